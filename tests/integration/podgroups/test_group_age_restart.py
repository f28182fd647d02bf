"""A pod group's age survives a manager's restart (docs/podgroups.md, "A group and its
queue"): a reclaim takes borrowers newest first within a priority, and a group
admitted before the manager started is as old as its oldest member, as the API
has it, not the oldest of its priority.

Queues a and b, nominal 4 GPUs each, one cohort, on 2 nodes x 4 GPUs. Team b runs
two JobSets of 2 pods x 2 GPUs, ``zz-old`` made first, then ``aa-young``: b
borrows all of a's nominal. The manager restarts. A GPUWorkload of team a (2 x 2
GPUs) needs its quota back: the younger JobSet is evicted whole, the older one
runs on. (Before, both groups were taken for the oldest after the restart, and
the tie went by name: the older one was evicted.)"""

from __future__ import annotations

import time
from typing import Any

from runtime import Client
from tests.integration.controller.conftest import (  # noqa: F401 (fixtures)
    NodeGroup,
    Running,
    admin,
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
    told,
)
from tests.waiting import eventually

peers, binder = peer_fixtures(JOBSET)


def uids(pods: list[dict[str, Any]]) -> set[str]:
    return {str(p["metadata"]["uid"]) for p in pods}


def run(admin: Client, ns: str, name: str,  # noqa: F811
        nodes: NodeGroup) -> list[dict[str, Any]]:
    """JobSet ``name`` (2 pods x 2 GPUs) made in ``ns`` and both its pods bound."""
    admin.create(gang(name, nodes), namespace=ns)
    return eventually(lambda: (lambda ps: ps if len(bound(ps)) == 2 else None)(
        members(admin, ns, name)), timeout=120, what=f"the JobSet {name}'s 2 pods bound")


def test_a_reclaim_after_a_restart_takes_the_younger_group(
        binder: Running, admin: Client, teams: Teams, group: NodeGroup) -> None:  # noqa: F811
    named_nodes(group, 2)
    a, b = teams.ns["a"], teams.ns["b"]
    old = run(admin, b, "zz-old", group)
    time.sleep(1.1)  # creation times are whole seconds
    young = run(admin, b, "aa-young", group)
    made = {name: min(p["metadata"]["creationTimestamp"] for p in pods)
            for name, pods in (("old", old), ("young", young))}
    assert made["old"] < made["young"], made
    teams.wait_used("b", 8, 4)
    binder.stop()  # both admitted by this manager; the next one did not see it
    binder.start()
    teams.submit("a", "a1", group, gpus=2, replicas=2)
    wait_phase(admin, a, "a1", "Running", timeout=120)
    # the younger group went, whole; the older runs on, its members the same pods
    assert not uids(bound(members(admin, b, "aa-young"))) & uids(young)
    assert uids(bound(members(admin, b, "zz-old"))) == uids(old)
    assert all(told(admin, b, [p], "Preempted", f" for {a}/a1;") for p in young)
    assert not any(told(admin, b, [p], "Preempted", "") for p in old)
