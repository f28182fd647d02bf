"""A watcher of every live pod, separate from the controller, that checks the
product's first promise on each pod event: no (node, device) is held by two live
pods of different workloads. A pod is live from the moment it is bound until it is
deleted from the API or has finished, its grace period included.

Shares and MIG instances (read from the pods' own annotations, not through the
controller's code): pods holding *shares* of one device may stand together as long as
their fractions add up to at most 1 and their memory to at most the device's
(``device_memory_mib``); a pod holding a device whole never stands beside another
workload's pod; pods holding MIG instances of one device stand together, one pod per
instance. Anything else on one device is an overlap."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from api.v1alpha1.keys import (
    DEVICES_ANNOTATION,
    MIG_ANNOTATION,
    SHARE_ANNOTATION,
    WORKLOAD_UID_LABEL,
)
from runtime import Client


def _owner(pod: dict[str, Any]) -> str:
    meta = pod["metadata"]
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller"):
            if ref.get("kind") == "GPUWorkload":
                return ref["uid"]
            uid = (meta.get("labels") or {}).get(WORKLOAD_UID_LABEL)
            return uid or ref["uid"]
    return meta["uid"]


def _devices(pod: dict[str, Any]) -> list[int]:
    value = ((pod["metadata"].get("annotations") or {}).get(DEVICES_ANNOTATION) or "")
    return [int(t) for t in value.split(",") if t.strip().isdigit()]


@dataclass
class Overlap:
    node: str
    device: int
    pods: list[str]


@dataclass
class OverCommit:
    """A node whose live pods hold more GPUs than it has: the devices they name plus
    the ``nvidia.com/gpu`` they request beyond those (the device plugin's, counted)."""

    node: str
    held: int
    capacity: int
    pods: list[str]


def _requested(pod: dict[str, Any]) -> int:
    """A pod's ``nvidia.com/gpu`` (limits, else requests), as the kubelet counts it."""
    def one(c: dict[str, Any]) -> int:
        res = c.get("resources") or {}
        value = (res.get("limits") or {}).get("nvidia.com/gpu",
                                               (res.get("requests") or {}).get("nvidia.com/gpu"))
        return int(value or 0)
    spec = pod.get("spec") or {}
    return max(sum(one(c) for c in spec.get("containers") or ()),
               max((one(c) for c in spec.get("initContainers") or ()), default=0))


@dataclass
class HolderWatch:
    """Watches pods (cluster-wide) on a thread; ``overlaps`` lists every moment two
    workloads' live pods held one device; ``log`` records (time, event, pod,
    resourceVersion). With ``jobs`` it also logs the Jobs' events, named
    ``job:<ns>/<name>``. A watch that ends is resumed from the last resourceVersion
    seen, so no event is missed between two watches."""

    client: Client
    jobs: bool = False
    #: called, on the watcher's thread, with the live pods after every pod event
    on_live: Callable[[list[dict[str, Any]]], None] | None = None
    device_memory_mib: int | None = None  # every device's, for memory shares
    shared_max: int = 0  # the most workloads seen on one device at once
    portions: set[str] = field(default_factory=set)  # pods seen holding a share or MIG
    samples: int = 0
    overlaps: list[Overlap] = field(default_factory=list)
    #: node -> its GPUs: with it, every moment a node's named + counted GPUs exceeded
    #: them is an ``OverCommit`` (kube-scheduler's pods beside ours)
    capacity: dict[str, int] = field(default_factory=dict)
    overcommits: list[OverCommit] = field(default_factory=list)
    log: list[tuple[float, str, str, int]] = field(default_factory=list)
    _live: dict[str, dict[str, Any]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _ready: list[threading.Event] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> HolderWatch:
        follow = [("v1", "Pod", self._listed_pods, self._apply)]
        if self.jobs:
            follow.append(("batch/v1", "Job", lambda items: None, self._log_job))
        for api, kind, listed, apply in follow:
            ready = threading.Event()
            self._ready.append(ready)
            self._threads.append(threading.Thread(
                target=self._follow, args=(api, kind, listed, apply, ready), daemon=True,
                name=f"holder-watch-{kind.lower()}"))
        for t in self._threads:
            t.start()
        for ready in self._ready:
            ready.wait(30)
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(10)

    def first(self, event: str, pod: str) -> float | None:
        """Monotonic time of the first ``event`` (ADDED, DELETED) of ``ns/name``
        (``job:ns/name`` for a Job) as this watcher received it."""
        with self._lock:
            return next((t for t, e, p, _ in self.log if e == event and p == pod), None)

    def first_rv(self, event: str, pod: str) -> int | None:
        """The resourceVersion of the first ``event`` of ``ns/name``: the API
        server's revision, which orders events of Pods and Jobs alike (receipt
        times of two watches do not)."""
        with self._lock:
            return next((rv for _, e, p, rv in self.log if e == event and p == pod), None)

    def pods_named(self, prefix: str) -> list[str]:
        """Every pod ``ns/name`` seen whose name starts with ``prefix``."""
        with self._lock:
            return sorted({p for _, _, p, _ in self.log if p.startswith(prefix)})

    def _follow(self, api: str, kind: str, listed: Any, apply: Any,
                ready: threading.Event) -> None:
        rv = ""
        while not self._stop.is_set():
            try:
                if not rv:
                    items = self.client.list(api, kind)
                    listed(items["items"])
                    rv = items["metadata"]["resourceVersion"]
                    ready.set()
                for ev in self.client.watch(api, kind, resource_version=rv,
                                            timeout_seconds=30):
                    if self._stop.is_set():
                        return
                    if ev["type"] == "ERROR":  # too old: list again
                        rv = ""
                        break
                    rv = (ev["object"].get("metadata") or {}).get("resourceVersion") or rv
                    if ev["type"] != "BOOKMARK":
                        apply(ev["type"], ev["object"])
            except Exception:
                rv = ""
                time.sleep(0.2)

    def _listed_pods(self, items: list[dict[str, Any]]) -> None:
        self._live = {p["metadata"]["uid"]: p for p in items}
        self._check()

    def _record(self, type_: str, name: str, obj: dict[str, Any]) -> None:
        rv = int((obj.get("metadata") or {}).get("resourceVersion") or 0)
        with self._lock:
            self.log.append((time.monotonic(), type_, name, rv))

    def _log_job(self, type_: str, job: dict[str, Any]) -> None:
        meta = job.get("metadata") or {}
        if meta.get("uid"):
            self._record(type_, f"job:{meta.get('namespace')}/{meta.get('name')}", job)

    def _apply(self, type_: str, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        if type_ == "BOOKMARK" or not meta.get("uid"):
            return
        self._record(type_, f"{meta.get('namespace')}/{meta.get('name')}", pod)
        if type_ == "DELETED":
            self._live.pop(meta["uid"], None)
        else:
            self._live[meta["uid"]] = pod
        self._check()

    def _check(self) -> None:
        self.samples += 1
        held: dict[tuple[str, int], dict[str, dict[str, Any]]] = defaultdict(dict)
        for pod in self._live.values():
            node = (pod.get("spec") or {}).get("nodeName")
            if not node or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            if _annotation(pod, SHARE_ANNOTATION) or _annotation(pod, MIG_ANNOTATION):
                self.portions.add(pod["metadata"]["uid"])
            for d in _devices(pod):
                held[(node, d)][pod["metadata"]["uid"]] = pod
        self._check_counted()
        self.shared_max = max(self.shared_max, max(
            (len({_owner(p) for p in pods.values()}) for pods in held.values()), default=0))
        for (node, d), pods in held.items():
            if len({_owner(p) for p in pods.values()}) > 1 and \
                    not _may_stand_together(list(pods.values()), self.device_memory_mib):
                self.overlaps.append(Overlap(node, d, sorted(
                    f"{p['metadata']['namespace']}/{p['metadata']['name']}"
                    for p in pods.values())))
        if self.on_live is not None:
            self.on_live([p for p in self._live.values() if (p.get("spec") or {}).get("nodeName")
                          and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")])


    def _check_counted(self) -> None:
        """Named devices plus counted GPUs per node of ``capacity``, against it."""
        if not self.capacity:
            return
        named: dict[str, set[int]] = defaultdict(set)
        counted: dict[str, int] = defaultdict(int)
        pods: dict[str, list[str]] = defaultdict(list)
        for pod in self._live.values():
            node = (pod.get("spec") or {}).get("nodeName")
            if node not in self.capacity or \
                    (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            devices = _devices(pod)
            extra = max(0, _requested(pod) - len(devices))
            if devices or extra:
                named[node].update(devices)
                counted[node] += extra
                pods[node].append(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}")
        for node, cap in self.capacity.items():
            if len(named[node]) + counted[node] > cap:
                self.overcommits.append(OverCommit(node, len(named[node]) + counted[node],
                                                   cap, sorted(pods[node])))


def _annotation(pod: dict[str, Any], key: str) -> str:
    return str((pod["metadata"].get("annotations") or {}).get(key) or "")


def _may_stand_together(pods: list[dict[str, Any]], memory_mib: int | None) -> bool:
    """Pods of several workloads on one device: all MIG pods on distinct instances,
    or all shares that add up to no more than the device."""
    migs = [_annotation(p, MIG_ANNOTATION) for p in pods]
    if all(migs):
        return len(set(migs)) == len(migs)
    shares = [_annotation(p, SHARE_ANNOTATION) for p in pods]
    if any(migs) or not all(shares):
        return False  # a whole holder (or MIG beside anything else) stands alone
    fraction, memory = Fraction(0), 0
    for share in shares:
        kind, _, amount = share.partition("=")
        if kind == "fraction":
            fraction += Fraction(amount)
        elif kind == "memory" and amount.endswith("Mi") and memory_mib:
            memory += int(amount[:-2])
        else:
            return False  # a share this watcher cannot size: not proven safe
    return fraction <= 1 and (not memory or memory <= memory_mib) and \
        (not memory or not fraction or fraction + Fraction(memory, memory_mib) <= 1)
