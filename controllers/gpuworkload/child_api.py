"""A GPUWorkload's children in the API: listed by attempt, created, asked to go.

``controllers/gpuworkload/children.py`` builds the manifests; this module sends them and reads
them back. Guarantees:

- A child we created counts as there from the moment its create answers, before
  the informer shows it (``OwnWrites.created``): it is never created twice, it
  holds its devices in the ledger once the reconcile's creates are done, all in
  one section (``PlacementState.hold_created``: a preemptor must see it among its
  victims' holders; a Job's pod may come at any moment; until then the workload's
  booking, or the departing hold a preemption leaves, keeps its devices), and
  asking the workload's children to go includes it.
- AlreadyExists adopts our own child of that name and never another's
  (``ChildNameTaken``); a create the API refuses for good ends the attempt
  (``ChildCreateFailed``); anything else is raised for the queue to retry.
- A child's phase is read from what this controller watches: a Job's from its
  pods, never from the Job's counts of them (``phase``).
- Asking is not freeing: children are deleted (Jobs in the foreground, so a Job is
  gone only once its pods are), and their devices stay held until they are gone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import Any

from api.v1alpha1.keys import ATTEMPT_LABEL, INDEX_LABEL
from controllers.gpuworkload.job_pods import pods_of_job
from controllers.gpuworkload.reconcile_outcome import EndAttempt
from controllers.placement.state import PlacementState
from controllers.shared.own_writes import OwnWrites
from controllers.status.conditions import child_phase
from internal import metrics as m
from internal.objects import JSON
from internal.scheduling.pods import controller_ref
from runtime import AlreadyExists, ApiError, Conflict, NotFound
from runtime.store import NODE_NAME_INDEX, Indexer

#: API answers to a create that no retry of the same request can fix
PERMANENT_CREATE_ERRORS = (400, 403, 422)
#: (api version, kind) of the children that hold devices
CHILD_KINDS = (("v1", "Pod"), ("batch/v1", "Job"))


class ChildAPI:
    def __init__(self, client: Any, pods: Indexer, jobs: Indexer,
                 own_writes: OwnWrites) -> None:
        self.client = client
        self.pods = pods
        self.jobs = jobs
        #: children created and not yet seen by the informer (among our other writes)
        self.own_writes = own_writes

    def _cache(self, kind: str) -> Indexer:
        return self.jobs if kind == "Job" else self.pods

    def known(self, uid: str, kind: str) -> list[JSON]:
        """The ``kind`` objects owned by ``uid`` in the cache, plus those we created
        that the cache does not show yet."""
        cached = self._cache(kind).by_index("owner-uid", uid)
        seen = {(o.get("metadata") or {}).get("uid") for o in cached}
        made = [o for o in self.own_writes.children(uid)
                if o.get("kind") == kind and o["metadata"].get("uid") not in seen]
        return [*cached, *made]

    def by_attempt(self, raw: JSON, kind: str, attempt: str) -> tuple[dict[int, JSON], bool]:
        """Our children of this attempt by index, and whether older ones remain
        (or ones of this attempt being deleted)."""
        mine: dict[int, JSON] = {}
        stale = False
        uid = raw["metadata"]["uid"]
        for obj in _controlled_by(uid, self.known(uid, kind)):
            meta = obj.get("metadata") or {}
            labels = meta.get("labels") or {}
            try:
                idx = int(labels.get(INDEX_LABEL, ""))
            except ValueError:
                continue
            if labels.get(ATTEMPT_LABEL, "0") == attempt and not meta.get("deletionTimestamp"):
                mine[idx] = obj
            else:
                stale = True
        return mine, stale

    def phase(self, child: JSON) -> str:
        """The child's phase (``child_phase``); a Job's from the pods it controls, as
        the pod cache shows them (controllers/gpuworkload/job_pods.py)."""
        if child.get("kind") == "Job":
            return child_phase(child, pods_of_job(self.pods, child))
        return child_phase(child)

    def left(self, uid: str) -> list[JSON]:
        """Every Pod and Job that ``uid`` owns and the cache still shows."""
        return [o for cache in (self.pods, self.jobs) for o in cache.by_index("owner-uid", uid)]

    def create(self, obj: dict[str, Any], *, kind_word: str,
               state: PlacementState | None = None,
               held: list[JSON] | None = None) -> JSON | None:
        """Creates ``obj``: None when created now; the existing object when one of
        ours (this workload, this attempt) is already there. Anything else ends the
        attempt with a reason a user can act on. A Pod or Job created holds its
        devices in ``state`` (the reconcile's one state) from then on, or, given
        ``held``, is put there for the caller to hold with its others."""
        meta = obj["metadata"]
        try:
            # a retried create that already went through answers AlreadyExists: handled;
            # the watch may bring the child before this answer (``OwnEchoes``)
            with self.own_writes.creating(meta["ownerReferences"][0]["uid"], obj):
                created = self.client.create(obj, handles_already_exists=True)
            if obj.get("kind") in ("Pod", "Job") and isinstance(created, Mapping):
                m.CHILD_CREATES.labels("created").inc()
                seen = self._cache(obj["kind"]).get_by_name(meta["name"], meta["namespace"])
                if (seen or {}).get("metadata", {}).get("uid") != \
                        (created.get("metadata") or {}).get("uid"):
                    # (not when the informer already showed it: its event came first)
                    self.own_writes.created(meta["ownerReferences"][0]["uid"], created)
                # it holds its devices from now on, before the cache shows it
                if held is not None:
                    held.append(dict(created))
                elif state is not None:
                    state.hold_created([dict(created)])
            return None
        except AlreadyExists:
            if obj.get("kind") in ("Pod", "Job"):
                m.CHILD_CREATES.labels("already_exists").inc()
            existing = self._get(obj)
            ours = obj["metadata"]["ownerReferences"][0]["uid"]
            ref = controller_ref(existing) if existing is not None else None
            if existing is None or ref is None or ref.get("uid") != ours:
                raise EndAttempt(
                    "ChildNameTaken",
                    f"{kind_word} {meta['name']} already exists and is not owned by this "
                    f"workload; delete or rename it") from None
            return existing
        except ApiError as exc:
            if exc.status in PERMANENT_CREATE_ERRORS:
                raise EndAttempt("ChildCreateFailed",
                                 f"cannot create {kind_word} {meta['name']}: "
                                 f"{exc.message or exc}") from None
            raise

    def _get(self, obj: JSON) -> JSON | None:
        meta = obj["metadata"]
        try:
            return self.client.get(obj["apiVersion"], obj["kind"], meta["name"],
                                   namespace=meta["namespace"])
        except NotFound:
            return None

    def delete(self, raw: JSON, *, keep_attempt: str | None = None,
               only_unfinished: bool = False) -> None:
        """Asks our children to go (Jobs in the foreground, so a Job is gone only
        when its pod is), those created and not in the cache yet included. Their
        devices stay held until they are gone (a Job's until the Job is).

        Each is deleted as we know it (its uid and resourceVersion are preconditions):
        a child the API has moved on from is left for the next reconcile, when the
        cache shows it. So a pod the garbage collector orphaned (``--cascade=orphan``
        took its ownerReference away) before our pod informer showed that is never
        deleted as ours, whichever of the workload's and the pod's events came first;
        a refused delete is retried on the child's own update, which wakes us."""
        uid = raw["metadata"]["uid"]
        for api, kind in CHILD_KINDS:
            for obj in _controlled_by(uid, self.known(uid, kind)):
                meta = obj.get("metadata") or {}
                if keep_attempt is not None and \
                        (meta.get("labels") or {}).get(ATTEMPT_LABEL, "0") == keep_attempt:
                    continue
                if only_unfinished and child_phase(obj) in ("Succeeded", "Failed"):
                    continue
                if meta.get("deletionTimestamp"):
                    continue
                with contextlib.suppress(NotFound, Conflict):
                    self.client.delete(api, kind, meta["name"], namespace=meta["namespace"],
                                       propagation_policy="Foreground" if kind == "Job"
                                       else "Background", preconditions=_as_known(meta))

    def force_delete_on(self, raw: JSON, nodes: list[str]) -> None:
        """Our pods on nodes that are gone: no kubelet will ever confirm their graceful
        deletion, so delete them at once (as the pod GC would, later), freeing their
        deterministic names for the next attempt."""
        uid = raw["metadata"]["uid"]
        for node in nodes:
            for pod in _controlled_by(uid, self.pods.by_index(NODE_NAME_INDEX, node)):
                meta = pod.get("metadata") or {}
                with contextlib.suppress(NotFound):
                    self.client.delete("v1", "Pod", meta["name"], namespace=meta["namespace"],
                                       grace_period_seconds=0)


def _as_known(meta: JSON) -> dict[str, str] | None:
    """Delete preconditions: the object as we know it (None if we know no version)."""
    pre = {k: meta[k] for k in ("uid", "resourceVersion") if meta.get(k)}
    return pre or None


def _controlled_by(uid: str, objs: Iterable[JSON]) -> list[JSON]:
    """The objects whose controller ownerReference is ``uid`` (ownership is never a
    label)."""
    return [o for o in objs if (controller_ref(o) or {}).get("uid") == uid]
