"""A controller restart in the middle of a burst. Its own module: no other
controller may run meanwhile (two leaders with two ledgers is exactly what leader
election prevents)."""

from __future__ import annotations

from hack.testenv import ControlPlane
from runtime import Client
from tests.integration.controller.conftest import (
    NodeGroup,
    Running,
    drop_finalizers,
    env_of,
    get_workload,
    pods_of,
    wait_condition,
    wait_phase,
    workload,
)
from tests.integration.controller.holders import HolderWatch
from tests.waiting import eventually

HOLD = "test.gpu-orchestrator.dev/hold"  # a finalizer of the test's: the Job stays


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


def test_a_restart_while_a_preemptor_waits_keeps_its_nomination_and_its_retries(
        installed: ControlPlane, admin: Client, namespace: str, group: NodeGroup) -> None:
    """A preemptor waits for its victim (a Job-mode workload whose deleted Job a
    finalizer of the test keeps, as a long grace period would) when the controller
    restarts. The new controller books the nomination again from the preemptor's
    status (nominatedOver): it keeps waiting, spends no retry, and runs once the
    victim's Job is gone. Before, the rebuild booked it without its nomination, its
    placement conflicted with the victim's holdings, and its attempt ended
    (PlacementConflict, retry 1)."""
    node, = group.add(1, gpus=2)
    watch = HolderWatch(admin, jobs=True).start()
    run = Running(installed).start()
    try:
        run.wait_nodes([node])
        admin.create(workload("low", namespace, gpusPerReplica=2, workloadKind="Job",
                              priority="low", nodeSelector=group.selector,
                              retryPolicy={"maxRetries": 10, "backoffSeconds": 60}))
        wait_phase(admin, namespace, "low", "Running")
        admin.patch("batch/v1", "Job", "low-0", {"metadata": {"finalizers": [HOLD]}},
                    namespace=namespace, patch_type="merge")
        admin.create(workload("high", namespace, gpusPerReplica=2, priority="high",
                              schedulingStrategy="priority", nodeSelector=group.selector))
        wait_condition(admin, namespace, "low", "Preempted", "Preempted")
        low_uid = get_workload(admin, namespace, "low")["metadata"]["uid"]

        def waiting_for_the_job() -> dict | None:
            w = get_workload(admin, namespace, "high")
            st = w.get("status") or {}
            cond = next((c for c in st.get("conditions") or () if c["type"] == "Scheduled"), {})
            return w if cond.get("message") == \
                f"waiting for 1 preempted Job(s) to terminate on {node}" and \
                st.get("nominatedOver") == [f"{low_uid}#0"] else None
        eventually(waiting_for_the_job, timeout=60, what="high waits for low's Job only")
    finally:
        run.stop()
    run = Running(installed).start()
    try:
        # the new controller has rebuilt its ledger and reconciled high at least once
        # (its status says so), and high still waits
        eventually(lambda: run.reconciler is not None and run.reconciler.state is not None
                   and run.reconciler.state.ready and
                   run.reconciler.state.blockers(f"{namespace}/high") != {},
                   timeout=60, what="the new controller books high's nomination")
        high = wait_condition(admin, namespace, "high", "Scheduled", "WaitingForPreemption")
        assert get_workload(admin, namespace, "high")["status"].get("retries", 0) == 0, high
        # nobody else gets the nominated devices from the new controller either
        admin.create(workload("mid", namespace, gpusPerReplica=1, priority="medium",
                              nodeSelector=group.selector,
                              retryPolicy={"maxRetries": 10, "backoffSeconds": 60}))
        wait_condition(admin, namespace, "mid", "Scheduled", "Unschedulable")
        assert pods_of(admin, namespace, "high") == []
        drop_finalizers(admin, "batch/v1", "Job", "low-0", namespace)
        w = wait_phase(admin, namespace, "high", "Running", timeout=60)
    finally:
        run.stop()
        watch.stop()
        drop_finalizers(admin, "batch/v1", "Job", "low-0", namespace, missing_ok=True)
    assert w["status"].get("retries", 0) == 0
    assert not w["status"].get("nominatedOver")
    assert watch.overlaps == []
    job_gone = watch.first_rv("DELETED", f"job:{namespace}/low-0")
    high_made = watch.first_rv("ADDED", f"{namespace}/high-0")
    assert job_gone is not None and high_made is not None and high_made > job_gone


def test_a_restart_with_another_default_strategy_keeps_what_placed_a_workload(
        installed: ControlPlane, admin: Client, namespace: str, group: NodeGroup) -> None:
    """docs/usage.md: a manager restarted with another ``--default-strategy`` changes
    only what it places from then on. The workload placed by ``leastLoaded`` still
    says ``leastLoaded`` after a restart with ``bestFit``; the one created after the
    restart says ``bestFit``. Before, the restarted manager rewrote the first one's
    ``status.strategy`` to ``bestFit`` though it never re-placed it."""
    group.add(2, gpus=4)
    run = Running(installed, default_strategy="leastLoaded").start()
    try:
        admin.create(workload("before", namespace, nodeSelector=group.selector))
        placed = wait_phase(admin, namespace, "before", "Running")
        assert placed["status"]["strategy"] == "leastLoaded"
    finally:
        run.stop()
    run = Running(installed, default_strategy="bestFit").start()
    try:
        admin.create(workload("after", namespace, nodeSelector=group.selector))
        assert wait_phase(admin, namespace, "after", "Running")["status"]["strategy"] \
            == "bestFit"
        # "before" came in the restarted manager's initial list, queued before "after"
        # was created: reconciled by the time "after" runs
        w = get_workload(admin, namespace, "before")
        assert w["status"]["placements"] == placed["status"]["placements"]
        assert w["status"]["strategy"] == "leastLoaded"
    finally:
        run.stop()
