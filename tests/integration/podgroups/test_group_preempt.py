"""A pod group as a preemptor, as a user runs it (docs/podgroups.md, "How a group
preempts"): a JobSet (the real JobSet v0.12.0 and Job controllers make the pods)
whose pods' PriorityClass puts them above what holds the room, with the
``priority`` strategy, takes exactly the lower-priority holders it needs (whole
groups, never some of a group's pods), and its members are bound on the freed
devices once those are gone; one of no higher priority evicts nothing and says why.

Each test's nodes are its own group of kwok nodes, named (the ledger picks the
devices there), and every workload and JobSet selects them."""

from __future__ import annotations

from typing import Any

from runtime import Client
from tests.integration.controller.conftest import (  # noqa: F401 (fixtures)
    NodeGroup,
    Running,
    delete_workload,
    events_for,
    get_workload,
    group,
    installed,
    wait_phase,
    workload,
)
from tests.integration.podgroups.controllers import JOBSET, jobset
from tests.integration.podgroups.fixtures import (
    JOBSET_NAME,
    bound,
    members,
    named_nodes,
    on_nodes,
    peer_fixtures,
    told,
)
from tests.waiting import eventually

DEVICES = "gpu.orchestrator.dev/devices"
STRATEGY = "gpu.orchestrator.dev/strategy"

peers, binder = peer_fixtures(JOBSET)


def gang(name: str, nodes: NodeGroup, jobs: list[tuple[str, int, int]], gpus: int,
         priority_class: str | None = None) -> dict[str, Any]:
    """A JobSet of ``jobs`` whose pods ask ``gpus`` GPUs each on ``nodes``, with the
    ``priority`` strategy and ``priority_class`` (None: priority 0, the default)."""
    return on_nodes(jobset(name, jobs), nodes, gpus, annotations={STRATEGY: "priority"},
                    priority_class=priority_class)


def all_bound(admin: Client, ns: str, name: str, count: int) -> list[dict[str, Any]]:
    return eventually(lambda: (lambda ps: ps if len(bound(ps)) == count else None)(
        members(admin, ns, name)), timeout=120, what=f"the JobSet {name}'s {count} pods bound")


def fill(admin: Client, ns: str, nodes: NodeGroup, count: int, priority: int = 0,
         priority_class: str | None = None) -> dict[str, str]:
    """``count`` GPUWorkloads of 4 GPUs (one node each), running: name -> node."""
    for i in range(count):
        spec: dict[str, Any] = {"gpusPerReplica": 4, "nodeSelector": dict(nodes.selector),
                                "priority": priority}
        if priority_class:
            spec["priorityClassName"] = priority_class
        admin.create(workload(f"held-{i}", ns, **spec))
    out = {}
    for i in range(count):
        w = wait_phase(admin, ns, f"held-{i}", "Running", timeout=90)
        out[f"held-{i}"] = w["status"]["placements"][0]["node"]
    return out


def preempted(admin: Client, ns: str, names: list[str]) -> list[str]:
    """Which of the GPUWorkloads ``names`` carry a Preempted=True condition."""
    out = []
    for n in names:
        conds = (get_workload(admin, ns, n).get("status") or {}).get("conditions") or []
        if any(c["type"] == "Preempted" and c["status"] == "True" for c in conds):
            out.append(n)
    return out


def test_a_high_priority_jobset_evicts_exactly_the_workloads_it_needs_and_binds_on_them(
        binder: Running, admin: Client, namespace: str, group: NodeGroup,  # noqa: F811
        classes: dict[int, str]) -> None:
    """3 nodes x 4 GPUs held by 3 priority-0 GPUWorkloads; a JobSet of 2 pods x 4
    GPUs of priority 100: 2 workloads are preempted (not 3), and both pods are bound
    on the nodes they held, each on all 4 devices."""
    named_nodes(group, 3)
    held = fill(admin, namespace, group, 3)
    admin.create(gang("urgent", group, [("workers", 1, 2)], 4, classes[100]),
                 namespace=namespace)
    placed = all_bound(admin, namespace, "urgent", 2)
    victims = preempted(admin, namespace, sorted(held))
    assert len(victims) == 2, victims
    assert sorted(p["spec"]["nodeName"] for p in placed) == sorted(held[v] for v in victims)
    assert all(p["metadata"]["annotations"].get(DEVICES) == "0,1,2,3" for p in placed)
    kept = (set(held) - set(victims)).pop()
    assert get_workload(admin, namespace, kept)["status"]["phase"] == "Running"
    for v in victims:  # the victim says who took its room
        conds = get_workload(admin, namespace, v)["status"]["conditions"]
        said = next(c["message"] for c in conds if c["type"] == "Preempted")
        assert f"preempted by PodGroup:{namespace}/jobset:urgent:" in said, said
        assert "(priority 100)" in said, said
    said = [e["message"] for e in events_for(admin, namespace, placed[0]["metadata"]["name"])
            if e["reason"] == "Preempting"]
    assert said and all(f"{namespace}/{v}" in said[0] for v in victims), said
    for name in held:
        delete_workload(admin, namespace, name)


def test_a_jobset_of_no_higher_priority_evicts_nothing_and_says_why(
        binder: Running, admin: Client, namespace: str, group: NodeGroup,  # noqa: F811
        classes: dict[int, str]) -> None:
    """The room held by GPUWorkloads of priority 100; a JobSet of priority 10: nobody
    is preempted, no pod bound, and each member says why."""
    named_nodes(group, 2)
    held = fill(admin, namespace, group, 2, priority=100, priority_class=classes[100])
    admin.create(gang("late", group, [("workers", 1, 2)], 4, classes[10]),
                 namespace=namespace)
    pods = eventually(lambda: (lambda ps: ps if len(ps) == 2 else None)(
        members(admin, namespace, "late")), timeout=90, what="the JobSet's 2 pods made")
    why = eventually(lambda: told(admin, namespace, pods, "FailedScheduling", "pod group"),
                     timeout=60, what="a FailedScheduling Event naming the pod group")
    assert "lower priority than the group's 10 would not make room either" in why, why
    assert bound(members(admin, namespace, "late")) == []
    assert preempted(admin, namespace, sorted(held)) == []
    for name in held:
        delete_workload(admin, namespace, name)


def test_a_jobset_preempting_a_lower_jobset_evicts_every_member_of_it(
        binder: Running, admin: Client, namespace: str, group: NodeGroup,  # noqa: F811
        classes: dict[int, str]) -> None:
    """A priority-0 JobSet of 4 pods x 2 GPUs fills 2 nodes; a priority-100 JobSet of
    2 pods x 2 GPUs needs half of it: all 4 members of the lower one are asked to go
    (never the 2 that would have made room), and the higher one is bound."""
    named_nodes(group, 2)
    admin.create(gang("low", group, [("launcher", 1, 2), ("workers", 1, 2)], 2),
                 namespace=namespace)
    lower = all_bound(admin, namespace, "low", 4)
    admin.create(gang("high", group, [("workers", 1, 2)], 2, classes[100]),
                 namespace=namespace)

    def evicted() -> set[str] | None:
        names = {p["metadata"]["name"] for p in lower
                 if any(e["reason"] == "Preempted"
                        for e in events_for(admin, namespace, p["metadata"]["name"]))}
        return names if len(names) == 4 else None
    eventually(evicted, timeout=90, what="a Preempted Event on every member of the lower group")
    placed = all_bound(admin, namespace, "high", 2)
    assert {p["metadata"]["annotations"].get(DEVICES) for p in placed} <= {"0,1", "2,3"}
    left = {p["metadata"]["uid"] for p in bound(members(admin, namespace, "low"))}
    assert not left & {p["metadata"]["uid"] for p in lower}  # no old member still bound


def test_a_budget_over_the_lower_jobset_keeps_it_whole_and_the_higher_one_books_nothing(
        binder: Running, admin: Client, namespace: str, group: NodeGroup,  # noqa: F811
        classes: dict[int, str]) -> None:
    """The same two JobSets, a PodDisruptionBudget allowing 1 disruption over the
    lower one's 4 pods: evicting them all would break it, so nobody is evicted, the
    higher JobSet holds nothing and says why; once the budget goes, it preempts."""
    named_nodes(group, 2)
    admin.create(gang("kept", group, [("launcher", 1, 2), ("workers", 1, 2)], 2),
                 namespace=namespace)
    lower = all_bound(admin, namespace, "kept", 4)
    admin.create({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                  "metadata": {"name": "kept"},
                  "spec": {"minAvailable": 3, "selector": {"matchLabels": {
                      JOBSET_NAME: "kept"}}}}, namespace=namespace)
    eventually(lambda: (admin.get("policy/v1", "PodDisruptionBudget", "kept", namespace)
                        .get("status") or {}).get("disruptionsAllowed") == 1, timeout=60,
               what="the budget allows 1 disruption")
    admin.create(gang("high", group, [("workers", 1, 2)], 2, classes[100]),
                 namespace=namespace)
    pods = eventually(lambda: (lambda ps: ps if len(ps) == 2 else None)(
        members(admin, namespace, "high")), timeout=90, what="the JobSet's 2 pods made")
    why = eventually(lambda: told(admin, namespace, pods, "FailedScheduling",
                                  "PodDisruptionBudget"),
                     timeout=60, what="a FailedScheduling Event naming the budget")
    assert f"PodDisruptionBudget {namespace}/kept allows 1 disruption(s)" in why, why
    assert "nothing is booked, nobody is evicted" in why, why
    assert bound(members(admin, namespace, "high")) == []
    assert {p["metadata"]["uid"] for p in bound(members(admin, namespace, "kept"))} == \
        {p["metadata"]["uid"] for p in lower}
    assert not any(e["reason"] == "Preempted" for p in lower
                   for e in events_for(admin, namespace, p["metadata"]["name"]))
    admin.delete("policy/v1", "PodDisruptionBudget", "kept", namespace)
    all_bound(admin, namespace, "high", 2)  # the budget gone: it preempts, whole
