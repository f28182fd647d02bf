"""``python main.py manager`` run as a real process against a test cluster: what a
user runs, so a test can read its JSON log, probe it, signal it and kill it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from hack.testenv import ControlPlane
from hack.testenv.controlplane import free_port
from hack.testenv.process import stop_child
from tests.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]
# Short lease timings keep the tests quick; the failover they measure scales with them.
LEASE_FLAGS = ("--leader-elect-lease-duration=6", "--leader-elect-renew-deadline=4",
               "--leader-elect-retry-period=1")


class ManagerProcess:
    """``python main.py manager`` against the test cluster, for one namespace and one
    Lease; JSON logs in ``log``; stopped by its PID."""

    def __init__(self, cluster: ControlPlane, namespace: str, lease: str, workdir: Path,
                 name: str, *flags: str) -> None:
        self.name = name
        self.health_port, self.metrics_port = free_port(), free_port()
        self.log = workdir / f"manager-{name}.log"
        self.argv = [
            sys.executable, str(ROOT / "main.py"), "manager",
            f"--kubeconfig={cluster.kubeconfig}", f"--namespace={namespace}",
            f"--leader-election-namespace={namespace}", f"--leader-election-id={lease}",
            f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
            "--no-metrics-secure",  # the test reads the counters without a token
            f"--health-probe-bind-address=127.0.0.1:{self.health_port}",
            "--log-format=json", *LEASE_FLAGS, *flags,
        ]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ManagerProcess:
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT,
                                         cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        eventually(lambda: self.logged("manager.starting"), timeout=60,
                   what=f"manager {self.name} starting")
        return self

    def logged(self, event: str) -> dict | None:
        """The first log line of ``event``, parsed."""
        for line in self.log.read_text(errors="replace").splitlines():
            if f'"{event}"' in line:
                try:
                    return json.loads(line)
                except ValueError:
                    continue
        return None

    @property
    def identity(self) -> str:
        started = self.logged("manager.starting")
        assert started is not None
        return started["identity"]

    def probe(self, path: str) -> tuple[int, str]:
        url = f"http://127.0.0.1:{self.health_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError as e:
            return 0, str(e)

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.read().decode()

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)

    def wait(self, timeout: float = 60) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def stop(self) -> None:
        stop_child(self.proc)
