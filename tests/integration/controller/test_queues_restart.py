"""A manager restarted while a reclaim waits for its victims' pods: the ledger is
rebuilt with the reclaimers' nominations (their status.nominatedOver), so the queue
takes no more than it needs, and the reclaimers' pods still start only once the
victims' pods are gone."""

from __future__ import annotations

from api.v1alpha1.types import API_VERSION
from hack.testenv import ControlPlane
from runtime import Client
from tests.integration.controller.conftest import (
    NodeGroup,
    Running,
    get_workload,
    wait_events,
    wait_phase,
)
from tests.integration.controller.holders import HolderWatch
from tests.integration.controller.queue_teams import Teams
from tests.waiting import eventually

SLOW = {"spec": {"terminationGracePeriodSeconds": 5,
                 "containers": [{"name": "main", "image": "busybox:1.36"}]}}


def test_a_restart_during_a_reclaim_takes_no_more_and_keeps_the_order(
        installed: ControlPlane, admin: Client, group: NodeGroup) -> None:
    teams = Teams(installed, admin)
    watch = HolderWatch(admin).start()
    run = Running(installed).start()
    a, b = teams.ns["a"], teams.ns["b"]
    try:
        run.wait_nodes(group.add(4, gpus=4))
        for i in range(4):
            teams.submit("a", f"a{i}", group, template=SLOW)
        for i in range(4):
            wait_phase(admin, a, f"a{i}", "Running", timeout=60)
        teams.wait_used("a", 16, 8)
        for i in range(2):
            teams.submit("b", f"b{i}", group)
        for i in range(2):
            wait_events(admin, b, f"b{i}", "Preempting")

        def nominated() -> bool:  # the status may come after the Event (status pacing)
            return all((get_workload(admin, b, f"b{i}").get("status") or {})
                       .get("nominatedOver") for i in range(2))
        eventually(nominated, timeout=20, what="both reclaimers nominated")
        run.stop()  # the victims' pods are still terminating (5 s grace)
        run = Running(installed).start()

        for i in range(2):
            wait_phase(admin, b, f"b{i}", "Running", timeout=60)
        pending = sorted(n for n in ("a0", "a1", "a2", "a3")
                         if get_workload(admin, a, n)["status"].get("phase") == "Pending")
        assert pending == ["a2", "a3"]  # two victims, no more
        teams.wait_used("a", 8, 0)
        teams.wait_used("b", 8, 0)
        # each victim's pod was gone before its reclaimer's pod was created
        for v in pending:
            said = [e["message"] for e in wait_events(admin, a, v, "Preempted")
                    if e["reason"] == "Preempted"]
            prefix = f"reclaimed by queue {teams.queue['b']} for {b}/"
            (by,) = {m[len(prefix):].split(";")[0] for m in said if m.startswith(prefix)}
            gone = watch.first_rv("DELETED", f"{a}/{v}-0")
            created = watch.first_rv("ADDED", f"{b}/{by}-0")
            assert gone is not None and created is not None and gone < created, (v, by)
        assert watch.overlaps == []
        queue = admin.get(API_VERSION, "GPUQueue", teams.queue["a"])["status"]
        assert queue["pendingWorkloads"] == 2 and queue["admittedWorkloads"] == 2
    finally:
        run.stop()
        watch.stop()
        teams.cleanup()
