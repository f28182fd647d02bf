"""A pod group reclaims its queue's quota from cohort borrowers as a GPUWorkload gang
does (docs/podgroups.md, "A group and its queue"; docs/queues.md, reclaim), as a
user runs it: the real JobSet and Job controllers make the pods.

Queues a and b, nominal 4 GPUs each, one cohort, on 2 nodes x 4 GPUs. Team b runs
two 4-GPU GPUWorkloads: the second borrows all of a's nominal. A JobSet of 2 pods x
2 GPUs in a's namespace would keep a within its nominal: b's newest borrower is
evicted (told by whom), and the JobSet's pods are bound, both, on the devices it
held. With a's ``reclaimWithinCohort: Never`` the JobSet holds nothing and its
members say what its queue and cohort have, until the queue says ``Any``."""

from __future__ import annotations

from api.v1alpha1.types import API_VERSION
from runtime import Client
from tests.integration.controller.conftest import (  # noqa: F401 (fixtures)
    NodeGroup,
    Running,
    admin,
    get_workload,
    group,
    installed,
    wait_phase,
)
from tests.integration.controller.queue_teams import Teams
from tests.integration.podgroups.controllers import JOBSET
from tests.integration.podgroups.fixtures import (
    bound,
    gang,
    members,
    named_nodes,
    peer_fixtures,
)
from tests.integration.podgroups.fixtures import told as said
from tests.waiting import eventually

DEVICES = "gpu.orchestrator.dev/devices"

peers, binder = peer_fixtures(JOBSET)


def borrow_all(teams: Teams, nodes: NodeGroup) -> dict[str, str]:
    """Team b's two 4-GPU workloads, running (the second borrows a's 4): name -> node."""
    out = {}
    for name in ("b1", "b2"):
        teams.submit("b", name, nodes, gpus=4)
        w = wait_phase(teams.admin, teams.ns["b"], name, "Running", timeout=90)
        out[name] = w["status"]["placements"][0]["node"]
    teams.wait_used("b", 8, 4)
    return out


def test_a_jobset_within_its_nominal_reclaims_from_the_borrowing_queue(
        binder: Running, admin: Client, teams: Teams, group: NodeGroup) -> None:  # noqa: F811
    named_nodes(group, 2)
    held = borrow_all(teams, group)
    a, b = teams.ns["a"], teams.ns["b"]
    admin.create(gang("train", group), namespace=a)
    placed = eventually(lambda: (lambda ps: ps if len(bound(ps)) == 2 else None)(
        members(admin, a, "train")), timeout=120, what="the JobSet's 2 pods bound")
    # the newest borrower went, the other runs on
    conds = get_workload(admin, b, "b2")["status"].get("conditions") or []
    why = next((c["message"] for c in conds
                if c["type"] == "Preempted" and c["status"] == "True"), "")
    assert f"reclaimed by queue {teams.queue['a']} for PodGroup:{a}/jobset:train:0" in why, \
        conds
    assert get_workload(admin, b, "b1")["status"]["phase"] == "Running"
    assert {p["spec"]["nodeName"] for p in placed} == {held["b2"]}
    assert sorted(p["metadata"]["annotations"][DEVICES] for p in placed) == ["0,1", "2,3"]
    told = said(admin, a, placed, "Preempting", "reclaiming 4 GPU(s)")
    assert told is not None and f"lent to {teams.queue['b']}" in told \
        and f"{b}/b2" in told, told
    teams.wait_used("a", 4, 0)


def test_a_jobset_whose_queue_never_reclaims_waits_and_says_why(
        binder: Running, admin: Client, teams: Teams, group: NodeGroup) -> None:  # noqa: F811
    named_nodes(group, 2)
    admin.patch(API_VERSION, "GPUQueue", teams.queue["a"],
                {"spec": {"preemption": {"reclaimWithinCohort": "Never"}}})
    borrow_all(teams, group)
    a, b = teams.ns["a"], teams.ns["b"]
    admin.create(gang("train", group), namespace=a)
    why = eventually(lambda: said(admin, a, members(admin, a, "train"), "FailedScheduling",
                                  f"queue {teams.queue['a']}"),
                     timeout=120, what="the JobSet's members say their queue refuses them")
    assert (f"pod group {a}/jobset:train:0 (2 of 2 members to place): queue "
            f"{teams.queue['a']}: 0 GPUs used, 4 nominal; cohort {teams.cohort} has 0 to "
            f"lend; needs 4") in why, why
    assert not bound(members(admin, a, "train"))
    for name in ("b1", "b2"):
        assert get_workload(admin, b, name)["status"]["phase"] == "Running"
    # the platform team lets queue a reclaim: the changed queue wakes the group
    admin.patch(API_VERSION, "GPUQueue", teams.queue["a"],
                {"spec": {"preemption": {"reclaimWithinCohort": "Any"}}})
    eventually(lambda: len(bound(members(admin, a, "train"))) == 2, timeout=120,
               what="the JobSet bound once its queue may reclaim")
    assert get_workload(admin, b, "b1")["status"]["phase"] == "Running"
