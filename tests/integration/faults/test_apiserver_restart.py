"""kube-apiserver stopped and started again (same etcd, port and certificates) under a
running controller: its watches resume and new workloads are placed, without
restarting it. Its own module: one controller at a time."""

from __future__ import annotations

import sys
import time

from hack.testenv import ControlPlane
from runtime import Client, Invalid
from tests.integration.controller.conftest import NodeGroup, Running, wait_phase, workload
from tests.integration.faults.conftest import device_holders


def test_controller_rides_out_an_apiserver_restart(
        installed: ControlPlane, admin: Client, namespace: str, group: NodeGroup) -> None:
    group.add(2, gpus=4)
    run = Running(installed).start()
    try:
        admin.create(workload("before", namespace, nodeSelector=group.selector))
        wait_phase(admin, namespace, "before", "Running", timeout=60)
        pid = installed.pids()["kube-apiserver"]

        t0 = time.monotonic()
        installed.restart_apiserver()
        assert installed.pids()["kube-apiserver"] != pid
        # admitted at once: no policy of ours takes GPUQueue params, which were a
        # configuration error until a restarted API server's admission rediscovered
        # that resource (hack/admission_window.py; test_admission_restarts.py counts)
        admitted_after = _admitted(admin, namespace, timeout=0)
        print(f"GPUWorkloads admitted {admitted_after:.1f}s after the restart", file=sys.stderr)
        admin.create(workload("after", namespace, nodeSelector=group.selector))
        wait_phase(admin, namespace, "after", "Running", timeout=180)
        print(f"placed {time.monotonic() - t0:.1f}s after the restart began", file=sys.stderr)

        assert run.thread is not None and run.thread.is_alive() and run.codes == []
        held = device_holders(admin, namespace, ["before", "after"])
        assert len(held) == len(set(held)) == 2
    finally:
        run.stop()


def _admitted(admin: Client, namespace: str, timeout: float) -> float:
    """Seconds until a dry-run GPUWorkload create is admitted; fails after ``timeout``."""
    t0 = time.monotonic()
    while True:
        try:
            admin.create(workload("probe", namespace), dry_run=True)
            return time.monotonic() - t0
        except Invalid as e:
            if "failed to configure policy" not in str(e) or time.monotonic() - t0 > timeout:
                raise
            time.sleep(0.5)
