"""Where one unit's latency goes, stage by stage, from a kept benchmark run.

``python -m bench --keep`` leaves the control plane's work dir (its path is printed
at the start: ``control plane: starting in /tmp/gpu-bench-...``), with the
kube-apiserver's audit log (``audit.log``: each request's received and completed
time, microseconds) and the controller's log (``logs/gpu-orchestrator.log``: one
``placement.committed`` line per decision, the moment the placement was booked).
Per unit of ours, in order:

========== ============================================================== ===========
stage      from -> to                                                     whose time
========== ============================================================== ===========
create     GPUWorkload create received -> its response complete           kube-apiserver
to_pod     create complete -> our pod's create received                   watch, queue,
                                                                          reconcile
pod        our pod's create received -> its response complete             kube-apiserver
total      GPUWorkload create received -> our pod's create complete
booked     our pod's create complete -> ``placement.committed`` logged    the placement
                                                                          state's lock
========== ============================================================== ===========

kube-scheduler's units (bare pods) in the same terms: ``create`` the pod's create,
``to_pod`` from its create complete to its Binding's request received, ``pod`` the
Binding. The benchmark's own latency adds the client's send before and its
watch's delivery after ``total``.

    python -m bench.profile_stages WORKDIR NAMESPACE [NAMESPACE...]

prints, per namespace, each stage's p50 / p90 / p99 / max in milliseconds, and the
slowest units' stages: which stage makes the tail.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

STAGES = ("create", "to_pod", "pod", "total", "booked")

_COMMITTED = re.compile(r"^(\S+)\s.*placement\.committed\b.*\bworkload=(\S+)/(\S+)")


def _ts(text: str) -> float:
    """An RFC 3339 timestamp (``...Z``, microseconds) as epoch seconds."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def audit_events(path: Path, namespaces: set[str]) -> Iterator[dict[str, Any]]:
    """The audit log's completed requests in ``namespaces`` (lines that do not parse
    are skipped: the log may end mid-line while it is written)."""
    with path.open() as fh:
        for line in fh:
            if not any(ns in line for ns in namespaces):
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if (event.get("objectRef") or {}).get("namespace") in namespaces:
                yield event


def committed_times(lines: Iterable[str]) -> dict[tuple[str, str], float]:
    """(namespace, workload) -> when its placement was committed (the first time:
    logged once its pods' creates have returned)."""
    out: dict[tuple[str, str], float] = {}
    for line in lines:
        m = _COMMITTED.match(line)
        if m:
            out.setdefault((m.group(2), m.group(3)), _ts(m.group(1)))
    return out


def _owner(pod_name: str) -> str:
    """Our pod ``<workload>-<index>``'s workload."""
    return pod_name.rpartition("-")[0] if "-" in pod_name else pod_name


def unit_stages(events: Iterable[dict[str, Any]],
                committed: dict[tuple[str, str], float]) -> dict[tuple[str, str], dict[str, float]]:
    """Each unit's stages in seconds (a stage whose ends are not both known is left out).

    A unit is a GPUWorkload created by the benchmark (ours) or a pod it created
    (kube-scheduler's); ours' pod is the first successful pod create for the
    workload, kube-scheduler's step is the pod's first successful Binding."""
    created: dict[tuple[str, str], tuple[float, float]] = {}
    step: dict[tuple[str, str], tuple[float, float]] = {}
    for e in events:
        ref = e.get("objectRef") or {}
        code = (e.get("responseStatus") or {}).get("code", 0)
        if e.get("verb") != "create" or not 200 <= code < 300 or not ref.get("name"):
            continue
        ns, name = ref["namespace"], ref["name"]
        times = (_ts(e["requestReceivedTimestamp"]), _ts(e["stageTimestamp"]))
        ours_unit = ref.get("resource") == "gpuworkloads"
        bare_pod = ref.get("resource") == "pods" and not ref.get("subresource") and \
            e.get("userAgent", "").startswith("gpu-bench")
        if ours_unit or bare_pod:
            created.setdefault((ns, name), times)
        elif ref.get("resource") == "pods" and ref.get("subresource") == "binding":
            step.setdefault((ns, name), times)
        elif ref.get("resource") == "pods" and not ref.get("subresource"):
            step.setdefault((ns, _owner(name)), times)
    out: dict[tuple[str, str], dict[str, float]] = {}
    for key, (c0, c1) in created.items():
        row = {"create": c1 - c0}
        s = step.get(key)
        if s is not None:
            row["to_pod"] = s[0] - c1
            row["pod"] = s[1] - s[0]
            row["total"] = s[1] - c0
            if key in committed:
                row["booked"] = committed[key] - s[1]
        out[key] = row
    return out


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def summary(stages: dict[tuple[str, str], dict[str, float]], slowest: int = 5) -> dict[str, Any]:
    """Per stage p50/p90/p99/max (ms) and the ``slowest`` units by total."""
    table = {}
    for stage in STAGES:
        vals = [row[stage] for row in stages.values() if stage in row]
        table[stage] = {q: (round(1000 * v, 1) if (v := _pct(vals, p)) is not None else None)
                        for q, p in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))}
        table[stage]["n"] = len(vals)
    tail = sorted((k for k in stages if "total" in stages[k]),
                  key=lambda k: -stages[k]["total"])[:slowest]
    return {"stages": table,
            "slowest": [{"unit": f"{k[0]}/{k[1]}",
                         **{s: round(1000 * stages[k][s], 1) for s in STAGES if s in stages[k]}}
                        for k in tail]}


def markdown(name: str, s: dict[str, Any]) -> str:
    lines = [f"### {name}", "", "| stage | n | p50 ms | p90 ms | p99 ms | max ms |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for stage, row in s["stages"].items():
        lines.append(f"| {stage} | {row['n']} | {row['p50']} | {row['p90']} | {row['p99']} "
                     f"| {row['max']} |")
    lines += ["", "slowest units (ms): " + "; ".join(
        f"{u['unit']}: " + ", ".join(f"{k} {v}" for k, v in u.items() if k != "unit")
        for u in s["slowest"]), ""]
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    workdir, namespaces = Path(argv[0]), argv[1:]
    log = workdir / "logs" / "gpu-orchestrator.log"
    committed = committed_times(log.read_text().splitlines()) if log.exists() else {}
    events = list(audit_events(workdir / "audit.log", set(namespaces)))
    for ns in namespaces:
        mine = [e for e in events if e["objectRef"]["namespace"] == ns]
        print(markdown(ns, summary(unit_stages(mine, committed))))


if __name__ == "__main__":
    main(sys.argv[1:])
