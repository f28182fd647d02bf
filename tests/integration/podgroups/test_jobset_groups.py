"""A JobSet's pods, made by the real JobSet and Job controllers, are one pod group
(internal/scheduling/podgroups.py, docs/podgroups.md), read from the live pods and
the live JobSet: one group of the whole JobSet per restart attempt. Under InOrder it
is placed by the manager's pod binding once the first replicated job's members
exist, the later ones' devices held as slots they take when made."""

from __future__ import annotations

from typing import Any

import pytest

from api.v1alpha1.keys import DEVICE_AUTHORITY_LABEL
from internal.scheduling.podgroups import PodGroup
from runtime import Client
from tests.integration.controller.conftest import (  # noqa: F401 (fixtures)
    NodeGroup,
    Running,
    group,
    installed,
)
from tests.integration.podgroups.conftest import REF
from tests.integration.podgroups.controllers import JOBSET, gpu_pod, jobset
from tests.integration.podgroups.fixtures import (
    groups_of,
    members,
    named,
    named_nodes,
    on_nodes,
    peer_fixtures,
    pinned,
    slots_of,
    told,
    when,
)
from tests.waiting import eventually

DEVICES = "gpu.orchestrator.dev/devices"
SLOTS = "gpu.orchestrator.dev/group-slots"


peers, binder = peer_fixtures(JOBSET)


def pod_groups(admin: Client, namespace: str, want: int) -> list[PodGroup]:
    """The group of every pod of ``namespace`` once there are ``want``."""
    return [g for _, g in groups_of(admin, namespace, want, "the JobSet and Job controllers")]


def test_a_jobsets_pods_are_one_group_of_its_size(
        peers: None, admin: Client, namespace: str) -> None:
    """4 pods x 4 GPUs as the issue's user ran it: a launcher Job of 1 pod and 3 worker
    Jobs of 1 pod: 4 members of one group, indices 0..3."""
    admin.create(jobset("train", [("launcher", 1, 1), ("workers", 3, 1)]), namespace=namespace)
    groups = pod_groups(admin, namespace, 4)
    assert {g.key for g in groups} == {f"{namespace}/jobset:train:0"}
    assert {g.size for g in groups} == {4}
    assert sorted(g.index for g in groups) == [0, 1, 2, 3]


def test_jobs_of_several_pods_count_each_pod(
        peers: None, admin: Client, namespace: str) -> None:
    admin.create(jobset("ring", [("workers", 2, 3)]), namespace=namespace)
    groups = pod_groups(admin, namespace, 6)
    assert {(g.key, g.size) for g in groups} == {(f"{namespace}/jobset:ring:0", 6)}
    assert sorted(g.index for g in groups) == list(range(6))


def test_in_order_the_whole_jobset_is_one_group_made_first_at_its_launcher(
        peers: None, admin: Client, namespace: str) -> None:
    """InOrder: the workers' Jobs are made only once the launcher is ready, which
    nothing runs here: the launcher alone exists, a member of the whole JobSet's
    group (1 + 2 x 2), the one made first."""
    admin.create(jobset("staged", [("launcher", 1, 1), ("workers", 2, 2)], order="InOrder"),
                 namespace=namespace)
    groups = pod_groups(admin, namespace, 1)
    assert [(g.key, g.size, g.index, g.first) for g in groups] == [
        (f"{namespace}/jobset:staged:0", 5, 0, ((0, 1),))]


def test_every_member_reads_its_devices_from_the_binding(
        peers: None, exposure: None, admin: Client, namespace: str) -> None:
    """The job controller's pods pass JobSet's pod webhook, ours and the pod-devices
    policy: each GPU container's CUDA_VISIBLE_DEVICES is the devices annotation's,
    which the Binding of its group's placement writes."""
    admin.create(jobset("seen", [("launcher", 1, 1), ("workers", 1, 2)]), namespace=namespace)
    pod_groups(admin, namespace, 3)
    pods = admin.list("v1", "Pod", namespace=namespace)["items"]
    assert [[e for e in p["spec"]["containers"][0]["env"] if e["name"] == REF["name"]]
            for p in pods] == [[REF]] * 3


def staged(name: str, group: NodeGroup, how: str = "InOrder") -> dict[str, Any]:  # noqa: F811
    """A launcher Job of 1 pod, then (InOrder, or dependsOn the launcher Ready) 2
    worker Jobs of 2 pods, 4 GPUs each, on the test's own nodes."""
    js = jobset(name, [("launcher", 1, 1), ("workers", 2, 2)],
                order="InOrder" if how == "InOrder" else None)
    if how == "dependsOn":
        js["spec"]["replicatedJobs"][1]["dependsOn"] = [{"name": "launcher", "status": "Ready"}]
    return on_nodes(js, group)


def live(admin: Client, ns: str, name: str) -> dict[str, dict[str, Any]]:
    return named(members(admin, ns, name))


def all_bound(admin: Client, ns: str, name: str, count: int, timeout: float,
              what: str) -> dict[str, dict[str, Any]]:
    """JobSet ``name``'s ``count`` members once every one is bound."""
    def bound() -> dict[str, dict[str, Any]] | None:
        pods = live(admin, ns, name)
        return pods if len(pods) == count and all(p["spec"].get("nodeName")
                                                  for p in pods.values()) else None
    return eventually(bound, timeout=timeout, what=what)


def where_each(pods: dict[str, Any]) -> dict[str, tuple[str, int]]:
    """``<replicated job>-<job index>`` -> (its node, how many devices it holds)."""
    return {p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] + "-" +
            p["metadata"]["labels"]["jobset.sigs.k8s.io/job-index"]:
            (p["spec"]["nodeName"], len(p["metadata"]["annotations"][DEVICES].split(",")))
            for p in pods.values()}


@pytest.mark.parametrize("how", ["InOrder", "dependsOn"])
def test_an_in_order_jobset_is_placed_whole_at_its_launcher_and_workers_take_their_slots(
        binder: Running, admin: Client, namespace: str, group: NodeGroup,  # noqa: F811
        how: str) -> None:
    """Room for the whole JobSet (5 members x 4 GPUs on 5 nodes x 4): the launcher is
    bound first, holding the 4 workers' devices as slots written on its Binding; the
    workers, made by the JobSet controller only once the launcher is ready, each land
    on the slot of its index (1 + job index x 2 + completion index). The same under
    dependsOn the launcher, status Ready."""
    binder.wait_nodes(named_nodes(group, 5))
    admin.create(staged("staged", group, how), namespace=namespace)

    pods = all_bound(admin, namespace, "staged", 5, 150, "the launcher and its 4 workers bound")
    (launcher,) = [p for p in pods.values()
                   if p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"]
                   == "launcher"]
    slots = slots_of(launcher["metadata"]["annotations"][SLOTS])
    assert sorted(slots) == [1, 2, 3, 4], slots
    for name, p in pods.items():
        labels = p["metadata"]["labels"]
        if p is launcher:
            continue
        assert when(p["metadata"]["creationTimestamp"]) >= when(
            launcher["metadata"]["creationTimestamp"]), name
        index = 1 + int(labels["jobset.sigs.k8s.io/job-index"]) * 2 + int(
            labels["batch.kubernetes.io/job-completion-index"])
        assert (p["spec"]["nodeName"], p["metadata"]["annotations"][DEVICES]) == \
            slots[index], (name, slots)
    held = [(p["spec"]["nodeName"], d) for p in pods.values()
            for d in p["metadata"]["annotations"][DEVICES].split(",")]
    assert len(held) == 20 and len(set(held)) == 20, held  # every member's devices distinct


def test_an_in_order_jobset_on_room_for_the_launcher_alone_holds_nothing_and_says_why(
        binder: Running, admin: Client, namespace: str, group: NodeGroup) -> None:  # noqa: F811
    """Room for 1 member of 5: nothing is bound, so the JobSet controller never makes
    the workers, and the launcher's FailedScheduling names the whole group. (Before,
    the launcher was a group of its own: it ran, holding 4 GPUs, while its workers
    waited for room.)"""
    binder.wait_nodes(named_nodes(group, 1))
    admin.create(staged("big", group), namespace=namespace)
    why = eventually(lambda: told(admin, namespace, live(admin, namespace, "big"),
                                  "FailedScheduling", "pod group"),
                     timeout=120, what="the launcher's FailedScheduling naming its group")
    assert f"pod group {namespace}/jobset:big:0 (5 of 5 members to place, 4 of them" in why, why
    pods = live(admin, namespace, "big")
    assert len(pods) == 1 and not any(p["spec"].get("nodeName") for p in pods.values()), pods


def test_an_in_order_jobsets_workers_go_where_their_own_template_says(
        binder: Running, admin: Client, namespace: str, group: NodeGroup) -> None:  # noqa: F811
    """A launcher of 1 GPU on pool a (one node of 4 GPUs) and 2 workers of 4 GPUs on
    pool b (two nodes of 4), each replicated job's nodeSelector its own: the launcher
    is bound on pool a holding 1 device, each worker's slot is 4 devices of a pool-b
    node, and the workers the JobSet controller then makes bind there. (Before, every
    slot was planned as the launcher at the largest request, 3 x 4 GPUs under pool
    a's selector: no room, and the JobSet never ran.)"""
    pool_a = group.add(1, 4, labels={DEVICE_AUTHORITY_LABEL: "named", "pool": "a"})
    pool_b = group.add(2, 4, labels={DEVICE_AUTHORITY_LABEL: "named", "pool": "b"})
    binder.wait_nodes(pool_a + pool_b)
    js = on_nodes(jobset("pools", [("launcher", 1, 1), ("workers", 2, 1)], order="InOrder"),
                  group)
    for rj, gpus, pool in zip(js["spec"]["replicatedJobs"], ("1", "4"), ("a", "b"),
                              strict=True):
        spec = rj["template"]["spec"]["template"]["spec"]
        spec["nodeSelector"]["pool"] = pool
        spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = gpus
    admin.create(js, namespace=namespace)

    pods = all_bound(admin, namespace, "pools", 3, 150, "the launcher and its 2 workers bound")
    where = where_each(pods)
    assert where["launcher-0"] == (pool_a[0], 1), where
    assert {where["workers-0"], where["workers-1"]} == {(n, 4) for n in pool_b}, where


def test_a_launcher_of_1_gpu_and_workers_of_4_go_where_only_that_fits(
        binder: Running, admin: Client, namespace: str, group: NodeGroup) -> None:  # noqa: F811
    """Three empty nodes of 4 GPUs and one with 1 free (a pod of 3 GPUs bound there):
    a JobSet of a launcher of 1 GPU and 3 workers of 4 fits only with the launcher on
    that last GPU, and runs so. (Before, the default strategy, leastLoaded, sent the
    launcher, searched first, to an empty node, and the workers found two: the JobSet
    held nothing and waited for as long as the room stayed so.)"""
    nodes = binder.wait_nodes(named_nodes(group, 4))
    other = pinned({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "other"},
                    **gpu_pod(3)}, group)
    other["spec"]["nodeSelector"]["kubernetes.io/hostname"] = nodes[3]
    admin.create(other, namespace=namespace)
    eventually(lambda: admin.get("v1", "Pod", "other", namespace)["spec"].get("nodeName"),
               timeout=60, what="the pod of 3 GPUs bound")
    js = on_nodes(jobset("fits", [("launcher", 1, 1), ("workers", 3, 1)]), group)
    for rj, gpus in zip(js["spec"]["replicatedJobs"], ("1", "4"), strict=True):
        rj["template"]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"][
            "nvidia.com/gpu"] = gpus
    admin.create(js, namespace=namespace)

    pods = all_bound(admin, namespace, "fits", 4, 90, "the launcher and its 3 workers bound")
    where = where_each(pods)
    assert where.pop("launcher-0") == (nodes[3], 1), where
    assert sorted(where.values()) == [(n, 4) for n in nodes[:3]], where


def test_a_jobset_with_a_map_is_placed_on_its_lines_and_each_member_reads_them(
        binder: Running, exposure: None, admin: Client, namespace: str,
        group: NodeGroup) -> None:  # noqa: F811
    """The seed's map in the replicated job's pod template, one line per member by
    its index in the group (job-index here): each member is bound on its line, its
    Binding writes the line's devices, and its CUDA_VISIBLE_DEVICES is the
    reference that reads them. (Before, the map was ignored for a group's members,
    and the webhook could not tell a Job pod's ordinal: no devices injected.)"""
    nodes = named_nodes(group, 2)
    binder.wait_nodes(nodes)
    js = on_nodes(jobset("mapped", [("workers", 2, 1)]), group, 2)
    template = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    template.setdefault("metadata", {}).setdefault("annotations", {})[
        "gpu-scheduling-map"] = f"0={nodes[1]}:2,3\n1={nodes[0]}:0,1"
    admin.create(js, namespace=namespace)

    pods = all_bound(admin, namespace, "mapped", 2, 120, "both members bound")
    where = {p["metadata"]["labels"]["jobset.sigs.k8s.io/job-index"]:
             (p["spec"]["nodeName"], p["metadata"]["annotations"][DEVICES])
             for p in pods.values()}
    assert where == {"0": (nodes[1], "2,3"), "1": (nodes[0], "0,1")}, where
    assert all([e for e in p["spec"]["containers"][0]["env"] if e["name"] == REF["name"]]
               == [REF] for p in pods.values())
