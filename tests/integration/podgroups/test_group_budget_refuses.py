"""A GPUWorkload whose preemption of a pod group a PodDisruptionBudget refuses gives
up its nomination (docs/podgroups.md, "Preemption takes whole groups"), as a user
runs it: the real JobSet and Job controllers make the pods.

One node of 4 GPUs held by a priority-0 JobSet of 2 pods x 2 GPUs, a budget over
its pods allowing no disruption. A priority-100 GPUWorkload of 4 GPUs would
preempt the group: the budget refuses, no member is evicted, and the workload is
nominated over nobody; it waits, spending no retry, and says why
(``PreemptionRefused``: ``preemption of pod group ... refused: PodDisruptionBudget
...``) and is placed on a node added later.
(Before, it stayed nominated over the group, waiting for pods that never went,
and never took the new node.)"""

from __future__ import annotations

import time
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
    wait_condition,
    wait_phase,
    workload,
)
from tests.integration.podgroups.controllers import JOBSET
from tests.integration.podgroups.fixtures import (
    JOBSET_NAME,
    bound,
    gang,
    members,
    named_nodes,
    peer_fixtures,
)
from tests.waiting import eventually

peers, binder = peer_fixtures(JOBSET)


def uids(pods: list[dict[str, Any]]) -> set[str]:
    return {str(p["metadata"]["uid"]) for p in pods}


def test_a_workload_whose_group_preemption_a_budget_refuses_is_nominated_over_nobody(
        binder: Running, admin: Client, namespace: str, group: NodeGroup) -> None:  # noqa: F811
    first = named_nodes(group, 1)
    admin.create(gang("kept", group), namespace=namespace)
    held = eventually(lambda: (lambda ps: ps if len(bound(ps)) == 2 else None)(
        members(admin, namespace, "kept")), timeout=120, what="the JobSet's 2 pods bound")
    admin.create({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                  "metadata": {"name": "kept"},
                  "spec": {"minAvailable": 2, "selector": {"matchLabels": {
                      JOBSET_NAME: "kept"}}}}, namespace=namespace)
    eventually(lambda: (admin.get("policy/v1", "PodDisruptionBudget", "kept", namespace)
                        .get("status") or {}).get("currentHealthy") == 2, timeout=60,
               what="the budget counts the 2 pods (it allows no disruption)")
    admin.create(workload("urgent", namespace, gpusPerReplica=4, priority=100,
                          schedulingStrategy="priority", nodeSelector=dict(group.selector),
                          retryPolicy={"backoffSeconds": 2}))
    # it waits (no retry spent), nominated over nobody
    cond = wait_condition(admin, namespace, "urgent", "Scheduled", "PreemptionRefused",
                          timeout=60)
    g = f"{namespace}/jobset:kept:0"
    assert (f"preemption of pod group {g} refused: PodDisruptionBudget {namespace}/kept "
            f"allows 0 disruption(s) and covers 2 member(s) of the group") in cond["message"], \
        cond
    time.sleep(5)  # past its retry backoff (2 s): a wait spends no retry
    status = get_workload(admin, namespace, "urgent")["status"]
    assert not status.get("nominatedOver") and not status.get("placements"), status
    assert not status.get("retries"), status  # a wait, not a failed attempt
    said = [e["message"] for e in events_for(admin, namespace, "urgent")
            if e["reason"] == "PreemptionRefused"]
    assert any(f"preemption of pod group {g} refused" in m for m in said), said
    # the group is whole, none of it asked to go
    assert uids(bound(members(admin, namespace, "kept"))) == uids(held)
    assert not any(e["reason"] == "Preempted" for p in held
                   for e in events_for(admin, namespace, p["metadata"]["name"]))
    # nominated over nobody, it takes room that appears elsewhere
    later = named_nodes(group, 1)
    w = wait_phase(admin, namespace, "urgent", "Running", timeout=90)
    assert [p["node"] for p in w["status"]["placements"]] == later, (first, later)
    assert uids(bound(members(admin, namespace, "kept"))) == uids(held)
    delete_workload(admin, namespace, "urgent")
