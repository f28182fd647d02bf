"""What one pod holds, read from the pod alone, and what the ledger makes of it.

A bound, unfinished pod holds the devices its devices annotation names plus,
counted, what its ``nvidia.com/gpu`` request asks beyond those; a malformed
annotation is reported and the pod's request still counts; the owner (the sharing
group) is one attempt of the GPUWorkload that created the pod, else the pod itself.
"""

from __future__ import annotations

from typing import Any

import pytest

from api.v1alpha1.keys import ATTEMPT_LABEL, DEVICES_ANNOTATION, WORKLOAD_UID_LABEL
from api.v1alpha1.types import Placement
from internal.scheduling import Ledger, pod_gpu_request
from internal.scheduling.pods import (
    BadPod,
    PodHolding,
    is_controller_pod,
    parse_devices,
    pod_holding,
    pod_owner,
)
from internal.scheduling.quantity import gpu_count


def pod(
    name: str = "p",
    node: str | None = "n1",
    *,
    uid: str | None = None,
    ns: str | None = "team",
    phase: str | None = "Running",
    devices: str | None = None,
    gpus: Any = None,
    ref: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels or {}}
    if ns is not None:
        meta["namespace"] = ns
    if uid is not None:
        meta["uid"] = uid
    if devices is not None:
        meta["annotations"] = {DEVICES_ANNOTATION: devices}
    if ref is not None:
        meta["ownerReferences"] = [ref]
    spec: dict[str, Any] = {"containers": [
        {"resources": {"limits": {"nvidia.com/gpu": gpus}}} if gpus is not None else {}
    ]}
    if node is not None:
        spec["nodeName"] = node
    out: dict[str, Any] = {"metadata": meta, "spec": spec}
    if phase is not None:
        out["status"] = {"phase": phase}
    return out


def gw_ref(uid: str | None = "w-uid", *, controller: bool = True) -> dict[str, Any]:
    ref: dict[str, Any] = {"kind": "GPUWorkload", "name": "w", "controller": controller}
    if uid is not None:
        ref["uid"] = uid
    return ref


def job_ref() -> dict[str, Any]:
    return {"kind": "Job", "name": "w-0", "uid": "job-uid", "controller": True}


def _p(node: str, *devices: int) -> Placement:
    return Placement(index=0, node=node, devices=list(devices))


def ledger(n1: int = 4) -> Ledger:
    led = Ledger()
    led.set_node_devices("n1", range(n1))
    return led


# -------------------------------------------------------------- the annotation


@pytest.mark.parametrize(
    ("value", "devices"),
    [
        (None, None),
        ("", None),
        ("  ", None),
        ("0", [0]),
        ("0,1", [0, 1]),
        (" 3 , 1", [1, 3]),  # spaces and order do not matter
        ("9999", [9999]),
        (2, [2]),  # a number where a string was expected
    ],
)
def test_devices_annotation_values(value: Any, devices: list[int] | None) -> None:
    assert parse_devices(value) == devices


@pytest.mark.parametrize("value", ["x", "0,,1", "1;2", "-1", "1.0", "\u00b2", "10000", "0,"])
def test_a_malformed_devices_annotation_is_a_clear_error(value: str) -> None:
    with pytest.raises(BadPod) as err:
        parse_devices(value)
    assert str(err.value) == (f"annotation {DEVICES_ANNOTATION}={value!r} is not a list of "
                              f"device indices")


# ----------------------------------------------------------------- the request


@pytest.mark.parametrize(
    ("value", "count"),
    [(None, 0), ("4", 4), (2, 2), ("1500m", 1), ("0", 0), ("-1", 0), ("lots", 0),
     ("2k", 2000), ([], 0)],
)
def test_gpu_quantities(value: Any, count: int) -> None:
    assert gpu_count(value) == count


def test_a_pod_without_spec_requests_nothing() -> None:
    assert pod_gpu_request({}) == 0
    assert pod_gpu_request({"spec": {"initContainers": [{}]}}) == 0
    assert pod_gpu_request({"spec": {"containers": None, "initContainers": None}}) == 0


# -------------------------------------------------------------------- owners


@pytest.mark.parametrize(
    ("ref", "labels", "owner", "ours"),
    [
        (gw_ref(), {ATTEMPT_LABEL: "2"}, "w-uid#2", True),
        (gw_ref(), {}, "w-uid#0", True),  # no attempt label: the first attempt
        (gw_ref(None), {ATTEMPT_LABEL: "2"}, "pod:u1", True),  # a reference without uid
        (gw_ref(controller=False), {}, "pod:u1", False),  # not its controller
        (job_ref(), {WORKLOAD_UID_LABEL: "w-uid", ATTEMPT_LABEL: "1"}, "w-uid#1", True),
        (job_ref(), {WORKLOAD_UID_LABEL: "w-uid"}, "w-uid#0", True),
        (job_ref(), {ATTEMPT_LABEL: "1"}, "pod:u1", False),  # somebody else's Job
        ({"kind": "ReplicaSet", "uid": "rs", "controller": True},
         {WORKLOAD_UID_LABEL: "w-uid"}, "pod:u1", False),  # a label alone is not ours
        (None, {WORKLOAD_UID_LABEL: "w-uid"}, "pod:u1", False),
    ],
)
def test_owner_of_a_pod(ref: dict | None, labels: dict, owner: str, ours: bool) -> None:
    p = pod(uid="u1", gpus=1, ref=ref, labels=labels)
    assert pod_owner(p) == owner
    assert is_controller_pod(p) is ours
    led = ledger()
    assert led.sync_pod(p) == []
    assert led.counted("n1") == {owner: 1}


def test_the_controller_reference_is_the_one_that_counts() -> None:
    p = pod(uid="u1", gpus=1, labels={ATTEMPT_LABEL: "3"})
    p["metadata"]["ownerReferences"] = [
        {"kind": "ReplicaSet", "uid": "rs", "controller": False},
        gw_ref("w-uid"),
    ]
    assert pod_owner(p) == "w-uid#3" and is_controller_pod(p)


def test_a_pod_without_uid_is_its_own_owner_by_name() -> None:
    assert pod_owner(pod("p", ns="team", gpus=1)) == "pod:team/p"
    assert pod_owner(pod("p", ns=None, gpus=1)) == "pod:default/p"
    assert pod_owner({}) == "pod:default/"


# ------------------------------------------------------------------ holdings


def test_a_pod_holds_named_devices_and_counts_the_rest_of_its_request() -> None:
    h = pod_holding(pod("p", uid="u1", devices="0,2", gpus=3, ref=gw_ref()))
    assert h == PodHolding("u1", "team/p", "n1", (0, 2), 1, "w-uid#0")
    assert h.key == "pod:u1"
    assert pod_holding(pod(uid="u1", devices="1", gpus=1)).counted == 0
    # an annotation naming more than the request asks: the names hold, nothing counted
    assert pod_holding(pod(uid="u1", devices="0,1,2", gpus=1)).counted == 0
    assert pod_holding(pod(uid="u1", devices="3")) == PodHolding(
        "u1", "team/p", "n1", (3,), 0, "pod:u1")
    assert pod_holding(pod(uid="u1", gpus=2)) == PodHolding(
        "u1", "team/p", "n1", (), 2, "pod:u1")


@pytest.mark.parametrize(
    "p",
    [
        pod(node=None, devices="0", gpus=1),  # not bound yet
        pod(node="", devices="0", gpus=1),
        pod(phase="Succeeded", devices="0", gpus=1),
        pod(phase="Failed", devices="0", gpus=1),
        pod(gpus=None),  # no GPU at all
        pod(gpus="0", devices=""),
    ],
)
def test_pods_that_hold_no_gpu(p: dict) -> None:
    assert pod_holding(p) is None
    led = ledger()
    assert led.sync_pod(p) == [] and led.free_count("n1") == 4


@pytest.mark.parametrize("phase", [None, "Pending", "Running", "Unknown"])
def test_a_bound_pod_holds_until_it_finishes(phase: str | None) -> None:
    h = pod_holding(pod(phase=phase, uid="u1", devices="1"))
    assert h is not None and h.devices == (1,)


def test_a_malformed_annotation_is_raised_by_pod_holding() -> None:
    with pytest.raises(BadPod):
        pod_holding(pod(devices="one", gpus=1))


# ----------------------------------------------------------- the ledger's sync


def test_sync_pod_follows_a_pod_through_its_life() -> None:
    led = ledger()
    assert led.sync_pod(pod(uid="u1", node=None, gpus=2)) == []
    assert led.free_count("n1") == 4 and not led.has_pod("u1")
    led.sync_pod(pod(uid="u1", devices="0,1", gpus=2), priority=7)
    assert led.free_devices("n1") == frozenset({2, 3}) and led.free_count("n1") == 2
    assert led.holder("n1", 0) == "team/p" and led.priority_of("pod:u1") == 7
    assert led.device_owners("n1", 1) == frozenset({"pod:u1"})
    # re-annotated (issue 23): it keeps what it was given, neither more nor less
    assert led.sync_pod(pod(uid="u1", devices="3", gpus=2)) == [
        f"pod team/p: annotation {DEVICES_ANNOTATION} changed to 3 after it was given "
        "0,1; it keeps holding those"]
    assert led.free_devices("n1") == frozenset({2, 3}) and led.counted("n1") == {}
    led.sync_pod(pod(uid="u1", devices="0,1,2,3", gpus=2))
    assert led.free_devices("n1") == frozenset({2, 3})
    led.sync_pod(pod(uid="u1", devices=None, gpus=2))  # removed: still held
    assert led.free_devices("n1") == frozenset({2, 3})
    assert led.sync_pod(pod(uid="u1", phase="Succeeded", devices="3", gpus=2)) == []
    assert led.free_count("n1") == 4 and led.allocations() == {}


def test_a_pod_without_uid_is_keyed_by_its_name() -> None:
    led = ledger()
    led.sync_pod(pod("p", devices="0"))
    assert led.has_pod("team/p")
    led.sync_pod(pod("p", devices="0", phase="Failed"))
    assert not led.has_pod("team/p") and led.free_count("n1") == 4


def test_a_malformed_annotation_still_counts_the_request() -> None:
    led = ledger()
    led.sync_pod(pod(uid="u1", devices=None, gpus=1))  # held by its request only
    problems = led.sync_pod(pod(uid="u1", devices="zero,one", gpus=3), priority=4)
    assert problems == [f"pod team/p: annotation {DEVICES_ANNOTATION}='zero,one' is not a "
                        f"list of device indices"]
    assert led.free_devices("n1") == frozenset(range(4))  # names nothing it can read
    assert led.free_count("n1") == 1  # but holds its 3 GPUs
    assert led.counted("n1") == {"pod:u1": 3} and led.priority_of("pod:u1") == 4
    assert led.holding("pod:u1") is not None and led.holding("pod:u1").name == "team/p"


def test_a_malformed_annotation_of_a_pod_of_ours_keeps_its_owner() -> None:
    led = ledger()
    led.sync_pod(pod(uid="u1", devices="x", gpus=2, ref=gw_ref(),
                     labels={ATTEMPT_LABEL: "1"}))
    assert led.counted("n1") == {"w-uid#1": 2}
    assert led.pod("u1") is not None and led.pod("u1").owner == "w-uid#1"


def test_a_malformed_annotation_of_a_pod_that_requests_nothing_frees_it() -> None:
    led = ledger()
    problems = led.sync_pod(pod(uid="u1", devices="x"))
    assert len(problems) == 1 and problems[0].startswith("pod team/p: annotation ")
    assert led.free_count("n1") == 4 and not led.has_pod("u1")


def test_an_edit_that_makes_the_annotation_unreadable_frees_nothing() -> None:
    """Issue 23: shrinking (or breaking) the annotation released the devices."""
    led = ledger()
    led.sync_pod(pod(uid="u1", devices="2", gpus=1))
    led.sync_pod(pod(uid="u1", devices="x"))
    assert led.free_count("n1") == 3 and led.holder("n1", 2) == "team/p"


@pytest.mark.parametrize("p", [pod(uid="u1", devices="x", gpus=2, node=None),
                               pod(uid="u1", devices="x", gpus=2, phase="Succeeded")])
def test_an_unbound_or_finished_pod_holds_nothing_whatever_it_names(p: dict) -> None:
    led = ledger()
    led.sync_pod(pod(uid="u1", devices="2", gpus=1))
    assert led.sync_pod(p) == []
    assert led.free_count("n1") == 4 and not led.has_pod("u1")


def test_sync_pod_reports_a_device_shared_with_another_owner() -> None:
    led = ledger()
    led.sync_pod(pod("a", uid="ua", devices="0,1"))
    problems = led.sync_pod(pod("b", uid="ub", devices="1,2"))
    assert problems == ["pod team/b: n1: device 1 also held by team/a"]
    # never refused: both hold device 1, and 2 is b's
    assert led.device_owners("n1", 1) == frozenset({"pod:ua", "pod:ub"})
    assert led.free_devices("n1") == frozenset({3})
    led.remove_pod("ua")
    assert led.device_owners("n1", 1) == frozenset({"pod:ub"})
    assert led.free_devices("n1") == frozenset({0, 3})


def test_pods_of_one_attempt_share_devices_without_a_conflict() -> None:
    led = ledger()
    ours = {"ref": gw_ref(), "labels": {ATTEMPT_LABEL: "1"}}
    assert led.sync_pod(pod("a", uid="ua", devices="0", **ours)) == []
    assert led.sync_pod(pod("b", uid="ub", devices="0", **ours)) == []
    # the previous attempt's pod is someone else
    old = led.sync_pod(pod("c", uid="uc", devices="0", ref=gw_ref(),
                           labels={ATTEMPT_LABEL: "0"}))
    assert old == ["pod team/c: n1: device 0 also held by team/a",
                   "pod team/c: n1: device 0 also held by team/b"]


def test_a_victims_pod_under_a_nomination_is_no_conflict() -> None:
    led = ledger()
    led.sync_pod(pod("victim", uid="v", devices="0,1"))
    led.assume("ns/pre", [_p("n1", 0, 1)], owner="pre#0", overlap=["pod:v"])
    # the victim's pod is seen again (a status update): not a conflict
    assert led.sync_pod(pod("victim", uid="v", devices="0,1")) == []
    # anybody else on the nominated devices is
    assert led.sync_pod(pod("other", uid="o", devices="1")) == [
        "pod team/other: n1: device 1 also held by ns/pre",
        "pod team/other: n1: device 1 also held by team/victim",
    ]


@pytest.mark.parametrize("value", ["3,3", "0,1,0"])
def test_a_device_named_twice_is_refused_not_deduplicated(value: str) -> None:
    """Issue 23: ``"3,3"`` was read as ``"3"``; the pod said something else."""
    with pytest.raises(BadPod, match="names a device twice"):
        parse_devices(value)


def test_an_annotation_made_unreadable_keeps_the_devices_it_was_given() -> None:
    """Issue 23: editing a pod's devices annotation neither books more nor frees any."""
    led = ledger()
    led.sync_pod(pod(uid="u1", devices="0", gpus=3))
    assert led.sync_pod(pod(uid="u1", devices="zero,one", gpus=3)) == [
        f"pod team/p: annotation {DEVICES_ANNOTATION}='zero,one' is not a list of device "
        "indices"]
    assert led.free_devices("n1") == frozenset({1, 2, 3}) and led.counted("n1") == {"pod:u1": 2}
