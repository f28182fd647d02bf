"""A kubelet's admission of one pod, as the kubelet decides it: pure functions, no
server (the local control plane's admitter, ``admitter.py``, runs them).

The kubelet admits a pod bound to its node by re-running kube-scheduler's general
predicates against the pods it has already admitted there (kubelet
``pkg/kubelet/lifecycle/predicate.go``, ``generalFilter``), in this order, the first
failure deciding:

====================  ==========================  =====================================
check                 reason                      message (after ``Pod was rejected: ``)
====================  ==========================  =====================================
one more pod          ``OutOfpods``               ``Node didn't have enough resource:
                                                  pods, requested: 1, used: 110,
                                                  capacity: 110``
cpu, memory,          ``OutOfcpu``,               ``Node didn't have enough resource:
ephemeral-storage,    ``OutOfmemory``, ...        cpu, requested: 8000, used: 60000,
extended resources                                capacity: 64000`` (cpu in millicores,
(``nvidia.com/gpu``                               the rest in bytes or counts)
included)
nodeSelector and      ``NodeAffinity``            ``Predicate NodeAffinity failed:
required node                                     node(s) didn't match Pod's node
affinity                                          affinity/selector``
host ports            ``NodePorts``               ``Predicate NodePorts failed: node(s)
                                                  didn't have free ports for the
                                                  requested pod ports``
NoExecute taints      ``TaintToleration``         ``Predicate TaintToleration failed:
(only those: the                                  node(s) had taints that the pod
kubelet leaves                                    didn't tolerate``
NoSchedule to the
scheduler)
====================  ==========================  =====================================

Requests are kube-scheduler's ``computePodResourceRequest``, computed here on their
own (not with ``internal/scheduling/nodefit.py``'s, which the controller places
with: the admitter is the check of that arithmetic, so it does not share it). Like
the kubelet, an extended resource the node does not list is not checked
(``removeMissingExtendedResources``: a cluster-level resource). Unlike a real
kubelet, a node that lists no cpu, memory, ephemeral-storage or pods is not checked
for it: a real node always reports them, the test nodes made by hand do not all.
What is shared with ``nodefit.py`` is only how a selector term and a host port read
(the API's meaning, not an arithmetic): ``term_matches``, ``host_ports``,
``port_clash``, and ``taints.tolerates``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from internal.scheduling.nodefit import Port, host_ports, port_clash, term_matches
from internal.scheduling.quantity import parse_quantity
from internal.scheduling.taints import tolerates

CPU, MEMORY, EPHEMERAL, PODS = "cpu", "memory", "ephemeral-storage", "pods"
NATIVE = (CPU, MEMORY, EPHEMERAL)
REJECTED_PREFIX = "Pod was rejected: "


def _value(resource: str, raw: Any) -> int:
    """Kubernetes' ``MilliValue`` for cpu, ``Value`` (rounded up) for the rest."""
    try:
        q = parse_quantity(raw)
    except (ValueError, TypeError, ArithmeticError):
        return 0
    return max(0, math.ceil(q * 1000 if resource == CPU else q))


def _list(values: Mapping[str, Any] | None) -> dict[str, int]:
    return {k: _value(k, v) for k, v in (values or {}).items()}


def _container(c: Mapping[str, Any]) -> dict[str, int]:
    res = c.get("resources") or {}
    return {**_list(res.get("limits")), **_list(res.get("requests"))}


def _add(into: dict[str, int], more: Mapping[str, int]) -> None:
    for k, v in more.items():
        into[k] = into.get(k, 0) + v


def requests(spec: Mapping[str, Any]) -> dict[str, int]:
    """``computePodResourceRequest``: the containers' sum (restartable init
    containers, the sidecars, included) or the largest init container with the
    sidecars started before it, whichever is larger, plus ``spec.overhead``."""
    total: dict[str, int] = {}
    for c in spec.get("containers") or ():
        _add(total, _container(c))
    sidecars: dict[str, int] = {}
    init: dict[str, int] = {}
    for c in spec.get("initContainers") or ():
        own = _container(c)
        if c.get("restartPolicy") == "Always":
            _add(total, own)
            _add(sidecars, own)
            during = dict(sidecars)
        else:
            during = dict(own)
            _add(during, sidecars)
        for k, v in during.items():
            init[k] = max(init.get(k, 0), v)
    for k, v in init.items():
        total[k] = max(total.get(k, 0), v)
    _add(total, _list(spec.get("overhead")))
    return total


def allocatable(node: Mapping[str, Any]) -> dict[str, int]:
    status = node.get("status") or {}
    return _list(status.get("allocatable") or status.get("capacity"))


def _extended(name: str) -> bool:
    """An extended resource (``example.com/foo``), not a native one
    (``kubernetes.io/...``, ``hugepages-*``, cpu, memory)."""
    domain = name.split("/", 1)[0] if "/" in name else ""
    return bool(domain) and not domain.endswith("kubernetes.io") and \
        not name.startswith("requests.")


@dataclass(frozen=True, slots=True)
class Admitted:
    """What an admitted pod takes on its node."""

    requests: Mapping[str, int]
    ports: frozenset[Port]


def admitted(pod: Mapping[str, Any]) -> Admitted:
    spec = pod.get("spec") or {}
    return Admitted(requests(spec), host_ports(spec))


@dataclass(frozen=True, slots=True)
class Rejection:
    reason: str
    message: str  # the kubelet's, after "Pod was rejected: "

    @property
    def status_message(self) -> str:
        return REJECTED_PREFIX + self.message


def _insufficient(resource: str, want: int, used: int, cap: int) -> Rejection:
    return Rejection(f"OutOf{resource}", f"Node didn't have enough resource: {resource}, "
                     f"requested: {want}, used: {used}, capacity: {cap}")


def _predicate(name: str, desc: str) -> Rejection:
    return Rejection(name, f"Predicate {name} failed: {desc}")


def _matches_node(spec: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """``GetRequiredNodeAffinity(pod).Match(node)``: the nodeSelector and the
    required node affinity's terms (any one of them)."""
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    for k, v in (spec.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return False
    req = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
           .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if req is None:
        return True
    return any(term_matches(t, labels, str(meta.get("name") or ""))
               for t in req.get("nodeSelectorTerms") or ())


def admit(pod: Mapping[str, Any], node: Mapping[str, Any],
          others: Iterable[Admitted]) -> Rejection | None:
    """Why the kubelet of ``node`` rejects ``pod`` beside the pods it admitted
    there (``others``), else None."""
    spec = pod.get("spec") or {}
    alloc = allocatable(node)
    listed = ((node.get("status") or {}).get("allocatable")
              or (node.get("status") or {}).get("capacity") or {})
    others = list(others)
    if PODS in listed and len(others) + 1 > alloc.get(PODS, 0):
        return _insufficient(PODS, 1, len(others), alloc.get(PODS, 0))
    want = requests(spec)
    used: dict[str, int] = {}
    for o in others:
        _add(used, o.requests)
    order = [*NATIVE, *sorted(r for r in want if r not in NATIVE)]
    for r in order:
        n = want.get(r, 0)
        if n <= 0:
            continue
        if r not in listed and (r in NATIVE or _extended(r)):
            continue  # not reported (a hand-made node), or a cluster-level resource
        cap = alloc.get(r, 0)
        if n > cap - used.get(r, 0):
            return _insufficient(r, n, used.get(r, 0), cap)
    if not _matches_node(spec, node):
        return _predicate("NodeAffinity", "node(s) didn't match Pod's node affinity/selector")
    ports = host_ports(spec)
    if ports and port_clash(ports, [p for o in others for p in o.ports]) is not None:
        return _predicate("NodePorts",
                          "node(s) didn't have free ports for the requested pod ports")
    tolerations = spec.get("tolerations") or ()
    for taint in (node.get("spec") or {}).get("taints") or ():
        if taint.get("effect") == "NoExecute" and not tolerates(tolerations, taint):
            return _predicate("TaintToleration",
                              "node(s) had taints that the pod didn't tolerate")
    return None
