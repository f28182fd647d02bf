"""Our own writes coming back through the informers wake no reconcile
(controllers/shared/echoes.py): the add of a child exactly as we created it, the
update that is our last status write landing and nothing else. Anything else,
including the same events changed by someone else, passes."""

from __future__ import annotations

import copy
from typing import Any

from controllers.shared.echoes import OwnEchoes
from controllers.shared.own_writes import OwnWrites
from runtime.predicates import CreateEvent, UpdateEvent


def child(rv: int, uid: str = "pod-1") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "w-0", "namespace": "ns", "uid": uid,
                         "resourceVersion": str(rv)},
            "spec": {"nodeName": "node1"}, "status": {"phase": "Pending"}}


def workload(rv: int, status: dict | None = None, **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": "w", "namespace": "ns", "uid": "w-uid",
                         "resourceVersion": str(rv), "generation": 1, **meta},
            "spec": {"replicas": 1}, "status": status or {}}


def test_the_add_of_a_child_as_we_created_it_wakes_nobody_either_order() -> None:
    for informer_first in (True, False):
        own = OwnWrites()
        echoes = OwnEchoes(own)
        own.created("w-uid", child(10))
        if informer_first:
            own.observed(child(10))  # the cache's own handler ran first
        assert not echoes.create(CreateEvent(child(10)))
        own.observed(child(10))
        # asked once: a second add of that child (a relist) passes
        assert echoes.create(CreateEvent(child(10)))


def test_a_child_changed_before_the_informer_showed_it_wakes_its_owner() -> None:
    """Its kubelet (or anyone) changed it already: the add is news."""
    own = OwnWrites()
    echoes = OwnEchoes(own)
    own.created("w-uid", child(10))
    own.observed(child(12))
    assert echoes.create(CreateEvent(child(12)))
    other = OwnWrites()
    other.created("w-uid", child(10))
    assert OwnEchoes(other).create(CreateEvent(child(12)))


def test_a_child_nobody_of_ours_created_passes() -> None:
    assert OwnEchoes(OwnWrites()).create(CreateEvent(child(10, uid="theirs")))


def test_our_status_write_landing_wakes_nobody() -> None:
    own = OwnWrites()
    echoes = OwnEchoes(own)
    before = workload(20)
    mark = own.writing(before, {"phase": "Running"})
    after = workload(21, {"phase": "Running"})
    own.wrote(after, mark)
    assert not echoes.update(UpdateEvent(before, after))


def test_a_write_that_landed_on_another_change_wakes_the_workload() -> None:
    """The version our write landed at also carries a change the cache had not shown
    (a spec edit, a label, a deletion): the update is news."""
    own = OwnWrites()
    echoes = OwnEchoes(own)
    old = workload(20)
    mark = own.writing(old, {"phase": "Running"})
    landed = workload(22, {"phase": "Running"})
    own.wrote(landed, mark)
    edited = copy.deepcopy(landed)
    edited["spec"]["replicas"] = 2
    assert echoes.update(UpdateEvent(old, edited))
    labelled = workload(22, {"phase": "Running"}, labels={"team": "a"})
    assert echoes.update(UpdateEvent(old, labelled))
    deleting = workload(22, {"phase": "Running"}, deletionTimestamp="2026-11-28T00:00:00Z")
    assert echoes.update(UpdateEvent(old, deleting))


def test_an_update_past_our_write_passes() -> None:
    """Someone else's status (or ours, but not what we asked for) is news."""
    own = OwnWrites()
    echoes = OwnEchoes(own)
    old = workload(20)
    mark = own.writing(old, {"phase": "Running"})
    own.wrote(workload(21, {"phase": "Running"}), mark)
    assert echoes.update(UpdateEvent(workload(21), workload(23, {"phase": "Failed"})))


def test_our_status_showing_before_its_answer_is_taken_in_wakes_nobody() -> None:
    """The watch brings the write before the writer took in its answer: the status
    is the one we asked for, as the API stores it (no null fields)."""
    own = OwnWrites()
    echoes = OwnEchoes(own)
    old = workload(20)
    own.writing(old, {"phase": "Running", "nextRetryTime": None,
                      "conditions": [{"type": "Ready", "reason": None}]})
    landed = workload(21, {"phase": "Running", "conditions": [{"type": "Ready"}]})
    assert not echoes.update(UpdateEvent(old, landed))
    other = workload(21, {"phase": "Failed"})
    assert echoes.update(UpdateEvent(old, other))


def test_our_finalizer_landing_wakes_nobody_but_another_finalizer_does() -> None:
    own = OwnWrites()
    echoes = OwnEchoes(own)
    old = workload(20)
    own.writing(old, {"phase": "Scheduled"})  # a status write still on its way
    own.finalized(old, 21)
    ours = workload(21, finalizers=["gpu.orchestrator.dev/children"])
    assert not echoes.update(UpdateEvent(old, ours))
    theirs = workload(21, finalizers=["gpu.orchestrator.dev/children", "x/y"])
    assert echoes.update(UpdateEvent(old, theirs))


def test_nothing_is_kept_of_a_deleted_child() -> None:
    own = OwnWrites()
    own.created("w-uid", child(10))
    own.observed(child(10))
    own.deleted(child(10))
    assert OwnEchoes(own).create(CreateEvent(child(10)))


def manifest() -> dict[str, Any]:
    """The child as the reconcile sends it: no uid, no resourceVersion, no status."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "w-0", "namespace": "ns",
                         "ownerReferences": [{"uid": "w-uid", "controller": True}]},
            "spec": {"nodeName": "node1"}}


def as_created(rv: int, **changes: Any) -> dict[str, Any]:
    obj = copy.deepcopy(manifest())
    obj["metadata"].update(uid="pod-1", resourceVersion=str(rv))
    obj["status"] = {"phase": "Pending", **changes}
    return obj


def test_the_add_of_a_child_before_its_create_answered_wakes_nobody() -> None:
    """The watch brings our pod while its create's answer is still on its way: the
    add shows nothing but what we sent, and the reconcile that sent it knew that."""
    own = OwnWrites()
    echoes = OwnEchoes(own)
    sent = manifest()
    with own.creating("w-uid", sent):
        assert not echoes.create(CreateEvent(as_created(10)))
        own.observed(as_created(10))  # the cache's own handler
    # the answer came after the cache showed it: nothing is recorded (child_api)
    assert len(own) == 0
    # a later add of that name (a relist, another pod of the name) is news
    assert echoes.create(CreateEvent(as_created(10)))


def test_an_early_add_that_shows_more_than_we_sent_wakes_its_owner() -> None:
    own = OwnWrites()
    echoes = OwnEchoes(own)
    with own.creating("w-uid", manifest()):
        assert echoes.create(CreateEvent(as_created(12, phase="Running")))
        theirs = as_created(10)
        theirs["metadata"]["ownerReferences"] = [{"uid": "other", "controller": True}]
        assert echoes.create(CreateEvent(theirs))
        elsewhere = as_created(10)
        elsewhere["metadata"]["namespace"] = "other-ns"
        assert echoes.create(CreateEvent(elsewhere))


def test_a_create_that_failed_leaves_nothing_on_its_way() -> None:
    own = OwnWrites()
    try:
        with own.creating("w-uid", manifest()):
            raise TimeoutError
    except TimeoutError:
        pass
    assert OwnEchoes(own).create(CreateEvent(as_created(10)))


def test_our_finalizer_before_its_patch_answered_wakes_nobody() -> None:
    """The watch brings our finalizer's patch (a cluster without the finalizer's
    admission policy) before the writer took in its answer."""
    own = OwnWrites()
    echoes = OwnEchoes(own)
    old = workload(20)
    with own.finalizing(old):
        ours = workload(21, finalizers=["gpu.orchestrator.dev/children"])
        assert not echoes.update(UpdateEvent(old, ours))
        theirs = workload(21, finalizers=["x/y"])
        assert echoes.update(UpdateEvent(old, theirs))
        with_status = workload(21, {"phase": "Failed"},
                               finalizers=["gpu.orchestrator.dev/children"])
        assert echoes.update(UpdateEvent(old, with_status))
    # the patch answered (or failed): its echo is known by where it landed, or not
    assert echoes.update(UpdateEvent(old, ours))
    assert len(own) == 0
