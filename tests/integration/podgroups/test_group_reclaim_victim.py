"""A pod group that borrowed is a reclaim victim (docs/podgroups.md, "A group and
its queue"; docs/queues.md, reclaim), as a user runs it: the real JobSet and Job
controllers make the pods.

Queues a and b, nominal 4 GPUs each, one cohort, on 2 nodes x 4 GPUs. Team b runs a
4-GPU GPUWorkload (its nominal) and a JobSet of 2 pods x 2 GPUs, which borrows all
of a's nominal. A 4-GPU GPUWorkload of team a needs its quota back: the JobSet's
group is evicted whole (both members, told by whom), and the workload runs on the
node the group held."""

from __future__ import annotations

from typing import Any

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
    told,
)
from tests.waiting import eventually

peers, binder = peer_fixtures(JOBSET)


def uid(p: dict[str, Any]) -> str:
    return str(p["metadata"]["uid"])


def test_a_borrowing_jobset_is_reclaimed_whole_by_the_lending_queue(
        binder: Running, admin: Client, teams: Teams, group: NodeGroup) -> None:  # noqa: F811
    named_nodes(group, 2)
    a, b = teams.ns["a"], teams.ns["b"]
    teams.submit("b", "b1", group, gpus=4)
    mine = wait_phase(admin, b, "b1", "Running", timeout=90)["status"]["placements"][0]["node"]
    admin.create(gang("borrower", group), namespace=b)
    held = eventually(lambda: (lambda ps: ps if len(bound(ps)) == 2 else None)(
        members(admin, b, "borrower")), timeout=120, what="the borrowing JobSet's 2 pods bound")
    node = {p["spec"]["nodeName"] for p in held}
    assert node == {next(n for n in group.names if n != mine)}, node
    teams.wait_used("b", 8, 4)
    # team a wants its quota back
    teams.submit("a", "a1", group, gpus=4)
    w = wait_phase(admin, a, "a1", "Running", timeout=120)
    assert {p["node"] for p in w["status"]["placements"]} == node
    # the whole group went: every member asked, none left holding its devices
    first = {uid(p) for p in held}
    left = [p for p in members(admin, b, "borrower", terminating=True) if uid(p) in first]
    assert not left, [p["metadata"]["name"] for p in left]
    # each member is told by whom, and that it was a reclaim of the lent quota
    assert all((said := told(admin, b, [p], "Preempted", f" for {a}/a1;")) and
               said.startswith("reclaimed by queue ") for p in held), \
        [told(admin, b, [p], "Preempted", "") for p in held]
    assert get_workload(admin, b, "b1")["status"]["phase"] == "Running"
    teams.wait_used("a", 4, 0)
