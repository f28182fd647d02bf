"""Fakes for the GPUWorkload reconciler's unit tests (no API server).

``Env`` holds real ``runtime.store.Indexer`` caches filled with plain dicts, a real
``PlacementState`` rebuilt from them, and a ``FakeClient`` that records every call.
The client writes what it creates, patches and deletes into those caches at once
(as if the informers caught up instantly), and feeds the placement state the pod
events a watch would deliver; ``lag`` keeps created pods out of the cache, as a
watch that has not caught up yet would. A deleted pod *terminates*: it gets a
``deletionTimestamp`` and keeps holding its devices until the test says it is gone
(``Env.pod_gone``), as a pod in its grace period would.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from api.v1alpha1.keys import DEVICES_ANNOTATION, WORKLOAD_UID_LABEL
from api.v1alpha1.types import API_VERSION, DeviceExposure
from controllers.dra.claims import bind as bind_claim
from controllers.dra.claims import claim_name
from controllers.gpuworkload.reconciler import GPUWorkloadReconciler
from controllers.placement.source import PlacementStateSource
from controllers.placement.state import PlacementState
from controllers.shared.own_writes import OwnWrites
from runtime import AlreadyExists, ApiError, Conflict, NotFound, Request, Result
from runtime.errors import Forbidden, InternalError, Invalid
from runtime.store import (
    NODE_NAME_INDEX,
    OWNER_UID_INDEX,
    Indexer,
    index_by_node_name,
    index_by_owner_uid,
    thaw,
)
from tests.unit.scheduling.helpers import DRA_DRIVER, dra_slice, node

NS = "ns"
NOW = datetime(2026, 1, 1, tzinfo=UTC)
Key = tuple[str, str]  # (kind, name)


def invalid(message: str) -> Invalid:
    return Invalid(422, "Invalid", message)


def forbidden(message: str) -> Forbidden:
    return Forbidden(403, "Forbidden", message)


def internal(message: str = "etcdserver: request timed out") -> InternalError:
    return InternalError(500, "InternalError", message)


def merge(into: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """RFC 7386 merge patch (a None value deletes the key)."""
    for k, v in patch.items():
        if v is None:
            into.pop(k, None)
        elif isinstance(v, Mapping) and isinstance(into.get(k), dict):
            merge(into[k], v)
        else:
            into[k] = thaw(v)
    return into


@dataclass
class Call:
    verb: str  # create, get, patch, delete
    kind: str
    name: str
    body: Any = None
    opts: dict[str, Any] = field(default_factory=dict)


class FakeClaims:
    """The claim manager of a manager with DRA: each replica's claim is there and
    allocated (``ensured`` lists the replicas asked for)."""

    bind = staticmethod(bind_claim)

    def __init__(self) -> None:
        self.ensured: list[tuple[str, int, int]] = []

    def ensure(self, w: Any, raw: Any, p: Any, attempt: int, pod_exists: bool) -> str:
        self.ensured.append((w.metadata.name, p.index, attempt))
        return claim_name(w.metadata.name, p.index, attempt)


class FakeRecorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []  # (object, type, reason, message)

    def normal(self, obj: Any, reason: str, message: str) -> None:
        self.events.append((obj["metadata"]["name"], "Normal", reason, message))

    def warning(self, obj: Any, reason: str, message: str) -> None:
        self.events.append((obj["metadata"]["name"], "Warning", reason, message))


class FakeClient:
    """Records create/get/patch/delete; ``fail[(kind, name)]`` is raised by every
    create of that object until removed (``fail_patch[(kind, name)]`` by the next
    patch only); objects
    in ``others`` exist in the API without being in any cache of ours."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.calls: list[Call] = []
        self.fail: dict[Key, ApiError] = {}
        self.fail_patch: dict[Key, ApiError] = {}
        self.others: dict[Key, dict[str, Any]] = {}
        self.lag = False  # created pods stay out of the pods cache
        self.lagging: dict[Key, dict[str, Any]] = {}
        #: (verb, kind, name) -> called once just before that request is served
        #: (another worker's reconcile running meanwhile, say)
        self.before: dict[tuple[str, str, str], Callable[[], None]] = {}
        self._uids = itertools.count(1)
        self._rv = itertools.count(100)
        #: (kind, name) -> the resourceVersion the API holds where it moved on from
        #: the cache's copy (a delete whose precondition names another is refused)
        self.api_rv: dict[Key, str] = {}

    def of(self, verb: str, kind: str | None = None) -> list[Call]:
        return [c for c in self.calls if c.verb == verb and kind in (None, c.kind)]

    def names(self, verb: str, kind: str | None = None) -> list[str]:
        return [c.name for c in self.of(verb, kind)]

    def _exists(self, kind: str, name: str) -> dict[str, Any] | None:
        if (kind, name) in self.others:
            return self.others[(kind, name)]
        if (kind, name) in self.lagging:
            return self.lagging[(kind, name)]
        cache = self.env.cache(kind)
        return thaw(cache.get_by_name(name, NS)) if cache is not None and \
            cache.get_by_name(name, NS) is not None else None

    def create(self, obj: dict[str, Any], handles_already_exists: bool = False) -> dict[str, Any]:
        kind, name = obj["kind"], obj["metadata"]["name"]
        hook = self.before.pop(("create", kind, name), None)
        if hook is not None:
            hook()
        self.calls.append(Call("create", kind, name, obj))
        err = self.fail.get((kind, name))
        if err is not None:
            raise err
        if self._exists(kind, name) is not None:
            raise AlreadyExists(409, "AlreadyExists", f'{kind.lower()}s "{name}" already exists')
        made = thaw(obj)
        made["metadata"].update(uid=f"{kind.lower()}-{next(self._uids)}",
                                resourceVersion=str(next(self._rv)))
        if kind == "Pod":
            made["status"] = {"phase": "Pending"}
            if self.lag:
                self.lagging[(kind, name)] = made
            else:
                self.env.put_pod(made)
        elif kind == "Job":
            if self.lag:
                self.lagging[(kind, name)] = made
            else:
                self.env.put_job(made)
        else:
            self.others[(kind, name)] = made
        return made

    def get(self, api_version: str, kind: str, name: str,
            namespace: str | None = None) -> dict[str, Any]:
        self.calls.append(Call("get", kind, name))
        found = self._exists(kind, name)
        if found is None:
            raise NotFound(404, "NotFound", f'{kind.lower()}s "{name}" not found')
        return found

    def patch(self, api_version: str, kind: str, name: str, body: dict[str, Any],
              namespace: str | None = None, patch_type: str = "merge",
              subresource: str | None = None) -> dict[str, Any]:
        assert (api_version, kind, patch_type) == (API_VERSION, "GPUWorkload", "merge")
        self.calls.append(Call("patch", kind, name, thaw(body), {"subresource": subresource}))
        err = self.fail_patch.pop((kind, name), None)
        if err is not None:
            raise err
        current = self.env.workloads.get_by_name(name, NS)
        if current is None:
            raise NotFound(404, "NotFound", f'gpuworkloads "{name}" not found')
        obj = thaw(current)
        want_rv = (body.get("metadata") or {}).get("resourceVersion")
        if want_rv is not None and want_rv != obj["metadata"]["resourceVersion"]:
            raise Conflict(409, "Conflict", "the object has been modified")
        body = thaw(body)
        body.get("metadata", {}).pop("resourceVersion", None)
        if subresource == "status":
            merge(obj, {"status": body.get("status") or {}})
        else:
            merge(obj, {k: v for k, v in body.items() if k != "status"})
        obj["metadata"]["resourceVersion"] = str(next(self._rv))
        if obj["metadata"].get("deletionTimestamp") and not obj["metadata"].get("finalizers"):
            self.env.drop_workload(name)  # the API server removes it now
        else:
            self.env.put_workload(obj)
        return obj

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None,
               **opts: Any) -> None:
        self.calls.append(Call("delete", kind, name, opts=opts))
        if kind not in ("Pod", "Job"):
            raise AssertionError(f"unexpected delete of {kind} {name}")
        want = (opts.get("preconditions") or {}).get("resourceVersion")
        if want is not None and (kind, name) in self.api_rv and self.api_rv[(kind, name)] != want:
            raise Conflict(409, "Conflict", f"Precondition failed: ResourceVersion in "
                           f"precondition: {want}, ResourceVersion in object meta: "
                           f"{self.api_rv[(kind, name)]}")
        lagging = self.lagging.get((kind, name))
        if lagging is not None:  # in the API, not in the cache yet
            lagging["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:30Z"
            return
        if kind == "Pod":
            pod = self.env.pods.get_by_name(name, NS)
            if pod is None:
                raise NotFound(404, "NotFound", f'pods "{name}" not found')
            if opts.get("grace_period_seconds") == 0:
                self.env.pod_gone(name)
                return
            pod = thaw(pod)
            pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:30Z"
            self.env.put_pod(pod)  # terminating: still holds its devices
        else:
            job = self.env.jobs.get_by_name(name, NS)
            if job is None:
                raise NotFound(404, "NotFound", f'jobs "{name}" not found')
            if opts.get("propagation_policy") != "Foreground":
                self.env.job_gone(name)
                return
            # in the foreground: the Job stays until its pods are gone (the test
            # says when: ``Env.job_gone``)
            job = thaw(job)
            job["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:30Z"
            self.env.put_job(job)


class Env:
    """Nodes ``node1``..``node<n>`` with ``gpus`` GPUs each, the caches, the placement
    state and the reconciler under test."""

    def __init__(self, nodes: int = 1, gpus: int = 4,
                 exposure: DeviceExposure = DeviceExposure.CUDA_VISIBLE_DEVICES) -> None:
        self.gpus = gpus
        self.nodes = [node(f"node{i}", gpus) for i in range(1, nodes + 1)]
        owner = {OWNER_UID_INDEX: index_by_owner_uid}
        self.workloads = Indexer()
        self.pods = Indexer({**owner, NODE_NAME_INDEX: index_by_node_name})
        self.jobs = Indexer(owner)
        self.client = FakeClient(self)
        self.recorder = FakeRecorder()
        self.problems: list[tuple[str, str, str]] = []  # (object, reason, message)
        self.woken: list[str] = []
        self.decisions = 0
        self.now = NOW  # the reconciler's clock; tests move it
        self._uids = itertools.count(1)
        #: ResourceSlices of the DRA driver (``with_dra``); None: the manager runs
        #: without DRA
        self.slices: list[dict[str, Any]] | None = None
        #: our writes the caches have not shown yet, shared as setup.py shares them
        self.own_writes = OwnWrites()
        self.state = self.new_state()
        self.rec = self.new_reconciler()

    def new_reconciler(self, **kw: Any) -> GPUWorkloadReconciler:
        """A reconciler on this environment's state (made with ``kw``: options, a
        status writer, a backstop, claims; its ``own_writes``
        are this environment's), as the manager's setup makes it."""
        # the state tests set up; once invalidated (a handler raised), filled again
        # from the caches, in place, as the manager's
        states = PlacementStateSource(lambda books: self.state, self.fill)
        states.get()
        kw.setdefault("own_writes", self.own_writes)
        return GPUWorkloadReconciler(
            self.client, self.recorder, self.workloads, self.pods, self.jobs, states,
            clock=lambda: self.now, rng=random.Random(1), **kw)

    # --------------------------------------------------------------- state

    def new_state(self) -> PlacementState:
        """A placement state rebuilt from the caches (as after a restart)."""
        state = PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES, rng=random.Random(1),
                               own_writes=self.own_writes,
                               dra_driver=DRA_DRIVER if self.slices is not None else None,
                               enqueue_waiting=self.woken.extend,
                               on_problem=lambda obj, reason, msg: self.problems.append(
                                   (obj["metadata"]["name"], reason, msg)))
        decide = state.decide

        def counting(w: Any) -> Any:
            self.decisions += 1
            return decide(w)
        state.decide = counting  # type: ignore[method-assign]
        self.fill(state)
        return state

    def fill(self, state: PlacementState) -> None:
        """Fills ``state`` from the caches (``PlacementState.rebuild``)."""
        self.rebuild_problems = state.rebuild(
            lambda: (self.nodes, [], self.workloads.list(), self.pods.list()),
            (lambda: (self.slices or [], [])) if self.slices is not None else None,
            read_jobs=self.jobs.list)

    def with_dra(self) -> Env:
        """The manager runs with DRA: every node publishes its GPUs in ResourceSlices,
        and each replica's claim is ``FakeClaims``' (allocated at once)."""
        self.slices = [dra_slice(n["metadata"]["name"], self.gpus) for n in self.nodes]
        self.state = self.new_state()
        self.rec = self.new_reconciler(claims=FakeClaims())
        return self

    def restart(self, *, dra: bool | None = None) -> None:
        """A new controller: a new ledger rebuilt from the caches (``decisions``
        counts the new one's). ``dra``: with or without DRA (None: as before)."""
        if dra is not None:
            if dra and self.slices is None:
                self.slices = [dra_slice(n["metadata"]["name"], self.gpus) for n in self.nodes]
            elif not dra:
                self.slices = None
        self.decisions = 0
        self.own_writes = OwnWrites()  # a new process remembers none of its writes
        self.state = self.new_state()
        self.rec = self.new_reconciler(
            claims=FakeClaims() if self.slices is not None else None)

    # --------------------------------------------------------------- caches

    def cache(self, kind: str) -> Indexer | None:
        return {"Pod": self.pods, "Job": self.jobs, "GPUWorkload": self.workloads}.get(kind)

    def put_pod(self, pod: dict[str, Any]) -> None:
        self.pods.add(pod)
        self.state.events.on_pod(pod)
        self.own_writes.observed(pod)  # as the informer's handlers do

    def pod_gone(self, name: str) -> None:
        """The pod is deleted from the API (its grace period is over)."""
        pod = self.pods.delete(f"{NS}/{name}")
        assert pod is not None, f"no pod {name}"
        self.state.events.on_pod_deleted(pod)
        self.own_writes.deleted(pod)

    def put_job(self, job: dict[str, Any]) -> None:
        self.jobs.add(job)
        self.state.events.on_job(job)
        self.own_writes.observed(job)

    def job_gone(self, name: str) -> None:
        """The Job is deleted from the API (in the foreground: once its pods are)."""
        job = self.jobs.delete(f"{NS}/{name}")
        assert job is not None, f"no job {name}"
        self.state.events.on_job_deleted(job)
        self.own_writes.deleted(job)

    def job_pod(self, job_name: str, *, lagging: bool = False) -> dict[str, Any]:
        """What the Job controller does, at a moment of its own: the Job's pod, from
        its template (bound, with the devices annotation). ``lagging``: the Job
        controller acts on a copy of the Job the API has already deleted."""
        job = self.jobs.get_by_name(job_name, NS) or \
            self.client.lagging.get(("Job", job_name))
        assert job is not None, f"no job {job_name}"
        assert lagging or not job["metadata"].get("deletionTimestamp"), \
            "the Job controller makes no pod for a Job it knows is being deleted"
        tpl = thaw(job["spec"]["template"])
        meta = tpl["metadata"]
        meta.update(name=f"{job_name}-x", namespace=NS, uid=f"pod-of-{job['metadata']['uid']}",
                    ownerReferences=[{"apiVersion": "batch/v1", "kind": "Job",
                                      "name": job_name, "uid": job["metadata"]["uid"],
                                      "controller": True}])
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": tpl["spec"],
               "status": {"phase": "Running"}}
        self.put_pod(pod)
        return pod

    def set_job_condition(self, name: str, type_: str) -> None:
        """The Job finished (``Complete`` or ``Failed``)."""
        job = thaw(self.jobs.get_by_name(name, NS))
        job["status"] = {"conditions": [{"type": type_, "status": "True"}]}
        self.put_job(job)

    def set_phase(self, name: str, phase: str) -> None:
        pod = thaw(self.pods.get_by_name(name, NS))
        pod["status"] = {"phase": phase}
        self.put_pod(pod)

    def catch_up(self) -> None:
        """The caches see what was created while they lagged."""
        for (kind, _name), obj in sorted(self.client.lagging.items()):
            (self.put_pod if kind == "Pod" else self.put_job)(obj)
        self.client.lagging.clear()

    def put_workload(self, obj: dict[str, Any]) -> None:
        self.workloads.add(obj)
        self.state.events.on_workload(obj)

    def drop_workload(self, name: str) -> None:
        obj = self.workloads.delete(f"{NS}/{name}")
        if obj is not None:
            self.state.events.on_workload_deleted(obj)

    # --------------------------------------------------------------- objects

    def workload(self, name: str, uid: str | None = None, **spec: Any) -> dict[str, Any]:
        """Creates a GPUWorkload in the cache (as the API server would: a UID, a
        resourceVersion, a generation)."""
        obj = {"apiVersion": API_VERSION, "kind": "GPUWorkload",
               "metadata": {"name": name, "namespace": NS,
                            "uid": uid or f"uid-{name}-{next(self._uids)}",
                            "resourceVersion": str(next(self.client._rv)), "generation": 1,
                            "creationTimestamp": "2026-01-01T00:00:00Z"},
               "spec": {"template": {"spec": {"containers": [{"name": "main",
                                                              "image": "busybox"}]}},
                        **spec},
               "status": {}}
        self.put_workload(obj)
        return obj

    def edit(self, name: str, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        """A user's write of the workload (a new resourceVersion)."""
        obj = thaw(self.workloads.get_by_name(name, NS))
        change(obj)
        obj["metadata"]["resourceVersion"] = str(next(self.client._rv))
        self.put_workload(obj)
        return obj

    def delete_workload(self, name: str, *, orphan: bool = False) -> None:
        """``kubectl delete gw name`` (``--cascade=orphan``): the API server sets the
        deletionTimestamp; the object stays while finalizers are left."""
        def mark(o: dict[str, Any]) -> None:
            o["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:10Z"
            if orphan:
                o["metadata"]["finalizers"] = ["orphan", *o["metadata"].get("finalizers", [])]
        obj = self.edit(name, mark)
        if not obj["metadata"].get("finalizers"):
            self.drop_workload(name)

    def get(self, name: str) -> dict[str, Any] | None:
        return self.workloads.get_by_name(name, NS)

    def status(self, name: str) -> dict[str, Any]:
        obj = self.get(name)
        assert obj is not None, f"no workload {name}"
        return obj.get("status") or {}

    def condition(self, name: str, type_: str) -> dict[str, Any]:
        for c in self.status(name).get("conditions") or ():
            if c["type"] == type_:
                return c
        raise AssertionError(f"{name} has no {type_} condition: {self.status(name)}")

    def pod(self, name: str) -> dict[str, Any] | None:
        return self.pods.get_by_name(name, NS)

    def foreign_pod(self, name: str, node_name: str, devices: str | None = None,
                    gpus: int = 0, owner: dict[str, Any] | None = None,
                    phase: str = "Running", scheduler: str | None = None) -> dict[str, Any]:
        """A pod someone else made, bound to ``node_name``."""
        c: dict[str, Any] = {"name": "c", "image": "x"}
        if gpus:
            c["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
        meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"uid-{name}",
                                "annotations": {}}
        if devices is not None:
            meta["annotations"][DEVICES_ANNOTATION] = devices
        if owner is not None:
            meta["ownerReferences"] = [owner]
        spec: dict[str, Any] = {"nodeName": node_name, "containers": [c]}
        if scheduler:
            spec["schedulerName"] = scheduler
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
               "status": {"phase": phase}}
        self.put_pod(pod)
        return pod

    # --------------------------------------------------------------- acting

    def reconcile(self, name: str) -> Result | None:
        return self.rec.reconcile(Request(NS, name))

    def settle(self, name: str, rounds: int = 5) -> Result | None:
        """Reconciles until nothing asks to come back soon (a cache-lag requeue)."""
        result = None
        for _ in range(rounds):
            result = self.reconcile(name)
            if result is None or result.requeue_after > 0.2:
                return result
        return result

    def holders(self, node_name: str) -> dict[int, frozenset[str]]:
        """device -> the owners holding it."""
        led = self.state.view()
        return {d: led.device_owners(node_name, d) for d in sorted(led.usable(node_name))
                if led.device_owners(node_name, d)}

    def free(self, node_name: str = "node1") -> int:
        return self.state.view().free_count(node_name)

    def overlaps(self) -> list[tuple[str, int, list[str]]]:
        """(node, device, pods) where live pods of different workloads share a
        device (what HolderWatch checks on a real cluster), pods the cache has not
        seen yet included."""
        live = [*self.pods.list(),
                *(o for (kind, _), o in self.client.lagging.items() if kind == "Pod")]
        held: dict[tuple[str, int], dict[str, str]] = {}
        for pod in live:
            if pod["status"].get("phase") in ("Succeeded", "Failed"):
                continue
            meta = pod["metadata"]
            ref = (meta.get("ownerReferences") or [{}])[0]
            # a Job's pod belongs to the workload its labels name
            owner = (meta.get("labels") or {}).get(WORKLOAD_UID_LABEL) \
                if ref.get("kind") == "Job" else ref.get("uid") or meta["uid"]
            value = (pod["metadata"].get("annotations") or {}).get(DEVICES_ANNOTATION) or ""
            for d in (int(t) for t in value.split(",") if t.strip().isdigit()):
                held.setdefault((pod["spec"]["nodeName"], d), {})[owner] = \
                    pod["metadata"]["name"]
        return [(n, d, sorted(o.values())) for (n, d), o in sorted(held.items()) if len(o) > 1]

    def warnings(self, name: str) -> list[tuple[str, str]]:
        return [(r, m) for n, t, r, m in self.recorder.events if n == name and t == "Warning"]

    def normals(self, name: str) -> list[str]:
        return [r for n, t, r, _ in self.recorder.events if n == name and t == "Normal"]


def running(env: Env, name: str) -> None:
    """Workload ``name``'s Pending children are all Running, and it has seen so."""
    for pod in env.pods.list():
        if pod["metadata"]["name"].startswith(f"{name}-") and \
                pod["status"]["phase"] == "Pending":
            env.set_phase(pod["metadata"]["name"], "Running")
    env.settle(name)
    assert env.status(name)["phase"] == "Running", env.status(name)
