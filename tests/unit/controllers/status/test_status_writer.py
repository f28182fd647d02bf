"""The status writer against a fake API whose writes can be held in flight (a
deterministic pause point): a commit never follows a write that may still land,
an in-flight write that was settled or forgotten is not retried, a write never
lands on another object of the same name, and a later write's mark survives an
earlier one landing."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from api.v1alpha1.keys import CHILDREN_FINALIZER
from api.v1alpha1.types import API_VERSION
from controllers.shared.own_writes import OwnWrites
from controllers.status.writer import RETRY_BASE, StatusWriter
from internal.metrics.domain import STATUS_DROPPED
from runtime import Conflict, Invalid, NotFound
from runtime.errors import ApiError, BadRequest, Forbidden, TooManyRequests
from runtime.store import Indexer, thaw
from tests.unit.controllers.fakes import internal, merge

NS = "ns"
KEY = f"{NS}/w"


class API:
    """One GPUWorkload in the API (``objects``) and in the cache (``cache``), which
    the test moves on. Call ``i`` of ``patch`` waits on ``gates[i]`` when there is
    one (held in flight), then raises ``fail[i]`` when there is one."""

    def __init__(self) -> None:
        self.rv = itertools.count(100)
        self.cache = Indexer()
        self.objects: dict[str, dict[str, Any]] = {}
        self.calls: list[dict[str, Any]] = []
        self.entered: list[threading.Event] = [threading.Event() for _ in range(8)]
        self.gates: dict[int, threading.Event] = {}
        self.fail: dict[int, Exception] = {}
        self.during: dict[int, Callable[[], None]] = {}

    def create(self, uid: str) -> dict[str, Any]:
        obj = {"apiVersion": API_VERSION, "kind": "GPUWorkload",
               "metadata": {"name": "w", "namespace": NS, "uid": uid,
                            "resourceVersion": str(next(self.rv))}, "spec": {}, "status": {}}
        self.objects["w"] = obj
        self.cache.add(thaw(obj))
        return thaw(obj)

    def patch(self, api_version: str, kind: str, name: str, body: dict[str, Any],
              namespace: str | None = None, patch_type: str = "merge",
              subresource: str | None = None) -> dict[str, Any]:
        i = len(self.calls)
        self.calls.append(thaw(body))
        self.entered[i].set()
        gate = self.gates.get(i)
        if gate is not None:
            assert gate.wait(5), "a gate was never opened"
        hook = self.during.get(i)
        if hook is not None:
            hook()
        if i in self.fail:
            raise self.fail[i]
        obj = self.objects.get(name)
        if obj is None:
            raise NotFound(404, "NotFound", f'gpuworkloads "{name}" not found')
        if patch_type == "json":  # what the writer sends: test the UID, set status
            assert subresource == "status"
            test, add = body
            assert (test["op"], test["path"], add["op"], add["path"]) == (
                "test", "/metadata/uid", "add", "/status")
            if test["value"] != obj["metadata"]["uid"]:
                raise Invalid(422, "Invalid", "the server rejected our request")
            obj["status"] = thaw(add["value"])
            obj["metadata"]["resourceVersion"] = str(next(self.rv))
            return thaw(obj)
        meta = body.get("metadata") or {}
        if meta.get("uid") not in (None, obj["metadata"]["uid"]):
            raise Conflict(409, "Conflict", "Precondition failed: UID in precondition")
        if meta.get("resourceVersion") not in (None, obj["metadata"]["resourceVersion"]):
            raise Conflict(409, "Conflict", "the object has been modified")
        if subresource == "status":
            merge(obj, {"status": body.get("status") or {}})
        else:
            merge(obj, {"metadata": {k: v for k, v in meta.items()
                                     if k not in ("uid", "resourceVersion")}})
        obj["metadata"]["resourceVersion"] = str(next(self.rv))
        return thaw(obj)

    def get(self, api_version: str, kind: str, name: str,
            namespace: str | None = None) -> dict[str, Any]:
        obj = self.objects.get(name)
        if obj is None:
            raise NotFound(404, "NotFound", "not found")
        return thaw(obj)


@pytest.fixture
def api() -> API:
    return API()


def writer_of(api: API, **kw: Any) -> StatusWriter:
    w = StatusWriter(api, api.cache, threads=1, **kw)
    w.start()
    return w


def hold(api: API, call: int) -> threading.Event:
    gate = threading.Event()
    api.gates[call] = gate
    return gate


# ------------------------------------------------------------------- settle


def test_settle_says_it_did_not_settle_while_a_write_is_still_in_flight(api: API) -> None:
    raw = api.create("uid-1")
    gate = hold(api, 0)
    writer = writer_of(api)
    try:
        writer.submit(raw, {"phase": "Pending", "placements": None})
        assert api.entered[0].wait(5)
        assert writer.settle(KEY, timeout=0.1) is False
        gate.set()
        assert writer.settle(KEY, timeout=5) is True
    finally:
        gate.set()
        writer.stop()


def test_a_settled_write_that_fails_in_flight_is_not_retried(api: API) -> None:
    """Its retry could land after the commit that follows the settle and erase the
    committed placement (``placements: null``)."""
    raw = api.create("uid-1")
    gate = hold(api, 0)
    api.fail[0] = internal()
    writer = writer_of(api)
    try:
        writer.submit(raw, {"phase": "Pending", "placements": None})
        assert api.entered[0].wait(5)
        assert writer.settle(KEY, timeout=0.05) is False  # the caller requeues
        gate.set()  # the write in flight fails
        assert writer.flush(2)
        assert len(api.calls) == 1  # not tried again
        assert api.objects["w"]["status"] == {}
    finally:
        gate.set()
        writer.stop()


def test_a_settled_write_that_fails_in_flight_takes_back_its_mark(api: API) -> None:
    """It never landed: it no longer makes every cached copy older, and ``view`` no
    longer shows its status (else a gang that decides the same wait again finds it
    unchanged and writes nothing, and stays without its Scheduled condition)."""
    raw = api.create("uid-1")
    own = OwnWrites()
    gate = hold(api, 0)
    api.fail[0] = internal()
    writer = writer_of(api, own_writes=own)
    try:
        writer.submit(raw, {"phase": "Pending", "message": "queue a: waiting for quota"})
        assert api.entered[0].wait(5)
        assert writer.settle(KEY, timeout=0.05) is False
        gate.set()  # the write in flight fails
        assert writer.flush(2)
        assert own.view(raw) is None
        assert not own.is_behind(raw)
    finally:
        gate.set()
        writer.stop()


# ---------------------------------------------------------- another object


def test_a_status_write_never_lands_on_another_object_of_the_same_name(api: API) -> None:
    raw = api.create("uid-old")
    api.objects["w"]["metadata"]["uid"] = "uid-new"  # re-created; the cache lags
    writer = writer_of(api)
    try:
        writer.submit(raw, {"phase": "Pending", "placements": None,
                            "message": "the old object's status"})
        assert writer.flush(5)
        assert len(api.calls) == 1  # refused, and not tried again
        assert api.objects["w"]["status"] == {}
        # nothing of ours is awaited on either object of that name
        assert writer.own_writes.view(raw) is None
        assert not writer.own_writes.is_behind(thaw(api.objects["w"]))
    finally:
        writer.stop()


# ----------------------------------------------------------------- finalizer


def test_a_workload_forgotten_while_its_finalizer_is_added_is_forgotten(api: API) -> None:
    raw = api.create("uid-1")
    writer = writer_of(api)
    api.during[0] = lambda: writer.forget(KEY)  # gone while the add is on its way
    try:
        writer.submit(raw, {"phase": "Scheduled"}, finalizer=True)
        assert writer.flush(5)
        assert CHILDREN_FINALIZER in api.objects["w"]["metadata"]["finalizers"]
        assert writer.has_finalizer(raw) is False
    finally:
        writer.stop()


def test_the_finalizer_we_added_is_one_of_our_own_writes(api: API) -> None:
    """Remembered where every write of ours is (the controller's OwnWrites, by UID):
    a reconcile asks for it once while the cache lags, and the object's delete event
    ends it, as it ends every record of that object."""
    raw = api.create("uid-1")
    own = OwnWrites()
    writer = writer_of(api, own_writes=own)
    try:
        writer.submit(raw, {"phase": "Scheduled"}, finalizer=True)
        assert writer.flush(5)
        assert CHILDREN_FINALIZER in api.objects["w"]["metadata"]["finalizers"]
        assert writer.has_finalizer(raw) and own.finalizer_added("uid-1")
        again = api.create("uid-2")  # deleted, then created again under its name
        own.deleted(raw)
        assert not writer.has_finalizer(raw) and not writer.has_finalizer(again)
    finally:
        writer.stop()


# --------------------------------------------------------------- own writes


def test_an_earlier_write_landing_keeps_a_later_ones_mark(api: API) -> None:
    """Write 1 is in flight when write 2 (which releases the placement) is
    submitted: once write 1 lands, a cached copy at write 1's version is still
    older than our last write (its placement must not be adopted again)."""
    raw = api.create("uid-1")
    own = OwnWrites()
    gate0, gate1 = hold(api, 0), hold(api, 1)
    writer = writer_of(api, own_writes=own)
    try:
        writer.submit(raw, {"phase": "Running", "placements": [{"index": 0, "node": "n"}]})
        assert api.entered[0].wait(5)
        writer.submit(raw, {"phase": "Pending", "placements": None})
        gate0.set()
        assert api.entered[1].wait(5)  # write 1 landed and said where
        copy = thaw(api.objects["w"])
        assert copy["status"]["phase"] == "Running"
        assert own.is_behind(copy)
        assert own.view(copy)["status"]["phase"] == "Pending"  # what we asked for last
        gate1.set()
        assert writer.flush(5)
        assert not own.is_behind(thaw(api.objects["w"]))
        assert own.view(thaw(api.objects["w"])) is None  # the copy shows it
    finally:
        gate0.set()
        gate1.set()
        writer.stop()


def test_a_settled_write_takes_back_its_mark(api: API) -> None:
    """A pending write that a settle drops is never sent: it no longer makes every
    cached copy older (the reconcile would requeue itself for ever)."""
    raw = api.create("uid-1")
    own = OwnWrites()
    writer = writer_of(api, own_writes=own)  # started, but the write is settled first
    writer.stop()
    writer.submit(raw, {"phase": "Pending", "placements": None})
    assert own.is_behind(raw)
    assert writer.settle(KEY, timeout=1) is True
    assert not own.is_behind(raw)
    assert api.calls == []


def test_a_write_that_lands_before_its_mark_leaves_no_mark_behind(api: API) -> None:
    """A lost requeue seen under churn: two workloads stayed Pending (one Scheduled
    with its pod Running) for good, nothing queued, and even an edit did not wake
    them. The writer marked "a write is on its way" only after handing the write to
    its threads; when a thread wrote it and said where it landed first, the mark
    came after and stayed, and every reconcile took the cache as older than our
    own write and only requeued itself. Here the submitting thread is paused at the
    worst moment (at most 1 s: a writer that cannot see the write is not waited
    for)."""
    raw = api.create("uid-1")
    landed = threading.Event()

    class Paused(OwnWrites):
        def writing(self, obj: Any, status: Any = None) -> int:
            landed.wait(1.0)  # preempted here, for as long as the writer takes
            return super().writing(obj, status)

        def wrote(self, obj: Any, mark: int | None = None, **kw: Any) -> None:
            super().wrote(obj, mark, **kw)
            api.cache.add(thaw(obj))  # the informer shows it at once
            landed.set()

    own = Paused()
    writer = writer_of(api, own_writes=own)
    try:
        writer.submit(raw, {"phase": "Pending", "message": "0/4 nodes are available"})
        assert writer.flush(5) and landed.wait(5)
        cached = api.cache.get_by_name("w", NS)
        assert cached["status"]["phase"] == "Pending"
        # the cache holds our write: it is not older than it, and a reconcile acts
        assert not own.is_behind(cached)
    finally:
        writer.stop()


# ------------------------------------------------------------ refused for good


class Recorder:
    """The Events the writer records."""

    def __init__(self) -> None:
        self.events: list[tuple[dict[str, Any], str, str]] = []

    def warning(self, obj: dict[str, Any], reason: str, message: str) -> None:
        self.events.append((obj, reason, message))


TOO_LONG = ('GPUWorkload.gpu.orchestrator.dev "w" is invalid: status.message: Too long: '
            'may not be more than 32768 bytes')


@pytest.mark.parametrize("refusal", [
    Invalid(422, "Invalid", TOO_LONG),
    Forbidden(403, "Forbidden", 'gpuworkloads.gpu.orchestrator.dev "w" is forbidden: User '
              '"system:serviceaccount:gpu-orchestrator-system:manager" cannot patch '
              'resource "gpuworkloads/status"'),
    BadRequest(400, "BadRequest", "the server could not read the patch"),
], ids=["422", "403", "400"])
def test_a_status_the_api_refuses_for_good_is_sent_once_and_reported(
        api: API, refusal: Exception) -> None:
    """The same write gets the same answer: it was sent again every 10 s at most, for
    ever, while its mark made every reconcile take the cache as older than our
    write and ``view`` show the refused status as if it were there. Now it is sent
    once; the workload gets a Warning Event with the code and the API's message; the
    drop is counted; and the mark goes, so the next reconcile sees the status the
    API holds and writes again (or reports again)."""
    raw = api.create("uid-1")
    own, recorder = OwnWrites(), Recorder()
    api.fail = {i: refusal for i in range(8)}
    reason = type(refusal).__name__
    dropped = STATUS_DROPPED.labels(reason)._value.get()
    writer = writer_of(api, own_writes=own, recorder=recorder)
    try:
        writer.submit(raw, {"phase": "Pending", "message": "x" * 40_000})
        assert writer.flush(2), "the refused write is still queued (retried)"
        time.sleep(RETRY_BASE * 3)  # a retry would have gone by now
        assert len(api.calls) == 1
        assert STATUS_DROPPED.labels(reason)._value.get() == dropped + 1
        [(obj, why, message)] = recorder.events
        assert (obj["kind"], obj["metadata"]["uid"], why) == ("GPUWorkload", "uid-1",
                                                             "StatusRefused")
        assert f"{refusal.status} {reason}" in message  # type: ignore[attr-defined]
        assert refusal.message in message  # type: ignore[attr-defined]
        # the reconciler no longer takes its status for current
        assert own.view(raw) is None and not own.is_behind(raw)
        assert writer.refused(raw)
        # the next reconcile writes again: a status the API takes lands
        api.fail.clear()
        writer.submit(raw, {"phase": "Pending", "message": "0/4 nodes are available"})
        assert writer.flush(2)
        assert api.objects["w"]["status"]["message"] == "0/4 nodes are available"
        assert not writer.refused(raw)
    finally:
        writer.stop()


@pytest.mark.parametrize("error", [
    Conflict(409, "Conflict", "the object has been modified"),
    TooManyRequests(429, "TooManyRequests", "too many requests"),
    internal(),
    ApiError(0, "ConnectionRefused", "connection refused"),
], ids=["409", "429", "500", "connection"])
def test_a_passing_error_is_retried_until_the_write_lands(api: API, error: Exception) -> None:
    raw = api.create("uid-1")
    api.fail = {0: error, 1: error}
    recorder = Recorder()
    writer = writer_of(api, recorder=recorder)
    try:
        writer.submit(raw, {"phase": "Pending", "message": "0/4 nodes are available"})
        assert writer.flush(5)
        assert len(api.calls) == 3
        assert api.objects["w"]["status"]["message"] == "0/4 nodes are available"
        assert recorder.events == []
    finally:
        writer.stop()
