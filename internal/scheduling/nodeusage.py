"""What each node's pods request (CPU, memory, ..., host ports, the pod count):
running sums kept by the pod events, read by the node-fit filter (``nodefit.py``).

Guarantees:

- **Every bound, unfinished pod counts**, whoever made it, GPUs or not, as
  kube-scheduler counts it (bound until deleted or Succeeded/Failed; a pod being
  deleted still counts). A pod is recorded by UID; an event seen twice changes
  nothing, and a pod's requests are read again only when its node or its
  ``metadata.generation`` changed (a pod's resources change only by a resize).
- **A booking counts before its pods exist**: ``reserve`` records what one replica
  of a booked workload asks (only when it asks for something); until its pods show
  on a node, each replica booked there counts as one such pod (``on``). Reservations
  of bookings the ledger no longer has are ignored, and pruned by ``prune``.
- No lock of its own: its owner (the placement cache) calls it under its lock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from internal.objects import JSON
from internal.scheduling.nodefit import (
    PODS,
    PodFit,
    Port,
    host_ports,
    pod_requests,
    resources,
)
from internal.scheduling.pods import pod_is_active, pod_owner, pod_uid

if TYPE_CHECKING:
    from internal.scheduling.ledger import Ledger


@dataclass(frozen=True, slots=True)
class _Pod:
    node: str
    owner: str
    generation: Any
    requests: Mapping[str, int]
    ports: frozenset[Port]


@dataclass(slots=True)
class Used:
    """What is taken on one node: requests, the pod count, host ports."""

    requests: dict[str, int]
    pods: int
    ports: list[Port]

    def add(self, fit: PodFit, n: int = 1) -> None:
        for k, v in fit.requests.items():
            self.requests[k] = self.requests.get(k, 0) + v * n
        self.pods += n
        if fit.ports:
            self.ports.extend(fit.ports)


class NodeUsage:
    """Per node: the sum of its pods' requests, their count and their host ports."""

    def __init__(self, pods: Iterable[JSON] = ()) -> None:
        self._pods: dict[str, _Pod] = {}
        self._requests: dict[str, dict[str, int]] = {}
        self._count: Counter[str] = Counter()
        self._ports: dict[str, Counter[Port]] = {}
        self._owner_pods: Counter[tuple[str, str]] = Counter()
        #: booking owner -> what one of its replicas asks (see ``reserve``)
        self._booked: dict[str, PodFit] = {}
        for p in pods:
            self.set_pod(p)

    # ------------------------------------------------------------ pod events

    def set_pod(self, pod: JSON) -> None:
        """Records ``pod`` as it is now (bound and unfinished: counted; else not)."""
        uid = pod_uid(pod)
        spec = pod.get("spec") or {}
        node = spec.get("nodeName")
        if not node or not pod_is_active(pod):
            self.remove_pod(uid)
            return
        gen = (pod.get("metadata") or {}).get("generation")
        have = self._pods.get(uid)
        if have is not None and have.node == node and have.generation == gen:
            return
        self.remove_pod(uid)
        entry = _Pod(str(node), pod_owner(pod), gen, pod_requests(spec), host_ports(spec))
        self._pods[uid] = entry
        self._apply(entry, 1)

    def remove_pod(self, uid: str) -> None:
        entry = self._pods.pop(uid, None)
        if entry is not None:
            self._apply(entry, -1)

    def _apply(self, e: _Pod, sign: int) -> None:
        sums = self._requests.setdefault(e.node, {})
        for k, v in e.requests.items():
            sums[k] = sums.get(k, 0) + sign * v
            if not sums[k]:
                del sums[k]
        self._count[e.node] += sign
        self._owner_pods[(e.owner, e.node)] += sign
        if not self._owner_pods[(e.owner, e.node)]:
            del self._owner_pods[(e.owner, e.node)]
        if e.ports:
            ports = self._ports.setdefault(e.node, Counter())
            ports.update({p: sign for p in e.ports})
            for p in e.ports:
                if ports[p] <= 0:
                    del ports[p]

    # -------------------------------------------------------------- bookings

    def reserve(self, owner: str, fit: PodFit) -> None:
        """A booking of ``owner`` was made whose replicas each ask ``fit``."""
        if not fit.empty:
            self._booked[owner] = fit

    def prune(self, ledger: Ledger) -> None:
        """Drops the reservations of owners the ledger books nothing for."""
        if len(self._booked) > 64:
            live = {a.owner for a in ledger.bookings()}
            self._booked = {o: f for o, f in self._booked.items() if o in live}

    # --------------------------------------------------------------- reading

    def pods_on(self, node: str) -> int:
        return self._count.get(node, 0)

    def on(self, node: str, ledger: Ledger | None = None) -> Used:
        """What node ``node``'s pods take, plus the replicas booked there whose
        pods do not show yet (read from ``ledger``'s bookings)."""
        used = Used(dict(self._requests.get(node, {})), self._count.get(node, 0),
                    list(self._ports.get(node, ())))
        if ledger is None or not self._booked:
            return used
        for key in ledger.keys_on(node):
            a = ledger.allocation(key)
            if a is None or a.holder or a.owner not in self._booked:
                continue
            replicas = sum(1 for p in a.placements if p.node == node)
            if not replicas and a.gpus_per_replica:
                replicas = a.counted.get(node, 0) // a.gpus_per_replica
            missing = replicas - self._owner_pods.get((a.owner, node), 0)
            if missing > 0:
                used.add(self._booked[a.owner], missing)
        return used


def node_allocatable(node: JSON) -> dict[str, int]:
    """A Node's allocatable (else capacity) in fit's units, GPUs left out; ``pods``
    as a count."""
    status = node.get("status") or {}
    raw = status.get("allocatable") or status.get("capacity") or {}
    out = resources(raw)
    if PODS in raw and PODS not in out:
        out[PODS] = 0
    return out
