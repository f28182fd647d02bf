"""Three teams' queues under churn: random arrivals and deletes (seeded) across three
GPUQueues of one cohort on 4 nodes x 4 GPUs, with reclaims and priorities. At every
pod event, no queue's live pods hold more than its nominal plus borrowing limit
and no device is held by two workloads; afterwards the system settles: nothing is
left waiting for victims, nothing Failed, every pending workload says its queue's
reason, and each queue's status counts what its live pods hold."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter
from typing import Any

from api.v1alpha1.keys import DEVICES_ANNOTATION
from api.v1alpha1.types import API_VERSION
from hack.testenv import ControlPlane
from runtime import Client
from tests.integration.controller.conftest import NodeGroup, Running, delete_workload, workload
from tests.integration.controller.holders import HolderWatch
from tests.waiting import eventually

#: team -> (nominalGPUs, borrowingLimit); the cohort's 16 GPUs are the cluster's
QUEUES = {"a": (6, 2), "b": (5, 3), "c": (5, 4)}
CHURN_SECONDS = 40
WAITING = {"WaitingForQuota", "Queued", "WaitingForCapacity"}


def _gpus(pod: dict[str, Any]) -> int:
    value = ((pod["metadata"].get("annotations") or {}).get(DEVICES_ANNOTATION) or "")
    return len([t for t in value.split(",") if t.strip()])


def test_queues_under_churn_never_exceed_quota_and_settle(
        controller: Running, admin: Client, installed: ControlPlane, group: NodeGroup) -> None:
    rng = random.Random(2511)
    tag = uuid.uuid4().hex[:6]
    ns = {t: f"churn-{t}-{tag}" for t in QUEUES}
    queue = {t: f"cq-{t}-{tag}" for t in QUEUES}
    ceiling = {ns[t]: n + limit for t, (n, limit) in QUEUES.items()}
    controller.wait_nodes(group.add(4, gpus=4))
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

    watch = HolderWatch(admin, on_live=on_live).start()
    live: list[tuple[str, str]] = []
    made = deleted = 0
    try:
        deadline = time.monotonic() + CHURN_SECONDS
        while time.monotonic() < deadline:
            if live and rng.random() < 0.35:
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
        assert made > 40 and deleted > 10

        def settled() -> bool:
            used = {}
            for t in QUEUES:
                status = admin.get(API_VERSION, "GPUQueue", queue[t]).get("status") or {}
                with lock:
                    held = live_gpus.get(ns[t], 0)
                if status.get("usedGPUs") != held:
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
                    if st.get("phase") != "Pending" or reason not in WAITING:
                        return False
                    one = w["spec"]["gpusPerReplica"] * w["spec"]["replicas"] == 1
                    if one and used[t] + 1 <= QUEUES[t][0] and borrowing - {t}:
                        return False  # one GPU within its nominal, lent out: reclaim it
            return True
        eventually(settled, timeout=90, interval=1.0, what="queues settled")
        assert over == [], f"a queue's live pods held more than its quota: {over[:5]}"
        assert watch.overlaps == []
        for t in QUEUES:
            for w in admin.list(API_VERSION, "GPUWorkload", namespace=ns[t])["items"]:
                assert (w.get("status") or {}).get("retries", 0) == 0, w["metadata"]["name"]
    finally:
        watch.stop()
        for t in QUEUES:
            for w in admin.list(API_VERSION, "GPUWorkload", namespace=ns[t])["items"]:
                delete_workload(admin, ns[t], w["metadata"]["name"])
            admin.delete(API_VERSION, "GPUQueue", queue[t])
            installed.api("DELETE", f"/api/v1/namespaces/{ns[t]}")
