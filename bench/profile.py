"""py-spy on the controller during the benchmark's phases, and a top-functions summary.

``python -m bench --profile`` records ours during the burst and the steady phase of
the largest size (``<out>/profile/controller-<phase>.folded``, py-spy's raw format:
one stack and its sample count a line), sampling only the thread that holds the GIL
(``--gil``): where the controller's Python CPU goes (not TLS encryption or socket
calls, which run with the GIL released). The summary also leaves out
samples whose leaf is a wait (a lock, a socket read, a select) and gives, of the
rest, each function's share of samples on the stack (inclusive) and as the leaf
(self).

    python -m bench.profile <out>/profile/controller-burst.folded   # prints the summary
"""

from __future__ import annotations

import collections
import contextlib
import subprocess
import sys
from pathlib import Path
from typing import Any

#: leaves that are waiting, not computing
WAITS = ("Condition.wait", "SSLSocket.read", "_PollLikeSelector.select", "Event.wait",
         "sleep", "select (", "SocketIO.readinto", "Thread.join", "poll (")


class PySpy:
    """py-spy record of one process, started and stopped around a phase."""

    def __init__(self, exe: str, out_dir: Path) -> None:
        self.exe, self.out_dir = exe, out_dir
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, pid: int, phase: str = "burst") -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [self.exe, "record", "--pid", str(pid), "--rate", "100", "--format", "raw",
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


def _is_wait(frame: str) -> bool:
    return frame.startswith(WAITS)


def summarize(folded: Path, top: int = 25) -> dict[str, Any]:
    """Samples, the share spent waiting, and the hottest functions of the rest."""
    incl: collections.Counter[str] = collections.Counter()
    self_: collections.Counter[str] = collections.Counter()
    total = busy = 0
    for line in folded.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        try:
            count = int(n)
        except ValueError:
            continue
        frames = stack.split(";")
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
