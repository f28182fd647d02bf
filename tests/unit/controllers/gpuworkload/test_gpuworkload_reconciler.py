"""The GPUWorkload reconciler with a fake client, real caches and the real placement
state (no server): the failure paths of issue 11 item 4 end the attempt readably and
free nothing a pod still holds; a re-created name is a different holder; a
preemptor's nomination waits for its victims' pods; deletion waits for children."""

from __future__ import annotations

import contextlib
from datetime import datetime, timedelta

import pytest

from api.v1alpha1.keys import ATTEMPT_LABEL, CHILDREN_FINALIZER
from runtime import ApiError
from runtime.store import thaw
from tests.unit.controllers.fakes import NS, Env, forbidden, internal, invalid, running

FOUR = {0, 1, 2, 3}


def owners(env: Env, node: str = "node1") -> dict[int, frozenset[str]]:
    return env.holders(node)



# ------------------------------------------------------- a child cannot be made


def test_an_invalid_headless_service_name_ends_the_attempt_with_child_create_failed() -> None:
    env = Env(gpus=4)
    env.workload("gang", replicas=2, gpusPerReplica=1)
    env.client.fail[("Service", "gang")] = invalid(
        'Service "gang" is invalid: metadata.name: Invalid value: "7b-finetune": a DNS-1035 '
        'label must start with an alphabetic character')
    result = env.settle("gang")

    st = env.status("gang")
    assert st["phase"] == "Pending" and st.get("placements") is None
    cond = env.condition("gang", "Scheduled")
    assert (cond["status"], cond["reason"]) == ("False", "ChildCreateFailed")
    assert "cannot create headless Service gang" in cond["message"]
    assert "DNS-1035" in cond["message"] and "retry 1 of 5 in " in cond["message"]
    assert st["retries"] == 1 and st["nextRetryTime"]
    assert ("ChildCreateFailed", cond["message"]) in env.warnings("gang")
    assert result is not None and result.requeue_after >= 10  # the policy's backoff
    # no pod was made, the booking is released, and nothing holds a device
    assert env.client.of("create", "Pod") == []
    assert env.state.booking(f"{NS}/gang") is None
    assert env.free() == 4


def test_a_child_that_cannot_be_created_is_tried_again_only_when_its_retry_is_due() -> None:
    env = Env(gpus=4)
    env.workload("gang", replicas=2, gpusPerReplica=1,
                 retryPolicy={"maxRetries": 2, "backoffSeconds": 30})
    env.client.fail[("Service", "gang")] = forbidden("services is forbidden: quota")
    env.settle("gang")
    st = env.status("gang")
    assert st["retries"] == 1 and "retry 1 of 2 in " in st["message"]
    due = datetime.fromisoformat(st["nextRetryTime"].replace("Z", "+00:00"))
    # its own status write (and any freed capacity) wakes it at once: not yet due
    result = env.reconcile("gang")
    assert result is not None and 0 < result.requeue_after <= (due - env.now).total_seconds()
    assert env.client.names("create", "Service") == ["gang"]
    assert env.status("gang")["retries"] == 1 and env.decisions == 1
    env.now = due + timedelta(seconds=1)
    env.settle("gang")
    assert env.client.names("create", "Service") == ["gang", "gang"]
    assert env.status("gang")["retries"] == 2
    env.now = datetime.fromisoformat(
        env.status("gang")["nextRetryTime"].replace("Z", "+00:00")) + timedelta(seconds=1)
    assert env.reconcile("gang") is None  # one reconcile ends it, and says so
    st = env.status("gang")
    assert st["phase"] == "Failed" and "no retries left (maxRetries 2)" in st["message"]
    assert env.condition("gang", "Failed")["reason"] == "ChildCreateFailed"
    assert any("no retries left" in m for r, m in env.warnings("gang"))
    assert env.client.names("create", "Service") == ["gang"] * 3
    assert env.state.booking(f"{NS}/gang") is None and env.free() == 4


def test_a_quota_denial_ends_the_attempt_and_frees_only_the_booking() -> None:
    env = Env(gpus=8)
    env.workload("other", gpusPerReplica=2)
    env.settle("other")
    running(env, "other")
    env.workload("gang", replicas=2, gpusPerReplica=2)
    env.client.fail[("Pod", "gang-1")] = forbidden(
        'pods "gang-1" is forbidden: exceeded quota: gpus, requested: requests.nvidia.com/gpu=2')
    env.settle("gang")

    cond = env.condition("gang", "Scheduled")
    assert cond["reason"] == "ChildCreateFailed"
    assert "cannot create Pod gang-1" in cond["message"] and "exceeded quota" in cond["message"]
    assert env.status("gang")["retries"] == 1
    assert any(r == "ChildCreateFailed" for r, _ in env.warnings("gang"))
    # gang-0 was made before the denial: it is asked to go, and terminates holding
    # its two GPUs; the booking of the attempt is released, other keeps its own.
    assert env.client.names("delete", "Pod") == ["gang-0"]
    assert env.pod("gang-0")["metadata"].get("deletionTimestamp")
    assert env.state.booking(f"{NS}/gang") is None
    gang0 = [int(d) for d in env.pod("gang-0")["metadata"]["annotations"]
             ["gpu.orchestrator.dev/devices"].split(",")]
    gang_owner = f"{env.get('gang')['metadata']['uid']}#0"
    assert [d for d, o in owners(env).items() if gang_owner in o] == gang0
    assert env.free() == 4  # 8 - other's 2 - terminating gang-0's 2
    env.pod_gone("gang-0")
    assert env.free() == 6
    assert len(owners(env)) == 2  # other's


def test_a_server_error_on_create_is_retried_by_the_queue_not_counted() -> None:
    env = Env()
    env.workload("a", gpusPerReplica=2)
    env.client.fail[("Pod", "a-0")] = internal()
    with pytest.raises(ApiError) as err:  # to the work queue: a rate-limited requeue
        env.reconcile("a")
    assert err.value.status == 500
    del env.client.fail[("Pod", "a-0")]
    # not the workload's failure: no retry spent, no booking left behind
    assert env.status("a").get("retries", 0) == 0
    assert env.state.booking(f"{NS}/a") is None and env.free() == 4
    env.settle("a")
    assert env.pod("a-0") is not None and env.status("a")["retries"] == 0


# ------------------------------------------------------------- AlreadyExists


def test_a_name_taken_by_an_object_we_do_not_own_is_never_counted_as_ours() -> None:
    env = Env()
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "train", "uid": "sts-uid",
           "controller": True}
    # train-0 of a StatefulSet, bound elsewhere: in the API, not in our caches
    env.client.others[("Pod", "train-0")] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "train-0", "namespace": NS, "uid": "sts-pod",
                     "ownerReferences": [sts]},
        "spec": {"nodeName": "node1"}, "status": {"phase": "Running"}}
    env.workload("train", gpusPerReplica=4)
    env.settle("train")

    cond = env.condition("train", "Scheduled")
    assert cond["reason"] == "ChildNameTaken"
    assert "Pod train-0 already exists and is not owned by this workload" in cond["message"]
    st = env.status("train")
    assert st["phase"] == "Pending" and st["retries"] == 1  # not Running: not ours
    assert any(r == "ChildNameTaken" for r, _ in env.warnings("train"))
    assert env.client.of("delete") == []  # never asked to go
    assert env.state.booking(f"{NS}/train") is None and env.free() == 4
    assert CHILDREN_FINALIZER not in (env.get("train")["metadata"].get("finalizers") or [])


def test_our_own_child_answering_already_exists_is_adopted_without_a_second_decision() -> None:
    env = Env()
    env.workload("a", gpusPerReplica=2)
    env.client.lag = True  # the pods cache has not seen a-0 yet
    env.client.fail_patch[("GPUWorkload", "a")] = internal()  # the finalizer write fails
    with pytest.raises(ApiError):
        env.reconcile("a")
    assert env.decisions == 1 and env.client.names("create", "Pod") == ["a-0"]
    made = env.client.lagging[("Pod", "a-0")]

    env.settle("a")  # requeued; the cache still lags: the created pod is expected
    assert env.client.names("create", "Pod") == ["a-0"]  # no second create, no GET
    assert env.decisions == 1  # the booking stood: decided once
    st = env.status("a")
    assert st["phase"] == "Scheduled" and st["retries"] == 0
    assert st["placements"] == [{"index": 0, "node": "node1",
                                 "devices": [int(d) for d in made["metadata"]["annotations"]
                                             ["gpu.orchestrator.dev/devices"].split(",")]}]
    assert env.warnings("a") == []
    env.client.lag = False
    env.catch_up()
    running(env, "a")
    assert env.decisions == 1 and len(env.client.of("create", "Pod")) == 1


def test_a_restarted_controller_adopts_the_pod_it_made_before_its_status_write() -> None:
    env = Env()
    env.workload("a", gpusPerReplica=2)
    env.client.fail_patch[("GPUWorkload", "a")] = internal()
    with contextlib.suppress(Exception):
        env.reconcile("a")  # the pod is made; then the controller dies
    assert env.status("a").get("placements") is None
    env.restart()
    env.settle("a")
    assert env.decisions == 0  # the new ledger read the placement from the pod
    assert len(env.client.of("create", "Pod")) == 1
    assert env.status("a")["placements"][0]["node"] == "node1"


# --------------------------------------------------------------- invalid spec


def test_a_spec_that_no_longer_validates_keeps_its_running_pods_held() -> None:
    env = Env()
    env.workload("a", gpusPerReplica=4)
    env.settle("a")
    running(env, "a")
    env.edit("a", lambda o: o["spec"].update(priority="urgent"))
    env.settle("a")

    cond = env.condition("a", "Scheduled")
    assert (cond["status"], cond["reason"]) == ("False", "InvalidSpec")
    assert "priority" in cond["message"]
    assert any(r == "InvalidSpec" for r, _ in env.warnings("a"))
    assert env.client.of("delete") == []
    assert env.pod("a-0")["status"]["phase"] == "Running"
    assert set(owners(env)) == FOUR and env.free() == 0

    env.workload("b", gpusPerReplica=1)
    env.settle("b")
    assert env.condition("b", "Scheduled")["reason"] == "Unschedulable"

    env.restart()  # a new leader: the rebuild keeps both the pod and the placement
    assert any("ns/a: invalid spec, placements kept" in p for p in env.rebuild_problems)
    assert set(owners(env)) == FOUR and env.free() == 0
    env.settle("a")
    env.settle("b")
    assert env.condition("b", "Scheduled")["reason"] == "Unschedulable"
    assert env.pod("b-0") is None


# ------------------------------------------------------- delete and re-create


def test_a_workload_recreated_under_the_same_name_is_a_different_holder() -> None:
    env = Env()
    env.workload("w", gpusPerReplica=4, uid="uid-old")
    env.settle("w")
    running(env, "w")
    env.delete_workload("w")
    env.settle("w")  # children asked to go; finalizer kept while one is left
    assert env.pod("w-0")["metadata"].get("deletionTimestamp")
    assert env.client.names("delete", "Pod") == ["w-0"]
    assert env.get("w") is not None  # our finalizer holds it

    # The API lets the old object go (say, someone removed our finalizer), and the
    # name is created again while the old pod still terminates.
    env.drop_workload("w")
    env.workload("w", gpusPerReplica=4, uid="uid-new")
    env.settle("w")
    assert env.condition("w", "Scheduled")["reason"] == "Unschedulable"
    assert owners(env) == {d: frozenset({"uid-old#0"}) for d in FOUR}
    # w-0 of the new object cannot be made while the old one is there
    assert env.client.names("create", "Pod") == ["w-0"]

    env.pod_gone("w-0")
    assert f"{NS}/w" in env.woken
    env.settle("w")
    new = env.pod("w-0")
    assert new is not None and new["metadata"]["ownerReferences"][0]["uid"] == "uid-new"
    assert owners(env) == {d: frozenset({"uid-new#0"}) for d in FOUR}


def test_a_booking_left_by_the_old_object_of_a_name_is_not_the_new_ones() -> None:
    env = Env()
    env.workload("w", gpusPerReplica=2, uid="uid-old")
    env.client.lag = True
    env.settle("w")  # booked and its pod made; the cache does not show it yet
    assert env.state.booking(f"{NS}/w").uid == "uid-old"
    # the old object is gone and a new one of the same name appears before the
    # cache delivers the deletion
    env.workloads.delete(f"{NS}/w")
    env.workload("w", gpusPerReplica=4, uid="uid-new")
    env.client.lag = False
    env.catch_up()  # the old pod w-0 (uid-old) is there after all, holding 2 GPUs
    env.settle("w")
    assert env.state.booking(f"{NS}/w") is None  # the old one's was released
    assert env.condition("w", "Scheduled")["reason"] == "Unschedulable"
    old_devices = {d for d, o in owners(env).items() if o == {"uid-old#0"}}
    assert len(old_devices) == 2


# ---------------------------------------------------------------- preemption


def preemption(env: Env) -> None:
    env.workload("low", gpusPerReplica=4, priority="low",
                 retryPolicy={"maxRetries": 10, "backoffSeconds": 60})
    env.settle("low")
    running(env, "low")
    env.workload("high", gpusPerReplica=4, priority="high", schedulingStrategy="priority")
    env.settle("high")


def test_a_preemptor_is_nominated_and_waits_for_its_victims_pods() -> None:
    env = Env()
    preemption(env)
    high = env.condition("high", "Scheduled")
    assert (high["status"], high["reason"]) == ("True", "WaitingForPreemption")
    assert high["message"] == "waiting for 1 preempted pod(s) to terminate on node1"
    assert env.status("high")["placements"][0]["devices"] == [0, 1, 2, 3]
    assert env.pod("high-0") is None
    assert "Preempting" in env.normals("high")
    assert f"{NS}/low" in env.woken  # the victim's own reconcile deletes its pod

    env.settle("low")
    low = env.condition("low", "Preempted")
    assert low["status"] == "True" and f"preempted by {NS}/high" in low["message"]
    assert env.status("low")["phase"] == "Pending"
    assert env.client.names("delete", "Pod") == ["low-0"]
    # low-0 terminates: it still holds, high is nominated over it, nobody else fits
    assert env.pod("low-0")["metadata"].get("deletionTimestamp")
    env.workload("mid", gpusPerReplica=1, priority="medium",
                 retryPolicy={"maxRetries": 10, "backoffSeconds": 60})
    env.settle("mid")
    assert env.condition("mid", "Scheduled")["reason"] == "Unschedulable"
    env.settle("high")
    assert env.condition("high", "Scheduled")["reason"] == "WaitingForPreemption"
    assert env.pod("high-0") is None

    env.pod_gone("low-0")
    assert f"{NS}/high" in env.woken
    env.settle("high")  # low has not seen its pod gone yet: its devices are still its own
    assert env.pod("high-0") is None
    env.settle("low")  # its pod's deletion wakes it: none of its children is left
    env.settle("high")
    pod = env.pod("high-0")
    assert pod is not None
    assert pod["metadata"]["annotations"]["gpu.orchestrator.dev/devices"] == "0,1,2,3"
    running(env, "high")
    env.settle("mid")
    assert env.pod("mid-0") is None and env.free() == 0


def test_a_victim_chosen_while_its_own_gang_is_being_created_is_waited_for() -> None:
    """The race the churn test found: a preemptor chose a gang as its victim while
    the gang's reconcile was committing it and creating its pods; the gang's pods
    were made after the preemptor checked for its victims' pods, on the same GPUs."""
    env = Env()
    env.workload("low", replicas=2, gpusPerReplica=2, priority="low",
                 retryPolicy={"maxRetries": 10, "backoffSeconds": 60})
    env.client.lag = True  # low's pods reach the cache late, too
    seen: list[list] = []

    def high_meanwhile() -> None:  # high is created, and another worker places it
        env.workload("high", gpusPerReplica=4, priority="high",
                     schedulingStrategy="priority")
        env.settle("high")
        seen.append(env.overlaps())
    env.client.before[("create", "Pod", "low-0")] = high_meanwhile
    env.settle("low")  # placed, committed; high preempts it between two creates
    assert env.state.eviction(f"{NS}/low") is not None
    cond = env.condition("high", "Scheduled")
    assert cond["reason"] == "WaitingForPreemption", cond
    assert env.pod("high-0") is None and env.overlaps() == []

    env.settle("high")  # low's pods hold (as made, before the cache shows them)
    assert env.condition("high", "Scheduled")["message"] == \
        "waiting for 2 preempted pod(s) to terminate on node1"
    env.settle("low")  # takes in its eviction; its pods are not in the cache yet,
    # but it made them: they are asked to go all the same
    assert env.condition("low", "Preempted")["status"] == "True"
    assert sorted(env.client.names("delete", "Pod")) == ["low-0", "low-1"]
    env.settle("high")
    assert env.pod("high-0") is None and env.overlaps() == []
    env.client.lag = False
    env.catch_up()
    env.settle("low")  # nothing more to ask: they terminate
    assert sorted(env.client.names("delete", "Pod")) == ["low-0", "low-1"]
    env.settle("high")
    assert env.pod("high-0") is None and env.overlaps() == []
    env.pod_gone("low-0")
    env.pod_gone("low-1")
    env.settle("low")
    env.settle("high")
    assert env.pod("high-0") is not None
    assert seen == [[]] and env.overlaps() == []


def test_a_preemptor_deleted_while_waiting_gives_its_nomination_back() -> None:
    env = Env()
    preemption(env)
    env.settle("low")
    assert env.pod("low-0")["metadata"].get("deletionTimestamp")
    assert CHILDREN_FINALIZER in env.get("high")["metadata"]["finalizers"]
    env.delete_workload("high")
    env.settle("high")
    assert env.get("high") is None  # no child: the finalizer went at once
    env.reconcile("high")  # gone from the cache
    assert env.state.booking(f"{NS}/high") is None

    env.pod_gone("low-0")
    assert env.free() == 0  # the victim has not seen its pod gone: still its own
    # the victim's reconcile (its pod's deletion wakes it) lets them go, and with no
    # nomination left over them it is placed on them again
    env.settle("low")
    assert env.pod("low-0") is not None and env.free() == 0
    assert env.status("low")["placements"][0]["devices"] == [0, 1, 2, 3]


# ------------------------------------------------------------------ deleting


def test_deleting_a_workload_deletes_its_children_and_waits_for_them() -> None:
    env = Env()
    env.workload("gang", replicas=2, gpusPerReplica=2)
    env.settle("gang")
    running(env, "gang")
    assert CHILDREN_FINALIZER in env.get("gang")["metadata"]["finalizers"]
    env.delete_workload("gang")
    result = env.settle("gang")
    assert sorted(env.client.names("delete", "Pod")) == ["gang-0", "gang-1"]
    assert result is not None and result.requeue_after > 0
    assert CHILDREN_FINALIZER in env.get("gang")["metadata"]["finalizers"]
    assert env.free() == 0  # terminating pods hold

    env.pod_gone("gang-0")
    env.settle("gang")
    assert env.get("gang") is not None and env.free() == 2
    assert len(env.client.names("delete", "Pod")) == 2  # not asked twice

    env.pod_gone("gang-1")
    assert env.settle("gang") is None
    assert env.get("gang") is None  # our finalizer removed: the API let it go
    env.reconcile("gang")
    assert env.state.booking(f"{NS}/gang") is None and env.free() == 4


def test_orphan_propagation_keeps_the_children_and_their_gpus() -> None:
    env = Env()
    env.workload("g1", gpusPerReplica=2)
    env.settle("g1")
    running(env, "g1")
    env.delete_workload("g1", orphan=True)
    env.settle("g1")
    assert env.client.of("delete") == []
    assert env.get("g1")["metadata"]["finalizers"] == ["orphan"]  # ours is gone
    # the garbage collector orphans the pod, then lets the object go
    pod = thaw(env.pod("g1-0"))
    pod["metadata"]["ownerReferences"] = []
    env.put_pod(pod)
    env.drop_workload("g1")
    env.reconcile("g1")
    assert env.state.booking(f"{NS}/g1") is None
    assert env.free() == 2  # g1-0 still runs on two of them
    env.workload("next", gpusPerReplica=4, retryPolicy={"maxRetries": 3})
    env.settle("next")
    assert env.condition("next", "Scheduled")["reason"] == "Unschedulable"
    env.pod_gone("g1-0")
    env.settle("next")
    assert env.pod("next-0") is not None


# ------------------------------------------------------------------ retries


def test_a_failed_replica_ends_the_attempt_and_the_retry_waits_for_its_pods() -> None:
    env = Env()
    env.workload("gang", replicas=2, gpusPerReplica=2,
                 retryPolicy={"maxRetries": 3, "backoffSeconds": 1})
    env.settle("gang")
    running(env, "gang")
    env.set_phase("gang-1", "Failed")
    env.settle("gang")
    cond = env.condition("gang", "Scheduled")
    assert cond["reason"] == "ReplicaFailed" and env.status("gang")["retries"] == 1
    assert env.client.names("delete", "Pod") == ["gang-0"]  # the failed one holds nothing
    assert env.free() == 2  # gang-0 terminates on its two
    env.settle("gang")
    assert env.status("gang")["message"] == \
        "waiting for the previous attempt's pods to terminate"
    assert not any(p["metadata"]["labels"][ATTEMPT_LABEL] == "1" for p in env.pods.list())
    env.pod_gone("gang-0")
    env.pod_gone("gang-1")
    env.settle("gang")
    # the pods are gone, but the ended attempt's backoff still holds
    assert not env.pods.list()
    env.now += timedelta(seconds=10)
    env.settle("gang")
    assert {p["metadata"]["labels"][ATTEMPT_LABEL] for p in env.pods.list()} == {"1"}
    assert env.status("gang")["retries"] == 1  # waiting spent no second retry
