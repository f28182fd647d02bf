"""A nomination waits for devices, not for workloads (issue: a preemptor started on
its victim's still-held devices for 9 s).

A gang victim's pods terminate on the devices its preemptor is nominated to. When
the victim GPUWorkload is then deleted with ``--cascade=orphan``, the garbage
collector takes the pods' ownerReference away: they are their own owners from then
on, and no longer the owner the nomination was booked over. Before the fix the
preemptor stopped waiting at that moment and made its pods beside them.
"""

from __future__ import annotations

import contextlib

from runtime.store import thaw
from tests.unit.controllers.fakes import NS, Env


def running(env: Env, name: str) -> None:
    for pod in env.pods.list():
        if pod["metadata"]["name"].startswith(f"{name}-"):
            env.set_phase(pod["metadata"]["name"], "Running")
    env.settle(name)
    assert env.status(name)["phase"] == "Running", env.status(name)


def gang_victim_and_preemptor(env: Env) -> None:
    """``low``: a 2 x 2-GPU gang on node1 and node2, Running; ``high``: a 2 x 2-GPU
    gang of higher priority, nominated over it."""
    env.workload("low", replicas=2, gpusPerReplica=2, priority="low",
                 retryPolicy={"maxRetries": 10, "backoffSeconds": 60})
    env.settle("low")
    running(env, "low")
    env.workload("high", replicas=2, gpusPerReplica=2, priority="high",
                 schedulingStrategy="priority")
    env.settle("high")
    assert env.condition("high", "Scheduled")["reason"] == "WaitingForPreemption"


def orphan(env: Env, name: str) -> None:
    """``kubectl delete gw name --cascade=orphan`` as the API server and the garbage
    collector carry it out: the pods lose their ownerReference, then the workload
    is gone."""
    for pod in env.pods.list():
        if pod["metadata"]["name"].startswith(f"{name}-"):
            pod = thaw(pod)
            pod["metadata"]["ownerReferences"] = []
            env.put_pod(pod)
    env.drop_workload(name)


def test_a_preemptor_waits_for_an_orphaned_victims_terminating_pods() -> None:
    env = Env(nodes=2, gpus=2)
    gang_victim_and_preemptor(env)
    env.settle("low")  # takes in its eviction: its pods terminate (grace period)
    assert sorted(env.client.names("delete", "Pod")) == ["low-0", "low-1"]
    orphan(env, "low")
    env.settle("high")
    assert env.pod("high-0") is None and env.pod("high-1") is None
    cond = env.condition("high", "Scheduled")
    assert cond["reason"] == "WaitingForPreemption", cond
    assert cond["message"] == "waiting for 2 preempted pod(s) to terminate on node1, node2"
    assert env.overlaps() == []

    env.pod_gone("low-0")
    env.settle("high")
    assert env.pod("high-0") is None and env.pod("high-1") is None  # a gang: all or none
    env.pod_gone("low-1")
    assert f"{NS}/high" in env.woken
    env.settle("high")
    assert env.pod("high-0") is not None and env.pod("high-1") is not None
    assert env.overlaps() == []


def test_a_victim_orphaned_before_it_took_in_its_eviction_keeps_its_devices() -> None:
    """Orphaned before its own reconcile asked its pods to go: they run on as bare
    pods and keep their GPUs; the preemptor waits for them, however long."""
    env = Env(nodes=2, gpus=2)
    gang_victim_and_preemptor(env)
    orphan(env, "low")
    for _ in range(3):
        env.settle("high")
        assert env.pod("high-0") is None and env.pod("high-1") is None
        assert env.overlaps() == []
    assert env.condition("high", "Scheduled")["message"] == \
        "waiting for 2 preempted pod(s) to terminate on node1, node2"
    env.pod_gone("low-0")
    env.pod_gone("low-1")
    env.settle("high")
    assert env.pod("high-0") is not None and env.overlaps() == []


def test_a_pod_that_came_to_hold_a_booked_device_is_waited_for() -> None:
    """Any holder, not only a victim: a pod of someone else that names a device of a
    booking whose child is not made yet (here a bare pod with the devices
    annotation) is waited for, and the condition says so without 'preempted'."""
    env = Env(nodes=1, gpus=2)
    env.workload("w", replicas=2, gpusPerReplica=1)
    # the gang's placement is committed; as its first pod is sent, another pod
    # naming both devices appears, and the create's answer is lost
    real_create = env.client.create

    def intruder_then_timeout(obj, handles_already_exists=False):  # type: ignore[no-untyped-def]
        if obj.get("kind") != "Pod" or env.pod("intruder") is not None:
            return real_create(obj, handles_already_exists)
        env.foreign_pod("intruder", "node1", devices="0,1")
        raise TimeoutError("the create timed out before it reached the API")

    env.client.create = intruder_then_timeout  # type: ignore[method-assign]
    with contextlib.suppress(TimeoutError):
        env.reconcile("w")
    env.client.create = real_create  # type: ignore[method-assign]
    env.settle("w")
    assert env.pod("w-0") is None and env.pod("w-1") is None
    cond = env.condition("w", "Scheduled")
    assert cond["reason"] == "WaitingForDevices", cond
    assert cond["message"] == "waiting for 1 pod(s) holding its devices to terminate on node1"
    env.pod_gone("intruder")
    env.settle("w")
    assert env.pod("w-0") is not None and env.pod("w-1") is not None
