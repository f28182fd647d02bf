"""One control-plane process: started with its log in a file, stopped by its own PID."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path


class StartError(RuntimeError):
    """A process did not become ready; the message names it and ends with its log tail."""


def tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); treat it as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def terminate_pid(pid: int, grace: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after ``grace`` seconds; returns when the PID is gone."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while alive(pid) and time.monotonic() < deadline:
        _reap(pid)
        time.sleep(0.05)
    if alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        while alive(pid):
            _reap(pid)
            time.sleep(0.02)
    _reap(pid)


def stop_child(proc: subprocess.Popen | None, grace: float = 30.0) -> None:
    """Stops a child this process started, by its own PID: SIGTERM, then SIGKILL after
    ``grace`` seconds; returns once it is reaped (its exit code kept in ``proc``).
    Nothing when it has exited already."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


class Process:
    """A named child process with its log file and a readiness probe."""

    def __init__(self, name: str, argv: list[str], log: Path):
        self.name = name
        self.argv = argv
        self.log = log
        self.pid: int | None = None
        self._popen: subprocess.Popen | None = None

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            # Own session: a Ctrl-C in the terminal reaches the Python parent, which
            # then stops every child by PID in order, instead of all at once.
            self._popen = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
        self.pid = self._popen.pid

    def wait_ready(self, probe: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last_error = ""
        while time.monotonic() < deadline:
            if self._popen is not None and self._popen.poll() is not None:
                raise StartError(
                    f"{self.name} exited with code {self._popen.returncode} before it was ready "
                    f"(log {self.log}):\n{tail(self.log)}"
                )
            try:
                if probe():
                    return
            except Exception as exc:  # a probe failing is the normal "not yet"
                last_error = f"{type(exc).__name__}: {exc}"
            time.sleep(0.2)
        raise StartError(
            f"{self.name} was not ready after {timeout:.0f}s (last probe error: "
            f"{last_error or 'none'}; log {self.log}):\n{tail(self.log)}"
        )

    def stop(self, grace: float = 10.0) -> None:
        if self.pid is None:
            return
        terminate_pid(self.pid, grace)
        if self._popen is not None:
            with contextlib.suppress(Exception):
                self._popen.wait(timeout=1)
        self.pid = None
        self._popen = None
