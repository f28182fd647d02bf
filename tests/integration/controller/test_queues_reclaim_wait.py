"""A reclaim never runs the cohort above its nominal quota, as a user watching the
pods sees it (docs/queues.md, reclaim).

Queues a and b, nominal 4 each, one cohort, on 3 nodes x 4 GPUs: the cluster has
room beyond the cohort's 8. Team a runs two 4-GPU workloads, one per node
(borrowing b's 4); b then asks for 4 GPUs on the third node, free, and takes its
quota back by reclaim: a's newest goes for the quota alone, on devices the
reclaimer does not take. The reclaimer's pods must still wait until the victim's
pods are gone, grace period included (5 s here), or the cohort's live pods hold 12
GPUs of its nominal 8 meanwhile. A watcher apart from the controller counts the
GPUs of the teams' live pods (bound, not finished, not yet deleted: terminating
ones count) at every pod event."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from api.v1alpha1.keys import DEVICES_ANNOTATION
from hack.testenv import ControlPlane
from runtime import Client
from tests.integration.controller.conftest import (
    NodeGroup,
    Running,
    get_workload,
    wait_events,
    wait_phase,
    workload,
)
from tests.integration.controller.holders import HolderWatch
from tests.integration.controller.queue_teams import Teams

NOMINAL = 4
POOL = "example.com/pool"
#: a victim's pod stays this long once deleted (kwok honours the grace period)
TEMPLATE = {"spec": {"terminationGracePeriodSeconds": 5,
                     "containers": [{"name": "main", "image": "busybox:1.36"}]}}


@pytest.fixture
def teams(installed: ControlPlane, admin: Client) -> Iterator[Teams]:
    t = Teams(installed, admin, nominal=NOMINAL)
    yield t
    t.cleanup()


def _gpus(pod: dict[str, Any]) -> int:
    value = (pod["metadata"].get("annotations") or {}).get(DEVICES_ANNOTATION) or ""
    return sum(1 for t in value.split(",") if t.strip().isdigit())


def test_a_reclaimer_starts_only_once_its_victims_pods_are_gone(
        controller: Running, admin: Client, teams: Teams, group: NodeGroup) -> None:
    nodes = {pool: group.add(1, gpus=4, labels={POOL: pool})[0] for pool in ("x", "y", "z")}
    controller.wait_nodes(list(nodes.values()))
    a, b = teams.ns["a"], teams.ns["b"]
    cohort = 2 * NOMINAL
    lock = threading.Lock()
    over: list[tuple[float, int, list[str]]] = []  # (when, GPUs, the pods)
    peak = [0]

    def on_live(pods: list[dict[str, Any]]) -> None:
        mine = [p for p in pods if p["metadata"].get("namespace") in (a, b)]
        used = sum(_gpus(p) for p in mine)
        with lock:
            peak[0] = max(peak[0], used)
            if used > cohort:
                over.append((time.monotonic(), used, sorted(
                    f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in mine)))

    def submit(ns: str, name: str, pool: str) -> None:
        admin.create(workload(name, ns, gpusPerReplica=4, template=TEMPLATE,
                              nodeSelector={**group.selector, POOL: pool}))

    watch = HolderWatch(admin, on_live=on_live).start()
    try:
        submit(a, "a0", "x")
        wait_phase(admin, a, "a0", "Running", timeout=60)
        submit(a, "a1", "y")  # the newer: the one reclaimed
        wait_phase(admin, a, "a1", "Running", timeout=60)
        teams.wait_used("a", 8, 4)

        submit(b, "b0", "z")  # free devices, but a holds b's quota
        events = wait_events(admin, b, "b0", "Preempting")
        assert any(f"preempting {a}/a1" in e["message"] for e in events), events
        wait_phase(admin, b, "b0", "Running", timeout=60)
        teams.wait_used("b", 4, 0)
        teams.wait_used("a", 4, 0)
        assert get_workload(admin, a, "a1")["status"]["phase"] == "Pending"
    finally:
        watch.stop()
    with lock:
        first = over[0] if over else None
        span = over[-1][0] - over[0][0] if over else 0.0
        most = max((g for _, g, _ in over), default=0)
    assert first is None, (
        f"the cohort's live pods held up to {most} GPUs of its nominal {cohort} for "
        f"{span:.1f} s ({len(over)} pod events), first: {first[2]}")
    assert peak[0] == cohort  # the watcher saw the cohort full
    # the reclaimer's pod was created after the victim's pod was gone
    created = watch.first_rv("ADDED", f"{b}/b0-0")
    gone = watch.first_rv("DELETED", f"{a}/a1-0")
    assert gone is not None and created is not None and gone < created
    assert watch.overlaps == []
