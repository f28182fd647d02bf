"""``gpu_orchestrator_pod_groups``: other controllers' gangs by state, as a user
watching a dashboard would read them (issue 34: metrics of groups waiting and
placed)."""

from __future__ import annotations

from typing import Any

from api.v1alpha1.keys import DEVICES_ANNOTATION, GROUP_SLOTS_ANNOTATION
from controllers.podbinding.group_metrics import group_states
from internal.metrics.domain import POD_GROUPS
from internal.scheduling.podgroups import (
    POD_GROUP_LABEL,
    POD_GROUP_SIZE_ANNOTATION,
    pod_group,
)

SCHED = "gpu-scheduler"


def member(group: str, name: str, size: str = "2", node: str | None = None,
           scheduler: str = SCHED, phase: str = "Pending") -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": scheduler, "containers": [{"name": "c"}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}",
                         "labels": {POD_GROUP_LABEL: group},
                         "annotations": {POD_GROUP_SIZE_ANNOTATION: size}},
            "spec": spec, "status": {"phase": phase}}


def states(pods: list[dict[str, Any]]) -> dict[str, int]:
    return group_states(pods, SCHED, pod_group)


def test_a_group_is_placed_only_when_every_member_is_bound() -> None:
    assert states([member("a", "a-0")]) == {"waiting": 1, "placed": 0, "refused": 0}
    assert states([member("a", "a-0", node="n1"), member("a", "a-1")])["waiting"] == 1
    both = [member("a", "a-0", node="n1"), member("a", "a-1", node="n2")]
    assert states(both) == {"waiting": 0, "placed": 1, "refused": 0}


def test_a_leader_holding_its_workers_slots_is_a_placed_group() -> None:
    """A LeaderReady group: the leader is bound with its workers' devices reserved,
    the workers are made only once it is Ready."""
    leader = member("lws", "lws-0", size="3", node="n1")
    leader["metadata"]["annotations"][DEVICES_ANNOTATION] = "0,1"
    leader["metadata"]["annotations"][GROUP_SLOTS_ANNOTATION] = "1=n1:2,3;2=n2:0,1"
    assert states([leader]) == {"waiting": 0, "placed": 1, "refused": 0}
    leader["metadata"]["annotations"][GROUP_SLOTS_ANNOTATION] = "1=n1:2,3"
    assert states([leader])["waiting"] == 1  # one worker has no slot


def test_members_that_disagree_on_the_size_make_a_refused_group() -> None:
    pods = [member("a", "a-0", size="2"), member("a", "a-1", size="3"),
            member("b", "b-0", size="x")]
    assert states(pods) == {"waiting": 0, "placed": 0, "refused": 2}


def test_finished_pods_and_other_schedulers_pods_are_no_members() -> None:
    pods = [member("a", "a-0", node="n1", phase="Succeeded"),
            member("a", "a-1", node="n1", scheduler="default-scheduler"),
            member("c", "c-0", size="1", node="n1", phase="Running")]
    assert states(pods) == {"waiting": 0, "placed": 1, "refused": 0}


def test_the_gauge_reads_its_source_at_scrape_time() -> None:
    pods = [member("a", "a-0")]
    POD_GROUPS.set_source(lambda: states(pods))
    try:
        got = {s.labels["state"]: s.value for m in POD_GROUPS.collect() for s in m.samples}
        assert got == {"waiting": 1.0, "placed": 0.0, "refused": 0.0}
        pods.append(member("a", "a-1"))
        pods[:] = [member("a", "a-0", node="n1"), member("a", "a-1", node="n1")]
        got = {s.labels["state"]: s.value for m in POD_GROUPS.collect() for s in m.samples}
        assert got["placed"] == 1.0 and got["waiting"] == 0.0
    finally:
        POD_GROUPS.set_source(dict)
