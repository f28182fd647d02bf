"""The pod-binding reconciler against an in-memory cache, a fake client and the real
PlacementState (no server): bookings, refusals, releases and the rebuild.

Tests read the state through ``state.view()``; a test that sets a scene (another
workload's booking) writes its private ledger directly, as no controller may."""

from __future__ import annotations

from typing import Any

import pytest

from api.v1alpha1.types import DeviceExposure, GPUWorkload, Placement
from controllers.placement.source import PlacementStateSource
from controllers.placement.state import PlacementState
from controllers.podbinding.controller import PodBindingOptions, PodBindingReconciler
from controllers.podbinding.seedbook import SeedBook, bound_entry, owner_key, read_bound
from controllers.podbinding.setup import pod_predicate
from runtime import ApiError, Conflict, NotFound, Request
from runtime.predicates import UpdateEvent
from runtime.store import Indexer
from tests.unit.scheduling.helpers import SEED_MAP, gpunode, node

NS = "ns"
STS = f"StatefulSet:{NS}/check"


class FakeClient:
    def __init__(self) -> None:
        self.bindings: list[dict[str, Any]] = []
        self.fail: Exception | None = None
        #: (kind, namespace, name) -> what a get answers; the gets asked
        self.objects: dict[tuple[str, str | None, str], dict[str, Any]] = {}
        self.gets: list[tuple[str, str | None, str]] = []

    def get(self, api_version: str, kind: str, name: str,
            namespace: str | None = None) -> dict[str, Any]:
        self.gets.append((kind, namespace, name))
        try:
            return self.objects[(kind, namespace, name)]
        except KeyError:
            raise NotFound(404, "NotFound", f'{kind.lower()}s "{name}" not found') from None

    def create_subresource(self, api_version: str, kind: str, name: str, sub: str,
                           body: dict[str, Any], namespace: str | None = None,
                           deadline: float | None = None) -> dict:
        assert (api_version, kind, sub) == ("v1", "Pod", "binding")
        if self.fail is not None:
            raise self.fail
        self.bindings.append(body)
        return body


class FakeRecorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []

    def normal(self, obj: Any, reason: str, message: str) -> None:
        self.events.append((obj["metadata"]["name"], "Normal", reason, message))

    def warning(self, obj: Any, reason: str, message: str) -> None:
        self.events.append((obj["metadata"]["name"], "Warning", reason, message))


def pod(name: str, *, map_text: str | None = SEED_MAP, owner: str | None = "check",
        node_name: str | None = None, gpus: int | None = None, phase: str = "Pending",
        annotations: dict[str, str] | None = None,
        scheduler: str = "gpu-scheduler") -> dict[str, Any]:
    ann = dict(annotations or {})
    if map_text is not None:
        ann["gpu-scheduling-map"] = map_text
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"uid-{name}",
                            "annotations": ann}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                                    "name": owner, "uid": "sts", "controller": True}]
    c: dict[str, Any] = {"name": "c", "image": "x"}
    if gpus is not None:
        c["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    spec: dict[str, Any] = {"schedulerName": scheduler, "containers": [c]}
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


class Env:
    def __init__(self, pods: list[dict[str, Any]] = (), gpus: int = 4) -> None:  # type: ignore[assignment]
        self.nodes = [node(f"node{i}", gpus) for i in range(1, 5)]
        self.pods = Indexer()
        for p in pods:
            self.pods.add(p)
        self.book = SeedBook()
        # the manager's one placement state, as setup hands it to the pod binding:
        # the book registered with the source, the state built and filled from the
        # caches on first use (and again once invalidated)
        self.states = PlacementStateSource(
            lambda books: PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES, pod_books=books),
            lambda state: self.fill(state))
        self.states.add_pod_book(self.book)
        self.client, self.recorder = FakeClient(), FakeRecorder()
        self.rec = self.reconciler()

    def reconciler(self, options: PodBindingOptions | None = None) -> PodBindingReconciler:
        return PodBindingReconciler(self.client, self.recorder, self.pods, self.states,
                                    self.book, options or PodBindingOptions())

    @property
    def state(self) -> PlacementState:
        return self.states.get()

    def fill(self, state: PlacementState,
             workloads: list[dict[str, Any]] = ()) -> list[str]:  # type: ignore[assignment]
        return state.rebuild(lambda: (self.nodes, [], list(workloads), self.pods.list()))

    def rebuild(self, workloads: list[dict[str, Any]] = ()) -> list[str]:  # type: ignore[assignment]
        return self.fill(self.state, workloads)

    def add(self, p: dict[str, Any]) -> None:
        self.pods.add(p)

    def reconcile(self, name: str) -> Any:
        return self.rec.reconcile(Request(NS, name))

    def holder(self, node_name: str, device: int) -> str | None:
        return self.state.view().holder(node_name, device)

    def bound(self) -> dict[str, tuple[str, str | None]]:
        return {b["metadata"]["name"]: (b["target"]["name"],
                                        (b["metadata"].get("annotations") or {})
                                        .get("gpu.orchestrator.dev/devices"))
                for b in self.client.bindings}

    def warnings(self, name: str) -> list[str]:
        return [m for n, t, r, m in self.recorder.events
                if n == name and t == "Warning" and r == "FailedScheduling"]


def test_seed_map_binds_each_index_to_its_node_and_devices() -> None:
    env = Env()
    for i in range(5):
        env.add(pod(f"check-{i}"))
        assert env.reconcile(f"check-{i}") is None
    assert env.bound() == {"check-0": ("node1", "0,1"), "check-1": ("node2", "2"),
                           "check-2": ("node3", "0,1,2"), "check-3": ("node4", "3"),
                           "check-4": ("node4", "3")}
    assert env.client.bindings[0]["metadata"]["uid"] == "uid-check-0"
    alloc = env.state.view().allocation(STS)
    assert alloc is not None and alloc.committed
    assert alloc.priority == 0  # the pods' own priority: a workload above it may preempt
    assert sorted(p.index for p in alloc.placements) == [0, 1, 2, 3, 4]
    assert env.holder("node4", 3) == STS


def test_index_label_wins_over_the_name() -> None:
    env = Env()
    p = pod("whatever-0")
    p["metadata"]["labels"] = {"apps.kubernetes.io/pod-index": "2"}
    env.add(p)
    env.reconcile("whatever-0")
    assert env.bound() == {"whatever-0": ("node3", "0,1,2")}


@pytest.mark.parametrize("map_text, name, want", [
    ("0=node1:0", "check-3", "no entry for replica index 3"),
    ("0=node9:0", "check-0", "node9: replica 0: node not found"),
    ("0=node1:4", "check-0", "node1: replica 0: device 4 does not exist (4 GPUs)"),
    ("0=node1", "check-0", "invalid gpu-scheduling-map annotation: line 1"),
    ("0=node1:0", "nameless", "cannot tell the pod's replica index"),
])
def test_unplaceable_pods_get_an_event_and_a_retry(map_text: str, name: str, want: str) -> None:
    env = Env([pod(name, map_text=map_text)])
    first = env.reconcile(name)
    second = env.reconcile(name)
    assert env.client.bindings == []
    assert any(want in m for m in env.warnings(name)), env.warnings(name)
    assert 0 < first.requeue_after < second.requeue_after  # exponential backoff


def test_device_of_another_workload_is_refused_and_nothing_is_booked() -> None:
    env = Env()
    env.state._ledger.assume("ns/gw", [Placement(index=0, node="node4", devices=[3])])
    env.add(pod("check-3"))
    env.reconcile("check-3")
    assert "node4: replica 3: device 3 held by ns/gw" in env.warnings("check-3")[0]
    assert env.state.view().allocation(STS) is None
    # another StatefulSet is "another workload" too
    env.state._ledger.forget("ns/gw")
    env.add(pod("other-3", owner="other"))
    env.reconcile("other-3")
    env.add(pod("check-3"))
    env.reconcile("check-3")
    assert f"held by StatefulSet {NS}/other" in env.warnings("check-3")[-1]


def test_failed_bind_releases_the_booking() -> None:
    env = Env([pod("check-0")])
    env.client.fail = ApiError(500, "InternalError", "boom")
    with pytest.raises(ApiError):
        env.reconcile("check-0")
    assert env.holder("node1", 0) is None
    env.client.fail = Conflict(409, "Conflict", "already assigned")
    assert env.reconcile("check-0") is None
    assert env.holder("node1", 0) is None


def test_finished_or_deleted_pods_release_only_their_own_devices() -> None:
    env = Env()
    for i in (3, 4):
        env.add(pod(f"check-{i}"))
        env.reconcile(f"check-{i}")
    env.add(pod("check-3", node_name="node4", phase="Succeeded"))
    env.reconcile("check-3")
    assert env.holder("node4", 3) == STS  # check-4 still holds it
    env.pods.delete(f"{NS}/check-4")
    env.reconcile("check-4")
    assert env.holder("node4", 3) is None
    assert env.state.view().allocation(STS) is None


def test_release_wakes_waiting_pods_and_workloads() -> None:
    env = Env()
    woken: list[Request] = []
    env.rec.enqueue_after = lambda req, delay: woken.append(req)
    env.rec.options.min_wake_interval = 0
    env.add(pod("a-0", owner="a", map_text="0=node1:0"))
    env.reconcile("a-0")
    env.add(pod("b-0", owner="b", map_text="0=node1:0"))
    env.reconcile("b-0")
    assert env.warnings("b-0")
    env.pods.delete(f"{NS}/a-0")
    env.reconcile("a-0")
    assert woken == [Request(NS, "b-0")]
    env.reconcile("b-0")
    assert env.bound()["b-0"] == ("node1", "0")


def test_no_map_uses_the_default_strategy() -> None:
    env = Env(gpus=2)
    env.add(pod("plugin-0", map_text=None, gpus=2))
    env.reconcile("plugin-0")
    (node_name, devices), = env.bound().values()
    assert devices is None  # the device plugin picks: counted, not named
    assert env.state.view().counted(node_name) == {f"Pod:{NS}/plugin-0": 2}
    env.add(pod("plain-0", map_text=None, owner=None))
    env.reconcile("plain-0")
    node2, devs2 = env.bound()["plain-0"]
    assert node2 != node_name and devs2 is not None and len(devs2.split(",")) == 1
    assert env.holder(node2, int(devs2)) == f"Pod:{NS}/plain-0"


def test_a_map_on_the_statefulsets_own_metadata_is_said_once_on_the_statefulset() -> None:
    """Its pods carry no map and are placed by the default strategy; the StatefulSet,
    read once for all its pods, gets one MapNotOnTemplate Warning naming the template."""
    env = Env()
    env.client.objects[("StatefulSet", NS, "check")] = {
        "metadata": {"name": "check", "namespace": NS, "uid": "sts",
                     "annotations": {"gpu-scheduling-map": SEED_MAP}},
        "spec": {"template": {"metadata": {"labels": {"app": "check"}}}}}
    for i in range(2):
        env.add(pod(f"check-{i}", map_text=None))
        env.reconcile(f"check-{i}")
    assert sorted(env.bound()) == ["check-0", "check-1"]
    assert env.client.gets == [("StatefulSet", NS, "check")]
    warned = [e for e in env.recorder.events if e[2] == "MapNotOnTemplate"]
    assert len(warned) == 1
    assert "move it to spec.template.metadata.annotations" in warned[0][3]


def test_rebuild_rebooks_bound_pods_and_never_counts_them_as_foreign() -> None:
    pods = [
        pod("check-3", node_name="node4", phase="Running",
            annotations={"gpu.orchestrator.dev/devices": "3"}),
        pod("check-4", node_name="node4", phase="Running"),  # devices from its map line
        pod("gpu-0", map_text=None, node_name="node2", gpus=2, phase="Running"),
        pod("done-0", map_text="0=node1:0", owner="done", node_name="node1",
            phase="Succeeded"),
    ]
    env = Env(pods)
    ledger = env.state.view()
    assert env.holder("node4", 3) == STS
    assert sorted(p.index for p in ledger.allocation(STS).placements) == [3, 4]
    assert ledger.counted("node2") == {f"Pod:{NS}/gpu-0": 2}
    assert not [a for a in ledger.allocations().values() if a.holder]
    assert env.holder("node1", 0) is None
    # events for our pods never count them as foreign either
    env.state.events.on_pod(pods[2])
    assert not [a for a in ledger.allocations().values() if a.holder]


def test_rebuild_books_a_bound_pod_before_a_workload_status_naming_its_device() -> None:
    """What runs wins (docs/architecture.md, invariant 4): a status whose workload
    runs nothing there (its write of Preempted or of an ended attempt died with the
    previous process) is the placement not booked, reported; its own reconcile
    ends that attempt."""
    wl = {"apiVersion": "gpu.orchestrator.dev/v1alpha1", "kind": "GPUWorkload",
          "metadata": {"name": "gw", "namespace": NS},
          "spec": {"gpusPerReplica": 1},
          "status": {"phase": "Running",
                     "placements": [{"index": 0, "node": "node4", "devices": [3]}]}}
    env = Env()
    env.add(pod("check-3", node_name="node4", phase="Running"))
    problems = env.rebuild([wl])
    assert any(p.startswith("ns/gw: placement not booked") and STS in p for p in problems)
    assert env.holder("node4", 3) == STS


def test_after_a_lost_event_the_pod_binding_places_on_a_state_rebuilt_from_the_caches() -> None:
    """The pod binding takes the manager's one state from its source: once a handler
    lost an event (the state invalidated), its next reconcile rebuilds the state from
    the caches, so a pod the lost event would have booked still holds its devices."""
    env = Env()
    lost = env.state
    env.add(pod("other-0", map_text=None, owner=None, node_name="node1", phase="Running",
                scheduler="default-scheduler",
                annotations={"gpu.orchestrator.dev/devices": "0,1"}))  # its event lost
    lost.invalidate("a handler raised")
    env.add(pod("check-0"))  # its map line: node1, devices 0 and 1
    env.reconcile("check-0")
    assert env.bound() == {}
    assert env.warnings("check-0") and "node1" in env.warnings("check-0")[0]
    assert env.state is lost and lost.generation == 2  # filled again, in place
    assert env.holder("node1", 0) == f"{NS}/other-0"


def test_bound_entry_and_owner_key() -> None:
    assert owner_key(pod("x-1")) == STS
    assert owner_key(pod("x-1", owner=None)) == f"Pod:{NS}/x-1"
    assert bound_entry(pod("x-1")) is None  # not bound
    e = bound_entry(pod("x-1", node_name="node2"))
    assert e is not None and (e.placement.node, e.placement.devices) == ("node2", [2])
    assert bound_entry(pod("x-1", node_name="node3")) is None  # map names another node


@pytest.mark.parametrize("annotations, map_text, gpus, want", [
    # the devices annotation unreadable: the map line still names node2's device 2
    ({"gpu.orchestrator.dev/devices": "\u00b2"}, SEED_MAP, None, (STS, "node2", [2], 1)),
    ({"gpu.orchestrator.dev/devices": "0,x"}, SEED_MAP, None, (STS, "node2", [2], 1)),
    # nothing readable: its request, counted, and at least one GPU
    ({"gpu.orchestrator.dev/devices": "0,x"}, None, None, (f"Pod:{NS}/x-1", "node2", [], 1)),
    ({"gpu.orchestrator.dev/devices": "0,x"}, None, 3, (f"Pod:{NS}/x-1", "node2", [], 3)),
    ({}, "1=node2:oops", None, (f"Pod:{NS}/x-1", "node2", [], 1)),
])
def test_a_bound_pod_with_unreadable_annotations_still_holds_and_says_why(
        annotations: dict[str, str], map_text: str | None, gpus: int | None,
        want: tuple[str, str, list[int], int]) -> None:
    e, problems = read_bound(pod("x-1", node_name="node2", annotations=annotations,
                                 map_text=map_text, gpus=gpus))
    assert e is not None and (e.ledger_key, e.placement.node, e.placement.devices,
                              e.gpus) == want
    assert len(problems) == 1
    assert ("gpu-scheduling-map" if "oops" in (map_text or "") else
            "gpu.orchestrator.dev/devices") in problems[0]
    # a readable devices annotation: the map is not read, and nothing is wrong
    assert read_bound(pod("x-1", node_name="node2", map_text="1=node2:oops",
                          annotations={"gpu.orchestrator.dev/devices": "1"}))[1] == []


def test_a_bound_pod_with_a_malformed_annotation_is_reported_once_per_version() -> None:
    from prometheus_client import REGISTRY

    def bad() -> float:
        return REGISTRY.get_sample_value("gpu_orchestrator_bad_objects_total",
                                         {"kind": "Pod"}) or 0.0

    env = Env()
    before = bad()
    p = pod("check-1", node_name="node2", phase="Running",
            annotations={"gpu.orchestrator.dev/devices": "\u00b2"})
    env.add(p)
    for _ in range(3):  # re-reads of the same pod say nothing new
        env.reconcile("check-1")
    events = [(t, r, m) for n, t, r, m in env.recorder.events if n == "check-1"]
    assert events == [("Warning", "BadAnnotation",
                       "annotation gpu.orchestrator.dev/devices='\u00b2' is not a list of "
                       "device indices; it is taken to hold GPU devices 2 on node2")]
    assert env.holder("node2", 2) == STS
    assert bad() == before + 1
    # another wording (a new version of the pod) is reported again; what was booked stays
    p2 = pod("check-1", node_name="node2", phase="Running", map_text=None,
             annotations={"gpu.orchestrator.dev/devices": "0,x"})
    env.add(p2)
    env.reconcile("check-1")
    assert [m for n, t, r, m in env.recorder.events if r == "BadAnnotation"][-1].endswith(
        "it is taken to hold GPU devices 2 on node2")
    assert env.holder("node2", 2) == STS
    assert bad() == before + 2
    # gone: released, and a new pod of that name is reported afresh
    env.pods.delete(p2)
    env.reconcile("check-1")
    assert env.holder("node2", 2) is None
    env.add(pod("check-1", node_name="node2", phase="Running",
                annotations={"gpu.orchestrator.dev/devices": "0,x"}))
    env.reconcile("check-1")
    assert len([r for n, t, r, m in env.recorder.events if r == "BadAnnotation"]) == 3


@pytest.mark.parametrize("devices, holds, held", [
    ("99", "it is taken to hold 1 GPU(s) on node2, counted", []),
    ("1,99", "it is taken to hold GPU devices 1 on node2", [1]),
])
def test_a_pod_naming_a_device_its_node_lacks_holds_no_phantom_device(
        devices: str, holds: str, held: list[int]) -> None:
    """Issue 23: a seed pod annotated ``"99"`` on a 4-GPU node was booked device 99."""
    env = Env()
    env.add(pod("odd-0", node_name="node2", phase="Running", map_text=None,
                annotations={"gpu.orchestrator.dev/devices": devices}))
    env.reconcile("odd-0")
    (message,) = [m for n, t, r, m in env.recorder.events if r == "BadAnnotation"]
    assert message == ("annotation gpu.orchestrator.dev/devices names device(s) 99, which "
                       f"node2 does not have (it has 0,1,2,3); {holds}")
    assert env.holder("node2", 99) is None
    assert [d for d in range(4) if env.holder("node2", d)] == held


def test_predicate_keeps_unbound_and_lifecycle_changes_only() -> None:
    pred = pod_predicate(SeedBook())
    unbound, bound = pod("a-0"), pod("a-0", node_name="node1", phase="Running")
    assert not pred.update(UpdateEvent(pod("a-0", scheduler="default-scheduler"),
                                       pod("a-0", scheduler="default-scheduler")))
    assert pred.update(UpdateEvent(unbound, unbound))
    assert pred.update(UpdateEvent(unbound, bound))
    assert not pred.update(UpdateEvent(bound, bound))
    assert pred.update(UpdateEvent(bound, pod("a-0", node_name="node1", phase="Failed")))


@pytest.mark.parametrize("taints, unschedulable, tolerations, want", [
    ([{"key": "team", "value": "b", "effect": "NoSchedule"}], False, [],
     "node1: replica 0: taint team=b:NoSchedule not tolerated"),
    ([], True, [], "node1: replica 0: unschedulable (cordoned)"),
    ([{"key": "team", "value": "b", "effect": "NoSchedule"}], False,
     [{"key": "team", "operator": "Equal", "value": "b", "effect": "NoSchedule"}], None),
    ([], True, [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}], None),
])
def test_a_map_honours_taints_and_cordons_unless_tolerated(
        taints: list, unschedulable: bool, tolerations: list, want: str | None) -> None:
    """Attack 5: a map cannot land a tenant on a node tainted for another."""
    env = Env()
    env.nodes[0] = node("node1", 4, taints=taints, unschedulable=unschedulable)
    env.rebuild()
    p = pod("check-0")
    p["spec"]["tolerations"] = tolerations
    env.add(p)
    env.reconcile("check-0")
    if want is None:
        assert env.bound() == {"check-0": ("node1", "0,1")}
    else:
        assert env.client.bindings == []
        assert any(want in m for m in env.warnings("check-0")), env.warnings("check-0")


class EvictingClient(FakeClient):
    def __init__(self) -> None:
        super().__init__()
        self.evictions: list[dict[str, Any]] = []

    def create_subresource(self, api_version: str, kind: str, name: str, sub: str,
                           body: dict[str, Any], namespace: str | None = None,
                           deadline: float | None = None) -> dict:
        if sub == "eviction":
            self.evictions.append(body)
            return body
        return super().create_subresource(api_version, kind, name, sub, body, namespace)


@pytest.mark.parametrize("evict", [False, True])
def test_a_pod_bound_by_someone_else_onto_held_devices(evict: bool) -> None:
    """Reported always (Event, metric); evicted only by the admin's flag; never booked."""
    from prometheus_client import REGISTRY

    def conflicts(action: str) -> float:
        return REGISTRY.get_sample_value("gpu_orchestrator_device_conflicts_total",
                                         {"action": action}) or 0.0

    env = Env()
    env.state._ledger.assume("ns/gw", [Placement(index=0, node="node1", devices=[0, 1])])
    env.client = EvictingClient()
    env.rec = env.reconciler(PodBindingOptions(evict_conflicting_pods=evict))
    action = "evicted" if evict else "reported"
    before = conflicts(action)
    env.add(pod("intruder-0", map_text=None, owner=None, node_name="node1",
                annotations={"gpu.orchestrator.dev/devices": "0,1"}, phase="Running"))
    env.reconcile("intruder-0")
    assert env.holder("node1", 0) == "ns/gw"
    events = [m for n, t, r, m in env.recorder.events if r == "DeviceConflict"]
    assert events and ("evicting it" in events[0]) == evict
    assert len(env.client.evictions) == (1 if evict else 0)
    if evict:
        body = env.client.evictions[0]
        assert body["kind"] == "Eviction"
        assert body["deleteOptions"]["preconditions"]["uid"] == "uid-intruder-0"
    assert conflicts(action) == before + 1


def test_evict_holder_asks_every_pod_of_a_seed_holder_to_go() -> None:
    """What preemption of a seed-path holder needs: its pods evicted (the ledger keeps
    their devices until they are gone)."""
    from controllers.podbinding.seedbook import is_seed_key

    env = Env()
    for i in (3, 4):
        env.add(pod(f"check-{i}"))
        env.reconcile(f"check-{i}")
    env.client = EvictingClient()
    env.rec = env.reconciler()
    assert is_seed_key(STS) and not is_seed_key("ns/gw")
    assert env.rec.evict_holder(STS, "preempted by ns/urgent (priority 100)") is None
    assert sorted(e["metadata"]["name"] for e in env.client.evictions) == ["check-3", "check-4"]
    assert [r for _, _, r, m in env.recorder.events if "preempted by" in m] == ["Preempted"] * 2
    assert env.holder("node4", 3) == STS  # held until the pods are gone


def test_a_higher_priority_workload_preempts_seed_pods_and_waits_for_them() -> None:
    # The seed map fills node1 with check-0 (0,1); a 4-GPU workload of higher priority
    # may take node1 only by preempting the StatefulSet's booking.
    env = Env([pod("check-0", node_name="node1", phase="Running",
                   annotations={"gpu.orchestrator.dev/devices": "0,1,2,3"})])
    asked: list[tuple[str, str]] = []
    env.book.on_evict = lambda key, message: asked.append((key, message))
    assert env.state.view().allocation(STS).priority == 0
    hi = GPUWorkload.model_validate({
        "metadata": {"name": "hi", "namespace": NS, "uid": "uid-hi"},
        "spec": {"gpusPerReplica": 4, "priority": "high", "schedulingStrategy": "priority"}})
    for n in ("node2", "node3", "node4"):  # nothing else fits
        env.state._ledger.assume(f"x/{n}", [Placement(index=0, node=n, devices=[0, 1, 2, 3])],
                                priority=10**9)
    decision = env.state.decide(hi)
    assert decision.outcome == "Preempting" and decision.victims == [STS]
    assert asked and asked[0][0] == STS and "preempted by ns/hi" in asked[0][1]
    # the StatefulSet's booking stays until its pod is gone: nominated, not free
    assert env.state.view().allocation(STS) is not None
    assert env.state.blockers("ns/hi") == {"node1": [STS]}
    env.state.seeds.release_seed(env.book, f"{NS}/check-0")  # the pod is gone
    assert env.state.blockers("ns/hi") == {}


def test_a_device_a_preemptor_is_nominated_over_is_refused_by_the_plan() -> None:
    """The seed path asked only for the first holder the ledger names: a device its
    own StatefulSet held and a preemptor was nominated over (the StatefulSet's
    booking stays until its pods go) passed its plan, and only the booking refused
    it, in the ledger's words. The shared filters count every other owner, and say
    so as they say it for a mapped GPUWorkload."""
    env = Env()
    env.add(pod("check-3"))
    env.reconcile("check-3")
    assert env.holder("node4", 3) == STS
    env.state._ledger.assume("ns/pre", [Placement(index=0, node="node4", devices=[3])],
                             priority=100, overlap=[STS])
    env.add(pod("check-4"))
    env.reconcile("check-4")
    assert "check-4" not in env.bound()
    assert "node4: replica 4: device 3 held by" in env.warnings("check-4")[-1]


def test_a_map_naming_a_node_whose_gpu_agent_went_silent_is_refused() -> None:
    """A node whose GPU agent stopped reporting offers nothing; the seed path's own
    check did not ask, and refused the pod for devices "unhealthy", which they are
    not. The shared filters say why, as they say it to a GPUWorkload."""
    env = Env()
    silent = gpunode("node1")
    silent["status"]["lastHeartbeatTime"] = "2020-01-01T00:00:00Z"
    env.state.events.on_gpunode(silent)
    env.add(pod("check-0"))
    env.reconcile("check-0")
    assert env.bound() == {}
    assert "node1: replica 0: GPUNode heartbeat stale" in env.warnings("check-0")[-1]


def test_a_pod_asking_more_gpus_than_a_pod_may_have_is_told_what_it_asked() -> None:
    env = Env()
    env.add(pod("huge-0", map_text=None, gpus=100))
    env.reconcile("huge-0")
    assert env.client.bindings == []
    assert env.warnings("huge-0") == [
        "the pod requests 100 nvidia.com/gpu, more than the 64 one pod may have"]
