"""Three teams' queues under churn: random arrivals and deletes (seeded) across three
GPUQueues of one cohort on 4 nodes x 4 GPUs (13 of the 16 GPUs the cohort's nominal
quota), with reclaims, priorities, kill -9s of the controller (its own process, as in
test_churn.py), kube-apiserver restarts and an etcd pause. At every pod event, no
queue's live pods hold more than its nominal plus borrowing limit, the cohort's no
more than its nominal total (a reclaimer waits for its victims' pods), and no device
is held by two workloads; no workload is preempted more than once by the same arrival
(``PreemptionWatch``: each time a workload's Preempted condition turns True, with
the preemptor it names); afterwards the system settles: nothing is left waiting for
victims, nothing Failed, every pending workload says its queue's reason, and each
queue's status counts what its live pods hold.

``CHURN_SEED`` changes the seed (2511), ``CHURN_KILLS`` the kill -9s (2, at 35% and
70% of the run), ``CHURN_SECONDS`` the duration (40), ``CHURN_RESTARTS`` the
kube-apiserver restarts (1), ``CHURN_ETCD_PAUSE`` the seconds etcd is stopped once
(3), ``CHURN_LOG`` where the controller's log goes. Every GPUWorkload create must be
admitted, the ones right after a restart included."""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from api.v1alpha1.keys import DEVICES_ANNOTATION
from api.v1alpha1.types import API_VERSION
from controllers.gpuworkload.backstop import DEFAULT_PERIOD
from hack.testenv import ControlPlane
from runtime import Client
from runtime.manager import Options
from tests.integration.controller.churn_process import ControllerProcess, release_finalizers
from tests.integration.controller.conftest import NodeGroup, delete_workload, workload
from tests.integration.controller.holders import HolderWatch
from tests.integration.controller.preemptions import PreemptionWatch
from tests.waiting import eventually

#: team -> (nominalGPUs, borrowingLimit); the cohort's 13 GPUs of the cluster's 16
QUEUES = {"a": (5, 2), "b": (4, 3), "c": (4, 4)}
COHORT = sum(n for n, _ in QUEUES.values())
CHURN_SECONDS = float(os.environ.get("CHURN_SECONDS") or 40)
SEED = int(os.environ.get("CHURN_SEED") or 2511)
KILLS = int(os.environ.get("CHURN_KILLS") or 2)
RESTARTS = int(os.environ.get("CHURN_RESTARTS") or 1)
#: workloads alive at once at most (a ten-minute soak must not pile up thousands)
LIVE_MAX = 40
ETCD_PAUSE = float(os.environ.get("CHURN_ETCD_PAUSE") or 3)
LOG = os.environ.get("CHURN_LOG")
WAITING = {"WaitingForQuota", "Queued", "WaitingForCapacity"}
#: the last restart's manager leads within a Lease (15 s) of it; the backstop then
#: reconciles a workload no reconcile looked at within 1.5 periods (its first sweep
#: comes half a period in, and a workload is due a whole period after it is first
#: seen): the settle check waits at least that long after the last restart
SETTLE_BOUND = Options().lease_duration + 1.5 * DEFAULT_PERIOD + 10


def _gpus(pod: dict[str, Any]) -> int:
    value = ((pod["metadata"].get("annotations") or {}).get(DEVICES_ANNOTATION) or "")
    return len([t for t in value.split(",") if t.strip()])


def test_queues_under_churn_never_exceed_quota_and_settle(
        admin: Client, installed: ControlPlane, group: NodeGroup, tmp_path: Path) -> None:
    rng = random.Random(SEED)
    tag = uuid.uuid4().hex[:6]
    ns = {t: f"churn-{t}-{tag}" for t in QUEUES}
    queue = {t: f"cq-{t}-{tag}" for t in QUEUES}
    ceiling = {ns[t]: n + limit for t, (n, limit) in QUEUES.items()}
    group.add(4, gpus=4)
    ctl = ControllerProcess(installed, Path(LOG) if LOG else tmp_path / "controller.log")
    for t, (nominal, limit) in QUEUES.items():
        code, body = installed.api("POST", "/api/v1/namespaces", {
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns[t]}})
        assert code == 201, body
        admin.create({"apiVersion": API_VERSION, "kind": "GPUQueue",
                      "metadata": {"name": queue[t]},
                      "spec": {"nominalGPUs": nominal, "borrowingLimit": limit,
                               "cohort": f"churn-{tag}", "namespaceSelector": {
                                   "matchLabels": {"kubernetes.io/metadata.name": ns[t]}}}})
    over: list[tuple[str, int]] = []
    live_gpus: dict[str, int] = {}
    lock = threading.Lock()

    def on_live(pods: list[dict[str, Any]]) -> None:
        per: Counter[str] = Counter()
        for p in pods:
            if p["metadata"].get("namespace") in ceiling:
                per[p["metadata"]["namespace"]] += _gpus(p)
        with lock:
            live_gpus.clear()
            live_gpus.update(per)
            over.extend((n, g) for n, g in per.items() if g > ceiling[n])
            if sum(per.values()) > COHORT:
                over.append(("the cohort", sum(per.values())))

    watch = HolderWatch(admin, on_live=on_live).start()
    preempted = PreemptionWatch(admin, frozenset(ns.values())).start()
    live: list[tuple[str, str]] = []
    made = deleted = 0
    kills = [CHURN_SECONDS * (0.35 * (i + 1) if KILLS == 2 else (i + 1) / (KILLS + 1))
             for i in range(KILLS)]
    killed = 0
    restarts = [CHURN_SECONDS * (0.2 + 0.6 * i / max(1, RESTARTS)) for i in range(RESTARTS)]
    pauses = [CHURN_SECONDS * 0.85] if ETCD_PAUSE > 0 else []
    disturbed = Counter[str]()
    try:
        ctl.start()
        started = restarted = time.monotonic()
        # every planned fault happens, also when one ends past the run's time
        while ((elapsed := time.monotonic() - started) < CHURN_SECONDS
               or kills or restarts or pauses):
            if ctl.restarted_after_lease_loss():
                disturbed["controller restarts after losing its Lease"] += 1
                restarted = time.monotonic()
            assert ctl.alive(), f"the controller exited:\n{ctl.tail()}"
            if kills and elapsed >= kills[0]:
                kills.pop(0)
                ctl.kill9()
                killed += 1
                ctl.start()
                restarted = time.monotonic()
            if restarts and elapsed >= restarts[0]:
                restarts.pop(0)
                installed.restart_apiserver()
                disturbed["kube-apiserver restarts"] += 1
            if pauses and elapsed >= pauses[0]:
                pauses.pop(0)
                installed.pause_etcd(ETCD_PAUSE)
                disturbed[f"etcd paused {ETCD_PAUSE:g} s"] += 1
            if live and (rng.random() < 0.35 or len(live) >= LIVE_MAX):
                team, name = live.pop(rng.randrange(len(live)))
                delete_workload(admin, ns[team], name)
                deleted += 1
            else:
                team = rng.choice(list(QUEUES))
                made += 1
                name = f"w{made}"
                admin.create(workload(
                    name, ns[team], gpusPerReplica=rng.choice([1, 2, 4]),
                    replicas=rng.choice([1, 1, 2]), priority=rng.choice([0, 10, 50]),
                    nodeSelector=group.selector,
                    template={"spec": {"terminationGracePeriodSeconds": rng.choice([1, 2]),
                                       "containers": [{"name": "main",
                                                       "image": "busybox:1.36"}]}}))
                live.append((team, name))
            time.sleep(rng.uniform(0.1, 0.5))
        assert made > 40 and deleted > 10 and killed == KILLS
        assert disturbed["kube-apiserver restarts"] == RESTARTS

        why: list[str] = [""]

        def never_tried() -> list[str]:
            """Workloads without a Scheduled condition, by priority (the priority gate
            holds lower ones back while one of them waits)."""
            out = []
            for t in QUEUES:
                for w in admin.list(API_VERSION, "GPUWorkload", namespace=ns[t])["items"]:
                    st = w.get("status") or {}
                    if not any(c["type"] == "Scheduled" for c in st.get("conditions") or ()):
                        gone = "deleting" if w["metadata"].get("deletionTimestamp") else ""
                        out.append(f"{t}/{w['metadata']['name']} p{w['spec'].get('priority')} "
                                   f"{st.get('phase')} {sorted(st)} {gone}")
            return out

        def settled() -> bool:
            used = {}
            for t in QUEUES:
                status = admin.get(API_VERSION, "GPUQueue", queue[t]).get("status") or {}
                with lock:
                    held = live_gpus.get(ns[t], 0)
                if status.get("usedGPUs") != held:
                    why[0] = f"queue {t}: status usedGPUs {status.get('usedGPUs')}, pods {held}"
                    return False
                used[t] = held
            borrowing = {t for t in QUEUES if used[t] > QUEUES[t][0]}
            for t in QUEUES:
                for w in admin.list(API_VERSION, "GPUWorkload", namespace=ns[t])["items"]:
                    st = w.get("status") or {}
                    reason = next((c.get("reason") for c in st.get("conditions") or ()
                                   if c["type"] == "Scheduled"), None)
                    if st.get("phase") == "Running":
                        continue
                    name = w["metadata"]["name"]
                    if st.get("phase") != "Pending" or reason not in WAITING:
                        why[0] = (f"{t}/{name}: {st.get('phase')} {reason}: {st.get('message')}"
                                  f" (priority {w['spec'].get('priority')}; never tried: "
                                  f"{never_tried()})")
                        return False
                    one = w["spec"]["gpusPerReplica"] * w["spec"]["replicas"] == 1
                    if one and used[t] + 1 <= QUEUES[t][0] and borrowing - {t}:
                        why[0] = (f"{t}/{name}: 1 GPU within nominal, lent out, not "
                                  f"reclaimed (used {used}): {reason}: {st.get('message')}")
                        return False  # one GPU within its nominal, lent out: reclaim it
            return True
        try:
            bound = max(90.0, restarted + SETTLE_BOUND - time.monotonic())
            eventually(settled, timeout=bound, interval=1.0, what="queues settled")
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}: {why[0]} (meanwhile {len(watch.overlaps)} overlaps, {len(over)} "
                f"times above quota, preempted twice by one arrival: {preempted.repeated()})"
                f"\n{ctl.tail()}") from None
        print(f"\nqueue churn (seed {SEED}, {CHURN_SECONDS:.0f}s, {killed} kill -9s, "
              f"{dict(disturbed)}): "
              f"{made} created, {deleted} deleted, {preempted.total()} preemptions, "
              f"{watch.samples} samples, {len(watch.overlaps)} overlaps")
        assert over == [], f"live pods held more than a quota: {over[:5]}"
        assert watch.overlaps == [], f"{watch.overlaps[:5]}\n{ctl.tail()}"
        assert preempted.repeated() == {}, "preempted more than once by one arrival"
        for t in QUEUES:
            for w in admin.list(API_VERSION, "GPUWorkload", namespace=ns[t])["items"]:
                assert (w.get("status") or {}).get("retries", 0) == 0, w["metadata"]["name"]
    finally:
        watch.stop()
        preempted.stop()
        for t in QUEUES:
            for w in admin.list(API_VERSION, "GPUWorkload", namespace=ns[t])["items"]:
                delete_workload(admin, ns[t], w["metadata"]["name"])
        if ctl.alive():
            with contextlib.suppress(AssertionError):  # not to hide the test's own failure
                eventually(lambda: all(not admin.list(API_VERSION, "GPUWorkload",
                                                      namespace=ns[t])["items"] for t in QUEUES),
                           timeout=60, what="the churn's workloads gone")
        ctl.stop()
        for t in QUEUES:
            release_finalizers(admin, ns[t])
            admin.delete(API_VERSION, "GPUQueue", queue[t])
            installed.api("DELETE", f"/api/v1/namespaces/{ns[t]}")
