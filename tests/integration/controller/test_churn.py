"""Churn with grace periods on: the product's first promise under ordinary chaos.

Workloads of every strategy, gangs, Job mode, preemptions (one of them a gang)
whose victims are deleted with ``--cascade=orphan`` at several delays into the
preemptor's wait, workloads orphan-deleted while they run, deleted replicas, kill -9
of the controller, kube-apiserver restarts and an etcd pause: created, deleted and
failed at random (seeded) for a bounded time, while ``HolderWatch`` samples every
live pod on every pod event. Across the whole run no (node, device) is held by two
live pods of different workloads, and at its end no workload is left unplaced while
its retry is due and the group has room for it, nor Scheduled while its pods run
(``churn_checks.stuck``: a lost requeue, or a phase read from a Job status the
restart left stale), and every pod of a workload orphan-deleted while it ran is
still Running (``--cascade=orphan`` keeps the pods and their devices; no
``UnauthorizedDevices`` eviction). The controller runs as its own process (``python
main.py manager``), so it can be killed with SIGKILL and started again, as a crashed
pod would be.

kube-scheduler runs beside the manager with a stream of ordinary pods asking
``nvidia.com/gpu`` (the default scheduler's, ``Foreign``): the group's nodes are
named (the ``gpu.orchestrator.dev/device-authority`` label and taint, docs/install.md)
and one counted node is added to it; ``HolderWatch`` also counts each node's named
devices plus counted GPUs against its GPUs, and no node is ever over-committed
(``CHURN_FOREIGN=0`` leaves the stream out).

``CHURN_SEED`` and ``CHURN_SECONDS`` change the seed and the duration; ``CHURN_NODES``,
``CHURN_GPUS``, ``CHURN_LIVE``, ``CHURN_KILLS`` and ``CHURN_PACE`` its size (``make
soak`` runs 100 x 8 for ten minutes with nine kill -9s); ``CHURN_RESTARTS`` the
kube-apiserver restarts (1) and ``CHURN_ETCD_PAUSE`` the seconds etcd is stopped
once (3; ``make soak``: 2 restarts, 20 s).
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

from api.v1alpha1.keys import DEVICE_AUTHORITY_LABEL, WORKLOAD_LABEL
from api.v1alpha1.types import API_VERSION, SchedulingStrategy
from hack.testenv import ControlPlane
from runtime import ApiError, Client, NotFound
from tests.integration.controller.churn_checks import (
    DEVICE_MIB,
    Foreign,
    GPUNodes,
    Orphaner,
    ask_node_fit,
    settled,
)
from tests.integration.controller.churn_process import ControllerProcess, release_finalizers
from tests.integration.controller.conftest import (
    NodeGroup,
    delete_workload,
    workload,
)
from tests.integration.controller.holders import HolderWatch
from tests.waiting import eventually

SEED = int(os.environ.get("CHURN_SEED") or 11)
SECONDS = float(os.environ.get("CHURN_SECONDS") or 45)
#: where the controller's log is kept (default: the test's tmp_path)
LOG = os.environ.get("CHURN_LOG")
#: the node group, and the workloads alive at once at most (``make soak``: 100 x 8)
NODES = int(os.environ.get("CHURN_NODES") or 3)
GPUS = int(os.environ.get("CHURN_GPUS") or 4)
LIVE_MAX = int(os.environ.get("CHURN_LIVE") or 10)
#: kill -9s of the controller, spread evenly over the run
KILLS = int(os.environ.get("CHURN_KILLS") or 2)
#: the pause between two random actions is 0.1-0.5 s times this
PACE = float(os.environ.get("CHURN_PACE") or 1.0)
#: kube-apiserver restarts, spread over the run; one etcd pause of this many seconds
RESTARTS = int(os.environ.get("CHURN_RESTARTS") or 1)
ETCD_PAUSE = float(os.environ.get("CHURN_ETCD_PAUSE") or 3)
#: kube-scheduler and a stream of default-scheduler GPU pods beside the manager
FOREIGN = os.environ.get("CHURN_FOREIGN", "1") not in ("0", "")
NAMED_TAINT = {"key": DEVICE_AUTHORITY_LABEL, "value": "named", "effect": "NoSchedule"}


def tpl(rng: random.Random) -> dict[str, Any]:
    return {"spec": {"terminationGracePeriodSeconds": rng.choice([2, 3]),
                     "containers": [{"name": "main", "image": "busybox:1.36"}]}}


class Churn:
    """The random actions, and what they did (``done``)."""

    def __init__(self, admin: Client, cluster: ControlPlane, ns: str, group: NodeGroup,
                 nodes: list[str], rng: random.Random) -> None:
        self.admin, self.cluster, self.ns, self.group = admin, cluster, ns, group
        self.nodes, self.rng = nodes, rng
        self.live: list[str] = []
        self.serial = 0
        self.done: Counter[str] = Counter()
        #: pods of workloads orphan-deleted while they ran (pod -> workload), and the
        #: pods the churn itself failed or deleted since
        self.orphans: dict[str, str] = {}
        self.touched: set[str] = set()
        self.fit_rng = random.Random(SEED + 2)  # node-fit asks, off the main sequence

    def _name(self, prefix: str) -> str:
        self.serial += 1
        return f"{prefix}{self.serial}"

    def spec(self) -> tuple[str, dict[str, Any]]:
        rng = self.rng
        strategy = rng.choice(list(SchedulingStrategy))
        spec: dict[str, Any] = {"nodeSelector": self.group.selector, "template": tpl(rng),
                                "schedulingStrategy": strategy.value,
                                "priority": rng.choice(["low", "medium", "high", 10, 90]),
                                "retryPolicy": {"maxRetries": 3, "backoffSeconds": 1,
                                                "maxBackoffSeconds": 3}}
        self.done.update(ask_node_fit(spec["template"], self.fit_rng, self.nodes,
                                      selector=strategy is not SchedulingStrategy.ANNOTATION_MAP))
        kind = rng.random()
        if strategy is SchedulingStrategy.ANNOTATION_MAP:
            replicas, gpus = rng.choice([1, 2]), rng.choice([1, 2])
            lines = [f"{i}={rng.choice(self.nodes)}:"
                     f"{','.join(map(str, sorted(rng.sample(range(GPUS), gpus))))}"
                     for i in range(replicas)]
            spec.update(replicas=replicas, gpusPerReplica=gpus, schedulingMap="\n".join(lines))
            return self._name("map"), spec
        if kind < 0.12:  # a share of one device (memory or fraction, time-sliced or MPS)
            share = rng.choice([{"memory": "20Gi"}, {"memory": "40Gi"}, {"fraction": "0.25"},
                                {"fraction": "0.5"}])
            spec.update(replicas=rng.choice([1, 2]), schedulingStrategy="bestFit", gpuShare={
                **share, "mode": rng.choice(["timeSlicing", "mps"])})  # bestFit packs them
            return self._name("share"), spec
        if kind < 0.2:  # a MIG instance of the first node's device 0
            spec.update(migProfile="1g.10gb")
            return self._name("mig"), spec
        if kind < 0.4:
            spec.update(replicas=rng.choice([2, 3]), gpusPerReplica=rng.choice([1, 2]))
            return self._name("gang"), spec
        if kind < 0.52:
            spec.update(workloadKind="Job", gpusPerReplica=rng.choice([1, 2]))
            return self._name("job"), spec
        if kind < 0.6:
            spec.update(gpusPerReplica=rng.choice([1, 2]), deviceExposure=rng.choice(
                ["nvidia-visible-devices", "cuda-visible-devices"]))
        else:
            spec.update(gpusPerReplica=rng.choice([1, 2, 3, 4]))
        return self._name("w"), spec

    def create(self) -> None:
        name, spec = self.spec()
        try:
            self.admin.create(workload(name, self.ns, **spec))
        except ApiError as exc:  # a map the API refuses is a user error, not ours
            self.done[f"create refused ({exc.status})"] += 1
            return
        self.live.append(name)
        self.done["created"] += 1
        if name.startswith(("share", "mig")):
            self.done[f"created {name.rstrip('0123456789')}"] += 1

    def preempt(self, replicas: int = 1) -> str:
        """Whole nodes for a high-priority workload (a gang with ``replicas`` > 1) of
        the priority strategy, once the group is full of lower-priority work: it
        preempts and waits."""
        name = self._name("vip")
        self.admin.create(workload(name, self.ns, replicas=replicas, gpusPerReplica=GPUS,
                                   priority=100, schedulingStrategy="priority",
                                   template=tpl(self.rng), nodeSelector=self.group.selector))
        self.live.append(name)
        self.done["preemptor created"] += 1
        return name

    def delete(self) -> None:
        if not self.live:
            return
        name = self.live.pop(self.rng.randrange(len(self.live)))
        orphan = self.rng.random() < 0.1
        if orphan:  # its running pods must run on: the garbage collector keeps them
            self.orphans.update({p["metadata"]["name"]: name for p in self._pods()
                                 if (p["metadata"].get("labels") or {}).get(WORKLOAD_LABEL)
                                 == name})
        with contextlib.suppress(NotFound):
            self.admin.delete(API_VERSION, "GPUWorkload", name, namespace=self.ns,
                              propagation_policy="Orphan" if orphan else "Background")
        self.done["deleted (orphan)" if orphan else "deleted"] += 1

    def _pods(self) -> list[dict[str, Any]]:
        return [p for p in self.admin.list("v1", "Pod", namespace=self.ns)["items"]
                if not p["metadata"].get("deletionTimestamp")
                and (p.get("status") or {}).get("phase") == "Running"]

    def fail_pod(self) -> None:
        pods = self._pods()
        if not pods:
            return
        pod = self.rng.choice(pods)["metadata"]["name"]
        self.touched.add(pod)
        try:
            self.cluster.set_pod_phase(self.ns, pod, "Failed", timeout=5)
            self.done["pod failed"] += 1
        except (RuntimeError, TimeoutError):
            self.done["pod failed (gone first)"] += 1

    def delete_pod(self) -> None:
        pods = self._pods()
        if not pods:
            return
        pod = self.rng.choice(pods)["metadata"]["name"]
        self.touched.add(pod)
        with contextlib.suppress(NotFound):
            self.admin.delete("v1", "Pod", pod, namespace=self.ns)
            self.done["pod deleted"] += 1

    def orphans_lost(self) -> list[str]:
        """Pods of orphan-deleted workloads that are no longer Running although the
        churn never touched them (evicted, deleted or failed by someone else)."""
        pods = {p["metadata"]["name"]: p
                for p in self.admin.list("v1", "Pod", namespace=self.ns)["items"]}
        lost = []
        for pod, owner in sorted(self.orphans.items()):
            p = pods.get(pod)
            if pod in self.touched:
                continue
            if p is None or p["metadata"].get("deletionTimestamp") or \
                    (p.get("status") or {}).get("phase") != "Running":
                why = "gone" if p is None else (
                    "deleting" if p["metadata"].get("deletionTimestamp")
                    else (p.get("status") or {}).get("phase"))
                lost.append(f"{pod} (of {owner}): {why}")
        return lost

    def step(self) -> None:
        r = self.rng.random()
        if r < 0.40 and len(self.live) < LIVE_MAX:
            self.create()
        elif r < 0.65:
            self.delete()
        elif r < 0.85:
            self.fail_pod()
        else:
            self.delete_pod()


def gone(admin: Client, ns: str) -> bool:
    left = admin.list(API_VERSION, "GPUWorkload", namespace=ns)["items"]
    pods = [p for p in admin.list("v1", "Pod", namespace=ns)["items"]
            if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    return not left and not pods


def test_churn_never_gives_a_device_to_two_workloads(
        installed: ControlPlane, admin: Client, namespace: str, group: NodeGroup,
        tmp_path: Path) -> None:
    rng = random.Random(SEED)
    nodes = group.add(NODES, gpus=GPUS)
    counted: list[str] = []
    foreign = Foreign(admin, namespace, group, random.Random(SEED + 1)) if FOREIGN else None
    if foreign is not None:  # named nodes, one counted node, kube-scheduler beside us
        for n in nodes:
            admin.patch("v1", "Node", n, {"metadata": {"labels": {
                DEVICE_AUTHORITY_LABEL: "named"}}, "spec": {"taints": [NAMED_TAINT]}})
        counted = group.add(1, gpus=GPUS, labels={DEVICE_AUTHORITY_LABEL: "counted"})
        installed.start_scheduler()
    ctl = ControllerProcess(installed, Path(LOG) if LOG else tmp_path / "controller.log")
    gpunodes = GPUNodes(admin, nodes, GPUS)
    gpunodes.create()
    watch = HolderWatch(admin, device_memory_mib=DEVICE_MIB,
                        capacity={n: GPUS for n in nodes + counted}).start()
    churn = Churn(admin, installed, namespace, group, nodes, rng)
    # kill -9 at these points of the run (two: at 35% and 70%)
    kills = [SECONDS * (0.35 * (i + 1) if KILLS == 2 else (i + 1) / (KILLS + 1))
             for i in range(KILLS)]
    # kube-apiserver restarts between the kills; the etcd pause at 85%
    restarts = [SECONDS * (0.2 + 0.6 * i / max(1, RESTARTS)) for i in range(RESTARTS)]
    pauses = [SECONDS * 0.85] if ETCD_PAUSE > 0 else []
    # preemptions: (when, replicas, delay of the victims' orphan delete into the wait),
    # three per 45 s
    delays = [(1, 0.2), (2, 1.0), (1, 2.0)]
    count = max(3, round(3 * SECONDS / 45))
    preemptions = [(SECONDS * (0.25 + 0.6 * i / count), *delays[i % 3]) for i in range(count)]
    orphaner = Orphaner(admin, namespace)
    try:
        ctl.start()
        started = time.monotonic()
        # every planned fault happens: a 20 s etcd pause at 85% of a short run ends
        # past its last kill's time, which is then made once the pause is over
        while ((elapsed := time.monotonic() - started) < SECONDS
               or kills or restarts or pauses):
            if ctl.restarted_after_lease_loss():
                churn.done["controller restarts after losing its Lease"] += 1
            assert ctl.alive(), f"the controller exited:\n{ctl.tail()}"
            if kills and elapsed >= kills[0]:
                kills.pop(0)
                ctl.kill9()
                churn.done["controller kill -9"] += 1
                ctl.start()
            if restarts and elapsed >= restarts[0]:
                restarts.pop(0)
                installed.restart_apiserver()
                churn.done["kube-apiserver restart"] += 1
            if pauses and elapsed >= pauses[0]:
                pauses.pop(0)
                installed.pause_etcd(ETCD_PAUSE)
                churn.done[f"etcd paused {ETCD_PAUSE:g} s"] += 1
            if preemptions and elapsed >= preemptions[0][0]:
                _, replicas, delay = preemptions.pop(0)
                orphaner.watch(churn.preempt(replicas), delay)
            orphaner.step(churn.live)
            gpunodes.beat()
            churn.step()
            if foreign is not None:
                foreign.step()
            time.sleep(rng.uniform(0.1, 0.5) * PACE)

        # No requeue lost: once the actions stop, nothing is left behind.
        left = settled(admin, namespace, nodes, GPUS, timeout=60)
        assert not left, f"left behind: {left}\n{ctl.tail()}"
        # Orphans run on: none evicted as an intruder, none lost.
        lost = churn.orphans_lost()
        intruders = [e for e in admin.list("v1", "Event", namespace=namespace)["items"]
                     if e.get("reason") == "UnauthorizedDevices"]
        churn.done["orphaned pods kept"] = len(churn.orphans) - len(lost)
        assert not lost and not intruders, (
            f"orphans lost: {lost}; intruder Warnings: "
            f"{[(e['involvedObject']['name'], e.get('message')) for e in intruders][:5]}")

        # Everything goes; the controller (our finalizer) sees every child gone.
        for name in churn.live:
            delete_workload(admin, namespace, name)
        for p in admin.list("v1", "Pod", namespace=namespace)["items"]:  # orphans
            with contextlib.suppress(NotFound):
                admin.delete("v1", "Pod", p["metadata"]["name"], namespace=namespace)
        eventually(lambda: gone(admin, namespace), timeout=90, interval=0.5,
                   what="every workload and pod of the churn gone")
        # Nothing leaked: the whole group is free again for one gang.
        gpunodes.without_mig()
        admin.create(workload("after", namespace, replicas=NODES, gpusPerReplica=GPUS,
                              nodeSelector=group.selector, template=tpl(rng)))

        def after_running() -> bool:
            w = admin.get(API_VERSION, "GPUWorkload", "after", namespace)
            return (w.get("status") or {}).get("phase") == "Running"
        eventually(after_running, timeout=60, what="a gang over the whole group Running")
        delete_workload(admin, namespace, "after")
        eventually(lambda: gone(admin, namespace), timeout=60, what="'after' gone")
    finally:
        watch.stop()
        ctl.stop()
        if foreign is not None:
            installed.stop_scheduler()
        release_finalizers(admin, namespace)
        gpunodes.delete()
    churn.done["victims orphan-deleted while their preemptor waited"] = len(orphaner.orphaned)
    summary = ", ".join(f"{k}: {v}" for k, v in sorted(churn.done.items()))
    print(f"\nchurn (seed {SEED}, {SECONDS:.0f}s, {NODES}x{GPUS} GPUs): {watch.samples} "
          f"samples, {len(watch.overlaps)} overlaps, {len(left)} workloads stuck, "
          f"{len(watch.portions)} pods holding a share or a MIG instance, at most "
          f"{watch.shared_max} workloads on one device; {summary}")
    assert watch.overlaps == [], (
        f"{len(watch.overlaps)} overlaps, first: {watch.overlaps[:5]}\n{ctl.tail()}")
    assert watch.overcommits == [], (
        f"{len(watch.overcommits)} over-commits, first: {watch.overcommits[:5]}")
    rejected = installed.admission_rejections(namespace)
    print(f"pods rejected by the kubelet's admission: {len(rejected)}")
    assert rejected == [], f"{len(rejected)} pods rejected, first: {rejected[:5]}"
    if foreign is not None:
        print(f"default-scheduler GPU pods: {foreign.serial} created, bound to "
              f"{sorted(Counter(foreign.bound.values()).items())}, 0 over-commits")
        assert foreign.bound and set(foreign.bound.values()) <= set(counted), foreign.bound
    assert churn.done["created"] >= 10 and churn.done["controller kill -9"] == KILLS
    assert churn.done["kube-apiserver restart"] == RESTARTS
