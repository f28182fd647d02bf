"""What each node's pods request (CPU, memory, ..., nvidia.com/gpu, host ports, the
pod count):
running sums kept by the pod events, read by the node-fit filter (``nodefit.py``).

Guarantees:

- **Every bound, unfinished pod counts**, whoever made it, GPUs or not (its
  ``nvidia.com/gpu`` requests too, which the kubelet checks), as kube-scheduler
  counts it (bound until deleted or Succeeded/Failed; a pod being
  deleted still counts). A pod is recorded by UID; an event seen twice changes
  nothing, and a pod's requests are read again only when its node or its
  ``metadata.generation`` changed (a pod's resources change only by a resize).
- **A booking counts before its pods exist**: ``reserve`` records, per node, the
  replicas a booking put there and what one asks (only when it asks for something);
  each pod of its owner that shows on the node takes one off, and until then the
  missing ones count (``on``). A reservation whose booking the ledger no longer has
  (released before its pods were made) is dropped when its node is next read.
- **A preemption plan's victims take their pods with them** (``on`` with
  ``released``): a released owner's pods, and the pods the ledger holds only by a
  released owner's booking of their devices (a pod group's members, booked by their
  group: by their own reading each is its own owner).
- No lock of its own: its owner (the placement cache) calls it under its lock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from api.v1alpha1.keys import DEVICES_ANNOTATION, GPU_RESOURCE
from internal.objects import JSON
from internal.scheduling.nodefit import (
    PODS,
    PodFit,
    Port,
    fit_reason,
    host_ports,
    pod_requests,
    resources,
    room_for,
)
from internal.scheduling.pods import BadPod, parse_devices, pod_is_active, pod_owner, pod_uid

if TYPE_CHECKING:
    from internal.scheduling.ledger import Ledger


@dataclass(frozen=True, slots=True)
class _Pod:
    uid: str
    node: str
    owner: str
    generation: Any
    requests: Mapping[str, int]
    ports: frozenset[Port]
    devices: frozenset[int] = frozenset()  # its devices annotation's (a preemption reads)


@dataclass(frozen=True, slots=True)
class _Reserved:
    key: str  # the booking's ledger key
    missing: int  # replicas booked on the node whose pods do not show yet
    fit: PodFit


_NONE: Mapping[str, int] = {}
_NO_PODS: frozenset[str] = frozenset()


@dataclass(slots=True)
class Used:
    """What is taken on one node: requests, the pod count, host ports (read-only
    views of the running sums until ``add`` copies them)."""

    requests: Mapping[str, int]
    pods: int
    ports: Iterable[Port]
    copied: bool = False

    def add(self, fit: PodFit, n: int = 1) -> None:
        if not self.copied:
            self.requests, self.ports, self.copied = dict(self.requests), list(self.ports), True
        assert isinstance(self.requests, dict) and isinstance(self.ports, list)
        for k, v in fit.requests.items():
            self.requests[k] = self.requests.get(k, 0) + v * n
        self.pods += n
        if fit.ports:
            self.ports.extend(fit.ports)

    def take_off(self, pod: _Pod) -> None:
        """``pod`` is taken as gone (a preemption plan's victim)."""
        if not self.copied:
            self.requests, self.ports, self.copied = dict(self.requests), list(self.ports), True
        assert isinstance(self.requests, dict) and isinstance(self.ports, list)
        for k, v in pod.requests.items():
            self.requests[k] = self.requests.get(k, 0) - v
        self.pods -= 1
        for p in pod.ports:
            if p in self.ports:
                self.ports.remove(p)


class NodeUsage:
    """Per node: the sum of its pods' requests, their count and their host ports."""

    def __init__(self, pods: Iterable[JSON] = ()) -> None:
        self._pods: dict[str, _Pod] = {}
        self._requests: dict[str, dict[str, int]] = {}
        self._count: Counter[str] = Counter()
        self._ports: dict[str, Counter[Port]] = {}
        #: (owner, node) -> UIDs of the owner's pods there (its count; a victim's
        #: pods, which a preemption plan takes as gone)
        self._owner_pods: dict[tuple[str, str], set[str]] = {}
        #: node -> UIDs of its pods
        self._node_pods: dict[str, set[str]] = {}
        #: node -> booking owner -> its replicas there whose pods do not show yet
        self._pending: dict[str, dict[str, _Reserved]] = {}
        #: told each node whose usage changes (the snapshot stamps it: ``stamps.py``)
        self.touched: Callable[[str], None] = _nothing
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
        entry = _Pod(uid, str(node), pod_owner(pod), gen, pod_requests(spec), host_ports(spec),
                     _devices(pod))
        self._pods[uid] = entry
        self._apply(entry, 1)
        if have is None or have.node != entry.node:  # a resize is no new pod there
            self._pod_arrived(entry.owner, entry.node)

    def remove_pod(self, uid: str) -> None:
        entry = self._pods.pop(uid, None)
        if entry is not None:
            self._apply(entry, -1)

    def _apply(self, e: _Pod, sign: int) -> None:
        self.touched(e.node)
        sums = self._requests.setdefault(e.node, {})
        for k, v in e.requests.items():
            sums[k] = sums.get(k, 0) + sign * v
            if not sums[k]:
                del sums[k]
        self._count[e.node] += sign
        _index(self._owner_pods, (e.owner, e.node), e.uid, sign)
        _index(self._node_pods, e.node, e.uid, sign)
        if e.ports:
            ports = self._ports.setdefault(e.node, Counter())
            ports.update({p: sign for p in e.ports})
            for p in e.ports:
                if ports[p] <= 0:
                    del ports[p]

    # -------------------------------------------------------------- bookings

    def reserve(self, key: str, owner: str, fit: PodFit, nodes: Iterable[str],
                ledger: Ledger | None = None) -> None:
        """The booking ``key`` of ``owner`` put one replica asking ``fit`` on each
        of ``nodes`` (a node once per replica): until that many of its pods show
        there, the missing ones count (nothing is kept for a ``fit`` of nothing).
        With ``ledger``, the nodes' reservations of bookings gone are dropped."""
        if fit.empty:
            return
        for node, n in Counter(nodes).items():
            if ledger is not None:
                self._prune(node, ledger)
            missing = n - len(self._owner_pods.get((owner, node), ()))
            if missing > 0:
                self._pending.setdefault(node, {})[owner] = _Reserved(key, missing, fit)
                self.touched(node)

    def _pod_arrived(self, owner: str, node: str) -> None:
        held = self._pending.get(node)
        r = held.get(owner) if held else None
        if r is None:
            return
        assert held is not None
        self.touched(node)
        if r.missing <= 1:
            del held[owner]
            if not held:
                del self._pending[node]
        else:
            held[owner] = _Reserved(r.key, r.missing - 1, r.fit)

    def _reserved(self, node: str, ledger: Ledger | None) -> list[tuple[str, _Reserved]]:
        """The live reservations on ``node``: those whose booking ``ledger`` still
        has (the others were released before their pods were made). A reader:
        it changes nothing, as a scheduling pass outside the lock reads it; the dead
        ones go when the node is next reserved (``reserve``)."""
        held = self._pending.get(node)
        if not held:
            return []
        return [(owner, r) for owner, r in list(held.items())
                if ledger is None or _live(ledger, owner, r)]

    def _prune(self, node: str, ledger: Ledger) -> None:
        """A writer: drops ``node``'s reservations whose booking is gone."""
        held = self._pending.get(node)
        if not held:
            return
        for owner, r in list(held.items()):
            if not _live(ledger, owner, r):
                del held[owner]
        if not held:
            del self._pending[node]

    # --------------------------------------------------------------- reading

    def pods_on(self, node: str) -> int:
        return self._count.get(node, 0)

    def on(self, node: str, ledger: Ledger | None = None,
           released: AbstractSet[str] = frozenset()) -> Used:
        """What node ``node``'s pods take, plus the replicas booked there whose
        pods do not show yet (``reserve``; ``ledger`` says which bookings live),
        less what the ``released`` owners (a preemption plan's victims) take there."""
        return self._used(node, ledger, released, self._released_pods(node, ledger, released))

    def _used(self, node: str, ledger: Ledger | None, released: AbstractSet[str],
              gone: AbstractSet[str]) -> Used:
        """``on``, the released owners' pods there (``_released_pods``) given."""
        used = Used(self._requests.get(node) or {}, self._count.get(node, 0),
                    self._ports.get(node) or ())
        for owner, r in self._reserved(node, ledger):
            if owner not in released:
                used.add(r.fit, r.missing)
        for uid in gone:
            used.take_off(self._pods[uid])
        return used

    def _released_pods(self, node: str, ledger: Ledger | None,
                       released: AbstractSet[str]) -> set[str]:
        """The pods on ``node`` that the ``released`` owners (a preemption plan's
        victims) take with them: theirs by owner, and the pods the ledger holds by
        no holding of their own but by a released owner's booking of their devices
        (a pod book's: a pod group's members name no workload, so their owner, by
        their own reading, is themselves)."""
        uids = {u for o in released for u in self._owner_pods.get((o, node), ())}
        if ledger is None or not released:
            return uids
        for uid in self._node_pods.get(node, ()):
            p = self._pods[uid]
            if p.devices and uid not in uids and ledger.pod(uid) is None and any(
                    ledger.device_owners(node, d) & released for d in p.devices):
                uids.add(uid)
        return uids

    def room(self, node: str, allocatable: Mapping[str, int], fit: PodFit,
             ledger: Ledger | None,
             released: AbstractSet[str] = frozenset()) -> tuple[int, str] | None:
        """How many more pods of ``fit`` ``node`` has room for, and what bounds it
        (``nodefit.room_for``)."""
        used = self.on(node, ledger, released)
        return room_for(allocatable, used.requests, used.pods, fit)

    def refusal(self, node: str, allocatable: Mapping[str, int], fit: PodFit, mine: int,
                ledger: Ledger | None,
                released: AbstractSet[str] = frozenset()) -> str | None:
        """Why one more pod of ``fit`` does not fit ``node`` beside its pods, the
        replicas booked there and ``mine`` of this decision's, the ``released``
        owners' pods taken as gone (``fit_reason``)."""
        gone = self._released_pods(node, ledger, released) if released else _NO_PODS
        if node in self._pending or gone:
            used = self._used(node, ledger, released, gone)
            return fit_reason(allocatable, used.requests, used.pods, used.ports, fit, mine)
        # the fast way through (every node of every decision): the sums as they are
        requests = self._requests.get(node) or _NONE
        pods = self._count.get(node, 0)
        cap = allocatable.get(PODS)
        short = (cap is not None and pods + mine >= cap) or bool(fit.ports)
        n = mine + 1
        for r, want, unlisted_ok in fit.checks:
            have = allocatable.get(r)
            if have is None:
                if unlisted_ok:
                    continue
                have = 0
            if requests.get(r, 0) + n * want > have:
                short = True
                break
        if not short:
            return None
        return fit_reason(allocatable, requests, pods, self._ports.get(node) or (), fit, mine)


#: a Node's allocatable as listed -> in fit's units: nodes of a pool list the same
_ALLOCATABLE: dict[frozenset[tuple[str, Any]], dict[str, int]] = {}


def _live(ledger: Ledger, owner: str, r: _Reserved) -> bool:
    a = ledger.allocation(r.key)
    return a is not None and a.owner == owner


def _index(index: dict[Any, set[str]], key: Any, uid: str, sign: int) -> None:
    """Adds (``sign`` > 0) or removes ``uid`` under ``key``; an empty set goes."""
    uids = index.setdefault(key, set())
    if sign > 0:
        uids.add(uid)
        return
    uids.discard(uid)
    if not uids:
        del index[key]


def _devices(pod: JSON) -> frozenset[int]:
    """The devices ``pod``'s annotation names (none when it names none or cannot be
    read: the ledger reports such a pod)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    try:
        return frozenset(parse_devices(annotations.get(DEVICES_ANNOTATION)) or ())
    except BadPod:
        return frozenset()


def _nothing(node: str) -> None:
    """The default ``NodeUsage.touched``: nobody is told."""


def node_allocatable(node: JSON) -> dict[str, int]:
    """A Node's allocatable (else capacity) in fit's units; ``pods`` and
    ``nvidia.com/gpu`` kept when listed at 0 (a listed GPU count of 0 refuses a GPU
    pod, an unlisted one does not: ``nodefit.py``). (Read again at each Node update:
    remembered by what it lists.)"""
    status = node.get("status") or {}
    raw = status.get("allocatable") or status.get("capacity") or {}
    try:
        key = frozenset(raw.items())
    except TypeError:  # a value that is not a string: read it, do not remember it
        key = None
    have = _ALLOCATABLE.get(key) if key is not None else None
    if have is not None:
        return have
    out = resources(raw)
    for kept in (PODS, GPU_RESOURCE):
        if kept in raw and kept not in out:
            out[kept] = 0
    if key is not None:
        if len(_ALLOCATABLE) >= 1024:
            _ALLOCATABLE.clear()
        _ALLOCATABLE[key] = out
    return out
