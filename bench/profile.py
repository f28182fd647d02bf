"""py-spy on the controller during the benchmark's phases, and a top-functions summary.

``python -m bench --profile`` records ours during the burst and the steady phase of
the largest size (``<out>/profile/controller-<phase>.folded``, py-spy's raw format:
one stack and its sample count a line; ``--profile-rate``, default 100 a second:
a burst of 400 units is then about 100 busy samples), sampling only the thread that
holds the GIL
(``--gil``): where the controller's Python CPU goes (not TLS encryption or socket
calls, which run with the GIL released). The summary also leaves out
samples whose leaf is a wait (a lock, a socket read, a select) and gives, of the
rest, each function's share of samples on the stack (inclusive) and as the leaf
(self).

    python -m bench.profile <out>/profile/controller-burst.folded   # prints the summary

The summary ends with two grouped tables: each busy sample once, by the thread's work
(``ROLES``: the first marker found on its stack), and the costs that cut across
them (``COSTS``: a sample counts in each whose marker is on its stack).
"""

from __future__ import annotations

import collections
import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: leaves that are waiting, not computing
WAITS = ("Condition.wait", "SSLSocket.read", "_PollLikeSelector.select", "Event.wait",
         "sleep", "select (", "SocketIO.readinto", "Thread.join", "poll (")


class PySpy:
    """py-spy record of one process, started and stopped around a phase."""

    def __init__(self, exe: str, out_dir: Path, rate: int = 100) -> None:
        self.exe, self.out_dir, self.rate = exe, out_dir, rate
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, pid: int, phase: str = "burst") -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [self.exe, "record", "--pid", str(pid), "--rate", str(self.rate), "--format", "raw",
             "--output", str(self.out_dir / f"controller-{phase}.folded"), "--gil",
             "--nonblocking"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        import signal
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(30)
        except Exception:
            self.proc.kill()
            self.proc.wait(5)
        self.proc = None


#: what a thread is doing, by a marker frame on its stack; first match wins (the
#: placement state's event handling before the watch that delivers it)
ROLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("placement state: watch events applied (ledger, holdings, usage)",
     ("PlacementState.apply_event", "EventGate._drain")),
    ("status writer", ("StatusWriter._run",)),
    ("Events", ("EventRecorder._run",)),
    ("reconcile: the placement decision", ("Scheduler.schedule",)),
    ("reconcile: the rest (child create, status built, requests)", ("Controller._worker",)),
    ("watches: decode, freeze, store, other handlers", ("Reflector.", "HandlerRegistration.")),
)
#: costs that cut across the roles: a sample counts in each whose marker it holds
COSTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("HTTP client (`Client.request`: urllib3, http.client, TLS)", ("Client.request",)),
    ("watch decode + freeze", ("Watch.__iter__", "freeze (runtime/store.py")),
    ("pydantic (`model_validate`, `model_dump`)", ("BaseModel.model_",)),
    ("logging (structlog)", ("structlog/",)),
    ("metrics (prometheus_client)", ("prometheus_client/",)),
    ("waking a thread (`Condition.notify`)", ("Condition.notify",)),
)


def _is_wait(frame: str) -> bool:
    return frame.startswith(WAITS)


def _stacks(folded: Path) -> Iterator[tuple[list[str], int]]:
    """(frames, samples) of each line of a folded profile; a malformed line is skipped."""
    for line in folded.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        try:
            count = int(n)
        except ValueError:
            continue
        yield stack.split(";"), count


def summarize(folded: Path, top: int = 25) -> dict[str, Any]:
    """Samples, the share spent waiting, and the hottest functions of the rest."""
    incl: collections.Counter[str] = collections.Counter()
    self_: collections.Counter[str] = collections.Counter()
    total = busy = 0
    for frames, count in _stacks(folded):
        total += count
        if _is_wait(frames[-1]):
            continue
        busy += count
        self_[frames[-1]] += count
        for frame in set(frames):
            if not frame.startswith("Thread."):
                incl[frame] += count
    share = (lambda c: round(100 * c / busy, 1)) if busy else (lambda c: 0.0)
    return {"samples": total, "busy_samples": busy,
            "inclusive_pct": [(f, share(c)) for f, c in incl.most_common(top)],
            "self_pct": [(f, share(c)) for f, c in self_.most_common(top)]}


def grouped(folded: Path) -> dict[str, dict[str, float]]:
    """Share of busy samples (%) by ``ROLES`` (each sample once, "other" for none)
    and by ``COSTS`` (a sample in each it matches)."""
    roles: collections.Counter[str] = collections.Counter()
    costs: collections.Counter[str] = collections.Counter()
    busy = 0
    for frames, count in _stacks(folded):
        if _is_wait(frames[-1]):
            continue
        busy += count
        role = next((name for name, marks in ROLES
                     if any(m in f for f in frames for m in marks)), "other")
        roles[role] += count
        for name, marks in COSTS:
            if any(m in f for f in frames for m in marks):
                costs[name] += count
    share = (lambda c: round(100 * c / busy, 1)) if busy else (lambda c: 0.0)
    return {"roles": {name: share(roles[name]) for name, _ in (*ROLES, ("other", ()))},
            "costs": {name: share(costs[name]) for name, _ in COSTS}}


def markdown(summary: dict[str, Any], top: int = 15) -> str:
    lines = [f"{summary['busy_samples']} of {summary['samples']} samples busy "
             "(the rest waiting on a lock or a socket).", "",
             "| inclusive % | function | | self % | function |",
             "| ---: | --- | --- | ---: | --- |"]
    inc, own = summary["inclusive_pct"][:top], summary["self_pct"][:top]
    for k in range(max(len(inc), len(own))):
        a = inc[k] if k < len(inc) else ("", "")
        b = own[k] if k < len(own) else ("", "")
        lines.append(f"| {a[1]} | `{a[0]}` | | {b[1]} | `{b[0]}` |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(f"## {arg}\n")
        print(markdown(summarize(Path(arg))))
        groups = grouped(Path(arg))
        for title, rows in (("the thread's work", groups["roles"]),
                            ("costs across them", groups["costs"])):
            print(f"| % of busy samples | {title} |\n| ---: | --- |")
            print("\n".join(f"| {v} | {k} |" for k, v in rows.items()) + "\n")
