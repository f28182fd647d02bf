"""A watcher of every live pod, separate from the controller, that checks the
product's first promise on each pod event: no (node, device) is held by two live
pods of different workloads. A pod is live from the moment it is bound until it is
deleted from the API or has finished, its grace period included."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from api.v1alpha1.keys import DEVICES_ANNOTATION, WORKLOAD_UID_LABEL
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
    samples: int = 0
    overlaps: list[Overlap] = field(default_factory=list)
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
        held: dict[tuple[str, int], dict[str, str]] = defaultdict(dict)
        for pod in self._live.values():
            node = (pod.get("spec") or {}).get("nodeName")
            if not node or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            for d in _devices(pod):
                held[(node, d)][_owner(pod)] = \
                    f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        for (node, d), owners in held.items():
            if len(owners) > 1:
                self.overlaps.append(Overlap(node, d, sorted(owners.values())))
        if self.on_live is not None:
            self.on_live([p for p in self._live.values() if (p.get("spec") or {}).get("nodeName")
                          and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")])
