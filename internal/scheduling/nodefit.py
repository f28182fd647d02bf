"""What the kubelet checks when it admits a pod, as kube-scheduler computes it: the
pod's requests, its host ports, its nodeSelector and required node affinity, each
against one node. Pure functions; ``nodeusage.py`` keeps what a node's pods use.

Requests (kube-scheduler's ``computePodResourceRequest``): per resource, the larger
of the containers' sum (sidecars, init containers with ``restartPolicy: Always``,
included) and the largest init container (plus the sidecars started before it),
plus ``spec.overhead``. A container's request is its ``requests`` entry, else its
``limits`` entry (the API server defaults one to the other; a template is not
defaulted). CPU is counted in millicores, everything else in its own unit (bytes,
counts). ``nvidia.com/gpu`` is counted too: the GPU filters pick the devices, this
checks only what the kubelet would refuse the pod for.

Fit (``fit_reason``): each requested resource against the node's allocatable minus
what its pods request; one more pod against its ``pods``. A node that does not
report cpu, memory, ephemeral-storage or pods is not checked for it (a test node
made by hand). An extended resource it does not report is 0: kube-scheduler's rule
(its NodeResourcesFit), kept for every extended resource but one. ``nvidia.com/gpu``
is checked as the kubelet admits it (``pkg/kubelet/lifecycle/predicate.go``): a node
that does not list it is not checked for it (``removeMissingExtendedResources`` drops
the request), a node that lists it, even at 0 (a device plugin ran there, the kubelet
keeps its resource at 0), refuses a pod asking more than is left
(``OutOfnvidia.com/gpu``): our pods bound by name never pass kube-scheduler, only the
kubelet.

Host ports (kube-scheduler's NodePorts): two ports clash on the same protocol and
port when their hostIPs are equal or either is unset or ``0.0.0.0``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from api.v1alpha1.keys import GPU_RESOURCE
from internal.scheduling.quantity import parse_quantity

CPU, MEMORY, EPHEMERAL, PODS = "cpu", "memory", "ephemeral-storage", "pods"
#: resources a node always reports when a kubelet runs it
STANDARD = frozenset({CPU, MEMORY, EPHEMERAL, PODS})
#: resources not checked on a node that does not list them (the standard ones: a
#: test node made by hand; nvidia.com/gpu: the kubelet drops an unlisted one)
UNCHECKED_UNLISTED = STANDARD | {GPU_RESOURCE}
WILDCARD_IPS = frozenset({"", "0.0.0.0", "::"})

#: (protocol, hostIP, hostPort)
Port = tuple[str, str, int]


def amount(resource: str, value: Any) -> int:
    """A quantity in the unit fit counts: millicores for cpu, else whole units
    (rounded up). Anything that is not a quantity is 0."""
    try:
        q = parse_quantity(value)
    except (ValueError, TypeError, ArithmeticError):
        return 0
    if q <= 0:
        return 0
    return math.ceil(q * 1000) if resource == CPU else math.ceil(q)


def resources(values: Mapping[str, Any] | None) -> dict[str, int]:
    """A ResourceList (``{"cpu": "500m"}``) in fit's units (a resource of 0 left
    out)."""
    out: dict[str, int] = {}
    for name, value in (values or {}).items():
        n = amount(name, value)
        if n:
            out[name] = n
    return out


def container_requests(container: Mapping[str, Any]) -> dict[str, int]:
    """A container's requests, each resource's limit where it has no request."""
    res = container.get("resources") or {}
    out = resources(res.get("limits"))
    out.update(resources(res.get("requests")))
    return out


def _add(into: dict[str, int], more: Mapping[str, int]) -> None:
    for k, v in more.items():
        into[k] = into.get(k, 0) + v


def pod_requests(spec: Mapping[str, Any]) -> dict[str, int]:
    """What a pod of ``spec`` requests, as kube-scheduler counts it."""
    total: dict[str, int] = {}
    for c in spec.get("containers") or ():
        _add(total, container_requests(c))
    init_max: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    for c in spec.get("initContainers") or ():
        req = container_requests(c)
        if c.get("restartPolicy") == "Always":  # a sidecar runs beside the containers
            _add(total, req)
            _add(sidecars, req)
            req = dict(sidecars)
        else:
            req = {**req}
            _add(req, sidecars)
        for k, v in req.items():
            init_max[k] = max(init_max.get(k, 0), v)
    for k, v in init_max.items():
        total[k] = max(total.get(k, 0), v)
    _add(total, resources(spec.get("overhead")))
    return total


def host_ports(spec: Mapping[str, Any]) -> frozenset[Port]:
    """The host ports a pod of ``spec`` takes (with ``hostNetwork``, every
    containerPort is one)."""
    host_net = bool(spec.get("hostNetwork"))
    out: set[Port] = set()
    for c in spec.get("containers") or ():
        for p in c.get("ports") or ():
            port = p.get("hostPort") or (p.get("containerPort") if host_net else 0)
            try:
                port = int(port or 0)
            except (TypeError, ValueError):
                continue
            if port > 0:
                out.add((str(p.get("protocol") or "TCP"), str(p.get("hostIP") or ""), port))
    return frozenset(out)


def port_clash(want: Iterable[Port], used: Iterable[Port]) -> Port | None:
    """The first port of ``want`` that one of ``used`` already takes, else None."""
    taken = list(used)
    for proto, ip, port in want:
        for uproto, uip, uport in taken:
            if port == uport and proto == uproto and (
                    ip == uip or ip in WILDCARD_IPS or uip in WILDCARD_IPS):
                return proto, ip, port
    return None


def port_text(p: Port) -> str:
    proto, ip, port = p
    return f"{ip or '0.0.0.0'}:{port}/{proto}"


# ------------------------------------------------------------- selectors


def _expression(expr: Mapping[str, Any], value: str | None) -> bool:
    op = expr.get("operator")
    values = [str(v) for v in expr.get("values") or ()]
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            have, bound = int(value), int(values[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def term_matches(term: Mapping[str, Any], labels: Mapping[str, str], name: str) -> bool:
    """One nodeSelectorTerm: all its expressions and fields hold (an empty term
    matches no node, as in Kubernetes)."""
    exprs = term.get("matchExpressions") or ()
    fields = term.get("matchFields") or ()
    if not exprs and not fields:
        return False
    for e in exprs:
        if not _expression(e, labels.get(str(e.get("key")))):
            return False
    for f in fields:
        value = name if f.get("key") == "metadata.name" else None
        if not _expression(f, value):
            return False
    return True


def required_terms(spec: Mapping[str, Any]) -> list[Mapping[str, Any]] | None:
    """The template's required node affinity terms (None: it has none)."""
    req = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
           .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if req is None:
        return None
    return list(req.get("nodeSelectorTerms") or ())


# ------------------------------------------------------------------ fit


@dataclass(frozen=True, slots=True)
class PodFit:
    """What one pod of a template asks of its node, read once per decision."""

    requests: Mapping[str, int]
    ports: frozenset[Port] = frozenset()
    node_selector: Mapping[str, str] | None = None
    terms: list[Mapping[str, Any]] | None = None
    #: asks for nothing that other pods could take (set from the above)
    empty: bool = field(init=False, default=True)
    #: the requests in name order (set from the above)
    ordered: tuple[tuple[str, int], ...] = field(init=False, default=())
    #: (resource, request, not checked where the node does not list it) in name
    #: order
    checks: tuple[tuple[str, int, bool], ...] = field(init=False, default=())
    #: has a nodeSelector or required node affinity (set from the above)
    selective: bool = field(init=False, default=False)
    #: this fit without nvidia.com/gpu, once asked (``without_gpus``)
    no_gpus: PodFit | None = field(init=False, default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "empty", not self.requests and not self.ports)
        object.__setattr__(self, "ordered", tuple(sorted(self.requests.items())))
        object.__setattr__(self, "checks",
                           tuple((r, n, r in UNCHECKED_UNLISTED) for r, n in self.ordered))
        object.__setattr__(self, "selective",
                           bool(self.node_selector) or self.terms is not None)

    @classmethod
    def of(cls, spec: Mapping[str, Any] | None) -> PodFit:
        """The fit of a pod of ``spec``; the same spec object read again is not
        parsed again (a workload's template, decision after decision)."""
        if spec is None:
            return _NO_FIT
        hit = _SEEN.get(id(spec))
        if hit is not None and hit[0] is spec:
            return hit[1]
        fit = cls.parse(spec)
        if len(_SEEN) >= 256:
            _SEEN.clear()
        _SEEN[id(spec)] = (spec, fit)
        return fit

    def without_gpus(self) -> PodFit:
        """This fit asking no ``nvidia.com/gpu``. A placement with the device plugin
        (``Context``) asks none of node fit: its pods ask the replica's GPUs whatever
        the template says (``pod_template``), and the GPU filters count those against
        the node's devices; node fit checking the template's count too could refuse
        what fits, or say it in other words. Remembered on the fit (a workload's
        decisions ask it again)."""
        if GPU_RESOURCE not in self.requests:
            return self
        if self.no_gpus is None:
            requests = {k: v for k, v in self.requests.items() if k != GPU_RESOURCE}
            object.__setattr__(self, "no_gpus",
                               PodFit(requests, self.ports, self.node_selector, self.terms))
        return self.no_gpus  # type: ignore[return-value]

    @classmethod
    def parse(cls, spec: Mapping[str, Any]) -> PodFit:
        sel = spec.get("nodeSelector")
        return cls(pod_requests(spec), host_ports(spec),
                   {str(k): str(v) for k, v in sel.items()} if sel else None,
                   required_terms(spec))

    def selector_reason(self, labels: Mapping[str, str], name: str) -> str | None:
        """Why the node's labels (and name) do not match the template's nodeSelector
        or required node affinity, else None."""
        for k, v in (self.node_selector or {}).items():
            if labels.get(k) != v:
                return f"does not match the template's nodeSelector {k}={v}"
        if self.terms is not None and not any(
                term_matches(t, labels, name) for t in self.terms):
            return "does not match the template's required node affinity"
        return None


_NO_FIT = PodFit({})
#: id(spec) -> (spec, its fit): the spec is kept, so its id is not reused meanwhile
_SEEN: dict[int, tuple[Mapping[str, Any], PodFit]] = {}


def quantity_text(resource: str, n: int) -> str:
    """A count in fit's units as a person reads it: 2 CPU, 500m CPU, 3Gi memory."""
    if resource == CPU:
        return f"{n // 1000} CPU" if n % 1000 == 0 else f"{n}m CPU"
    if resource in (MEMORY, EPHEMERAL) or resource.startswith("hugepages-"):
        for unit, size in (("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
            if n >= size:
                v = n / size
                text = f"{v:.0f}" if v == int(v) else f"{v:.1f}"
                return f"{text}{unit} {resource}"
        return f"{n} bytes {resource}"
    return f"{n} {resource}"


def gpu_refusal(listed: int, free: int, want: int) -> str:
    """Why the kubelet would refuse a pod asking ``want`` nvidia.com/gpu on a node
    that lists ``listed`` of which ``free`` are left."""
    if listed == 0:
        return (f"node lists {GPU_RESOURCE}: 0 (a device plugin ran there); the kubelet "
                f"would refuse the pod (OutOf{GPU_RESOURCE})")
    return (f"node lists {GPU_RESOURCE}: {free} of {listed} left, needs {want}; the "
            f"kubelet would refuse the pod (OutOf{GPU_RESOURCE})")


def pods_reason(pods: int, cap: int) -> str | None:
    """Why one more pod does not fit beside ``pods`` on a node of ``cap`` pods."""
    return f"too many pods ({pods} of {cap})" if pods >= cap else None


def room_for(allocatable: Mapping[str, int], used: Mapping[str, int], pods: int,
             fit: PodFit) -> tuple[int, str] | None:
    """How many pods of ``fit`` the node still has room for, and what bounds it
    (``16 CPU free``, ``108 more pods``, ``host port 0.0.0.0:80/TCP``); None when
    nothing of node fit bounds it."""
    best: tuple[int, str] | None = None
    cap = allocatable.get(PODS)
    if cap is not None:
        best = (max(0, cap - pods), f"{max(0, cap - pods)} more pods")
    for r, want, unlisted_ok in fit.checks:
        have = allocatable.get(r)
        if have is None and unlisted_ok:
            continue
        free = max(0, (have or 0) - used.get(r, 0))
        if best is None or free // want < best[0]:
            best = (free // want, f"{quantity_text(r, free)} free")
    if fit.ports and (best is None or best[0] > 1):
        best = (1, f"host port {port_text(min(fit.ports))}")
    return best


def fit_reason(allocatable: Mapping[str, int], used: Mapping[str, int], pods: int,
               ports: Iterable[Port], fit: PodFit, mine: int = 0) -> str | None:
    """Why one more pod of ``fit`` does not fit a node of ``allocatable`` whose pods
    request ``used``, number ``pods`` and take ``ports``, beside ``mine`` more pods
    of ``fit`` (a gang's replicas already put there); None when it fits."""
    cap = allocatable.get(PODS)
    if cap is not None and pods + mine >= cap:
        return pods_reason(pods + mine, cap)
    for r, want in fit.ordered:
        have = allocatable.get(r)
        if have is None and r in UNCHECKED_UNLISTED:
            continue
        free = max(0, (have or 0) - used.get(r, 0) - mine * want)
        if want > free:
            if r == GPU_RESOURCE:
                return gpu_refusal(have or 0, free, want)
            return f"{quantity_text(r, free)} free, needs {quantity_text(r, want).split(' ')[0]}"
    if fit.ports:
        clash = next(iter(sorted(fit.ports))) if mine else port_clash(fit.ports, ports)
        if clash is not None:
            return f"host port {port_text(clash)} in use"
    return None
