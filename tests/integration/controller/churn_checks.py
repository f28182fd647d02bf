"""What the churn test does and checks beside its random actions.

- ``Orphaner``: once a preemptor is nominated (``status.nominatedOver``), its
  victims are deleted with ``--cascade=orphan`` at a chosen delay into the wait: the
  garbage collector takes their terminating pods' ownerReference away, so they are
  their own owners from then on, and the preemptor must still wait for them.
- ``stuck``: at the end, a workload left unplaced although its retry time has passed
  and the group has room for it, or left Scheduled while all its pods run: a
  requeue was lost.
- ``GPUNodes``: the group's GPUNodes as the agent would write them (80 GiB devices, so
  memory shares can be weighed; device 0 of the first node MIG-enabled, seven
  ``1g.10gb`` instances), their heartbeat kept fresh.
- ``Foreign``: ordinary pods of the default scheduler asking ``nvidia.com/gpu``, for
  kube-scheduler to place beside the manager.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from api.v1alpha1.keys import DEVICES_ANNOTATION, WORKLOAD_LABEL
from api.v1alpha1.types import API_VERSION
from runtime import Client, NotFound

if TYPE_CHECKING:
    from tests.integration.controller.conftest import NodeGroup


class Orphaner:
    """Orphan-deletes the victims of nominated preemptors, each at its delay."""

    def __init__(self, admin: Client, ns: str) -> None:
        self.admin, self.ns = admin, ns
        self.watching: dict[str, float] = {}  # preemptor -> delay into its wait
        self.due: list[tuple[float, str]] = []  # (when, victim)
        self.orphaned: list[tuple[str, str, float]] = []  # (preemptor, victim, delay)

    def watch(self, preemptor: str, delay: float) -> None:
        self.watching[preemptor] = delay

    def step(self, live: list[str]) -> None:
        """Looks for new nominations and sends the deletes that are due; removes the
        victims from ``live``."""
        now = time.monotonic()
        if self.watching:
            by_uid = {w["metadata"]["uid"]: w for w in self.admin.list(
                API_VERSION, "GPUWorkload", namespace=self.ns)["items"]}
            for name, delay in list(self.watching.items()):
                w = next((o for o in by_uid.values() if o["metadata"]["name"] == name), None)
                over = ((w or {}).get("status") or {}).get("nominatedOver") or []
                if w is None:
                    del self.watching[name]
                    continue
                victims = sorted({by_uid[o.split("#")[0]]["metadata"]["name"] for o in over
                                  if o.split("#")[0] in by_uid})
                if victims:
                    del self.watching[name]
                    self.due += [(now + delay, v) for v in victims]
                    self.orphaned += [(name, v, delay) for v in victims]
        for when, victim in [d for d in self.due if d[0] <= now]:
            self.due.remove((when, victim))
            with contextlib.suppress(NotFound):
                self.admin.delete(API_VERSION, "GPUWorkload", victim, namespace=self.ns,
                                  propagation_policy="Orphan")
            if victim in live:
                live.remove(victim)


def _free(admin: Client, ns: str, nodes: Iterable[str], gpus: int) -> dict[str, int]:
    """Free devices per node of the group, counted from the live pods."""
    held: dict[str, set[int]] = {n: set() for n in nodes}
    for p in admin.list("v1", "Pod", namespace=ns)["items"]:
        node = (p.get("spec") or {}).get("nodeName")
        if node not in held or (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        value = (p["metadata"].get("annotations") or {}).get(DEVICES_ANNOTATION) or ""
        held[node] |= {int(t) for t in value.split(",") if t.strip().isdigit()}
    return {n: gpus - len(d) for n, d in held.items()}


def _fits(spec: dict[str, Any], free: dict[str, int]) -> bool:
    """Could this workload be placed on the free devices (one replica per node
    at most for a gang that needs whole nodes; annotation maps are not judged)?"""
    if spec.get("schedulingStrategy") == "annotationMap":
        return False
    need, replicas = int(spec.get("gpusPerReplica") or 1), int(spec.get("replicas") or 1)
    slots = sum(f // need for f in free.values())
    return slots >= replicas


def stuck(admin: Client, ns: str, nodes: Iterable[str], gpus: int,
          slack: float = 5.0) -> list[str]:
    """Workloads a lost requeue left behind, in words (empty: none)."""
    nodes = list(nodes)
    free = _free(admin, ns, nodes, gpus)
    now = datetime.now(UTC)
    pods: dict[str, list[dict[str, Any]]] = {}
    for p in admin.list("v1", "Pod", namespace=ns)["items"]:
        owner = (p["metadata"].get("labels") or {}).get(WORKLOAD_LABEL)
        if owner and not p["metadata"].get("deletionTimestamp"):
            pods.setdefault(owner, []).append(p)
    out = []
    for w in admin.list(API_VERSION, "GPUWorkload", namespace=ns)["items"]:
        name, status = w["metadata"]["name"], w.get("status") or {}
        phase = status.get("phase") or "Pending"
        if w["metadata"].get("deletionTimestamp"):
            continue
        due = status.get("nextRetryTime")
        overdue = due is None or (now - datetime.fromisoformat(
            due.replace("Z", "+00:00"))).total_seconds() > slack
        if phase == "Pending" and overdue and _fits(w["spec"], free):
            out.append(f"{name}: Pending, retry due {due}, room {free}: "
                       f"{status.get('message')!r}")
        mine = pods.get(name, [])
        replicas = int(w["spec"].get("replicas") or 1)
        if phase == "Scheduled" and len(mine) >= replicas and \
                all((p.get("status") or {}).get("phase") == "Running" for p in mine):
            out.append(f"{name}: Scheduled with all {len(mine)} pod(s) Running: "
                       f"{status.get('message')!r}")
    return out


def settled(admin: Client, ns: str, nodes: Iterable[str], gpus: int,
            timeout: float) -> list[str]:
    """Waits up to ``timeout`` for nothing to be ``stuck``; returns what still is."""
    deadline = time.monotonic() + timeout
    while True:
        left = stuck(admin, ns, nodes, gpus)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(1.0)


#: every device's memory in the churn's GPUNodes (MiB)
DEVICE_MIB = 80 * 1024


class GPUNodes:
    """GPUNodes for ``nodes``, as the agent writes them; ``beat`` refreshes them."""

    def __init__(self, admin: Client, nodes: list[str], gpus: int) -> None:
        self.admin, self.nodes, self.gpus = admin, nodes, gpus
        self.last = 0.0
        self.mig = True  # device 0 of the first node MIG-enabled

    def _devices(self, node: str) -> list[dict[str, Any]]:
        out = []
        for i in range(self.gpus):
            d: dict[str, Any] = {"index": i, "uuid": f"GPU-{node}-{i}",
                                 "model": "NVIDIA H100 80GB HBM3", "memoryTotalMiB": DEVICE_MIB,
                                 "healthy": True}
            if self.mig and node == self.nodes[0] and i == 0:
                d.update(migMode=True, migInstances=[
                    {"uuid": f"MIG-{j:08x}-0000-4000-8000-{j:012x}",
                     "profile": "1g.10gb", "memoryTotalMiB": 9984, "placement": f"{j}:1"}
                    for j in range(7)])
            out.append(d)
        return out

    def create(self) -> None:
        for n in self.nodes:
            self.admin.create({"apiVersion": API_VERSION, "kind": "GPUNode",
                               "metadata": {"name": n}, "spec": {"nodeName": n}})
        self.beat(force=True)

    def beat(self, force: bool = False) -> None:
        """A fresh heartbeat every 30 s (the manager judges a GPUNode stale at 90)."""
        if not force and time.monotonic() - self.last < 30:
            return
        self.last = time.monotonic()
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        for n in self.nodes:
            devices = self._devices(n)
            with contextlib.suppress(NotFound):
                self.admin.patch(API_VERSION, "GPUNode", n, {"status": {
                    "devices": devices, "deviceCount": len(devices),
                    "healthyCount": len(devices), "lastHeartbeatTime": now}},
                    subresource="status")

    def without_mig(self) -> None:
        """Every device whole again (the test's own reconfiguration, once the MIG
        device's pods are gone: the product does not reconfigure MIG)."""
        self.mig = False
        self.beat(force=True)

    def delete(self) -> None:
        for n in self.nodes:
            with contextlib.suppress(NotFound):
                self.admin.delete(API_VERSION, "GPUNode", n)


class Foreign:
    """Ordinary pods of the default scheduler asking ``nvidia.com/gpu`` of the group,
    created and deleted at random: kube-scheduler places them where the device plugin
    counts (the counted node) and never on a named node (its taint)."""

    def __init__(self, admin: Client, ns: str, group: NodeGroup, rng: random.Random) -> None:
        self.admin, self.ns, self.group, self.rng = admin, ns, group, rng
        self.serial = 0
        self.live: list[str] = []
        self.bound: dict[str, str] = {}  # pod -> the node kube-scheduler bound it to

    def step(self) -> None:
        if self.rng.random() < 0.5 and len(self.live) < 6:
            self.serial += 1
            name = f"fg{self.serial}"
            self.admin.create({"apiVersion": "v1", "kind": "Pod",
                               "metadata": {"name": name, "namespace": self.ns},
                               "spec": {"nodeSelector": self.group.selector,
                                        "terminationGracePeriodSeconds": self.rng.choice([0, 2]),
                                        "containers": [{"name": "main", "image": "busybox:1.36",
                                                        "resources": {"limits": {
                                                            "nvidia.com/gpu": str(
                                                                self.rng.choice([1, 2]))}}}]}})
            self.live.append(name)
        elif self.live and self.rng.random() < 0.5:
            name = self.live.pop(self.rng.randrange(len(self.live)))
            with contextlib.suppress(NotFound):
                self.admin.delete("v1", "Pod", name, namespace=self.ns)
        for p in self.admin.list("v1", "Pod", namespace=self.ns)["items"]:
            node = (p.get("spec") or {}).get("nodeName")
            if p["metadata"]["name"].startswith("fg") and node:
                self.bound[p["metadata"]["name"]] = node


#: what the churn's workloads ask of their nodes beside GPUs (node fit): CPU and
#: memory that bind a node now and then (64 CPUs, 512Gi a kwok node), and a template
#: nodeSelector naming one node of the group
CPU_ASKS = ("500m", "2", "8", "24")
MEMORY_ASKS = ("1Gi", "16Gi", "200Gi")


def ask_node_fit(template: dict[str, Any], rng: random.Random, nodes: list[str],
                 *, selector: bool = True) -> list[str]:
    """Adds CPU/memory requests to some templates' container and, where ``selector``,
    a ``kubernetes.io/hostname`` nodeSelector to some; the admitter of the test
    environment then rejects any pod placed where the kubelet would not admit it.
    Returns what it added, in words (for the churn's summary)."""
    added = []
    container = template["spec"]["containers"][0]
    if rng.random() < 0.6:
        container["resources"] = {"requests": {"cpu": rng.choice(CPU_ASKS),
                                               "memory": rng.choice(MEMORY_ASKS)}}
        added.append("templates asking CPU and memory")
    if selector and rng.random() < 0.15:
        template["spec"]["nodeSelector"] = {"kubernetes.io/hostname": rng.choice(nodes)}
        added.append("templates with a nodeSelector")
    return added
