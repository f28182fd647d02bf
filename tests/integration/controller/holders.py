"""A watcher of every live pod, separate from the controller, that checks the
product's first promise on each pod event: no (node, device) is held by two live
pods of different workloads. A pod is live from the moment it is bound until it is
deleted from the API or has finished, its grace period included."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
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
    workloads' live pods held one device; ``log`` records (time, event, pod). With
    ``jobs`` it also logs the Jobs' events, named ``job:<ns>/<name>``."""

    client: Client
    jobs: bool = False
    samples: int = 0
    overlaps: list[Overlap] = field(default_factory=list)
    log: list[tuple[float, str, str]] = field(default_factory=list)
    _live: dict[str, dict[str, Any]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _ready: threading.Event = field(default_factory=threading.Event)
    _jobs_ready: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> HolderWatch:
        self._threads = [threading.Thread(target=self._run, daemon=True, name="holder-watch")]
        if self.jobs:
            self._threads.append(threading.Thread(target=self._run_jobs, daemon=True,
                                                  name="holder-watch-jobs"))
        for t in self._threads:
            t.start()
        self._ready.wait(30)
        if self.jobs:
            self._jobs_ready.wait(30)
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(10)

    def first(self, event: str, pod: str) -> float | None:
        """Monotonic time of the first ``event`` (ADDED, DELETED) of ``ns/name``
        (``job:ns/name`` for a Job)."""
        with self._lock:
            return next((t for t, e, p in self.log if e == event and p == pod), None)

    def pods_named(self, prefix: str) -> list[str]:
        """Every pod ``ns/name`` seen whose name starts with ``prefix``."""
        with self._lock:
            return sorted({p for _, _, p in self.log if p.startswith(prefix)})

    def _run(self) -> None:
        while not self._stop.is_set():
            listed = self.client.list("v1", "Pod")
            self._live = {p["metadata"]["uid"]: p for p in listed["items"]}
            self._check()
            self._ready.set()
            rv = listed["metadata"]["resourceVersion"]
            try:
                stream = self.client.watch("v1", "Pod", resource_version=rv, timeout_seconds=30)
                for ev in stream:
                    if self._stop.is_set():
                        return
                    self._apply(ev["type"], ev["object"])
            except Exception:
                time.sleep(0.2)

    def _run_jobs(self) -> None:
        while not self._stop.is_set():
            rv = self.client.list("batch/v1", "Job")["metadata"]["resourceVersion"]
            self._jobs_ready.set()
            try:
                for ev in self.client.watch("batch/v1", "Job", resource_version=rv,
                                            timeout_seconds=30):
                    if self._stop.is_set():
                        return
                    meta = ev["object"].get("metadata") or {}
                    if ev["type"] != "BOOKMARK" and meta.get("uid"):
                        with self._lock:
                            self.log.append((time.monotonic(), ev["type"],
                                             f"job:{meta.get('namespace')}/{meta.get('name')}"))
            except Exception:
                time.sleep(0.2)

    def _apply(self, type_: str, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        if type_ == "BOOKMARK" or not meta.get("uid"):
            return
        name = f"{meta.get('namespace')}/{meta.get('name')}"
        with self._lock:
            self.log.append((time.monotonic(), type_, name))
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
