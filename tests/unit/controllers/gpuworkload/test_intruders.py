"""Issue 23, attack 3: a pod that gives itself devices (on a cluster without the
pod-devices admission policy) is evicted, once, with an Event saying why; pods the
controller or a pod book made are never touched."""

from __future__ import annotations

import time
from typing import Any

import pytest

from controllers.gpuworkload.intruders import REASON, IntruderEvictor, names_devices_itself
from runtime.errors import TooManyRequests
from tests.unit.controllers.fakes import FakeRecorder
from tests.waiting import eventually


class Evictions:
    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    def create_subresource(self, api_version: str, kind: str, name: str, sub: str,
                           body: dict[str, Any], namespace: str | None = None,
                           deadline: float | None = None) -> dict:
        assert (api_version, kind, sub) == ("v1", "Pod", "eviction")
        assert body["deleteOptions"]["preconditions"]["uid"] == f"uid-{name}"
        self.asked.append((namespace or "", name))
        return body


def pod(name: str, devices: str | None = "0,1", node: str | None = "node1",
        owner: str | None = None, **meta: Any) -> dict[str, Any]:
    md: dict[str, Any] = {"name": name, "namespace": "team-a", "uid": f"uid-{name}", **meta}
    if devices is not None:
        md["annotations"] = {"gpu.orchestrator.dev/devices": devices}
    if owner:
        md["ownerReferences"] = [{"kind": owner, "name": "w", "uid": "w-uid",
                                  "controller": True}]
    spec = {"nodeName": node} if node else {}
    return {"metadata": md, "spec": spec, "status": {"phase": "Running"}}


@pytest.mark.parametrize("p, why", [
    (pod("bare"), True),
    (pod("unbound", node=None), False),  # holds nothing yet
    (pod("plain", devices=None), False),  # names nothing
    (pod("empty", devices=" "), False),
    (pod("ours", owner="GPUWorkload"), False),  # the controller's child
    (pod("going", deletionTimestamp="2026-01-01T00:00:00Z"), False),
])
def test_which_pods_gave_themselves_devices(p: dict, why: bool) -> None:
    assert names_devices_itself(p, lambda _: False) is why


def test_a_pod_book_pod_is_not_an_intruder() -> None:
    assert not names_devices_itself(pod("seed-0"), lambda p: True)


def test_an_intruder_is_evicted_once_with_an_event_and_only_when_placing() -> None:
    client, recorder = Evictions(), FakeRecorder()
    placing = [False]
    ev = IntruderEvictor(client, recorder, lambda _: False, lambda: placing[0])
    ev.on_pod(pod("bare"))
    assert client.asked == []  # not the leader (or not rebuilt yet): nothing
    placing[0] = True
    ev.on_pod(pod("bare"))
    ev.on_pod(None, pod("bare"))  # an update of the same pod
    eventually(lambda: client.asked == [("team-a", "bare")], timeout=5, what="evicted")
    assert [(n, r) for n, _, r, _ in recorder.events] == [("bare", REASON)]
    assert "gpu.orchestrator.dev/devices=0,1 was not set by gpu-orchestrator" in \
        recorder.events[0][3]


def test_only_the_managers_namespaces() -> None:
    client = Evictions()
    ev = IntruderEvictor(client, FakeRecorder(), lambda _: False, lambda: True,
                         frozenset({"team-b"}))
    ev.on_pod(pod("bare"))
    assert client.asked == []


def test_an_orphan_is_kept_with_an_event_and_a_forger_evicted_as_forged() -> None:
    """``--cascade=orphan`` took the orphan's ownerReference away; the ledger still
    says whose pod it booked it as. The forger copies its labels: nobody's."""
    client, recorder = Evictions(), FakeRecorder()
    labels = {"gpu.orchestrator.dev/workload": "w", "gpu.orchestrator.dev/workload-uid": "w-uid"}
    booked = {"uid-w-0": "w-uid#0"}
    ev = IntruderEvictor(client, recorder, lambda _: False, lambda: True,
                         booked_child=lambda p: booked.get(p["metadata"]["uid"], ""))
    ev.on_pod(pod("w-0", labels=labels))
    ev.on_pod(None, pod("w-0", labels=labels))  # told once
    ev.on_pod(pod("forged", devices="2,3", labels=labels))
    eventually(lambda: client.asked == [("team-a", "forged")], timeout=5, what="evicted")
    assert [(n, t, r) for n, t, r, _ in recorder.events] == [
        ("w-0", "Normal", "Orphaned"), ("forged", "Warning", REASON)]
    assert recorder.events[0][3] == (
        "its GPUWorkload team-a/w was deleted with --cascade=orphan: gpu-orchestrator "
        "created this pod, so it runs on and keeps its devices 0,1 on node1 until it ends "
        "or is deleted")
    assert "=2,3 was not set by gpu-orchestrator" in recorder.events[1][3]
    assert "the annotation is forged" in recorder.events[1][3]


class Refusing(Evictions):
    """A PodDisruptionBudget refuses every eviction (429)."""

    def create_subresource(self, *args: Any, **kwargs: Any) -> dict:
        super().create_subresource(*args, **kwargs)
        raise TooManyRequests(429, "TooManyRequests", "Cannot evict pod: disruption budget")


def test_a_sweep_asks_the_pods_whose_events_came_before_the_ledger_was_ready() -> None:
    client = Evictions()
    placing = [False]
    ev = IntruderEvictor(client, FakeRecorder(), lambda _: False, lambda: placing[0])
    ev.on_pod(pod("bare"))  # its only event: the ledger is not ready yet
    placing[0] = True
    ev.sweep([pod("bare"), pod("ours", owner="GPUWorkload")])
    ev.sweep([pod("bare")])
    eventually(lambda: client.asked == [("team-a", "bare")], timeout=5, what="evicted")
    time.sleep(0.2)
    assert client.asked == [("team-a", "bare")]  # once


def test_a_refused_eviction_is_asked_again_on_an_update_not_by_every_sweep() -> None:
    client, recorder = Refusing(), FakeRecorder()
    ev = IntruderEvictor(client, recorder, lambda _: False, lambda: True)
    ev.on_pod(pod("bare"))
    eventually(lambda: [r for _, _, r, _ in recorder.events] == [REASON, "EvictionFailed"],
               timeout=5, what="refused")
    ev.sweep([pod("bare")])
    time.sleep(0.2)
    assert len(client.asked) == 1
    ev.on_pod(None, pod("bare"))  # its next update
    eventually(lambda: len(client.asked) == 2, timeout=5, what="asked again")


def gpu_pod(name: str, gpus: int = 2, owner: str | None = None) -> dict[str, Any]:
    p = pod(name, devices=None, owner=owner)
    p["spec"]["containers"] = [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]
    return p


def test_a_pod_that_over_commits_its_node_is_evicted_with_a_device_conflict() -> None:
    """Issue 35: kube-scheduler's pod placed beside our children (8 GPUs held on a
    4-GPU node) was spared: it names no devices, it only requests them."""
    from controllers.gpuworkload.intruders import OVERCOMMIT_REASON
    from internal.metrics.domain import DEVICE_CONFLICTS

    client, recorder = Evictions(), FakeRecorder()
    over = {"uid-late": "node1: over-committed: 8 GPUs held on its 4 devices (...)"}
    asked: list[str] = []

    def over_commits(p: dict[str, Any]) -> str:
        asked.append(p["metadata"]["name"])
        return over.get(p["metadata"]["uid"], "")
    before = DEVICE_CONFLICTS.labels("evicted")._value.get()
    ev = IntruderEvictor(client, recorder, lambda _: False, lambda: True,
                         over_commits=over_commits)
    ev.on_pod(gpu_pod("early"))  # on a node with room: kept
    ev.on_pod(pod("cpu-only", devices=None))  # asks no GPU: the ledger is not asked
    ev.on_pod(gpu_pod("child", owner="GPUWorkload"))  # ours: never
    ev.on_pod(gpu_pod("late"))
    eventually(lambda: client.asked == [("team-a", "late")], timeout=5, what="evicted")
    assert asked == ["early", "late"]
    assert [(n, r) for n, _, r, _ in recorder.events] == [("late", OVERCOMMIT_REASON)]
    assert "8 GPUs held on its 4 devices" in recorder.events[0][3]
    eventually(lambda: DEVICE_CONFLICTS.labels("evicted")._value.get() == before + 1,
               timeout=5, what="counted")


class Threads:
    """Counts the threads started while it is on (``threading.Thread.start``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import threading
        self.names: list[str] = []
        start = threading.Thread.start

        def counted(thread: threading.Thread) -> None:
            self.names.append(thread.name)
            start(thread)
        monkeypatch.setattr(threading.Thread, "start", counted)


def test_fifty_intruders_are_evicted_by_one_thread_not_one_each(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 38: every eviction started a thread of its own."""
    client, recorder = Evictions(), FakeRecorder()
    threads = Threads(monkeypatch)
    ev = IntruderEvictor(client, recorder, lambda _: False, lambda: True)
    names = [f"bare-{i}" for i in range(50)]
    for name in names:
        ev.on_pod(pod(name))
        ev.on_pod(None, pod(name))  # its update: still asked once
    eventually(lambda: len(client.asked) == 50, timeout=10, what="all evicted")
    assert len(threads.names) <= 1, threads.names
    assert sorted(n for _, n in client.asked) == sorted(names)
    assert [(n, r) for n, _, r, _ in recorder.events] == [(n, REASON) for _, n in client.asked]
    ev.stop()


def test_our_pods_events_wake_no_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """The evictor's handler runs on the watch's thread: the events of the
    controller's own pods (nearly every pod event) start and wake no thread, and an
    intruder delivered the same way is still evicted."""
    from runtime.informer import HandlerRegistration

    client, recorder = Evictions(), FakeRecorder()
    threads = Threads(monkeypatch)
    ev = IntruderEvictor(client, recorder, lambda _: False, lambda: True)
    reg = HandlerRegistration(ev.handler(), "v1/Pod")
    for i in range(100):
        reg.push("add", gpu_pod(f"child-{i}", owner="GPUWorkload"))
    assert threads.names == []
    reg.push("add", pod("bare"))
    eventually(lambda: client.asked == [("team-a", "bare")], timeout=5, what="evicted")
    ev.stop()
    reg.stop()
    assert len(threads.names) == 1, threads.names
