"""Dynamic Resource Allocation, read side: GPUs published as ResourceSlices, and the
devices that allocated ResourceClaims hold (pure: no I/O).

A DRA driver such as NVIDIA's (``gpu.nvidia.com``) publishes, per node, one pool
named after the node with devices ``gpu-<minor>``; attributes ``uuid``,
``productName``, ``index``/``minor``, capacity ``memory``. Guarantees:

- ``SliceInventory`` keeps, per node, the devices of the *newest generation* of each
  pool of the configured driver (a driver replaces a pool by publishing a higher
  generation; older slices are being deleted). Slices of other drivers are ignored.
- ``SliceInventory.view`` turns a node's devices into the GPUNode-shaped dict the
  snapshot reads, merged with the node's GPUNode view where there is one (health,
  utilization and NVLink stay the agent's; the device list is the driver's). The
  view carries ``DRA_DRIVER_ANNOTATION``, so the scheduler knows the node can serve
  ``deviceExposure: dra``.
- ``claim_holding`` says which devices an *allocated* ResourceClaim holds, whoever
  allocated it (kube-scheduler, us): as the ledger holds pods' devices, it holds
  claims' devices, under ``claim:<uid>``. A claim of one of our workloads shares its
  attempt's owner (``<workload uid>#<attempt>``); any other claim is its own owner,
  so nobody else is given its devices until its allocation is removed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from api.v1alpha1.keys import ATTEMPT_LABEL, GROUP_CLAIM_ANNOTATION
from internal.objects import JSON, object_key
from internal.scheduling.inventory import DRA_DRIVER_ANNOTATION, SOURCE_ANNOTATION
from internal.scheduling.pods import PodHolding, controller_ref, workload_owner
from internal.scheduling.quantity import gpu_count

DEFAULT_DRIVER = "gpu.nvidia.com"
#: NVIDIA's DRA driver installs a DeviceClass of the driver's name
DEFAULT_DEVICE_CLASS = "gpu.nvidia.com"
DRA_API_VERSION = "resource.k8s.io/v1"

#: the ledger keys of pod groups (``controllers/podbinding/groupplan.group_ledger_key``)
GROUP_KEY_PREFIX = "PodGroup:"

_GPU_NAME = re.compile(r"^gpu-(\d{1,4})$")


class BadClaim(ValueError):
    """An allocated claim whose devices cannot be located; the message says why."""


@dataclass(frozen=True, slots=True)
class SliceDevice:
    """One GPU a driver publishes."""

    name: str  # the device's name in its pool (gpu-3)
    index: int  # host index (minor)
    pool: str
    node: str
    uuid: str = ""
    model: str = ""
    memory_mib: int | None = None


@dataclass(frozen=True, slots=True)
class ClaimHolding(PodHolding):
    """What one allocated ResourceClaim holds on its node (``uid`` is the claim's)."""

    @property
    def key(self) -> str:
        return claim_holder_key(self.uid)


def claim_holder_key(uid: str) -> str:
    return f"claim:{uid}"


def _attr(attrs: JSON, name: str) -> Any:
    """A device attribute's value (``{"string": ...}``, ``{"int": ...}``, ...)."""
    a = attrs.get(name)
    if a is None:
        a = attrs.get(f"{DEFAULT_DRIVER}/{name}")
    if not isinstance(a, Mapping):
        return None
    for kind in ("int", "string", "version", "bool"):
        if kind in a:
            return a[kind]
    return None


def device_index(name: str, attrs: JSON) -> int | None:
    """The host index of a published device: its ``minor`` or ``index`` attribute,
    else the number in ``gpu-<n>``; None when neither is there."""
    for key in ("minor", "index"):
        v = _attr(attrs, key)
        if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 10000:
            return v
    m = _GPU_NAME.match(name)
    return int(m.group(1)) if m else None


def memory_mib(capacity: JSON) -> int | None:
    c = capacity.get("memory")
    if not isinstance(c, Mapping) or c.get("value") is None:
        return None
    n = gpu_count(c["value"])
    return n // (1024 * 1024) if n else None


def slice_devices(rslice: JSON, driver: str) -> list[SliceDevice]:
    """The GPUs of one ResourceSlice of ``driver`` bound to a node (others: [])."""
    spec = rslice.get("spec") or {}
    node = spec.get("nodeName")
    if spec.get("driver") != driver or not node:
        return []
    pool = str((spec.get("pool") or {}).get("name") or node)
    out = []
    for d in spec.get("devices") or ():
        name = str(d.get("name") or "")
        attrs = d.get("attributes") or {}
        idx = device_index(name, attrs)
        if idx is None:
            continue
        out.append(SliceDevice(name=name, index=idx, pool=pool, node=str(node),
                               uuid=str(_attr(attrs, "uuid") or ""),
                               model=str(_attr(attrs, "productName") or ""),
                               memory_mib=memory_mib(d.get("capacity") or {})))
    return out


def _generation(rslice: JSON) -> int:
    try:
        return int(((rslice.get("spec") or {}).get("pool") or {}).get("generation") or 0)
    except (TypeError, ValueError):
        return 0


class SliceInventory:
    """The ResourceSlices of one driver, by node. Not thread-safe (the placement
    state's lock guards it)."""

    def __init__(self, driver: str = DEFAULT_DRIVER) -> None:
        self.driver = driver
        self._slices: dict[str, JSON] = {}  # slice name -> slice (this driver's)
        self._by_node: dict[str, set[str]] = {}  # node -> its slices' names
        self._devices: dict[str, dict[int, SliceDevice]] = {}  # node -> devices (cache)

    def upsert(self, rslice: JSON) -> str | None:
        """Records a slice; returns the node whose devices may have changed."""
        name = str((rslice.get("metadata") or {}).get("name") or "")
        spec = rslice.get("spec") or {}
        old = self._drop(name)
        if spec.get("driver") == self.driver and spec.get("nodeName"):
            node = str(spec["nodeName"])
            self._slices[name] = rslice
            self._by_node.setdefault(node, set()).add(name)
            self._devices.pop(node, None)
            return node
        return old

    def remove(self, rslice: JSON) -> str | None:
        """Forgets a deleted slice; returns its node. A late delete of an older slice
        of the same name (another UID) forgets nothing."""
        meta = rslice.get("metadata") or {}
        name = str(meta.get("name") or "")
        have = (self._slices.get(name) or {}).get("metadata") or {}
        if meta.get("uid") and have.get("uid") and meta["uid"] != have["uid"]:
            return None
        return self._drop(name)

    def _drop(self, name: str) -> str | None:
        node = _node_of(self._slices.pop(name, None))
        if node is not None:
            names = self._by_node.get(node, set())
            names.discard(name)
            if not names:
                self._by_node.pop(node, None)
            self._devices.pop(node, None)
        return node

    def nodes(self) -> set[str]:
        return set(self._by_node)

    def has(self, node: str) -> bool:
        return node in self._by_node

    def devices(self, node: str) -> dict[int, SliceDevice]:
        """index -> device, from the newest generation of each of the node's pools."""
        cached = self._devices.get(node)
        if cached is None:
            cached = self._devices[node] = self._compute(node)
        return cached

    def _compute(self, node: str) -> dict[int, SliceDevice]:
        mine = [self._slices[n] for n in sorted(self._by_node.get(node, ()))]
        newest: dict[str, int] = {}
        for s in mine:
            pool = str(((s.get("spec") or {}).get("pool") or {}).get("name") or node)
            newest[pool] = max(newest.get(pool, 0), _generation(s))
        out: dict[int, SliceDevice] = {}
        for s in mine:
            pool = str(((s.get("spec") or {}).get("pool") or {}).get("name") or node)
            if _generation(s) != newest[pool]:
                continue
            for d in slice_devices(s, self.driver):
                out.setdefault(d.index, d)
        return out

    def device(self, node: str, index: int) -> SliceDevice | None:
        return self.devices(node).get(index)

    def locate(self, pool: str, device: str) -> SliceDevice | None:
        """The published device named ``device`` in ``pool`` (None: not published).
        NVIDIA's pools are named after their node: that node is looked at first."""
        for d in self.devices(pool).values():
            if d.pool == pool and d.name == device:
                return d
        for s in self._slices.values():
            if str(((s.get("spec") or {}).get("pool") or {}).get("name") or "") != pool:
                continue
            for d in slice_devices(s, self.driver):
                if d.name == device:
                    return d
        return None

    def view(self, node: str, gpunode: JSON | None) -> JSON | None:
        """The GPUNode-shaped view of ``node`` for the snapshot: the driver's devices,
        with the agent's health, utilization and NVLink where its GPUNode reports the
        same index. None when the node has no slices of the driver (then the GPUNode
        or the allocatable count stays the source)."""
        devs = self.devices(node)
        if not devs:
            return None
        g = dict(gpunode or {})
        status = dict(g.get("status") or {})
        agent = {int(d.get("index", -1)): d for d in status.get("devices") or ()}
        out = []
        for idx, sd in sorted(devs.items()):
            a = dict(agent.get(idx) or {})
            a.update({"index": idx, "uuid": sd.uuid or a.get("uuid") or "",
                      "model": sd.model or a.get("model") or ""})
            if sd.memory_mib is not None:
                a["memoryTotalMiB"] = sd.memory_mib
            a.setdefault("healthy", True)
            out.append(a)
        status["devices"] = out
        status["deviceCount"] = len(out)
        meta = dict(g.get("metadata") or {"name": node})
        ann = dict(meta.get("annotations") or {})
        ann.setdefault(SOURCE_ANNOTATION, "resourceslice")
        ann[DRA_DRIVER_ANNOTATION] = self.driver
        meta["annotations"] = ann
        return {**g, "metadata": meta, "spec": {**(g.get("spec") or {}), "nodeName": node},
                "status": status}


def inventory_of(slices: Iterable[JSON], driver: str = DEFAULT_DRIVER) -> SliceInventory:
    """A ``SliceInventory`` of ``driver`` holding ``slices``."""
    inv = SliceInventory(driver)
    for s in slices:
        inv.upsert(s)
    return inv


def with_slices(views: Iterable[JSON], inventory: SliceInventory) -> list[JSON]:
    """The GPUNode views the snapshot reads once the driver's slices are in: each
    node's view merged with its slices (``SliceInventory.view``), plus a view of each
    node that only slices describe. As the controller builds them: ``views`` already
    judged for staleness, the slices taken as published."""
    views = list(views)
    named = {str((v.get("metadata") or {}).get("name")) for v in views}
    merged = [inventory.view(str((v.get("metadata") or {}).get("name")), v) or v
              for v in views]
    return merged + [v for n in sorted(inventory.nodes() - named)
                     if (v := inventory.view(n, None)) is not None]


def _node_of(rslice: JSON | None) -> str | None:
    if rslice is None:
        return None
    n = (rslice.get("spec") or {}).get("nodeName")
    return str(n) if n else None


# ------------------------------------------------------------------- claims


def claim_owner(claim: JSON) -> str:
    """``<workload uid>#<attempt>`` for a claim a GPUWorkload controls; the pod
    group's ledger key (``PodGroup:<ns>/<group>``) for a claim a Pod controls that the
    pod binding allocated for its group (``GROUP_CLAIM_ANNOTATION``, a key of the
    claim's own namespace: a tenant can name no other namespace's group), so it is
    its member's, not a conflict with its group's booking; else the claim itself."""
    meta = claim.get("metadata") or {}
    ref = controller_ref(claim)
    if ref is not None and ref.get("kind") == "GPUWorkload" and ref.get("uid"):
        return workload_owner(str(ref["uid"]), (meta.get("labels") or {}).get(ATTEMPT_LABEL))
    group = str((meta.get("annotations") or {}).get(GROUP_CLAIM_ANNOTATION) or "")
    if ref is not None and ref.get("kind") == "Pod" and ref.get("apiVersion") == "v1" \
            and group.startswith(f"{GROUP_KEY_PREFIX}{meta.get('namespace') or 'default'}/"):
        return group
    return claim_holder_key(str(meta.get("uid") or object_key(claim)))


def selector_node(allocation: JSON) -> str | None:
    """The node an allocation's ``nodeSelector`` names (one ``metadata.name`` In [x]
    field, or a ``kubernetes.io/hostname`` label), else None."""
    for term in ((allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or ()):
        for kind, key in (("matchFields", "metadata.name"),
                          ("matchExpressions", "kubernetes.io/hostname")):
            for r in term.get(kind) or ():
                vals = r.get("values") or ()
                if r.get("key") == key and r.get("operator") == "In" and len(vals) == 1:
                    return str(vals[0])
    return None


def allocated_devices(claim: JSON, inventory: SliceInventory
                      ) -> tuple[str, tuple[int, ...]] | None:
    """(node, host indices) of an allocated claim's devices of the inventory's driver;
    None when it is not allocated or holds none of them. Raises BadClaim when a
    device cannot be placed on one node."""
    alloc = (claim.get("status") or {}).get("allocation")
    if not alloc:
        return None
    results = [r for r in ((alloc.get("devices") or {}).get("results") or ())
               if r.get("driver") == inventory.driver]
    if not results:
        return None
    node = selector_node(alloc)
    indices: set[int] = set()
    for r in results:
        pool, dev = str(r.get("pool") or ""), str(r.get("device") or "")
        found = inventory.locate(pool, dev)
        if found is not None:
            where, idx = found.node, found.index
        else:
            # not (or no longer) published: NVIDIA's pools are named after the node
            m = _GPU_NAME.match(dev)
            if m is None:
                raise BadClaim(f"device {pool}/{dev} is not published and not gpu-<n>")
            where, idx = node or pool, int(m.group(1))
        if node is None:
            node = where
        if where != node:
            raise BadClaim(f"devices on several nodes ({node}, {where})")
        indices.add(idx)
    assert node is not None
    return node, tuple(sorted(indices))


def claim_holding(claim: JSON, inventory: SliceInventory) -> ClaimHolding | None:
    """What an allocated claim holds now (None: nothing of this driver). A claim
    holds its devices from allocation until the allocation is removed, whether or
    not a pod uses it. Raises BadClaim."""
    found = allocated_devices(claim, inventory)
    if found is None:
        return None
    node, devices = found
    meta = claim.get("metadata") or {}
    uid = str(meta.get("uid") or object_key(claim))
    return ClaimHolding(uid, f"claim {object_key(claim)}", node, devices, 0, claim_owner(claim))


def results_for(inventory: SliceInventory, node: str, devices: Iterable[int],
                request: str) -> list[dict[str, Any]] | None:
    """Allocation results naming ``devices`` of ``node`` (None: one is not published)."""
    out = []
    for d in devices:
        sd = inventory.device(node, d)
        if sd is None:
            return None
        out.append({"request": request, "driver": inventory.driver, "pool": sd.pool,
                    "device": sd.name})
    return out
