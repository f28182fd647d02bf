"""What the pod-group unit tests share: the pod binding on an in-memory cache, a
fake client and the real PlacementState (``GroupEnv``, test_podbinding's ``Env``
on 4 named nodes), one whose owner lookup serves one JobSet or LeaderWorkerSet
(``OwnedEnv``), and the members as their controllers make them (``member``,
``jobset_member``, ``lws_member``).

A Binding is what the pod binding writes; what the cache then shows is the API
server's and the kubelet's part, done here by ``show_binding``/``show_bindings``
(``bound_as``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from api.v1alpha1.keys import DEVICE_AUTHORITY_LABEL
from controllers.podbinding.controller import PodBindingOptions, PodBindingReconciler
from controllers.podbinding.seedbook import GROUP_SLOTS_ANNOTATION
from internal.scheduling.podgroups import (
    JOB_COMPLETION_INDEX_LABEL,
    JOBSET_JOB_INDEX_LABEL,
    JOBSET_NAME_LABEL,
    JOBSET_REPLICATED_JOB_LABEL,
    JOBSET_RESTART_LABEL,
    JOBSET_UID_LABEL,
    pod_group,
)
from tests.unit.controllers.podbinding.test_podbinding import NS, Env, pod

JSON = dict[str, Any]
GROUP = "gpu.orchestrator.dev/pod-group"
SIZE = "gpu.orchestrator.dev/pod-group-size"
#: what ``GroupEnv.held`` says when nobody holds a device
ALL_FREE = {f"node{n}": set() for n in range(1, 5)}


def recognise(p: JSON) -> Any:
    """The explicit label and size annotation (no owners to look up here)."""
    return pod_group(p)


def member(group: str, i: int, size: int = 4, gpus: int = 4) -> JSON:
    p = pod(f"{group}-{i}", map_text=None, owner=None, annotations={SIZE: str(size)})
    p["metadata"]["labels"] = {GROUP: group}
    p["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    return p


def jobset_member(jobset: str, rj: str, job: int, index: int, *, gpus: int = 4,
                  uid: str | None = None, suffix: str = "",
                  job_uid: str | None = None) -> JSON:
    """A pod of JobSet ``jobset`` as the JobSet and Job controllers make it: of
    replicated job ``rj``'s Job ``job``, completion ``index``, named as the Job
    controller names it (``-<suffix>``: another name each time); with the JobSet's
    ``uid`` label and its Job as its owner (of uid ``job_uid``) when given."""
    name = f"{jobset}-{rj}-{job}-{index}" + (f"-{suffix}" if suffix else "")
    labels = {JOBSET_NAME_LABEL: jobset, JOBSET_RESTART_LABEL: "0",
              JOBSET_REPLICATED_JOB_LABEL: rj, JOBSET_JOB_INDEX_LABEL: str(job),
              JOB_COMPLETION_INDEX_LABEL: str(index)}
    if uid:
        labels[JOBSET_UID_LABEL] = uid
    p = member("x", 0, gpus=gpus)
    p["metadata"].update(name=name, uid=f"uid-{name}", annotations={}, labels=labels)
    if job_uid:
        p["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job",
                                             "name": f"{jobset}-{rj}-{job}", "uid": job_uid,
                                             "controller": True}]
    return p


def jobset_of(name: str, uid: str, replicas: int, pods: int) -> JSON:
    """JobSet ``name`` of one replicated job, ``workers``: ``replicas`` Jobs of
    ``pods`` pods each."""
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": NS, "uid": uid},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": replicas, "template": {
                "spec": {"parallelism": pods, "completions": pods}}}]}}


def lws_member(lws: str, name: str, worker: int, size: int, gpus: int,
               revision: str = "r1") -> JSON:
    """Pod ``name``, worker ``worker`` (0: the leader) of LeaderWorkerSet ``lws``'s
    group 0 of ``size``, as LWS's pod webhook labels it."""
    p = member("x", worker, size=size, gpus=gpus)
    p["metadata"]["name"], p["metadata"]["uid"] = name, f"uid-{name}"
    p["metadata"]["labels"] = {
        "leaderworkerset.sigs.k8s.io/name": lws,
        "leaderworkerset.sigs.k8s.io/group-index": "0",
        "leaderworkerset.sigs.k8s.io/worker-index": str(worker),
        "leaderworkerset.sigs.k8s.io/template-revision-hash": revision}
    p["metadata"]["annotations"] = {"leaderworkerset.sigs.k8s.io/size": str(size)}
    return p


def job_template(pods: int, gpus: int, **pod_spec: Any) -> JSON:
    """A replicated job's Job template: ``pods`` Indexed pods of ``gpus`` GPUs each,
    their spec ``pod_spec`` beside the container."""
    return {"spec": {"parallelism": pods, "completions": pods, "completionMode": "Indexed",
                     "template": {"spec": {**pod_spec, "containers": [{"name": "c", "resources": {
                         "limits": {"nvidia.com/gpu": str(gpus)}}}]}}}}


def staged_jobset(launcher: JSON, workers: JSON, how: str = "InOrder") -> JSON:
    """JobSet ``staged``: 1 launcher Job of template ``launcher``, then 2 worker Jobs
    of template ``workers``, made once the launcher is ready (``InOrder``, or
    ``dependsOn`` the launcher ``Ready``)."""
    jobs: list[JSON] = [{"name": "launcher", "replicas": 1, "template": launcher},
                        {"name": "workers", "replicas": 2, "template": workers}]
    spec: JSON = {"replicatedJobs": jobs}
    if how == "InOrder":
        spec["startupPolicy"] = {"startupPolicyOrder": "InOrder"}
    else:
        jobs[1]["dependsOn"] = [{"name": "launcher", "status": "Ready"}]
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "staged", "namespace": NS, "uid": "js"}, "spec": spec}


def slots_of(text: str) -> dict[int, tuple[str, str]]:
    """A ``group-slots`` annotation: member index -> (node, devices)."""
    out = {}
    for part in text.split(";"):
        i, _, where = part.partition("=")
        node, _, devs = where.partition(":")
        out[int(i)] = (node, devs)
    return out


def bound_as(p: JSON, b: JSON, status: JSON | None = None) -> JSON:
    """Pod ``p`` as the API server leaves it once Binding ``b`` is done: on its
    node, with the Binding's annotations; its ``status`` as given (None: its own)."""
    shown = {**p, "spec": {**p["spec"], "nodeName": b["target"]["name"]},
             "metadata": {**p["metadata"], "annotations": {
                 **p["metadata"]["annotations"], **b["metadata"]["annotations"]}}}
    if status is not None:
        shown["status"] = status
    return shown


def wired(env: Env, options: PodBindingOptions,
          recognise: Callable[[JSON], Any]) -> PodBindingReconciler:
    """The pod binding on ``env``'s cache, client and state, recognising groups
    with ``recognise``; what it requeues is noted in ``env.enqueued``."""
    rec = PodBindingReconciler(env.client, env.recorder, env.pods, env.states, env.book,
                               options, recognise=recognise)
    env.enqueued: list[str] = []  # type: ignore[attr-defined]
    rec.enqueue_after = lambda req, delay: env.enqueued.append(req.name)  # type: ignore[attr-defined]
    return rec


class GroupEnv(Env):
    """node1..node4 of 4 GPUs, each named (the ledger picks devices there: members
    asking nvidia.com/gpu get exact devices, one authority per node)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        for n in self.nodes:
            n["metadata"].setdefault("labels", {})[DEVICE_AUTHORITY_LABEL] = "named"

    def reconciler(self, options: PodBindingOptions | None = None) -> PodBindingReconciler:
        return wired(self, options or PodBindingOptions(), recognise)

    def held(self) -> dict[str, set[int]]:
        """node -> devices held by anybody."""
        return {f"node{n}": {d for d in range(4) if self.holder(f"node{n}", d)}
                for n in range(1, 5)}

    def reasons(self, name: str, reason: str) -> list[str]:
        return [m for n, _, r, m in self.recorder.events if n == name and r == reason]

    def place(self, group: str, size: int, gpus: int = 4) -> None:
        """A group of ``size`` members of ``gpus`` GPUs made, every member reconciled,
        then those requeued."""
        for i in range(size):
            self.add(member(group, i, size=size, gpus=gpus))
        for i in range(size):
            self.reconcile(f"{group}-{i}")
        for name in list(self.enqueued):
            self.reconcile(name)
        self.enqueued.clear()

    def gone(self, name: str) -> None:
        """Pod ``name`` deleted, and its deletion reconciled."""
        self.pods.delete(f"{NS}/{name}")
        self.reconcile(name)

    def terminating(self, name: str) -> None:
        p = self.pods.get_by_name(name, NS)
        self.pods.add({**p, "metadata": {**p["metadata"],
                                         "deletionTimestamp": "2026-01-01T00:00:00Z"}})

    def show_bindings(self, names: Iterable[str] | None = None, *,
                      running: bool = True) -> None:
        """The cache shows the pod of every Binding (of ``names``) bound, Running
        unless not ``running`` (then its status as it was)."""
        for b in self.client.bindings:
            if names is not None and b["metadata"]["name"] not in names:
                continue
            p = self.pods.get_by_name(b["metadata"]["name"], NS)
            self.pods.add(bound_as(p, b, {"phase": "Running"} if running else None))

    def show_binding(self, name: str, ready: datetime | None = None) -> JSON:
        """The cache shows pod ``name`` bound as its Binding said (Ready since ``ready``)."""
        b = next(b for b in self.client.bindings if b["metadata"]["name"] == name)
        p = self.pods.get_by_name(name, NS)
        status: JSON = {"phase": "Running"}
        if ready is not None:
            status["conditions"] = [{"type": "Ready", "status": "True",
                                     "lastTransitionTime": ready.strftime("%Y-%m-%dT%H:%M:%SZ")}]
        shown = bound_as(p, b, status)
        self.pods.add(shown)
        return shown

    def placed_first(self, p: JSON, ready: datetime | None = None) -> dict[int, tuple[str, str]]:
        """Pod ``p``, the member its controller makes first (a LeaderReady leader, an
        InOrder launcher), placed and shown bound: its group's reserved slots."""
        name = p["metadata"]["name"]
        self.add(p)
        self.reconcile(name)
        shown = self.show_binding(name, ready)
        self.reconcile(name)
        return slots_of(shown["metadata"]["annotations"][GROUP_SLOTS_ANNOTATION])


class OwnedEnv(GroupEnv):
    """GroupEnv whose owner lookup serves one object, ``owner`` (None: gone, or not
    in the cache), as the ``kind`` called ``name``; every reconciler made with
    ``options`` unless told others."""

    def __init__(self, kind: str, name: str, owner: JSON | None, *args: Any,
                 options: PodBindingOptions | None = None, **kw: Any) -> None:
        self.owned, self.owner = (kind, name), owner
        self.options = options or PodBindingOptions()
        super().__init__(*args, **kw)

    def owners(self, api: str, kind: str, ns: str, name: str) -> JSON | None:
        return self.owner if (kind, name) == self.owned else None

    def reconciler(self, options: PodBindingOptions | None = None) -> PodBindingReconciler:
        return wired(self, options or self.options, lambda p: pod_group(p, self.owners))
