"""What a fill of the placement state (``PlacementState.rebuild``) takes in, what it
hands its scheduler, and what an operator sees of it: our Jobs, the claims and the
pod books' bookings are holders from the start; a fill without DRA reads no
slices; the state's random source, default exposure and share floors decide as
configured after every fill; each problem is returned, logged and counted; a lost
event (``invalidate``) is said with its reason and wakes the waiting; children held
without a commit are held and nothing is said lost. Pure: plain dicts, no server."""

from __future__ import annotations

import random
from fractions import Fraction
from typing import Any

from api.v1alpha1.types import DeviceExposure
from controllers.placement.state import PlacementState
from controllers.shared.own_writes import OwnWrites
from internal.metrics.domain import BAD_OBJECTS
from internal.scheduling.ledger import Ledger
from internal.scheduling.sharefloor import SHARE_BELOW_MINIMUM, ShareFloors
from tests.unit.controllers.placement.test_cache_adopt import Book, events, info_logs
from tests.unit.controllers.placement.test_placement_state import (
    NODES,
    World,
    child,
    gw,
    our_job,
)
from tests.unit.scheduling.helpers import dra_claim, dra_slice, gpunode, node

EIGHT = [node(f"n{i}", 4) for i in range(8)]
CUDA = DeviceExposure.CUDA_VISIBLE_DEVICES


def filled(nodes: list[dict[str, Any]] = EIGHT, gpunodes: list[dict[str, Any]] = (),  # type: ignore[assignment]
           exposure: DeviceExposure = CUDA, **kw: Any) -> PlacementState:
    s = PlacementState(exposure, **kw)
    s.rebuild(lambda: (nodes, list(gpunodes), [], []))
    return s


def random_nodes(s: PlacementState, prefix: str) -> list[str]:
    """Where six workloads of the random strategy go, one after the other."""
    out = []
    for i in range(6):
        d = s.decide(gw(f"{prefix}{i}", gpusPerReplica=1, schedulingStrategy="random"))
        assert d.ok, d.message
        out.append(d.placements[0].node)
    return out


def test_the_states_random_source_decides_where_random_workloads_go_after_each_fill() -> None:
    states = [filled(rng=random.Random(seed)) for seed in (5, 5, 6)]
    first = [random_nodes(s, "r") for s in states]
    assert first[0] == first[1] and first[0] != first[2]
    for s in states:  # filled again: the same source goes on
        s.rebuild(lambda: (EIGHT, [], [], []))
    again = [random_nodes(s, "q") for s in states]
    assert again[0] == again[1] and again[0] != again[2]


def test_the_default_exposure_is_the_schedulers_after_each_fill() -> None:
    plugin = filled(exposure=DeviceExposure.DEVICE_PLUGIN)
    for _ in range(2):
        d = plugin.decide(gw("a", gpusPerReplica=2))
        assert d.ok and d.counted  # the device plugin picks: no devices named
        plugin.forget("ns/a")
        plugin.rebuild(lambda: (EIGHT, [], [], []))
    d = filled().decide(gw("a", gpusPerReplica=2))
    assert d.ok and not d.counted and len(d.placements[0].devices) == 2


def test_the_share_floors_are_the_schedulers_after_each_fill() -> None:
    tiny = gw("tiny", gpuShare={"fraction": "0.001"})
    fresh = gpunode("n1", 4)
    fresh["status"]["lastHeartbeatTime"] = "2999-01-01T00:00:00Z"  # never stale
    nodes, gpunodes = [node("n1", 4)], [fresh]
    none = filled(nodes, gpunodes, share_floors=ShareFloors(0, Fraction(0)))
    assert none.decide(tiny).ok
    none.rebuild(lambda: (nodes, gpunodes, [], []))
    none.forget("ns/tiny")
    assert none.decide(tiny).ok
    d = filled(nodes, gpunodes).decide(tiny)  # the default floors
    assert not d.ok and d.wait_reason == SHARE_BELOW_MINIMUM


def test_a_fill_books_what_our_jobs_hold() -> None:
    job = our_job()
    s = PlacementState(CUDA)
    s.rebuild(lambda: (NODES, [], [], []), read_jobs=lambda: [job])
    led = s.view()
    assert {d: led.device_owners("node1", d) for d in (1, 2)} == {1: {"uid-w#1"}, 2: {"uid-w#1"}}
    assert led.free_count("node1") == 2


def test_a_fill_without_dra_reads_no_slices_nor_claims() -> None:
    asked: list[str] = []
    s = PlacementState(CUDA)
    s.rebuild(lambda: (NODES, [], [], []), lambda: (asked.append("dra"), ([], []))[1])
    assert asked == [] and s.slices is None


def test_a_fill_returns_a_claim_on_a_held_device_as_a_problem_and_books_the_first() -> None:
    s = PlacementState(CUDA, dra_driver="gpu.nvidia.com")
    claims = [dra_claim("k1", "node1", "gpu-0"), dra_claim("k2", "node1", "gpu-0"),
              dra_claim("k3", "node1", "gpu-1")]
    problems = s.rebuild(lambda: ([node("node1", 4)], [], [], []),
                         lambda: ([dra_slice("node1", 3)], claims))
    assert problems == ["claim ns/c-k2: node1: device 0 also held by claim ns/c-k1"]
    assert s.view().free_count("node1") == 1  # gpu-0 and gpu-1 held, gpu-2 free


class Troubled(Book):
    """A pod book whose rebuild finds one pod it cannot book."""

    def rebuild(self, ledger: Ledger, pods: list[dict[str, Any]]) -> list[str]:
        super().rebuild(ledger, pods)
        return ["pod ns/odd: its devices annotation names device 9, which node1 lacks"]


def test_each_problem_of_a_fill_is_returned_logged_and_counted() -> None:
    before = BAD_OBJECTS.labels("rebuild")._value.get()
    unreadable = child("bad", "uid-bad", "node2", "x")
    with info_logs() as logs:
        s = PlacementState(CUDA, pod_books=(Troubled(),))
        problems = s.rebuild(lambda: (NODES, [], [], [child("a", "uid-a", "node2", "0"),
                                                      unreadable]))
    assert len(problems) == 2 and "ns/bad-0" in problems[0]  # the pods', then the book's
    assert problems[1] == "pod ns/odd: its devices annotation names device 9, which node1 lacks"
    assert BAD_OBJECTS.labels("rebuild")._value.get() == before + 2
    assert [(e["problem"], e["log_level"]) for e in events(logs, "ledger.rebuild.problem")] \
        == [(p, "warning") for p in problems]
    [rebuilt] = events(logs, "ledger.rebuilt")
    assert (rebuilt["nodes"], rebuilt["holders"]) == (2, 2)  # the book's seed and pod a


def test_a_fill_books_the_children_we_made_that_the_caches_do_not_show_yet() -> None:
    writes = OwnWrites()
    made = {"kind": "Pod", **child("new", "uid-new", "node1", "2,3")}
    writes.created("uid-new", made)
    s = PlacementState(CUDA, own_writes=writes)
    s.rebuild(lambda: (NODES, [], [], []))
    assert s.view().free_count("node1") == 2


def test_an_invalidated_state_says_why_takes_no_event_and_wakes_the_waiting() -> None:
    w = World()
    w.state.pending.waiting.add("ns/waiter")
    with info_logs() as logs:
        w.state.invalidate("the pod handler raised")
    assert w.state.ready is False
    [said] = events(logs, "placement.invalidated")
    assert (said["log_level"], said["reason"], said["effect"]) == (
        "error", "the pod handler raised", "rebuilt from the caches before the next placement")
    assert "ns/waiter" in w.woken
    w.state.events.on_pod(child("late", "uid-late", "node1", "0"))
    assert w.state.view().free_count("node1") == 4  # not applied: the next fill reads it


def test_children_held_without_a_commit_hold_and_nothing_is_said_lost() -> None:
    w = World()
    with info_logs() as logs:
        assert w.state.hold_created([child("a", "uid-a", "node1", "0,1")]) is True
    assert events(logs, "placement.booking_lost") == []
    assert w.state.view().free_count("node1") == 2


def test_children_held_with_their_workloads_commit_commit_its_booking() -> None:
    w = World()
    d = w.state.decide(gw("a", gpusPerReplica=2))
    devices = ",".join(str(x) for x in d.placements[0].devices)
    assert not w.state.booking("ns/a").committed
    assert w.state.hold_created([child("a", "uid-a", d.placements[0].node, devices)],
                                commit="ns/a") is True
    assert w.state.booking("ns/a").committed
    assert w.state.hold_created([], commit="ns/gone") is False  # nothing to commit


def test_a_state_without_queues_reports_no_queue_usage() -> None:
    assert World().state.queue_usage() == ({}, {})
