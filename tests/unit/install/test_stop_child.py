"""``stop_child``, the one way tests stop a process they started (``main.py manager``
in the churn and fault tests): SIGTERM by its own PID, SIGKILL after the grace."""

from __future__ import annotations

import signal
import subprocess
import sys

from hack.testenv.process import stop_child

#: a child that says it is ready, then waits; with ``ignore`` it shrugs off SIGTERM
CHILD = ("import signal, sys, time\n"
         "if sys.argv[1] == 'ignore': signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
         "print('ready', flush=True)\n"
         "time.sleep(120)\n")


def child(mode: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", CHILD, mode], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc


def test_sigterm_stops_a_child_that_listens() -> None:
    proc = child("listen")
    stop_child(proc)
    assert proc.returncode == -signal.SIGTERM


def test_sigkill_after_the_grace_for_a_child_that_does_not() -> None:
    proc = child("ignore")
    stop_child(proc, grace=0.5)
    assert proc.returncode == -signal.SIGKILL


def test_nothing_to_stop() -> None:
    stop_child(None)
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(30)
    stop_child(proc)  # exited already: no signal to a PID that may be reused
    assert proc.returncode == 0
