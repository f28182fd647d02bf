"""The allocation ledger: who holds which GPU of which node, read from the API.

``DeviceLedger`` (``ledger_core.py``, over the holders' tables of
``holdings.py``) keeps the device arithmetic and the invariants it keeps
(docs/architecture.md, invariants 1 to 4); ``Ledger`` here reads API objects into
it: a pod (``sync_pod``), a Job of ours (``sync_job``), any holder read by a
function (``sync``: an allocated ResourceClaim), and the whole cache (``rebuild``:
pods and Jobs first, what runs wins, then committed placements,
``book_placements``, then the nominations of preemptors still waiting,
``book_nominations``). A holder that cannot be read is a problem to report, never
an exception.

Everything callers use of the ledger is importable from here.

Not thread-safe: callers serialize schedule + assume (one lock in the controller).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from api.v1alpha1.keys import DEVICES_ANNOTATION
from api.v1alpha1.types import GPUWorkload, Phase
from internal.objects import object_key
from internal.scheduling.freeindex import FreeIndex
from internal.scheduling.holdings import DEPARTING, Allocation, is_departing
from internal.scheduling.jobs import job_holder_key, job_holding, job_uid
from internal.scheduling.ledger_core import DeviceLedger, LedgerConflict
from internal.scheduling.pods import (
    BadPod,
    BadShare,
    PodHolding,
    child_owner,
    is_controller_pod,
    labelled_owner,
    pod_gpu_request,
    pod_holding,
    pod_is_active,
    pod_owner,
    workload_owner,
)

__all__ = [
    "DEPARTING",
    "Allocation",
    "DeviceLedger",
    "FreeIndex",
    "Ledger",
    "LedgerConflict",
    "booking_owner",
    "departing_key",
    "holds_devices",
    "is_controller_pod",
    "is_departing",
    "pod_gpu_request",
    "pod_is_active",
]


def departing_key(key: str) -> str:
    """The key (and name) of what workload ``key`` held on to after its booking was
    released while its children may still be made or still run (``Ledger.depart``)."""
    return f"{DEPARTING}{key}"


def booking_owner(w: GPUWorkload) -> str:
    """The owner of a workload's booking for its current attempt."""
    return workload_owner(w.metadata.uid or w.key, w.status.retries)


class Ledger(DeviceLedger):
    """The ledger: the device arithmetic, with API objects read into it."""

    def depart(self, key: str) -> Allocation | None:
        """Release the booking ``key`` of a workload whose children may still exist or
        still be being made (a preemption's victim, a deleted workload, an ended
        attempt): what it booked is held on under ``departing_key(key)``, a holding
        of the same owner, until ``release_departed`` (the workload's own reconcile
        found none of its children left). Until then nobody else is given those
        devices, whatever the cache shows of its pods: a pod still being created, or
        created and not yet seen, would otherwise stand on devices given to another
        workload (docs/architecture.md, invariant 3). A nomination over the owner
        waits for it as for the owner's pods. Returns the released booking."""
        a = self.allocation(key)
        if a is None or a.holder:
            return None
        self.forget(key)
        held = self.allocation(departing_key(key))
        if held is not None:  # departed before: keep both (one owner holds both)
            self.remove_holder(held.key)
        placements = tuple(a.placements) + tuple(
            p for p in (held.placements if held is not None else ()) if p not in a.placements)
        counted = dict(a.counted)
        for node, n in (held.counted.items() if held is not None else ()):
            counted[node] = max(counted.get(node, 0), n)
        hold = Allocation(departing_key(key), placements, counted, a.priority, True,
                          a.gpus_per_replica, a.owner, holder=True,
                          name=departing_key(a.name), uid=a.uid)
        self._apply(hold)  # what it booked: nothing to check
        return a

    def release_departed(self, key: str) -> bool:
        """Workload ``key``'s children are gone: its departing holding goes. True
        if there was one."""
        return self.remove_holder(departing_key(key))

    def sync_job(self, job: Mapping[str, Any]) -> list[str]:
        """Brings the ledger in line with one Job as the API has it now (``sync``; a
        Job with a malformed annotation holds nothing: its pod, once made, is counted
        by its request)."""
        return self.sync(job_holder_key(job_uid(job)), lambda: job_holding(job),
                         f"job {object_key(job)}")

    def sync(self, key: str, read: Callable[[], PodHolding | None], what: str) -> list[str]:
        """Brings the ledger in line with one holder (a Job, an allocated claim) as
        the API has it now; never refused. ``read`` says what it holds (None:
        nothing), or raises ValueError when that cannot be read; it then holds
        nothing here. Returns problems for a report: what could not be read (as
        ``what: error``), or the conflicts it makes with other owners."""
        try:
            h = read()
        except BadShare as exc:  # its share unreadable: its devices held whole
            return [f"{what}: {exc}", *self.set_pod(exc.holding)]
        except ValueError as exc:
            self.remove_holder(key)
            return [f"{what}: {exc}"]
        if h is None:
            self.remove_holder(key)
            return []
        return [f"{h.name}: {c}" for c in self.set_pod(h)]

    # ------------------------------------------------------------------ rebuild

    @classmethod
    def rebuild(
        cls,
        workloads: Iterable[GPUWorkload | Mapping[str, Any]],
        pods: Iterable[Mapping[str, Any]] = (),
        node_devices: Mapping[str, Iterable[int]] | None = None,
        *,
        jobs: Iterable[Mapping[str, Any]] = (),
        placements: bool = True,
        nominations: bool = True,
        into: Ledger | None = None,
    ) -> tuple[Ledger, list[str]]:
        """A ledger from the cache: first every pod and every Job of ours that holds
        GPUs (what runs wins; an orphan known by its child labels, ``sync_pod``),
        then (with ``placements``) the committed placements of workloads that still
        hold devices (``book_placements``), then (with ``nominations``) those placed
        by preemption, nominated again over the holders they wait for
        (``book_nominations``). A caller that has more holders to book (allocated
        claims, the seed path's bound pods) passes False for both and calls them
        after booking those: a status is a decision that may be stale (a write the
        previous process never made), a holder is what runs.

        ``into``: an empty ledger that already knows its nodes (``Snapshot.attach``):
        a pod that takes its node past its devices is then found over-committing as
        it is booked, as its event would find it (with no node known, no pod is).

        Returns the ledger and the problems found: unreadable pods (skipped, their
        request still counted where it can be read), placements that collide with
        running pods or an earlier placement (not booked: their workload's own
        reconcile ends that attempt). Never raises on a bad object.
        """
        ledger = into if into is not None else cls()
        for node, devs in (node_devices or {}).items():
            ledger.set_node_devices(node, devs)
        problems: list[str] = []
        # oldest first, as they came: the later of two holders is the one a conflict
        # or an over-commit is reported on (``set_pod``), after a restart as before it
        for pod in sorted(pods, key=_created):
            problems += ledger.sync_pod(pod, rebuilding=True)
        for job in jobs:
            problems += ledger.sync_job(job)
        parsed: list[GPUWorkload] = []
        for raw in workloads:
            w, problem = _parse_workload(raw)
            if problem:
                problems.append(problem)
            if w is not None:
                parsed.append(w)
        if placements:
            problems += ledger.book_placements(parsed)
        if nominations:
            problems += ledger.book_nominations(parsed)
        return ledger, problems

    def book_placements(
        self, workloads: Iterable[GPUWorkload | Mapping[str, Any]],
    ) -> list[str]:
        """Books the committed placements (``status.placements``) of ``workloads``
        that still hold devices and wait for nobody (a nomination is
        ``book_nominations``'), oldest workload first, after every holder: one that
        collides with another owner's holding is not booked (a problem; its
        workload's own reconcile ends that attempt). Unreadable workloads are
        reported by ``rebuild``, not here."""
        problems: list[str] = []
        parsed = [w for w in (_parse_workload(raw)[0] for raw in workloads) if w is not None]
        for w in _by_age(parsed):
            if not holds_devices(w) or w.status.nominated_over or \
                    self.allocation(w.key) is not None:
                continue
            try:
                self.assume(w.key, w.status.placements, gpus_per_replica=w.spec.gpus,
                            priority=w.spec.priority, committed=True, check_capacity=False,
                            owner=booking_owner(w), uid=w.metadata.uid or "")
            except LedgerConflict as e:
                problems.append(f"{w.key}: placement not booked: {e}")
        return problems

    def book_nominations(
        self, workloads: Iterable[GPUWorkload | Mapping[str, Any]],
    ) -> list[str]:
        """Books, after every other holder, the placements of ``workloads`` that
        wait for what they preempted (``status.nominatedOver``): nominated over those
        owners again, so that a restart neither ends their attempt nor lets anybody
        else take the devices. Booked last, a nomination never displaces a holder:
        one that collides with another owner is not booked (a problem)."""
        problems: list[str] = []
        parsed = [w for w in (_parse_workload(raw)[0] for raw in workloads) if w is not None]
        for w in _by_age(parsed):
            if not holds_devices(w) or not w.status.nominated_over or \
                    self.allocation(w.key) is not None:
                continue
            try:
                self.assume(w.key, w.status.placements, gpus_per_replica=w.spec.gpus,
                            priority=w.spec.priority, committed=True, check_capacity=False,
                            owner=booking_owner(w), uid=w.metadata.uid or "",
                            overlap=w.status.nominated_over)
            except LedgerConflict as e:
                problems.append(f"{w.key}: nominated placement not booked: {e}")
        return problems

    def sync_pod(self, pod: Mapping[str, Any], priority: int = 0, *,
                 rebuilding: bool = False) -> list[str]:
        """Brings the ledger in line with one pod as the API has it now. Returns
        problems (a malformed annotation: the pod's request is still counted).

        A bound pod keeps the devices it was first seen with: nobody of ours edits the
        annotation afterwards, so an edit (``kubectl annotate --overwrite``, which the
        pod-devices policy refuses) neither books more nor releases any.

        A pod booked as a workload attempt's (its controller a GPUWorkload, or a Job
        of ours) stays that attempt's pod in ``Allocation.child_of`` when it is
        orphaned (``--cascade=orphan`` takes its ownerReference away, and it becomes
        its own owner): a pod our controller created is ours whoever owns it now, and
        the intruder check (controllers/gpuworkload/intruders.py) tells it from a pod
        that forged our annotation by that. ``rebuilding``: the ledger never saw the
        pod before (a manager's start), so a pod of nobody's that carries a workload's
        child labels is taken for that workload's orphan."""
        uid = str((pod.get("metadata") or {}).get("uid") or object_key(pod))
        old = self.pod(uid)
        child_of = (old.child_of if old is not None else "") or child_owner(pod) or (
            labelled_owner(pod) if rebuilding else "")
        return self._sync_pod(pod, uid, priority, child_of)

    def _sync_pod(self, pod: Mapping[str, Any], uid: str, priority: int,
                  child_of: str) -> list[str]:
        given = self._given(pod, uid)
        try:
            h = pod_holding(pod)
        except BadPod as exc:
            # what it names cannot be read; what it requests the device plugin gave it
            # (a share that cannot be read: its devices, held whole)
            h = exc.holding if isinstance(exc, BadShare) else _requested_only(pod, uid)
            if given is not None and not isinstance(exc, BadShare):
                h = PodHolding(uid, object_key(pod), given[0], given[1],
                               max(0, pod_gpu_request(pod) - len(given[1])), pod_owner(pod))
            if h is None:
                self.remove_pod(uid)
            else:
                self.set_pod(h, priority, child_of=child_of)
            return [f"pod {object_key(pod)}: {exc}"]
        if given is not None and (h is None or h.devices != given[1]):
            now = ",".join(map(str, h.devices)) if h is not None and h.devices else "nothing"
            problem = (f"pod {object_key(pod)}: annotation {DEVICES_ANNOTATION} changed to {now} "
                       f"after it was given {','.join(map(str, given[1]))}; it keeps "
                       "holding those")
            h = PodHolding(uid, object_key(pod), given[0], given[1],
                           max(0, pod_gpu_request(pod) - len(given[1])), pod_owner(pod))
            return [problem] + [f"pod {h.name}: {c}"
                                for c in self.set_pod(h, priority, child_of=child_of)]
        if h is None:
            self.remove_pod(uid)
            return []
        return [f"pod {h.name}: {c}" for c in self.set_pod(h, priority, child_of=child_of)]

    def _given(self, pod: Mapping[str, Any], uid: str) -> tuple[str, tuple[int, ...]] | None:
        """(node, devices) a bound, unfinished pod was first seen holding by name,
        where it still runs; None when it held none."""
        node = (pod.get("spec") or {}).get("nodeName")
        old = self.pod(uid)
        if not node or not pod_is_active(pod) or old is None or not old.placements:
            return None
        first = old.placements[0]
        return (first.node, tuple(first.devices)) if first.devices and first.node == node \
            else None


# -------------------------------------------------------------------- helpers


def _requested_only(pod: Mapping[str, Any], uid: str) -> PodHolding | None:
    """A bound, unfinished pod whose devices annotation is unreadable holds its
    ``nvidia.com/gpu`` request, counted (None when it requests none)."""
    node = (pod.get("spec") or {}).get("nodeName")
    gpus = pod_gpu_request(pod)
    if not node or not gpus or not pod_is_active(pod):
        return None
    return PodHolding(uid, object_key(pod), str(node), (), gpus, pod_owner(pod))


def _parse_workload(
    raw: GPUWorkload | Mapping[str, Any],
) -> tuple[GPUWorkload | None, str]:
    """A workload for the rebuild. An object whose spec no longer validates still
    holds what its status says: keep its placements (never lose a booking)."""
    if isinstance(raw, GPUWorkload):
        return raw, ""
    try:
        return GPUWorkload.model_validate(raw), ""
    except ValidationError as e:
        meta = raw.get("metadata") or {}
        status = raw.get("status") or {}
        spec = raw.get("spec") or {}
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
        why = e.errors()[0].get("msg", str(e)) if e.errors() else str(e)
        try:
            gpus = spec.get("gpusPerReplica") or spec.get("gpuCount") or 1
            w = GPUWorkload.model_validate(
                {
                    "metadata": meta,
                    "spec": {"gpusPerReplica": int(gpus)},
                    "status": {
                        "phase": status.get("phase") or "Pending",
                        "placements": status.get("placements") or [],
                        "retries": status.get("retries") or 0,
                        "nominatedOver": status.get("nominatedOver") or [],
                    },
                }
            )
        except (ValidationError, TypeError, ValueError):
            return None, f"{key}: unreadable, ignored: {why}"
        return w, f"{key}: invalid spec, placements kept: {why}"


def _created(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("creationTimestamp") or ""), object_key(obj)


def _by_age(workloads: Iterable[GPUWorkload]) -> list[GPUWorkload]:
    return sorted(workloads, key=lambda w: (w.metadata.creation_timestamp or "", w.key))


def holds_devices(w: GPUWorkload) -> bool:
    """Does this workload's committed placement still book devices? (Not once it
    finished or is being deleted: then only its pods hold what they hold.)"""
    if not w.status.placements or w.metadata.deletion_timestamp:
        return False
    return w.status.phase not in (Phase.SUCCEEDED, Phase.FAILED)
