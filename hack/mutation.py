"""The mutation score of the placement core, from mutmut's results (``make mutation``).

Reads ``mutants/**/*.meta`` (written by ``mutmut run``, configured under
``[tool.mutmut]`` in pyproject.toml) and prints the score, the score per module and
the surviving mutants grouped by function, most survivors first, each with the
``mutmut show`` names to look at.

Score: mutants killed (a test failed, or the mutant made the tests time out) over
the mutants a test reached; mutants that no test reaches are counted and listed
apart, and the score over all mutants is printed too.

    python -m hack.mutation [--only PREFIX] [--limit N]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

#: mutmut 3.8's exit codes of a mutant's test run (mutmut.stats.status_by_exit_code)
_STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests",
           34: "skipped", 36: "timeout", 24: "timeout", -24: "timeout", 152: "timeout",
           255: "timeout", 37: "type check", None: "not checked"}


@dataclass(frozen=True, slots=True)
class Mutant:
    name: str  # e.g. internal.scheduling.snapshot.x_tolerates__mutmut_12
    status: str

    @property
    def module(self) -> str:
        return self.function_path[0]

    @property
    def function_path(self) -> tuple[str, str]:
        head, _, _ = self.name.rpartition("__mutmut_")
        module, _, mangled = head.rpartition(".")
        return module, mangled

    @property
    def function(self) -> str:
        """``module.function`` or ``module.Class.method``."""
        module, mangled = self.function_path
        name = mangled
        if mangled.startswith("x_"):
            name = mangled[2:]
        elif mangled.startswith("x\u01c1"):  # xǁClassǁmethod
            name = ".".join(p for p in mangled[1:].split("\u01c1") if p)
        return f"{module}.{name}"


def load(root: Path = Path("mutants")) -> list[Mutant]:
    out = []
    for meta in sorted(root.rglob("*.meta")):
        data = json.loads(meta.read_text())
        for name, code in data.get("exit_code_by_key", {}).items():
            out.append(Mutant(name, _STATUS.get(code, "suspicious")))
    return out


def _pct(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "-"


def summary(mutants: Iterable[Mutant]) -> tuple[Counter[str], str]:
    c = Counter(m.status for m in mutants)
    total = sum(c.values())
    killed = c["killed"] + c["timeout"]
    reached = total - c["no tests"] - c["not checked"] - c["skipped"]
    line = (f"{total} mutants: {c['killed']} killed, {c['timeout']} timed out, "
            f"{c['survived']} survived, {c['no tests']} reached by no test"
            + (f", {c['not checked']} not checked" if c["not checked"] else "")
            + f"; score {_pct(killed, reached)} of those reached "
            f"({_pct(killed, total)} of all)")
    return c, line


def report(mutants: list[Mutant], limit: int) -> Iterator[str]:
    _, line = summary(mutants)
    yield "mutation score (internal/scheduling + runtime/workqueue.py, unit tests only)"
    yield "  " + line
    yield ""
    yield "per module:"
    by_module: dict[str, list[Mutant]] = defaultdict(list)
    for m in mutants:
        by_module[m.module].append(m)
    for module in sorted(by_module):
        c, _ = summary(by_module[module])
        total = sum(c.values())
        reached = total - c["no tests"] - c["not checked"] - c["skipped"]
        killed = c["killed"] + c["timeout"]
        yield (f"  {module:<46} {total:>5} mutants {_pct(killed, reached):>7} of reached"
               f" {_pct(killed, total):>7} of all {c['survived']:>4} survived"
               f" {c['no tests']:>3} untested"
               + (f" {c['not checked']:>4} not checked" if c["not checked"] else ""))
    for status, title in (("survived", "surviving mutants"),
                          ("no tests", "mutants no test reaches")):
        groups: dict[str, list[str]] = defaultdict(list)
        for m in mutants:
            if m.status == status:
                groups[m.function].append(m.name.rpartition("__mutmut_")[2])
        if not groups:
            continue
        yield ""
        yield f"{title} by function (mutmut show <module>.x_<function>__mutmut_<n>):"
        ranked = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        for function, ids in ranked[:limit]:
            nums = ", ".join(sorted(ids, key=int))
            yield f"  {len(ids):>4}  {function}  [{nums}]"
        if len(ranked) > limit:
            rest = sum(len(ids) for _, ids in ranked[limit:])
            yield f"  ... {len(ranked) - limit} more functions, {rest} mutants"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="mutant name prefix, e.g. runtime.workqueue")
    ap.add_argument("--limit", type=int, default=60, help="functions listed at most")
    ap.add_argument("--dir", type=Path, default=Path("mutants"))
    args = ap.parse_args(argv)
    mutants = [m for m in load(args.dir) if m.name.startswith(args.only)]
    if not mutants:
        print(f"no mutmut results under {args.dir}/ (run `make mutation` first)", file=sys.stderr)
        return 1
    for line in report(mutants, args.limit):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
