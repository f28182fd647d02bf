"""Two teams share 4 nodes x 4 GPUs through GPUQueues (docs/queues.md).

Queues a and b, nominal 8 each, one cohort. Team a alone runs 16 GPUs (borrowing
b's 8); what a asks beyond waits with the queue's message and spends no retry;
team b's workloads arrive and take their 8 back by reclaim, the victims' pods gone
before b's pods are created, Events on both sides; with b idle again, a borrows
again. A gang above its queue's quota is never half admitted."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from api.v1alpha1.types import API_VERSION
from hack.testenv import ControlPlane
from internal.cli.main import main as gpu_main
from runtime import Client, errors
from tests.integration.controller.conftest import (
    NodeGroup,
    Running,
    delete_workload,
    get_workload,
    pods_of,
    wait_condition,
    wait_events,
    wait_phase,
    workload,
)
from tests.integration.controller.holders import HolderWatch
from tests.integration.controller.queue_teams import TEMPLATE, Teams
from tests.waiting import eventually


@pytest.fixture
def teams(installed: ControlPlane, admin: Client) -> Iterator[Teams]:
    t = Teams(installed, admin)
    yield t
    t.cleanup()


def test_two_teams_borrow_wait_and_reclaim(controller: Running, admin: Client, teams: Teams,
                                           group: NodeGroup,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    controller.wait_nodes(group.add(4, gpus=4))
    a, b = teams.ns["a"], teams.ns["b"]
    watch = HolderWatch(admin).start()
    try:
        # a alone runs the whole cluster: 8 of its own, 8 borrowed from b
        for i in range(4):
            teams.submit("a", f"a{i}", group)
        for i in range(4):
            wait_phase(admin, a, f"a{i}", "Running", timeout=60)
        status = teams.wait_used("a", 16, 8)
        assert status["admittedWorkloads"] == 4

        # beyond nominal + what the cohort lends: waits, with the queue's message
        teams.submit("a", "a4", group)
        cond = wait_condition(admin, a, "a4", "Scheduled", "WaitingForQuota")
        assert cond["message"] == (f"queue {teams.queue['a']}: 16 GPUs used, 8 nominal; "
                                   f"cohort {teams.cohort} has 0 to lend; needs 4")
        wait_events(admin, a, "a4", "WaitingForQuota")
        eventually(lambda: teams.queue_status("a").get("pendingWorkloads") == 1, timeout=20,
                   what="queue a counts a4 pending")
        # kubectl get gpuqueues and kubectl gpu queues say the same
        got = teams.cluster.kubectl("get", "gpuqueues", teams.queue["a"], "--no-headers").stdout
        assert got.split()[1:6] == [teams.cohort, "8", "16", "8", "1"], got
        capsys.readouterr()
        assert gpu_main(["queues", teams.queue["a"], teams.queue["b"],
                         "--kubeconfig", str(teams.cluster.kubeconfig)]) == 0
        table = capsys.readouterr().out
        line = next(ln for ln in table.splitlines() if teams.queue["a"] in ln)
        assert "[##########++++++++++]" in line, table

        # b arrives: it takes its 8 back, the newest of a's first, no more than needed
        teams.submit("b", "b0", group)
        teams.submit("b", "b1", group)
        for i in range(2):
            wait_phase(admin, b, f"b{i}", "Running", timeout=60)
            wait_events(admin, b, f"b{i}", "Preempting")
        victims = sorted(n for n in ("a0", "a1", "a2", "a3")
                         if (get_workload(admin, a, n)["status"].get("phase") == "Pending"))
        assert victims == ["a2", "a3"]
        reclaimer = {}
        for v in victims:
            events = wait_events(admin, a, v, "Preempted")
            said = [e["message"] for e in events if e["reason"] == "Preempted"]
            prefix = f"reclaimed by queue {teams.queue['b']} for {b}/"
            by = [m[len(prefix):].split(";")[0] for m in said if m.startswith(prefix)]
            assert len(by) == 1, said
            reclaimer[v] = by[0]
        assert sorted(reclaimer.values()) == ["b0", "b1"]  # one victim each
        teams.wait_used("a", 8, 0)
        teams.wait_used("b", 8, 0)

        # each victim's pod was gone before its reclaimer's pod was created
        for v, by in reclaimer.items():
            created = watch.first_rv("ADDED", f"{b}/{by}-0")
            gone = watch.first_rv("DELETED", f"{a}/{v}-0")
            assert gone is not None and created is not None and gone < created, (v, by)
        assert watch.overlaps == []

        # waiting is not failing: nothing of a's spent a retry or is Failed
        time.sleep(2)
        for n in ("a2", "a3", "a4"):
            st = get_workload(admin, a, n)["status"]
            assert st["phase"] == "Pending" and st.get("retries", 0) == 0
            assert not st.get("nextRetryTime")

        # b idle again: a borrows again
        for i in range(2):
            delete_workload(admin, b, f"b{i}")
        teams.wait_used("a", 16, 8)
        running = [n for n in ("a0", "a1", "a2", "a3", "a4")
                   if get_workload(admin, a, n)["status"].get("phase") == "Running"]
        assert len(running) == 4
    finally:
        watch.stop()


def test_a_gang_above_its_quota_is_never_half_admitted(
        controller: Running, admin: Client, teams: Teams, group: NodeGroup) -> None:
    controller.wait_nodes(group.add(4, gpus=4))
    a = teams.ns["a"]
    admin.patch(API_VERSION, "GPUQueue", teams.queue["a"], {"spec": {"borrowingLimit": 0}})
    teams.submit("a", "gang", group, replicas=3)  # 12 > 8 + 0 borrowed
    cond = wait_condition(admin, a, "gang", "Scheduled", "WaitingForQuota")
    assert cond["message"] == (f"queue {teams.queue['a']}: 0 of 8 GPUs used; cohort "
                               f"{teams.cohort} has 8 to lend; needs 12")
    time.sleep(1)
    w = get_workload(admin, a, "gang")
    assert w["status"]["phase"] == "Pending" and not w["status"].get("placements")
    assert pods_of(admin, a, "gang") == []
    # raising the limit admits the whole gang at once
    admin.patch(API_VERSION, "GPUQueue", teams.queue["a"], {"spec": {"borrowingLimit": 4}})
    w = wait_phase(admin, a, "gang", "Running", timeout=60)
    assert len(w["status"]["placements"]) == 3 and len(pods_of(admin, a, "gang")) == 3


def test_a_workload_naming_a_missing_queue_waits(
        controller: Running, admin: Client, teams: Teams, group: NodeGroup,
        namespace: str) -> None:
    """In a namespace no queue selects yet; in one a queue selects, admission knows
    its queues (the manager's marks) and refuses the name at once."""
    controller.wait_nodes(group.add(1, gpus=4))
    eventually(lambda: _refused_missing(admin, teams), timeout=30,
               what="a missing queue refused in a queued namespace")
    admin.create(workload("lost", namespace, gpusPerReplica=4, nodeSelector=group.selector,
                          queueName="no-such-queue", template=TEMPLATE))
    cond = wait_condition(admin, namespace, "lost", "Scheduled", "QueueNotFound")
    assert cond["message"] == "GPUQueue no-such-queue does not exist"
    # created later, the queue admits it
    teams.make_queue("no-such-queue", 4, namespace)
    try:
        wait_phase(admin, namespace, "lost", "Running", timeout=40)
    finally:
        admin.delete(API_VERSION, "GPUQueue", "no-such-queue")


def _refused_missing(admin: Client, teams: Teams) -> bool:
    ns = teams.ns["a"]
    try:
        admin.create(workload("lost", ns, gpusPerReplica=4, queueName="no-such-queue"),
                     dry_run=True)
    except errors.Forbidden as e:
        assert (f"GPUQueue no-such-queue does not admit namespace {ns} (the GPUQueues that "
                f"select it: {teams.queue['a']})") in str(e), str(e)
        return True
    return False
