"""A pod group's member in ``dra`` mode (docs/dra.md, "Pod group members"): the
ResourceClaims its pod names, how many GPUs they ask, and their allocation to the
devices its group's plan gave the member, written before its Binding, as
kube-scheduler's DRA plugin writes it for the devices it chose.

A member is in ``dra`` mode when it names a ResourceClaim and no other mode of its
own (``internal/webhook/groupexposure.py``, ``dra_member``). kube-controller-manager's
``resourceclaim`` controller makes its claim from the pod's
``resourceClaimTemplateName`` and names it in ``pod.status.resourceClaimStatuses``.

What ``read_member`` answers for a member (a ``MemberClaims``):

| the member's claims                                | answer                          |
|----------------------------------------------------|---------------------------------|
| one not made yet, or not in the cache yet          | ``waiting``: its group waits,   |
|                                                    | books nothing                   |
| each request ``exactly``, of the configured device | ``asks``, and ``gpus``: the sum |
| class, ``allocationMode: ExactCount`` (the         | of their ``count``              |
| default), no selector, no constraint; reserved for |                                 |
| no other pod                                       |                                 |
| anything else (``All``, another class, a selector, | ``refused``: its group is       |
| ``firstAvailable``, a claim another pod uses)      | refused, not guessed            |

A member not made yet of a group placed at its first members (``leaderfirst.py``: a
reserved slot) has no claim yet: ``read_slot`` reads what its owner's pod template
(``PodGroup.later_spec``) will ask from the ResourceClaimTemplates it names, by the
same rules (a template not in the cache yet: ``waiting``; a ``resourceClaimName``, a
claim shared by several pods: ``refused``). Once the pod is made and takes its slot,
its own claim (kube-controller-manager's, from that template) is read and allocated
as a first member's.

``allocate`` then writes, per claim, as kube-scheduler does in its PreBind: first
kube-scheduler's finalizer ``resource.kubernetes.io/delete-protection`` (so
kube-controller-manager's ``resourceclaim`` controller deallocates the claim once its
pod is gone, and deletes a claim it made) and our ``GROUP_CLAIM_ANNOTATION`` (the
group's ledger key: the ledger holds the claim's devices as its group's,
``resourceslices.claim_owner``), then ``status.allocation`` (results naming driver,
pool and device of exactly the member's planned devices, in the order of its
requests, and a node selector on its node) with ``status.reservedFor`` the pod. A
claim already allocated to exactly those devices only gets the pod in
``reservedFor``; one allocated elsewhere and reserved for nobody is deallocated
first. Any failure raises ``ClaimNotAllocated``: the member is not bound.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from api.v1alpha1.keys import GROUP_CLAIM_ANNOTATION
from controllers.dra.availability import TEMPLATES_FORBIDDEN
from controllers.dra.claims import node_selector
from internal.objects import JSON, object_key
from internal.scheduling.podgroups import LaterPart, PodGroup
from internal.scheduling.pods import pod_gpu_request, pod_uid
from internal.scheduling.resourceslices import DRA_API_VERSION
from internal.webhook.groupexposure import dra_member

#: kube-scheduler's finalizer on a claim it allocated (``resourceapi.Finalizer``):
#: kube-controller-manager's resourceclaim controller removes the allocation once no
#: pod is reserved, then this finalizer
DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"
#: a pod as planned, with its claims' GPU count (a key no API object carries, so no
#: tenant can write it): ``planned``, read by ``member_gpus``
_DRA_GPUS = "gpu.orchestrator.dev:dra-gpus"

#: why a ``dra`` member is refused while the manager runs without DRA
DRA_OFF = ("device exposure 'dra' is unavailable: the controller runs without --enable-dra "
           "(or the API server does not serve resource.k8s.io/v1)")
#: (namespace, name) -> the cached ResourceClaim, or None
ClaimOf = Callable[[str, str], JSON | None]
#: (namespace, name) -> the cached ResourceClaimTemplate, or None
TemplateOf = Callable[[str, str], JSON | None]
#: (node, devices, request) -> allocation results naming them, or None (not published)
ResultsFor = Callable[[str, list[int], str], list[dict[str, Any]] | None]


class ClaimNotAllocated(Exception):
    """The member's claim could not be allocated; the message says why."""


@dataclass(frozen=True, slots=True)
class ClaimAsk:
    """One claim of a member: the claim as cached, its requests (name, count)."""

    claim: JSON
    requests: tuple[tuple[str, int], ...]

    @property
    def gpus(self) -> int:
        return sum(n for _, n in self.requests)


@dataclass(frozen=True, slots=True)
class MemberClaims:
    """A ``dra`` member's claims (the module's table)."""

    asks: tuple[ClaimAsk, ...] = ()
    waiting: str = ""
    refused: str = ""
    gpus: int = field(default=0)


def claim_names(pod: JSON) -> list[tuple[str, str | None]]:
    """(entry, claim name) of each ``spec.resourceClaims`` entry of ``pod``; the
    name of a template's claim from ``status.resourceClaimStatuses``, None until
    kube-controller-manager made it."""
    made = {s.get("name"): s.get("resourceClaimName")
            for s in (pod.get("status") or {}).get("resourceClaimStatuses") or ()}
    out: list[tuple[str, str | None]] = []
    for c in (pod.get("spec") or {}).get("resourceClaims") or ():
        if c.get("resourceClaimName"):
            out.append((str(c.get("name")), str(c["resourceClaimName"])))
        elif c.get("resourceClaimTemplateName"):
            name = made.get(c.get("name"))
            out.append((str(c.get("name")), str(name) if name else None))
    return out


def read_member(pod: JSON, claim_of: ClaimOf, device_class: str) -> MemberClaims:
    """What ``pod``'s claims ask (the module's table)."""
    ns = (pod.get("metadata") or {}).get("namespace") or "default"
    asks: list[ClaimAsk] = []
    for entry, name in claim_names(pod):
        claim = claim_of(ns, name) if name else None
        if claim is None:
            return MemberClaims(waiting=f"the ResourceClaim of pod {object_key(pod)}'s "
                                        f"claim {entry!r} is not made yet")
        requests, why = _requests(claim, device_class)
        if not why:
            why = _used_by_another(claim, pod)
        if why:
            return MemberClaims(refused=_shape_refusal(
                f"ResourceClaim {object_key(claim)} of pod {object_key(pod)}", why,
                device_class))
        asks.append(ClaimAsk(claim, requests))
    return MemberClaims(tuple(asks), gpus=sum(a.gpus for a in asks))


def read_slot(spec: JSON, ns: str, template_of: TemplateOf, device_class: str,
              who: str) -> MemberClaims | None:
    """What a member not made yet will ask, its pod ``spec`` its owner's template
    (``who`` names it in words): None when it is not in ``dra`` mode (it names no
    claim, or asks ``nvidia.com/gpu``: the webhook's rule for a member with no mode
    of its own); else its templates' requests (the module's table)."""
    if not dra_member({"spec": spec}):
        return None
    asks: list[ClaimAsk] = []
    for c in spec.get("resourceClaims") or ():
        entry = c.get("name")
        if c.get("resourceClaimName"):
            return MemberClaims(refused=(
                f"{who}'s claim {entry!r} names ResourceClaim {ns}/{c['resourceClaimName']}, "
                f"a claim shared by the pods that name it: it cannot be allocated to each "
                f"member's own devices (name a resourceClaimTemplateName, one claim per pod)"))
        name = c.get("resourceClaimTemplateName")
        if not name:
            continue
        template = template_of(ns, str(name))
        if template is None:
            return MemberClaims(waiting=f"ResourceClaimTemplate {ns}/{name} of {who}'s claim "
                                        f"{entry!r} is not in the cache yet")
        requests, why = _requests({"spec": (template.get("spec") or {}).get("spec") or {}},
                                  device_class)
        if why:
            return MemberClaims(refused=_shape_refusal(
                f"ResourceClaimTemplate {ns}/{name} of {who}", why, device_class))
        asks.append(ClaimAsk(template, requests))
    return MemberClaims(tuple(asks), gpus=sum(a.gpus for a in asks))


def _shape_refusal(what: str, why: str, device_class: str) -> str:
    """Why a member's claim (or template) ``what`` refuses its group: ``why``, and
    the one shape a member's claim may have."""
    return (f"{what}: {why}: the group is placed on devices it chooses itself, so a "
            f"member's claim asks exactly N devices of device class {device_class!r} "
            f"(allocationMode ExactCount, no selector)")


def _requests(claim: JSON, device_class: str) -> tuple[tuple[tuple[str, int], ...], str]:
    devices = (claim.get("spec") or {}).get("devices") or {}
    if devices.get("constraints"):
        return (), "it has constraints"
    out: list[tuple[str, int]] = []
    for r in devices.get("requests") or ():
        name, exactly = str(r.get("name")), r.get("exactly")
        if not isinstance(exactly, dict):
            return (), f"request {name!r} is not 'exactly' (firstAvailable)"
        cls = exactly.get("deviceClassName")
        if cls != device_class:
            return (), f"request {name!r} asks device class {cls!r}"
        mode = exactly.get("allocationMode") or "ExactCount"
        if mode != "ExactCount":
            return (), f"request {name!r} has allocationMode {mode}"
        for refused in ("selectors", "adminAccess"):
            if exactly.get(refused):
                return (), f"request {name!r} has {refused}"
        count = exactly.get("count", 1)
        if not isinstance(count, int) or count < 1:
            return (), f"request {name!r} asks count {count!r}"
        out.append((name, count))
    if not out:
        return (), "it requests no device"
    return tuple(out), ""


def _used_by_another(claim: JSON, pod: JSON) -> str:
    other = next((r for r in (claim.get("status") or {}).get("reservedFor") or ()
                  if r.get("uid") != pod_uid(pod)), None)
    return f"it is reserved for {other.get('resource')} {other.get('name')}" if other else ""


def planned(pod: JSON, gpus: int) -> JSON:
    """``pod`` as its group's plan reads it: a ``dra`` member asking ``gpus``."""
    return {**pod, _DRA_GPUS: gpus}


def dra_gpus(pod: JSON) -> int | None:
    """The GPUs a planned ``dra`` member's claims ask (``planned``), None for any
    other pod."""
    n = pod.get(_DRA_GPUS)
    return n if isinstance(n, int) else None


def member_gpus(pod: JSON) -> int:
    """The GPUs a member asks: its claims' (a planned ``dra`` member), else its
    ``nvidia.com/gpu`` request."""
    n = dra_gpus(pod)
    return pod_gpu_request(pod) if n is None else n


# --------------------------------------------------------------------- writing


def allocate(client: Any, pod: JSON, claims: MemberClaims, node: str, devices: list[int],
             holder: str, results_for: ResultsFor, driver: str) -> None:
    """Allocate ``claims`` (read fresh from the cache) to ``devices`` of ``node``, in
    order, and reserve them for ``pod`` (the module's docstring). Raises
    ClaimNotAllocated."""
    if claims.gpus != len(devices):
        raise ClaimNotAllocated(f"its claims ask {claims.gpus} device(s), its group "
                                f"planned {len(devices)}")
    at = 0
    for ask in claims.asks:
        results: list[dict[str, Any]] = []
        for request, n in ask.requests:
            mine = devices[at:at + n]
            at += n
            got = results_for(node, mine, request)
            if got is None:
                raise ClaimNotAllocated(
                    f"{node}: device(s) {','.join(map(str, mine))} are not in the "
                    f"ResourceSlices of {driver}")
            results += got
        allocation = {"devices": {"results": results}, "nodeSelector": node_selector(node)}
        try:
            _write(client, ask.claim, allocation, pod, holder)
        except ClaimNotAllocated:
            raise
        except Exception as exc:
            raise ClaimNotAllocated(f"ResourceClaim {object_key(ask.claim)}: {exc}") from exc


def _devices_of(allocation: JSON | None) -> list[tuple[Any, ...]]:
    results = ((allocation or {}).get("devices") or {}).get("results") or ()
    return sorted((r.get("request"), r.get("driver"), r.get("pool"), r.get("device"))
                  for r in results)


def _write(client: Any, claim: JSON, allocation: JSON, pod: JSON, holder: str) -> None:
    meta = claim["metadata"]
    name, ns = meta["name"], meta.get("namespace") or "default"
    finalizers = list(meta.get("finalizers") or ())
    if DELETE_PROTECTION not in finalizers or \
            (meta.get("annotations") or {}).get(GROUP_CLAIM_ANNOTATION) != holder:
        claim = client.patch(DRA_API_VERSION, "ResourceClaim", name, {"metadata": {
            "resourceVersion": meta.get("resourceVersion"),
            "finalizers": _with(finalizers, DELETE_PROTECTION),
            "annotations": {GROUP_CLAIM_ANNOTATION: holder}}}, namespace=ns)
    status = dict(claim.get("status") or {})
    pod_ref = {"resource": "pods", "name": (pod.get("metadata") or {}).get("name"),
               "uid": pod_uid(pod)}
    reserved = [r for r in status.get("reservedFor") or () if r.get("uid") == pod_uid(pod)]
    have = status.get("allocation")
    if have and _devices_of(have) == _devices_of(allocation) \
            and (have.get("nodeSelector") == allocation["nodeSelector"]):
        if not reserved:
            client.update_status({**claim, "status": {**status, "reservedFor": [pod_ref]}})
        return
    if have:  # allocated elsewhere (an earlier plan's) and used by nobody else: undone
        other = _used_by_another(claim, pod)
        if other:
            raise ClaimNotAllocated(f"ResourceClaim {object_key(claim)}: {other}")
        claim = client.update_status({**claim, "status": {
            **status, "allocation": None, "reservedFor": None}})
        status = dict(claim.get("status") or {})
    client.update_status({**claim, "status": {**status, "allocation": allocation,
                                              "reservedFor": [pod_ref]}})


def _with(items: Iterable[str], item: str) -> list[str]:
    out = list(items)
    return out if item in out else [*out, item]


class MemberClaimsReader:
    """The pod binding's access to ``dra`` members' claims: the ResourceClaim
    cache and DRA's options (both None while DRA is off: a ``dra`` member is then
    refused, ``DRA_OFF``)."""

    def __init__(self, client: Any = None, claims: Any = None,
                 device_class: str | None = None, driver: str = "",
                 templates: Any = None) -> None:
        self.client, self.claims, self.templates = client, claims, templates
        self.device_class, self.driver = device_class, driver

    def read(self, pod: JSON) -> MemberClaims | None:
        """``pod``'s claims (``read_member``); None for a member not in ``dra`` mode."""
        if not dra_member(pod):
            return None
        if self.claims is None or self.device_class is None:
            return MemberClaims(refused=DRA_OFF)
        return read_member(pod, lambda ns, name: self.claims.get_by_name(name, ns),
                           self.device_class)

    def read_slot(self, spec: JSON, ns: str, who: str) -> MemberClaims | None:
        """A member not made yet (``read_slot``); None when not in ``dra`` mode."""
        if not dra_member({"spec": spec}):
            return None
        if self.device_class is None:
            return MemberClaims(refused=DRA_OFF)
        if self.templates is None:
            return MemberClaims(refused=TEMPLATES_FORBIDDEN)
        return read_slot(spec, ns, lambda n, name: self.templates.get_by_name(name, n),
                         self.device_class, who)

    def read_slots(self, group: PodGroup, reserve: list[int]) -> tuple[PodGroup, MemberClaims]:
        """``group`` as its plan reads it, each ``dra`` part of its members not made
        yet of indices ``reserve`` asking its templates' GPUs (``LaterPart.dra_gpus``),
        and what they ask together (``waiting`` or ``refused`` for the first that
        waits or is refused: ``group`` unchanged then)."""
        ns = group.key.split("/", 1)[0]
        parts: list[LaterPart] = []
        gpus = 0
        for part in group.later:
            claims = None if not any(part.start <= i < part.stop for i in reserve) else \
                self.read_slot(part.spec, ns, f"the members {part.start}-{part.stop - 1} of "
                                              f"pod group {group.key} not made yet")
            if claims is not None and (claims.waiting or claims.refused):
                return group, claims
            parts.append(part if claims is None else replace(part, dra_gpus=claims.gpus))
            gpus += 0 if claims is None else claims.gpus
        return replace(group, later=tuple(parts)), MemberClaims(gpus=gpus)

    def allocate(self, pod: JSON, node: str, devices: list[int], holder: str,
                 results_for: ResultsFor) -> str:
        """Allocates a ``dra`` member's claims to its devices (``allocate``) before
        its Binding: why it could not ("" once done, or for any other pod)."""
        claims = self.read(pod)
        if claims is None:
            return ""
        why = claims.refused or claims.waiting
        if why:
            return why
        try:
            allocate(self.client, pod, claims, node, devices, holder, results_for,
                     self.driver)
        except ClaimNotAllocated as exc:
            return str(exc)
        return ""
