"""What a pod holds, read from the pod alone.

kube-scheduler counts a pod's resources from the moment it is bound until the pod
object is deleted or has reached Succeeded/Failed; a pod being deleted (it has a
``deletionTimestamp``) still runs, and holds, for its whole grace period. The ledger
follows the same rule (docs/architecture.md, invariant 1), and this module says, for
one pod, whether it holds GPUs and which.

A bound, unfinished pod holds:

- the devices its ``gpu.orchestrator.dev/devices`` annotation names (written by the
  controller, the webhook or the pod binding), *named*;
- with ``gpu.orchestrator.dev/share`` or ``gpu.orchestrator.dev/mig`` beside it, a
  share of that one device or one of its MIG instances (``shares``); a value that
  cannot be read is reported and the devices are taken as held whole;
- plus, *counted*, whatever its ``nvidia.com/gpu`` request asks beyond those (the
  device plugin hands those out, and the ledger cannot know which).

Its *owner* is the group it may share devices with: the GPUWorkload attempt that
created it (``<workload uid>#<attempt>``), else the pod itself. Everything is
parsed defensively: a malformed annotation is reported, never raised.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from api.v1alpha1.keys import (
    ATTEMPT_LABEL,
    DEVICES_ANNOTATION,
    GPU_RESOURCE,
    MIG_ANNOTATION,
    SHARE_ANNOTATION,
    WORKLOAD_UID_LABEL,
)
from internal.objects import JSON, object_key
from internal.scheduling.quantity import gpu_count
from internal.scheduling.shares import read_portion

H = TypeVar("H", bound="PodHolding")


class BadPod(ValueError):
    """A pod whose GPU annotations cannot be read; the message says what and where."""


class BadShare(BadPod):
    """A pod whose share or MIG annotation cannot be read: it holds its devices
    whole (``holding``), never less than it may use."""

    def __init__(self, message: str, holding: PodHolding) -> None:
        super().__init__(message)
        self.holding = holding


@dataclass(frozen=True, slots=True)
class PodHolding:
    """What one pod holds on its node."""

    uid: str
    name: str  # namespace/name, for messages
    node: str
    devices: tuple[int, ...]  # named
    counted: int  # GPUs beyond the named ones
    owner: str  # sharing group
    share: str = ""  # SHARE_ANNOTATION's value, as read (a share of its one device)
    mig: str = ""  # MIG_ANNOTATION's value: the MIG instance it holds

    @property
    def key(self) -> str:
        return pod_holder_key(self.uid)


def pod_holder_key(uid: str) -> str:
    return f"pod:{uid}"



def pod_uid(pod: JSON) -> str:
    meta = pod.get("metadata") or {}
    return str(meta.get("uid") or object_key(pod))


def pod_is_active(pod: JSON) -> bool:
    """Not yet Succeeded or Failed (a terminating pod is still active)."""
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def pod_gpu_request(pod: JSON) -> int:
    """GPUs a pod takes: the max of its init containers' and the sum of its
    containers' ``nvidia.com/gpu`` (limits, else requests), as the kubelet counts."""
    spec = pod.get("spec") or {}

    def one(c: JSON) -> int:
        res = c.get("resources") or {}
        lim = (res.get("limits") or {}).get(GPU_RESOURCE)
        if lim is not None:
            return gpu_count(lim)
        return gpu_count((res.get("requests") or {}).get(GPU_RESOURCE))

    main = sum(one(c) for c in spec.get("containers") or ())
    init = max((one(c) for c in spec.get("initContainers") or ()), default=0)
    return max(main, init)


def parse_devices(value: Any) -> list[int] | None:
    """``"0,1"`` -> ``[0, 1]``; None when absent or empty. Raises BadPod for anything
    but comma-separated ASCII decimal indices (``"²"`` is a digit to ``isdigit``),
    each named once (``"3,3"`` is refused, not read as ``"3"``)."""
    if value is None or str(value).strip() == "":
        return None
    out: list[int] = []
    for tok in str(value).split(","):
        tok = tok.strip()
        if not (tok.isascii() and tok.isdigit()) or len(tok) > 4:
            raise BadPod(f"annotation {DEVICES_ANNOTATION}={value!r} is not a list of "
                         f"device indices")
        out.append(int(tok))
    if len(set(out)) != len(out):
        raise BadPod(f"annotation {DEVICES_ANNOTATION}={value!r} names a device twice")
    return sorted(out)


def controller_ref(obj: JSON) -> Mapping[str, Any] | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller"):
            return ref
    return None


def workload_owner(uid: str, attempt: Any) -> str:
    """The sharing group of one attempt of one GPUWorkload."""
    return f"{uid}#{attempt or 0}"


def pod_owner(pod: JSON) -> str:
    """``<workload uid>#<attempt>`` for a pod of a GPUWorkload (its controller, or
    the Job that is), else ``pod:<uid>``."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    ref = controller_ref(pod)
    if ref is not None and ref.get("kind") == "GPUWorkload" and ref.get("uid"):
        return workload_owner(str(ref["uid"]), labels.get(ATTEMPT_LABEL))
    if ref is not None and ref.get("kind") == "Job" and labels.get(WORKLOAD_UID_LABEL):
        return workload_owner(str(labels[WORKLOAD_UID_LABEL]), labels.get(ATTEMPT_LABEL))
    return pod_holder_key(pod_uid(pod))


def pod_holding(pod: JSON) -> PodHolding | None:
    """What ``pod`` holds now: None when unbound, finished, or holding no GPU.
    Raises BadPod when its devices annotation is malformed."""
    node = (pod.get("spec") or {}).get("nodeName")
    if not node or not pod_is_active(pod):
        return None
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    devices = tuple(parse_devices(annotations.get(DEVICES_ANNOTATION)) or ())
    counted = max(0, pod_gpu_request(pod) - len(devices))
    if not devices and not counted:
        return None
    return with_portion(
        PodHolding(pod_uid(pod), object_key(pod), str(node), devices, counted, pod_owner(pod)),
        annotations)


def with_portion(h: H, annotations: Mapping[str, Any]) -> H:
    """``h`` with the share or MIG instance its annotations name. Raises BadShare
    (carrying ``h``, its devices held whole) when they cannot be read."""
    devices = h.devices
    share, mig = annotations.get(SHARE_ANNOTATION), annotations.get(MIG_ANNOTATION)
    if not share and not mig:
        return h
    try:
        portion = read_portion(share, mig)
        if len(devices) != 1:
            raise ValueError(f"a share or MIG instance names one device, not {len(devices)}")
    except ValueError as exc:
        raise BadShare(f"{exc}: its devices held whole", h) from None
    assert portion is not None
    return replace(h, share=portion.text(), mig=portion.mig)


def is_controller_pod(pod: JSON) -> bool:
    """Created by the GPUWorkload controller: its controller is a GPUWorkload, or a
    Job whose pod template carries a workload UID. (Who may count as the owner of a
    device group is decided by ``pod_owner``; labels alone never make a pod ours.)"""
    ref = controller_ref(pod)
    if ref is None:
        return False
    if ref.get("kind") == "GPUWorkload":
        return True
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return ref.get("kind") == "Job" and WORKLOAD_UID_LABEL in labels


def child_owner(pod: JSON) -> str:
    """The workload attempt (``pod_owner``) whose child ``pod`` is now, by its
    controller ownerReference; "" for a pod of nobody's."""
    return pod_owner(pod) if is_controller_pod(pod) else ""


def labelled_owner(pod: JSON) -> str:
    """The workload attempt a pod's child labels name (the workload UID and attempt
    the controller gives its children), else "". Labels alone never make a pod ours
    (``is_controller_pod``); the ledger reads them only where it has nothing else to
    know an orphan by (a rebuild, ``Ledger.rebuild``)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    uid = labels.get(WORKLOAD_UID_LABEL)
    return workload_owner(str(uid), labels.get(ATTEMPT_LABEL)) if uid else ""
