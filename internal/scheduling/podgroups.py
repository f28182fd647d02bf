"""Which group a pod belongs to: the pods of another controller (a JobSet, a
LeaderWorkerSet group, an Indexed Job) or pods labelled as one group, placed all or
nothing (docs/podgroups.md). Pure: the owners are read through the ``owners``
callable handed in (an informer's cache, a client, or none).

:func:`pod_group` answers, for one pod, first match wins:

=================== ============================================ ============================
source              the pod carries                              size from
=================== ============================================ ============================
``label``           label ``gpu.orchestrator.dev/pod-group``     its ``pod-group-size`` annot.
``kueue``           label ``kueue.x-k8s.io/pod-group-name``      ``pod-group-total-count``
``jobset``          label ``jobset.sigs.k8s.io/jobset-name``     the JobSet (owner lookup)
``leaderworkerset`` LWS label ``name`` (and ``group-index``)    LWS annotation ``size``
``job``             a controlling Indexed Job (owner lookup)     parallelism == completions
=================== ============================================ ============================

A JobSet is one group per restart attempt; under ``InOrder`` or ``dependsOn``
``status: Ready`` its later replicated jobs are made only once the earlier ones are
ready, so the group says which members are made first (``PodGroup.first``), at
which it is placed whole; with a ``status: Complete`` dependency (run one after the
other) it is one group per replicated job.

:func:`pod_group` returns a :class:`PodGroup`, ``None`` (in no group: placed as one
pod), or a :class:`GroupRefusal` (the pod says it is in a group whose size cannot be
read; the caller records the refusal's ``reason`` as an Event and places nothing of
it).
:func:`disagreement` refuses a group whose members say different sizes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from api.v1alpha1.keys import POD_GROUP_LABEL, POD_GROUP_SIZE_ANNOTATION
from internal.objects import JSON
from internal.scheduling.podindex import POD_INDEX_LABEL

#: an owner by (apiVersion, kind, namespace, name), or None when it is not there
OwnerLookup = Callable[[str, str, str, str], JSON | None]

KUEUE_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_COUNT_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
# JobSet: sigs.k8s.io/jobset api/jobset/v1alpha2/jobset_types.go (JobSetNameKey,
# JobSetUIDKey, ReplicatedJobNameKey, JobIndexKey) and pkg/constants (RestartsKey)
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID_LABEL = "jobset.sigs.k8s.io/jobset-uid"
JOBSET_RESTART_LABEL = "jobset.sigs.k8s.io/restart-attempt"
JOBSET_REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
# LeaderWorkerSet: sigs.k8s.io/lws api/leaderworkerset/v1/leaderworkerset_types.go
LWS_API = "leaderworkerset.x-k8s.io/v1"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_SIZE_ANNOTATION = "leaderworkerset.sigs.k8s.io/size"
LWS_REVISION_LABEL = "leaderworkerset.sigs.k8s.io/template-revision-hash"
LWS_LEADER_READY = "LeaderReady"
# batch/v1 Job
JOB_COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"

#: the most members a group may have (a larger size is refused as unreadable)
MAX_GROUP_SIZE = 10000
#: Event reasons of a refusal
SIZE_UNREADABLE = "PodGroupSizeUnreadable"
SIZES_DISAGREE = "PodGroupSizesDisagree"

_NUMBER = re.compile(r"0|[1-9][0-9]{0,8}", re.ASCII)


@dataclass(frozen=True)
class LaterPart:
    """Members ``start`` <= index < ``stop`` of a group, made by their owner only once
    those made first are ready, each with the pod ``spec`` of their template."""

    start: int
    stop: int
    spec: Mapping[str, Any] = field(compare=False, hash=False)
    #: a ``dra`` member's GPUs, read from the ResourceClaimTemplates its ``spec``
    #: names (set by the pod binding for its plan: ``memberclaims.read_slot``)
    dra_gpus: int | None = field(default=None, compare=False, hash=False)


@dataclass(frozen=True)
class PodGroup:
    """A pod's group. ``key`` (``<namespace>/<source>:<name>``) is the same for every
    member and names no other group in the cluster; ``size`` is the members it
    needs, read from ``size_from`` (in words); ``index`` is this member's place in
    the group (0..size-1) when its controller says one. ``leader_first``: the
    member of index 0 is made alone and the others only once it is ready (a
    LeaderWorkerSet with ``startupPolicy: LeaderReady``). ``generation``: the
    owner's revision of the group where its key does not say it (a LeaderWorkerSet's
    template revision, a JobSet's uid): a member of another generation never takes a slot that a
    member of this one left. ``made_first``: the member indices (``[start, stop)``
    ranges) its owner makes before the others, which it makes only once these are
    ready (a JobSet's first replicated job under ``InOrder``, those without
    ``dependsOn``), said in words by ``staged_by``; () for a group made at once.
    ``later``: of a group placed before all its members exist (``first``), the pod
    spec each member not made yet will have, read from its owner's template (a
    replicated job's, an LWS worker's): where it goes and what it asks is its own."""

    key: str
    size: int
    source: str
    size_from: str
    index: int | None = None
    leader_first: bool = False
    generation: str = ""
    later: tuple[LaterPart, ...] = field(default=(), compare=False)
    made_first: tuple[tuple[int, int], ...] = ()
    staged_by: str = ""

    def later_spec(self, index: int) -> Mapping[str, Any] | None:
        """The pod spec of member ``index`` when it is one made later, else None."""
        part = self.later_part(index)
        return None if part is None else part.spec

    def later_part(self, index: int) -> LaterPart | None:
        """The ``LaterPart`` of member ``index`` when it is one made later, else None."""
        return next((p for p in self.later if p.start <= index < p.stop), None)

    @property
    def first(self) -> tuple[tuple[int, int], ...]:
        """The index ranges made first, once which the whole group is placed (its
        leader under ``leader_first``); () when every member is made at once."""
        return self.made_first or (((0, 1),) if self.leader_first else ())


@dataclass(frozen=True)
class GroupRefusal:
    """The pod says it is in a group, which cannot be formed: ``reason`` is the
    Event's reason, ``message`` says why in words; ``key`` when the group is known."""

    source: str
    reason: str
    message: str
    key: str | None = None


def _meta(obj: JSON) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _strings(obj: JSON, field: str) -> Mapping[str, Any]:
    value = _meta(obj).get(field)
    return value if isinstance(value, Mapping) else {}


def _count(value: Any) -> int | None:
    """A non-negative integer written as JSON number or decimal string, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        return int(value.strip())
    return None


def _size(value: Any, source: str, key: str, what: str) -> int | GroupRefusal:
    n = _count(value)
    if n is None or not 1 <= n <= MAX_GROUP_SIZE:
        shown = "missing" if value is None else repr(str(value)[:40])
        return GroupRefusal(source, SIZE_UNREADABLE,
                            f"pod group {key}: {what} is {shown}, not a member count "
                            f"from 1 to {MAX_GROUP_SIZE}", key)
    return n


def pod_group(pod: JSON, owners: OwnerLookup | None = None) -> PodGroup | GroupRefusal | None:
    """The group of ``pod`` (see the module's table), or None when it is in none."""
    labels, annotations = _strings(pod, "labels"), _strings(pod, "annotations")
    ns = str(_meta(pod).get("namespace") or "default")
    for label, annotation, source in (
            (POD_GROUP_LABEL, POD_GROUP_SIZE_ANNOTATION, "label"),
            (KUEUE_GROUP_LABEL, KUEUE_COUNT_ANNOTATION, "kueue")):
        if labels.get(label):
            return _labelled(ns, labels, annotations, label, annotation, source)
    if labels.get(JOBSET_NAME_LABEL):
        return _jobset(ns, labels, owners)
    if labels.get(LWS_NAME_LABEL):
        return _leaderworkerset(ns, labels, annotations, owners)
    return _indexed_job(pod, ns, labels, owners)


def _member_index(labels: Mapping[str, Any]) -> int | None:
    return _count(labels.get(JOB_COMPLETION_INDEX_LABEL, labels.get(POD_INDEX_LABEL)))


def _labelled(ns: str, labels: Mapping[str, Any], annotations: Mapping[str, Any],
              label: str, annotation: str, source: str) -> PodGroup | GroupRefusal:
    key = f"{ns}/{source}:{labels[label]}"
    size = _size(annotations.get(annotation), source, key, f"annotation {annotation}")
    if isinstance(size, GroupRefusal):
        return size
    return PodGroup(key, size, source, f"annotation {annotation}", _member_index(labels))


def _pods_per_job(template: Any) -> int:
    """Pods a Job of this template runs at once: parallelism (default 1), at most
    its completions when it sets them."""
    spec = template.get("spec") if isinstance(template, Mapping) else None
    spec = spec if isinstance(spec, Mapping) else {}
    parallelism = _count(spec.get("parallelism", 1))
    parallelism = 1 if parallelism is None else parallelism
    completions = _count(spec.get("completions"))
    return parallelism if completions is None else min(parallelism, completions)


def _jobset(ns: str, labels: Mapping[str, Any], owners: OwnerLookup | None
            ) -> PodGroup | GroupRefusal:
    name = str(labels[JOBSET_NAME_LABEL])
    attempt = _count(labels.get(JOBSET_RESTART_LABEL, "0"))
    base = f"{ns}/jobset:{name}"
    if attempt is None:
        return GroupRefusal("jobset", SIZE_UNREADABLE,
                            f"pod group {base}: label {JOBSET_RESTART_LABEL}="
                            f"{str(labels[JOBSET_RESTART_LABEL])[:40]!r} is not a restart "
                            f"attempt", base)
    key = f"{base}:{attempt}"
    jobset = owners(JOBSET_API, "JobSet", ns, name) if owners is not None else None
    uid = labels.get(JOBSET_UID_LABEL)
    if jobset is not None and uid and _meta(jobset).get("uid") != uid:
        jobset = None  # the JobSet of that name is another one, made since
    if jobset is None:
        return GroupRefusal("jobset", SIZE_UNREADABLE,
                            f"pod group {key}: JobSet {ns}/{name} cannot be read, so "
                            f"its size is unknown", key)
    spec = jobset.get("spec") if isinstance(jobset.get("spec"), Mapping) else {}
    jobs = [j for j in spec.get("replicatedJobs") or [] if isinstance(j, Mapping)]
    phase_of, made_first, staged_by = _phases(spec, jobs)
    rj_name = labels.get(JOBSET_REPLICATED_JOB_LABEL)
    if str(rj_name) not in phase_of:
        return GroupRefusal("jobset", SIZE_UNREADABLE,
                            f"pod group {key}: JobSet {ns}/{name} has no replicated job "
                            f"{str(rj_name)[:63]!r}, the pod's label "
                            f"{JOBSET_REPLICATED_JOB_LABEL}", key)
    phase = phase_of[str(rj_name)]
    mine = [j for j in jobs if phase_of[str(j.get("name"))] == phase]
    key = f"{key}:{phase}" if phase else key
    offset = 0
    index: int | None = None
    first: list[tuple[int, int]] = []
    later: list[LaterPart] = []
    for job in mine:
        replicas = _count(job.get("replicas", 1))
        replicas = 1 if replicas is None else replicas
        per_job = _pods_per_job(job.get("template"))
        if job.get("name") == rj_name:
            job_index = _count(labels.get(JOBSET_JOB_INDEX_LABEL))
            within = _count(labels.get(JOB_COMPLETION_INDEX_LABEL, "0"))
            if job_index is not None and within is not None:
                index = offset + job_index * per_job + within
        if replicas * per_job and job.get("name") in made_first:
            first.append((offset, offset + replicas * per_job))
        elif replicas * per_job:
            later.append(LaterPart(offset, offset + replicas * per_job,
                                   _template_spec(job.get("template"))))
        offset += replicas * per_job
    checked = _size(offset, "jobset", key, f"the JobSet's replicas x pods per Job ({offset})")
    if isinstance(checked, GroupRefusal):
        return checked
    what = (f"JobSet {name}: sum of replicas x pods per Job" if not phase
            else f"JobSet {name} replicated job {rj_name}: replicas x pods per Job"
            if len(mine) == 1 else
            f"JobSet {name} replicated jobs {', '.join(str(j.get('name')) for j in mine)} "
            f"(made once {phase} is): sum of replicas x pods per Job")
    staged = bool(later) and bool(first)
    return PodGroup(key, checked, "jobset", what,
                    index if index is not None and index < checked else None,
                    later=tuple(later) if staged else (),
                    made_first=tuple(first) if staged else (),
                    staged_by=staged_by if staged else "",
                    generation=str(uid or ""))


def _phases(spec: Mapping[str, Any], jobs: list[Mapping[str, Any]]
            ) -> tuple[dict[str, str], frozenset[str], str]:
    """Each replicated job's *phase* (the name its group key ends in; "" when the
    whole JobSet is one group), the replicated jobs made first in their phase, and
    in words what makes the others of a phase wait for them to be ready.

    A JobSet makes its replicated jobs together, or in order (``InOrder``), or
    each once those it ``dependsOn`` are Ready: one phase, placed whole once its
    members made first exist. A replicated job made only once another has
    *completed* (``dependsOn`` ``status: Complete``) runs after it, never beside it:
    it starts a phase of its own, with the replicated jobs made once it is Ready."""
    startup = spec.get("startupPolicy") if isinstance(spec.get("startupPolicy"), Mapping) else {}
    names = [str(j.get("name")) for j in jobs]
    if startup.get("startupPolicyOrder") == "InOrder":
        return dict.fromkeys(names, ""), frozenset(names[:1]), "startupPolicy InOrder"
    deps = {str(j.get("name")): [d for d in j.get("dependsOn") or () if isinstance(d, Mapping)]
            for j in jobs}
    ready = {n: [str(d.get("name")) for d in ds if d.get("status") == "Ready"]
             for n, ds in deps.items()}
    first = frozenset(n for n in names if not ready[n])
    if all(d.get("status") == "Ready" for ds in deps.values() for d in ds):
        return dict.fromkeys(names, ""), first, "dependsOn status Ready"
    root = {n: n for n in names}  # each phase named by its earliest replicated job

    def find(n: str) -> str:
        while root[n] != n:
            n = root[n]
        return n
    for n in names:
        for d in ready[n]:
            if d in root:
                a, b = sorted((find(n), find(d)), key=names.index)
                root[b] = a
    return {n: find(n) for n in names}, first, "dependsOn status Ready"


def _leaderworkerset(ns: str, labels: Mapping[str, Any], annotations: Mapping[str, Any],
                     owners: OwnerLookup | None) -> PodGroup | GroupRefusal:
    name = str(labels[LWS_NAME_LABEL])
    group = _count(labels.get(LWS_GROUP_INDEX_LABEL))
    if group is None:
        key = f"{ns}/leaderworkerset:{name}"
        raw = labels.get(LWS_GROUP_INDEX_LABEL)
        said = "is missing" if raw is None else f"is {str(raw)[:40]!r}, not a group index"
        return GroupRefusal("leaderworkerset", SIZE_UNREADABLE,
                            f"pod group {key}: label {LWS_GROUP_INDEX_LABEL} {said}", key)
    key = f"{ns}/leaderworkerset:{name}:{group}"
    size = _size(annotations.get(LWS_SIZE_ANNOTATION), "leaderworkerset", key,
                 f"annotation {LWS_SIZE_ANNOTATION}")
    if isinstance(size, GroupRefusal):
        return size
    lws = owners(LWS_API, "LeaderWorkerSet", ns, name) if owners is not None else None
    spec = lws.get("spec") if lws is not None else None
    leader_first = isinstance(spec, Mapping) and spec.get("startupPolicy") == LWS_LEADER_READY
    worker = _count(labels.get(LWS_WORKER_INDEX_LABEL))
    return PodGroup(key, size, "leaderworkerset", f"annotation {LWS_SIZE_ANNOTATION}",
                    worker if worker is not None and worker < size else None, leader_first,
                    str(labels.get(LWS_REVISION_LABEL) or ""),
                    (LaterPart(1, size, _worker_spec(spec)),) if leader_first and size > 1
                    else ())


def _worker_spec(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    """The pod spec of a LeaderWorkerSet's worker template ({} when unreadable)."""
    lwt = spec.get("leaderWorkerTemplate")
    return _pod_spec(lwt.get("workerTemplate") if isinstance(lwt, Mapping) else None)


def _template_spec(job_template: Any) -> Mapping[str, Any]:
    """The pod spec of a JobSet replicated job's Job template ({} when unreadable)."""
    spec = job_template.get("spec") if isinstance(job_template, Mapping) else None
    return _pod_spec(spec.get("template") if isinstance(spec, Mapping) else None)


def _pod_spec(template: Any) -> Mapping[str, Any]:
    """The spec of a pod template ({} when unreadable)."""
    spec = template.get("spec") if isinstance(template, Mapping) else None
    return spec if isinstance(spec, Mapping) else {}


def _indexed_job(pod: JSON, ns: str, labels: Mapping[str, Any], owners: OwnerLookup | None
                 ) -> PodGroup | None:
    if owners is None or JOB_COMPLETION_INDEX_LABEL not in labels:
        return None
    refs = _meta(pod).get("ownerReferences")
    ref = next((r for r in refs or [] if isinstance(r, Mapping) and r.get("controller")
                and r.get("kind") == "Job" and r.get("apiVersion") == "batch/v1"), None)
    if ref is None:
        return None
    job = owners("batch/v1", "Job", ns, str(ref.get("name")))
    if job is None or _meta(job).get("uid") != ref.get("uid"):
        return None
    spec = job.get("spec") if isinstance(job.get("spec"), Mapping) else {}
    parallelism, completions = _count(spec.get("parallelism", 1)), _count(spec.get("completions"))
    if (spec.get("completionMode") != "Indexed" or completions is None
            or parallelism != completions or not 2 <= completions <= MAX_GROUP_SIZE):
        return None
    index = _count(labels.get(JOB_COMPLETION_INDEX_LABEL))
    return PodGroup(f"{ns}/job:{ref.get('name')}", completions, "job",
                    f"Job {ref.get('name')}: parallelism (= completions)",
                    index if index is not None and index < completions else None)


def disagreement(members: Iterable[PodGroup]) -> GroupRefusal | None:
    """A refusal when members of one group say different sizes (an explicit or Kueue
    group labelled by hand, an LWS group across a change of its size), else None."""
    seen = list(members)
    sizes = sorted({m.size for m in seen})
    if len(sizes) < 2:
        return None
    key, source = seen[0].key, seen[0].source
    said = ", ".join(f"{s} ({sum(m.size == s for m in seen)} member(s))" for s in sizes)
    return GroupRefusal(source, SIZES_DISAGREE,
                        f"pod group {key}: its members say different sizes: {said}; no "
                        f"member is placed until they agree", key)
