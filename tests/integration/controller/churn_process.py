"""What every churn test drives besides its own actions: the manager as its own
process (``ControllerProcess``: kill -9 and start again, as a crashed pod would be),
the faults planned over the run (``Faults``: kill -9s of the manager and
kube-apiserver restarts through ``ControlPlane.restart_apiserver``), and the
finalizer cleanup left to a test once no controller runs (``release_finalizers``).

Used by ``test_churn.py``, ``test_queues_churn.py`` and
``tests/integration/podgroups/test_group_churn.py``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

from api.v1alpha1.types import API_VERSION
from hack.testenv import ControlPlane
from hack.testenv.process import stop_child
from runtime import Client, NotFound
from tests.integration.controller.conftest import ROOT


class ControllerProcess:
    """``python main.py manager`` against the admin kubeconfig (and ``extra``
    flags); stdout and stderr go to ``log``. Only the process this object started
    is ever signalled."""

    def __init__(self, cluster: ControlPlane, log: Path, extra: tuple[str, ...] = ()) -> None:
        self.cluster, self.log, self.extra = cluster, log, extra
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        assert self.proc is None
        out = self.log.open("ab")
        out.write(f"--- start {self.starts + 1}\n".encode())
        out.flush()
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(ROOT, "main.py"), "manager",
             "--kubeconfig", str(self.cluster.kubeconfig),
             "--metrics-bind-address", "0", "--health-probe-bind-address", "0",
             "--log-format", "console",
             "--log-level", os.environ.get("CHURN_LOG_LEVEL") or "warning",
             "--workers", "4", "--qps", "200", "--burst", "400", *self.extra],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        out.close()
        self.starts += 1

    def kill9(self) -> None:
        """SIGKILL: no shutdown, no last write; whatever was in flight is lost."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        self.proc = None

    def stop(self) -> None:
        stop_child(self.proc)
        self.proc = None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def restarted_after_lease_loss(self) -> bool:
        """If the process exited because it lost its Lease (a kube-apiserver restart
        or an etcd pause longer than the renew deadline: the manager stops, as
        controller-runtime's does), starts it again, as the kubelet restarts a
        container, and says so; False if it runs, or exited for another reason."""
        if self.proc is None or self.proc.poll() is None:
            return False
        with contextlib.suppress(OSError):
            last = self.log.read_text(errors="replace").rsplit("--- start", 1)[-1]
            if "leaderelection.lost" not in last:
                return False
        self.proc = None
        self.start()
        return True

    def tail(self, lines: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""


class Faults:
    """The faults planned over a run of ``seconds``: ``kills`` kill -9s of the
    manager and ``restarts`` kube-apiserver restarts, each spread evenly (one restart:
in the middle of the run, between two kills).
    ``due(elapsed)`` makes those whose time has come, and starts the manager again
    when it exited on losing its Lease; ``done`` counts what was made; ``left`` is
    true while a planned fault is still to come (a run's loop goes on for it)."""

    def __init__(self, cluster: ControlPlane, ctl: ControllerProcess, seconds: float,
                 kills: int, restarts: int) -> None:
        self.cluster, self.ctl = cluster, ctl
        self.kills = [seconds * (i + 1) / (kills + 1) for i in range(kills)]
        self.restarts = [seconds * (i + 0.5) / restarts for i in range(restarts)]
        self.done: Counter[str] = Counter()

    @property
    def left(self) -> bool:
        return bool(self.kills or self.restarts)

    def due(self, elapsed: float) -> list[str]:
        """Makes the faults due at ``elapsed`` seconds; returns what it made."""
        made = []
        if self.ctl.restarted_after_lease_loss():
            made.append("controller restart after losing its Lease")
        assert self.ctl.alive(), f"the controller exited:\n{self.ctl.tail()}"
        if self.kills and elapsed >= self.kills[0]:
            self.kills.pop(0)
            self.ctl.kill9()
            self.ctl.start()
            made.append("controller kill -9")
        if self.restarts and elapsed >= self.restarts[0]:
            self.restarts.pop(0)
            self.cluster.restart_apiserver()
            made.append("kube-apiserver restart")
        self.done.update(made)
        return made


def release_finalizers(admin: Client, ns: str) -> None:
    """With no controller left to remove our finalizer, the namespace's deletion
    would wait forever: drop it from whatever is left (after a failure)."""
    for w in admin.list(API_VERSION, "GPUWorkload", namespace=ns)["items"]:
        with contextlib.suppress(NotFound):
            admin.patch(API_VERSION, "GPUWorkload", w["metadata"]["name"],
                        {"metadata": {"finalizers": None}}, namespace=ns, patch_type="merge")
