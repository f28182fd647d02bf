"""The owners' caches (controllers/podbinding/owners.py): a JobSet or LeaderWorkerSet
API served only after the manager started is watched once discovery serves it, and
its pods are looked at again, without a restart (issue 34: JobSet installed after
gpu-orchestrator)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import structlog

from controllers.podbinding.owners import OwnerCaches, owner_lookup, requeue_members
from internal.scheduling.podgroups import JOBSET_API, JOBSET_NAME_LABEL, LWS_API, LWS_NAME_LABEL
from runtime import NotFound, Request
from runtime.errors import ApiError
from runtime.store import Indexer
from tests.waiting import eventually


@contextmanager
def info_logs() -> Iterator[list[dict[str, Any]]]:
    """What is logged, info lines too (the test run keeps only warnings)."""
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
    try:
        with structlog.testing.capture_logs() as captured:
            yield captured
    finally:
        structlog.configure(**saved)


class Informer:
    def __init__(self, synced: bool) -> None:
        self.indexer = Indexer()
        self.synced = synced

    def has_synced(self) -> bool:
        return self.synced


class Discovery:
    """``resource_for`` of a server that serves ``kinds``; ``failing`` answer 503."""

    def __init__(self, *kinds: str) -> None:
        self.kinds, self.failing = set(kinds), set[str]()
        self.asked: list[str] = []

    def resource_for(self, api_version: str, kind: str) -> object:
        self.asked.append(kind)
        if kind in self.failing:
            raise ApiError(503, "ServiceUnavailable", "etcd leader changed")
        if kind not in self.kinds:
            raise NotFound(404, "NotFound", f"no {api_version}")
        return object()


class Mgr:
    def __init__(self, client: Discovery, synced: bool = False) -> None:
        self.client, self.synced = client, synced
        self.informers: dict[str, Informer] = {}
        self.added: list[tuple[Any, bool]] = []

    def informer_for(self, api_version: str, kind: str) -> Informer:
        return self.informers.setdefault(kind, Informer(self.synced))

    def add(self, runnable: Any, need_leader_election: bool = True) -> None:
        self.added.append((runnable, need_leader_election))


def pod(name: str, labels: dict[str, str], scheduler: str = "gpu-scheduler") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "labels": labels},
            "spec": {"schedulerName": scheduler}}


def test_a_jobset_served_after_the_start_is_read_from_its_cache_once_synced() -> None:
    disco = Discovery("Job")
    mgr = Mgr(disco)
    caches = OwnerCaches(mgr, clock=lambda: 0.0)  # type: ignore[arg-type]
    assert set(mgr.informers) == {"Job"}  # nothing that would never sync
    assert caches(JOBSET_API, "JobSet", "ns", "train") is None  # refused as unreadable

    disco.kinds.add("JobSet")  # installed meanwhile
    caches.look()
    assert set(mgr.informers) == {"Job", "JobSet"}  # started: the manager's factory
    assert "LeaderWorkerSet" not in mgr.informers  # still 404
    jobset = {"metadata": {"name": "train", "namespace": "ns", "uid": "u1"}}
    mgr.informers["JobSet"].indexer.add(jobset)
    assert caches.promote_synced() == []  # its list not in yet: still unread
    assert caches(JOBSET_API, "JobSet", "ns", "train") is None

    told: list[str] = []
    caches.when_served(lambda api, kind: told.append(kind))
    mgr.informers["JobSet"].synced = True
    with info_logs() as logs:
        assert caches.promote_synced() == [(JOBSET_API, "JobSet")]
    assert caches(JOBSET_API, "JobSet", "ns", "train") == jobset
    assert told == ["JobSet"]
    assert [(e["event"], e["kind"]) for e in logs] == [("podgroups.owner_served", "JobSet")]
    assert logs[0]["log_level"] == "info"


def test_a_miss_asks_discovery_within_min_recheck_not_at_once_and_not_only_every_period() -> None:
    now = [100.0]
    caches = OwnerCaches(Mgr(Discovery("Job")), period=30.0, min_recheck=5.0,  # type: ignore[arg-type]
                         clock=lambda: now[0])
    caches.look()  # at 100
    now[0] = 102.0
    assert caches.until_due(now[0]) == 28.0  # nobody asked: the period
    caches(LWS_API, "LeaderWorkerSet", "ns", "serve")  # a pod of it read
    assert caches.until_due(now[0]) == 3.0  # rate-limited: 5 s after the last look
    now[0] = 105.0
    assert caches.until_due(now[0]) == 0.0
    caches.look()
    assert caches.until_due(105.0) == 30.0  # the miss was answered


def test_a_discovery_error_other_than_404_starts_no_informer_after_the_start() -> None:
    disco = Discovery("Job")
    mgr = Mgr(disco)
    caches = OwnerCaches(mgr)  # type: ignore[arg-type]
    disco.failing.add("JobSet")
    caches.look()
    assert set(mgr.informers) == {"Job"}  # a list that may 404 forever: never started
    disco.failing.clear()
    disco.kinds.add("JobSet")
    caches.look()
    assert "JobSet" in mgr.informers


def test_the_served_hook_requeues_the_pods_of_that_owner_that_we_schedule() -> None:
    pods = Indexer()
    for p in (pod("js-0", {JOBSET_NAME_LABEL: "train"}), pod("lws-0", {LWS_NAME_LABEL: "s"}),
              pod("other", {JOBSET_NAME_LABEL: "t"}, scheduler="default-scheduler"),
              pod("plain", {})):
        pods.add(p)
    queued: list[Request] = []
    hook = requeue_members(pods, lambda p: p["spec"]["schedulerName"] == "gpu-scheduler",
                           queued.append)
    hook(JOBSET_API, "JobSet")
    assert queued == [Request("ns", "js-0")]
    hook(LWS_API, "LeaderWorkerSet")
    assert queued[1:] == [Request("ns", "lws-0")]


def test_the_looks_run_on_their_own_thread_until_every_kind_is_watched() -> None:
    """A miss wakes the thread at once (min_recheck 0 here); it stops when asked."""
    disco = Discovery("Job")
    mgr = Mgr(disco, synced=True)
    caches = OwnerCaches(mgr, period=3600.0, min_recheck=0.0)  # type: ignore[arg-type]
    caches.start()
    try:
        disco.kinds |= {"JobSet", "LeaderWorkerSet"}
        assert caches(JOBSET_API, "JobSet", "ns", "a") is None
        eventually(lambda: caches.watched(JOBSET_API, "JobSet")
                   and caches.watched(LWS_API, "LeaderWorkerSet"), timeout=5,
                   what="both kinds watched after one miss")
    finally:
        caches.stop(5.0)
    assert not any(t.name == "podgroup-owners" and t.is_alive() for t in threading.enumerate())


def test_without_a_miss_the_period_finds_a_kind_served_late() -> None:
    """A manager started while discovery answered 404 (just after a kube-apiserver
    restart), with no pod of the kind to ask: the periodic look finds it."""
    disco = Discovery("Job")
    mgr = Mgr(disco, synced=True)
    caches = OwnerCaches(mgr, period=0.05, min_recheck=3600.0)  # type: ignore[arg-type]
    caches.start()
    try:
        disco.kinds.add("JobSet")
        eventually(lambda: caches.watched(JOBSET_API, "JobSet"), timeout=5,
                   what="JobSet watched by the periodic look")
    finally:
        caches.stop(5.0)


def test_one_owner_caches_per_manager_run_without_leader_election() -> None:
    mgr = Mgr(Discovery("Job", "JobSet", "LeaderWorkerSet"))
    first = owner_lookup(mgr)  # type: ignore[arg-type]
    assert owner_lookup(mgr) is first  # type: ignore[arg-type]
    assert mgr.added == [(first, False)]
