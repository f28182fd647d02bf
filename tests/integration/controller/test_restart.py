"""A controller restart in the middle of a burst. Its own module: no other
controller may run meanwhile (two leaders with two ledgers is exactly what leader
election prevents)."""

from __future__ import annotations

from hack.testenv import ControlPlane
from runtime import Client
from tests.integration.controller.conftest import (
    NodeGroup,
    Running,
    env_of,
    get_workload,
    pods_of,
    wait_phase,
    workload,
)
from tests.waiting import eventually


def test_restart_mid_burst_neither_duplicates_nor_loses(
        installed: ControlPlane, admin: Client, namespace: str, group: NodeGroup) -> None:
    """Its own controller: stopped while a burst is being placed, then a new one
    (with a ledger rebuilt from the cache) finishes the burst."""
    group.add(4, gpus=4)
    run = Running(installed).start()
    names = [f"burst-{i:02d}" for i in range(16)]
    try:
        for n in names:
            admin.create(workload(n, namespace, nodeSelector=group.selector))
        eventually(lambda: sum(1 for n in names if get_workload(admin, namespace, n).get(
            "status", {}).get("placements")) >= 4, what="some placed")
    finally:
        run.stop()
    run = Running(installed).start()
    try:
        for n in names:
            wait_phase(admin, namespace, n, "Running", timeout=60)
    finally:
        run.stop()
    devices = []
    for n in names:
        w = get_workload(admin, namespace, n)
        (p,) = w["status"]["placements"]
        devices += [(p["node"], d) for d in p["devices"]]
        pods = pods_of(admin, namespace, n)
        assert [x["metadata"]["name"] for x in pods] == [f"{n}-0"]
        assert env_of(pods[0], "CUDA_VISIBLE_DEVICES") == ",".join(map(str, p["devices"]))
    assert len(devices) == len(set(devices)) == 16
