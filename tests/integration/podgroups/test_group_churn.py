"""The churn with pod groups: JobSets (the real JobSet v0.12.0 controller, placed whole
by the pod binding) made and deleted at random beside GPUWorkloads (single, gangs
and memory shares) in a namespace a GPUQueue selects, members deleted while their
group runs (their Job makes them again), kill -9s of the manager (``python main.py
manager --enable-pod-binding``, its own process) and kube-apiserver restarts in the
middle of it (``ControlPlane.restart_apiserver``; the manager, the JobSet controller,
kube-controller-manager and kwok all reconnect, and the manager starts again if it
exits on losing its Lease).

Half the JobSets are of one shape (4 pods x 2 GPUs); the others' members ask
different things (*parts*, docs/podgroups.md): a launcher of 1 pod x 1 GPU and 2 or
3 workers of 2 or 4 GPUs (as many Jobs of 1 pod, or one Job of them all), either
anywhere or the launcher on pool a's 2 nodes and the workers on pool b's 3 (a
nodeSelector on the nodes' ``POOL`` label), made together, ``InOrder`` or with the
workers ``dependsOn`` the launcher Ready (placed whole at the launcher, the workers'
slots held for them).

``HolderWatch`` samples every live pod on every pod event: across the run no
(node, device) is held by two owners. Once the actions stop, within a settle time:
no partial group (a JobSet with some but not all of its members bound) and no group
stuck with room (a JobSet none of whose members is bound while ``kubectl gpu
nodes`` shows free devices enough for it: every member's GPUs on one node of its
pool, all at once, ``fits``). A JobSet that has finished (a Job out of retries
fails it) is no group to check.

``CHURN_SEED``, ``GROUP_CHURN_SECONDS`` (60), ``CHURN_KILLS`` (2) and
``CHURN_RESTARTS`` (1) change the seed, the duration, the kill -9s and the
kube-apiserver restarts; ``make soak`` runs it with the other churns.
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from api.v1alpha1.keys import DEVICE_AUTHORITY_LABEL, DEVICES_ANNOTATION, SHARE_ANNOTATION
from api.v1alpha1.types import API_VERSION
from hack.testenv import ControlPlane
from runtime import ApiError, Client, NotFound
from tests.integration.controller.churn_checks import DEVICE_MIB, GPUNodes
from tests.integration.controller.churn_process import ControllerProcess, Faults, release_finalizers
from tests.integration.controller.conftest import (  # noqa: F401 (fixtures)
    NodeGroup,
    admin,
    group,
    installed,
    namespace_queue,
    workload,
)
from tests.integration.controller.holders import HolderWatch
from tests.integration.podgroups.controllers import JOBSET, PeerController, jobset
from tests.integration.podgroups.fixtures import JOBSET_NAME, nodes_shown, on_nodes
from tests.waiting import eventually

SEED = int(os.environ.get("CHURN_SEED") or 11)
SECONDS = float(os.environ.get("GROUP_CHURN_SECONDS") or 60)
KILLS = int(os.environ.get("CHURN_KILLS") or 2)
RESTARTS = int(os.environ.get("CHURN_RESTARTS") or 1)
LOG = os.environ.get("CHURN_LOG")
NODES, GPUS = 5, 4
#: the nodes' pool label, and each pool's nodes (NODES in all)
POOL = "test.gpu-orchestrator.dev/pool"
POOLS = {"a": 2, "b": 3}
SETTLE = 120.0
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
LABEL = JOBSET_NAME
DEVICES, SHARE = DEVICES_ANNOTATION, SHARE_ANNOTATION


@pytest.fixture(scope="module")
def peers(installed: ControlPlane) -> Iterator[PeerController]:  # noqa: F811
    run = PeerController(installed, JOBSET).start()
    yield run
    run.stop()


@pytest.fixture
def queued(installed: ControlPlane, admin: Client) -> Iterator[str]:  # noqa: F811
    """A second namespace, for the GPUWorkloads, selected by a GPUQueue of 8 GPUs."""
    name = f"q-{random.Random().getrandbits(32):08x}"
    code, body = installed.api("POST", "/api/v1/namespaces", {
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    assert code == 201, body
    with namespace_queue(admin, name, 8):
        yield name
    installed.api("DELETE", f"/api/v1/namespaces/{name}")


@dataclass(frozen=True)
class Part:
    """A replicated job of a churn JobSet: ``jobs`` Jobs of ``pods`` pods, each pod
    asking ``gpus`` GPUs on a node of ``pool`` ("": any of the churn's)."""

    name: str
    jobs: int
    pods: int
    gpus: int
    pool: str = ""

    @property
    def members(self) -> int:
        return self.jobs * self.pods


#: the JobSet of one shape: 2 Jobs of 2 pods x 2 GPUs
ALIKE = (Part("workers", 2, 2, 2),)


def parts_of(rng: random.Random) -> tuple[tuple[Part, ...], str]:
    """A launcher of 1 pod x 1 GPU and 2 or 3 workers of 2 or 4 GPUs (as many Jobs
    of 1 pod, or one Job of them all), anywhere or on pools a and b; and how they
    start: ``together``, ``InOrder``, or the workers ``dependsOn`` the launcher."""
    pools = rng.random() < 0.5
    count, gpus = rng.choice([2, 3]), rng.choice([2, 4])
    jobs, pods = (count, 1) if rng.random() < 0.5 else (1, count)
    return ((Part("launcher", 1, 1, 1, "a" if pools else ""),
             Part("workers", jobs, pods, gpus, "b" if pools else "")),
            rng.choice(["together", "InOrder", "dependsOn"]))


def made(name: str, parts: tuple[Part, ...], start: str,
         group: NodeGroup) -> dict[str, Any]:  # noqa: F811
    """JobSet ``name`` of ``parts`` on ``group``'s nodes, started as ``start`` says;
    each Job makes a deleted member again (3 retries)."""
    js = on_nodes(jobset(name, [(p.name, p.jobs, p.pods) for p in parts],
                         order="InOrder" if start == "InOrder" else None), group)
    if start == "dependsOn":
        js["spec"]["replicatedJobs"][1]["dependsOn"] = [{"name": parts[0].name,
                                                         "status": "Ready"}]
    for rj, part in zip(js["spec"]["replicatedJobs"], parts, strict=True):
        rj["template"]["spec"]["backoffLimit"] = 3
        pod = rj["template"]["spec"]["template"]["spec"]
        pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = str(part.gpus)
        if part.pool:
            pod["nodeSelector"][POOL] = part.pool
    return js


def live_pods(admin: Client, ns: str) -> list[dict[str, Any]]:  # noqa: F811
    return [p for p in admin.list("v1", "Pod", namespace=ns)["items"]
            if not p["metadata"].get("deletionTimestamp")
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]


class GroupChurn:
    def __init__(self, admin: Client, ns: str, queued: str, group: NodeGroup,  # noqa: F811
                 rng: random.Random) -> None:
        self.admin, self.ns, self.queued, self.group, self.rng = admin, ns, queued, group, rng
        #: the live JobSets: name -> its parts
        self.jobsets: dict[str, tuple[Part, ...]] = {}
        self.workloads: list[str] = []
        self.serial = 0
        self.done: Counter[str] = Counter()
        self.log: list[str] = []  # (seconds since the start) what was done to what
        self.t0 = time.monotonic()

    def note(self, what: str) -> None:
        self.log.append(f"{time.monotonic() - self.t0:.1f}s {what}")

    def _name(self, prefix: str) -> str:
        self.serial += 1
        return f"{prefix}{self.serial}"

    def create_jobset(self) -> None:
        if self.rng.random() < 0.5:
            name, parts, start = self._name("js"), ALIKE, "together"
        else:
            name = self._name("jp")
            parts, start = parts_of(self.rng)
            self.done[f"jobsets of parts created ({start})"] += 1
            self.done["jobsets of parts on pools a and b"] += bool(parts[0].pool)
        self.admin.create(made(name, parts, start, self.group), namespace=self.ns)
        self.jobsets[name] = parts
        self.done["jobsets created"] += 1
        self.note(f"created {name}: {shape(parts)} {start}")

    def delete_jobset(self) -> None:
        if self.jobsets:
            name = list(self.jobsets)[self.rng.randrange(len(self.jobsets))]
            del self.jobsets[name]
            with contextlib.suppress(NotFound):
                self.admin.delete(JOBSET_API, "JobSet", name, self.ns,
                                  propagation_policy="Background")
            self.done["jobsets deleted"] += 1
            self.note(f"deleted {name}")

    def create_workload(self) -> None:
        rng, name = self.rng, self._name("w")
        spec: dict[str, Any] = {"nodeSelector": self.group.selector,
                                "retryPolicy": {"maxRetries": 50, "backoffSeconds": 1,
                                                "maxBackoffSeconds": 3},
                                "template": {"spec": {"terminationGracePeriodSeconds": 0,
                                                      "containers": [{"name": "main",
                                                                      "image": "busybox"}]}}}
        kind = rng.random()
        if kind < 0.25:
            spec.update(replicas=rng.choice([1, 2]), schedulingStrategy="bestFit",
                        gpuShare={"memory": rng.choice(["20Gi", "40Gi"]), "mode": "timeSlicing"})
            self.done["shares created"] += 1
        elif kind < 0.55:
            spec.update(replicas=2, gpusPerReplica=rng.choice([1, 2]))
            self.done["gangs created"] += 1
        else:
            spec.update(gpusPerReplica=rng.choice([1, 2, 4]))
            self.done["workloads created"] += 1
        try:
            self.admin.create(workload(name, self.queued, **spec))
        except ApiError as exc:
            self.done[f"workload refused ({exc.status})"] += 1
            return
        self.workloads.append(name)

    def delete_workload(self) -> None:
        if self.workloads:
            name = self.workloads.pop(self.rng.randrange(len(self.workloads)))
            with contextlib.suppress(NotFound):
                self.admin.delete(API_VERSION, "GPUWorkload", name, namespace=self.queued)
            self.done["workloads deleted"] += 1

    def delete_member(self) -> None:
        members = [p for p in live_pods(self.admin, self.ns) if p["spec"].get("nodeName")]
        if members:
            pod = self.rng.choice(members)["metadata"]["name"]
            with contextlib.suppress(NotFound):
                self.admin.delete("v1", "Pod", pod, self.ns, grace_period_seconds=0)
                self.done["members deleted while placed"] += 1
                self.note(f"deleted member {pod}")

    def step(self) -> None:
        r = self.rng.random()
        if r < 0.25 and len(self.jobsets) < 4:
            self.create_jobset()
        elif r < 0.40:
            self.delete_jobset()
        elif r < 0.65 and len(self.workloads) < 6:
            self.create_workload()
        elif r < 0.85:
            self.delete_workload()
        else:
            self.delete_member()


def free_devices(kubeconfig: str, nodes: list[str],
                 capsys: pytest.CaptureFixture[str]) -> dict[str, int]:
    """Free devices per node as ``kubectl gpu nodes`` shows them (the controller's
    ledger rebuilt from the API)."""
    return {n["name"]: sum(1 for d in n["devices"] if d["free"])
            for n in nodes_shown(kubeconfig, capsys, nodes)}


def shape(parts: tuple[Part, ...]) -> str:
    """``1 x 1 GPU (pool a) + 3 x 4 GPU (pool b)``."""
    return " + ".join(f"{p.members} x {p.gpus} GPU" + (f" (pool {p.pool})" if p.pool else "")
                      for p in parts)


def fits(parts: tuple[Part, ...], free: dict[str, int], pools: dict[str, str]) -> bool:
    """Whether every member of ``parts`` has its GPUs on one node of its pool, all at
    once, with ``free`` devices per node (node -> its pool in ``pools``): every
    assignment tried (at most 4 members on 5 nodes)."""
    asks = sorted(((p.gpus, p.pool) for p in parts for _ in range(p.members)), reverse=True)
    left = dict(free)

    def place(i: int) -> bool:
        if i == len(asks):
            return True
        gpus, pool = asks[i]
        for node in left:
            if left[node] >= gpus and pool in ("", pools[node]):
                left[node] -= gpus
                if place(i + 1):
                    return True
                left[node] += gpus
        return False
    return place(0)


def finished(admin: Client, ns: str, name: str) -> bool:  # noqa: F811
    """JobSet ``name`` has completed or failed (a Job out of retries fails it)."""
    try:
        js = admin.get(JOBSET_API, "JobSet", name, ns)
    except NotFound:
        return True
    return any(c.get("type") in ("Completed", "Failed") and c.get("status") == "True"
               for c in (js.get("status") or {}).get("conditions") or ())


def groups_wrong(admin: Client, ns: str, jobsets: dict[str, tuple[Part, ...]],  # noqa: F811
                 pools: dict[str, str], kubeconfig: str,
                 capsys: pytest.CaptureFixture[str]) -> list[str]:
    """Partial groups holding GPUs, and groups left unbound with room for them."""
    pods = live_pods(admin, ns)
    free = free_devices(kubeconfig, list(pools), capsys)
    wrong = []
    for name, parts in jobsets.items():
        size = sum(p.members for p in parts)
        mine = [p for p in pods if (p["metadata"].get("labels") or {}).get(LABEL) == name]
        bound = sum(1 for p in mine if p["spec"].get("nodeName"))
        if 0 < bound < size:
            wrong.append(f"{name}: partial, {bound} of {size} members bound")
        elif bound == 0 and fits(parts, free, pools) and not finished(admin, ns, name):
            wrong.append(f"{name}: none bound, {len(mine)} of {size} members made, "
                         f"room for {shape(parts)} ({free})")
    return wrong


def describe(admin: Client, ns: str, wrong: list[str]) -> str:  # noqa: F811
    """The pods and Jobs of the groups found wrong, as they stood then."""
    names = {w.split(":")[0] for w in wrong}
    lines = []
    for p in admin.list("v1", "Pod", namespace=ns)["items"]:
        meta = p["metadata"]
        if (meta.get("labels") or {}).get(LABEL) in names:
            lines.append(f"pod {meta['name']} phase={(p.get('status') or {}).get('phase')} "
                         f"node={p['spec'].get('nodeName')} "
                         f"deleting={bool(meta.get('deletionTimestamp'))} "
                         f"gates={[g['name'] for g in p['spec'].get('schedulingGates') or []]} "
                         f"devices={(meta.get('annotations') or {}).get(DEVICES)}")
    for j in admin.list("batch/v1", "Job", namespace=ns)["items"]:
        if (j["metadata"].get("labels") or {}).get(LABEL) in names:
            lines.append(f"job {j['metadata']['name']} status={j.get('status')}")
    return "\n".join(lines)


def test_group_churn_never_splits_a_group_nor_gives_a_device_twice(
        installed: ControlPlane, admin: Client, namespace: str, queued: str,  # noqa: F811
        group: NodeGroup, peers: PeerController, tmp_path: Path,  # noqa: F811
        capsys: pytest.CaptureFixture[str]) -> None:
    rng = random.Random(SEED)
    pools = {n: pool for pool, count in POOLS.items()
             for n in group.add(count, GPUS, labels={DEVICE_AUTHORITY_LABEL: "named",
                                                     POOL: pool})}
    nodes = list(pools)
    gpunodes = GPUNodes(admin, nodes, GPUS)
    gpunodes.mig = False
    gpunodes.create()
    churn = GroupChurn(admin, namespace, queued, group, rng)
    #: every (node, device, pods) seen held by two live pods at once: HolderWatch's
    #: overlaps are between owners (Jobs), these include two members of one Job
    twice: set[tuple[str, str, frozenset[str]]] = set()
    seen: list[str] = []  # the first of them, each pod as it stood then

    def record(pods: list[dict[str, Any]]) -> None:
        held: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for p in pods:
            annotations = p["metadata"].get("annotations") or {}
            for d in (annotations.get(DEVICES) or "").split(","):
                if d and not annotations.get(SHARE):
                    held.setdefault((p["spec"]["nodeName"], d), []).append(p)
        for (node, d), ps in held.items():
            if len(ps) > 1:
                twice.add((node, d, frozenset(p["metadata"]["name"] for p in ps)))
                if len(seen) < 4:
                    seen.append(f"{time.monotonic() - churn.t0:.1f}s {node}/{d}: " + "; ".join(
                        f"{p['metadata']['name']} ({(p.get('status') or {}).get('phase')}"
                        f"{', deleting' if p['metadata'].get('deletionTimestamp') else ''})"
                        for p in ps))
    watch = HolderWatch(admin, device_memory_mib=DEVICE_MIB, on_live=record).start()
    ctl = ControllerProcess(installed, Path(LOG) if LOG else tmp_path / "controller.log",
                            extra=("--enable-pod-binding",))
    faults = Faults(installed, ctl, SECONDS, KILLS, RESTARTS)
    kubeconfig = str(installed.kubeconfig)
    wrong: list[str] = []
    caught_up = 0.0
    try:
        ctl.start()
        started = time.monotonic()
        # every planned fault happens, also when one ends past the run's time
        while (elapsed := time.monotonic() - started) < SECONDS or faults.left:
            for made in faults.due(elapsed):
                churn.done[made] += 1
                churn.note(made)
            gpunodes.beat()
            churn.step()
            time.sleep(rng.uniform(0.2, 0.8))
        if installed.restarted:
            # kube-controller-manager (the Job controller remaking deleted members)
            # and kwok come back from a kube-apiserver restart with their own backoff
            caught_up = installed.caught_up()
        settle_started = time.monotonic()
        deadline = settle_started + SETTLE
        while True:
            gpunodes.beat()
            wrong = groups_wrong(admin, namespace, churn.jobsets, pools, kubeconfig, capsys)
            if not wrong or time.monotonic() > deadline:
                break
            time.sleep(2)
        settled_in = time.monotonic() - settle_started
        described = describe(admin, namespace, wrong)
        pods = live_pods(admin, namespace)
        placed = [name for name, parts in churn.jobsets.items()
                  if sum(1 for p in pods
                         if (p["metadata"].get("labels") or {}).get(LABEL) == name
                         and p["spec"].get("nodeName")) == sum(q.members for q in parts)]
        of_parts = [name for name, parts in churn.jobsets.items() if parts is not ALIKE]
        for name in list(churn.jobsets):
            with contextlib.suppress(NotFound):
                admin.delete(JOBSET_API, "JobSet", name, namespace,
                             propagation_policy="Background")
        for name in churn.workloads:
            with contextlib.suppress(NotFound):
                admin.delete(API_VERSION, "GPUWorkload", name, namespace=queued)
        eventually(lambda: not admin.list(API_VERSION, "GPUWorkload", namespace=queued)["items"],
                   timeout=90, what="every GPUWorkload of the churn gone")
    finally:
        watch.stop()
        ctl.stop()
        release_finalizers(admin, queued)
        gpunodes.delete()
    summary = ", ".join(f"{k}: {v}" for k, v in sorted(churn.done.items()))
    capsys.readouterr()
    with capsys.disabled():
        print(f"\ngroup churn (seed {SEED}, {SECONDS:.0f}s, {NODES}x{GPUS} GPUs): "
              f"{watch.samples} samples, {len(twice)} devices given twice "
              f"({len(watch.overlaps)} samples of two owners on one device), "
              f"{len(wrong)} groups partial or stuck with room after {settled_in:.0f} s "
              f"of settling ({caught_up:.1f} s for kube-controller-manager and kwok to catch up "
              f"after kube-apiserver), {len(placed)} of {len(churn.jobsets)} JobSets left "
              f"placed whole ({len(set(placed) & set(of_parts))} of the {len(of_parts)} "
              f"of parts); "
              f"{summary}")
    assert not twice and watch.overlaps == [], (
        f"first devices given twice: {seen}\nthe churn: {churn.log}\n{ctl.tail()}")
    assert wrong == [], f"{wrong}\n{described}\nthe churn: {churn.log}\n{ctl.tail()}"
    assert churn.done["jobsets created"] >= 3 and churn.done["controller kill -9"] == KILLS
    assert churn.done["kube-apiserver restart"] == RESTARTS
