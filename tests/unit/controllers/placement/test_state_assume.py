"""The cache's one locked step and the scheduler's cycle over it, as a workload sees
them: a decision the ledger refuses is the workload's Unschedulable status (and a
warning), a booked workload's CPU counts on its node until its pod shows, a
decision made on a cache that changed is refused as stale with the reason, an
admin's PriorityClass (and only that) preempts across namespaces, a pod group's
budget refusing its eviction leaves the preemptor waiting with nobody evicted, and a
preemptor's victims and their pods are what its children wait for until they are
gone. Pure: plain dicts, no server."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from api.v1alpha1.types import DeviceExposure, GPUWorkload, Placement
from controllers.placement.evictions import preempted_message
from controllers.placement.state import PlacementState
from internal.metrics.domain import STALE_DECISIONS
from internal.scheduling.framework import PREEMPT, SCHEDULED, UNSCHEDULABLE, Decision
from internal.scheduling.outcome import PREEMPTION_REFUSED
from internal.scheduling.sharefloor import DEFAULT_FLOORS
from internal.scheduling.stamps import StaleDecision
from tests.unit.controllers.placement.test_cache_adopt import Book, events, info_logs, tried
from tests.unit.controllers.placement.test_cache_bookings import BUSY_NODE2, preempted
from tests.unit.controllers.placement.test_placement_state import World, child, gw, placed, pod
from tests.unit.scheduling.helpers import node

CUDA = DeviceExposure.CUDA_VISIBLE_DEVICES


def on_node1(devices: list[int], **kw: Any) -> Decision:
    """A SCHEDULED decision of one replica on node1's ``devices``."""
    return Decision(SCHEDULED, "leastLoaded", placements=[
        Placement(index=0, node="node1", devices=devices)],
        gpus_per_replica=len(devices), visited=3, **kw)


# ------------------------------------------------------------- the locked step


def test_a_decision_the_ledger_refuses_is_unschedulable_with_a_warning() -> None:
    w = World(pods=[child("busy", "uid-busy", "node1", "0,1")])
    _, mark = w.state.mark_pass()
    with info_logs() as logs:
        got = w.state.assume_decision(gw("a", gpusPerReplica=2), on_node1([0, 1]), mark)
    assert (got.outcome, got.strategy, got.visited) == (UNSCHEDULABLE, "leastLoaded", 3)
    assert "node1" in got.message and not got.placements
    [said] = events(logs, "placement.refused")
    assert (said["workload"], said["reason"], said["effect"]) == (
        "ns/a", got.message, "Unschedulable; the filters should have said so")
    assert w.state.booking("ns/a") is None


def test_a_decision_on_a_node_that_changed_is_refused_as_stale_naming_the_nodes() -> None:
    w = World()
    _, mark = w.state.mark_pass()
    w.state.events.on_pod(child("b", "uid-b", "node1", "3"))
    w.state.events.on_pod(child("c", "uid-c", "node2", "3"))
    two = Decision(SCHEDULED, "leastLoaded", gpus_per_replica=1, placements=[
        Placement(index=0, node="node1", devices=[0]), Placement(index=1, node="node2",
                                                                 devices=[0])])
    with pytest.raises(StaleDecision) as refused:
        w.state.assume_decision(gw("a", gpusPerReplica=1, replicas=2), two, mark)
    assert str(refused.value) == "node node1, node2 changed"
    _, mark = w.state.mark_pass()
    w.state.rebuild(lambda: ([node("node1", 4), node("node2", 4)], [], [], []))
    with pytest.raises(StaleDecision) as refused:
        w.state.assume_decision(gw("a", gpusPerReplica=1), on_node1([0]), mark)
    assert str(refused.value) == "the placement cache was filled again"


class Queues:
    """A queue gate that admits what it is asked again, and records who asks."""

    def __init__(self, admits: bool) -> None:
        self.admits, self.asked, self.across = admits, [], []
        self.decisions: list[Decision] = []
        # what the cache reads to count each queue's usage (one queue, never changed)
        self.manager, self.floors = SimpleNamespace(generation=0), DEFAULT_FLOORS

    def queue_of(self, a: Any) -> str:
        return "q"

    def still_admits(self, w: GPUWorkload, decision: Decision, ledger: Any) -> bool:
        assert ledger is not None and ledger.free_count("node1") == 4
        self.asked.append(w.key)
        self.decisions.append(decision)
        return self.admits

    def gate(self, w: GPUWorkload, ledger: Any, sched: Any, across: bool) -> Decision:
        self.across.append(across)
        return sched.schedule(w, across_namespaces=across)


@pytest.mark.parametrize("gated", [False, True], ids=["no gate", "gate refuses"])
def test_a_queues_decision_is_stale_when_any_holder_changed(gated: bool) -> None:
    queues = Queues(False) if gated else None
    w = World()
    w.state.queues = queues  # type: ignore[assignment]
    _, mark = w.state.mark_pass()
    w.state.events.on_pod(child("elsewhere", "uid-e", "node2", "0"))  # not on node1
    with pytest.raises(StaleDecision) as refused:
        w.state.assume_decision(gw("a", gpusPerReplica=1), on_node1([0], queue="q"), mark)
    assert str(refused.value) == "the holders its queue's quota counts changed"
    assert queues is None or queues.asked == ["ns/a"]


def test_a_queues_decision_its_queue_still_admits_is_booked() -> None:
    w = World()
    w.state.queues = Queues(True)  # type: ignore[assignment]
    _, mark = w.state.mark_pass()
    w.state.events.on_pod(child("elsewhere", "uid-e", "node2", "0"))
    decision = on_node1([0], queue="q")
    got = w.state.assume_decision(gw("a", gpusPerReplica=1), decision, mark)
    assert got.ok and w.state.booking("ns/a") is not None
    assert w.state.queues.asked == ["ns/a"]  # type: ignore[union-attr]
    assert w.state.queues.decisions == [decision]  # type: ignore[union-attr]


def cpu_node(name: str, cpu: str) -> dict[str, Any]:
    n = node(name, 8)
    n["status"]["allocatable"]["cpu"] = cpu
    return n


def asks_cpu(name: str, cpu: str) -> GPUWorkload:
    return gw(name, gpusPerReplica=1, template={"spec": {"containers": [
        {"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}]}})


def test_a_booked_workloads_cpu_counts_on_its_node_until_its_pod_shows_there() -> None:
    s = PlacementState(CUDA)
    s.rebuild(lambda: ([cpu_node("n1", "4")], [], [], []))
    a = s.decide(asks_cpu("a", "3"))
    assert a.ok
    refused = s.decide(asks_cpu("b", "2"))  # a's pod is not there yet: 3 of 4 kept
    assert not refused.ok and "cpu" in refused.message.lower()
    a_pod = pod("a-0", "n1", devices=str(a.placements[0].devices[0]),
                owner={"apiVersion": "gpu.orchestrator.dev/v1alpha1", "kind": "GPUWorkload",
                       "name": "a", "uid": "uid-a", "controller": True},
                labels={"gpu.orchestrator.dev/attempt": "0"})
    a_pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "3"}}
    s.events.on_pod(a_pod)
    assert s.decide(asks_cpu("c", "1")).ok  # counted once: the pod, not the pod and a
    assert not s.decide(asks_cpu("d", "1")).ok


# ------------------------------------------------------------- preemption


def test_a_preemptors_children_wait_for_its_victims_then_their_pods() -> None:
    w = preempted()
    assert w.state.eviction("ns/low") == preempted_message("ns/high", 100)
    high = w.state.booking("ns/high")
    assert high is not None and high.overlap
    waits = w.state.children_wait("ns/high")
    assert (waits.victims, waits.nominated) == (["ns/low"], True)
    assert w.state.booking("ns/high").overlap  # still a nomination
    w.state.evicted("ns/low")
    waits = w.state.children_wait("ns/high")
    assert (waits.victims, waits.blocking) == ([], {"node1": ["departing:ns/low", "ns/low-0"]})
    w.state.events.on_pod_deleted(child("low", "uid-low", "node1", "0,1,2,3"))
    w.state.departed("ns/low")  # its reconcile found its children gone
    waits = w.state.children_wait("ns/high")
    assert (waits.victims, waits.blocking) == ([], {})
    assert not w.state.booking("ns/high").overlap  # no longer a nomination


def test_a_preemptor_is_not_waiting_for_capacity_once_it_preempts_or_is_placed() -> None:
    w = World(pods=[child("low", "uid-low", "node1", "0,1,2,3"), BUSY_NODE2],
              workloads=[placed("low", [0, 1, 2, 3]),
                         tried("high", gpusPerReplica=4, priority="high",
                               schedulingStrategy="priority")])
    assert "ns/high" in w.state.pending.waiting
    d = w.state.decide(gw("high", gpusPerReplica=4, priority="high",
                          schedulingStrategy="priority"))
    assert d.outcome == PREEMPT and "ns/high" not in w.state.pending.waiting
    w.state.set_workload(tried("other", gpusPerReplica=1))
    assert "ns/other" in w.state.pending.waiting
    w.state.forget("ns/high", departed=True)
    w.state.events.on_pod_deleted(child("busy", "uid-busy", "node2", "0,1,2,3"))
    assert w.state.decide(gw("other", gpusPerReplica=1)).ok
    assert "ns/other" not in w.state.pending.waiting


def test_a_nomination_done_is_no_longer_a_nomination() -> None:
    w = preempted()
    w.state.nomination_done("ns/high")
    assert not w.state.booking("ns/high").overlap


def test_a_preemptor_with_nothing_left_to_wait_for_is_woken_no_more() -> None:
    w = preempted()
    w.state.evicted("ns/low")
    w.state.events.on_pod_deleted(child("low", "uid-low", "node1", "0,1,2,3"))
    w.state.departed("ns/low")
    assert w.state.blockers("ns/high") == {}
    w.woken.clear()
    w.state.capacity_freed()
    assert "ns/high" not in w.woken


class Budgeted(Book):
    """A pod book whose pod group's budget refuses (at the pass, or only when asked
    to evict: changed meanwhile)."""

    def __init__(self, at_pass: str | None, at_evict: str | None) -> None:
        super().__init__(key="Pod:ns/seed", devices=(0, 1, 2, 3))
        self.at_pass, self.at_evict, self.messages = at_pass, at_evict, []

    def refusal(self, ledger_key: str, message: str) -> str | None:
        self.messages.append((ledger_key, message))
        return self.at_pass

    def evict(self, key: str, message: str) -> str | None:  # type: ignore[override]
        self.evicted.append(key)
        self.messages.append((key, message))
        return self.at_evict


@pytest.mark.parametrize("at_pass,at_evict", [("budget: 0 of 4 may go", None),
                                              (None, "budget: 0 of 4 may go")],
                         ids=["asked first", "changed meanwhile"])
def test_a_budget_refusing_its_groups_eviction_leaves_the_preemptor_waiting(
        at_pass: str | None, at_evict: str | None) -> None:
    book = Budgeted(at_pass, at_evict)
    w = World(pods=[BUSY_NODE2], books=(book,))
    d = w.state.decide(gw("high", gpusPerReplica=4, priority="high",
                          schedulingStrategy="priority"))
    assert (d.outcome, d.wait_reason, d.message, d.strategy) == (
        UNSCHEDULABLE, PREEMPTION_REFUSED, "budget: 0 of 4 may go", "priority")
    assert d.visited > 0  # the pass's, kept
    told = ("Pod:ns/seed", "preempted by ns/high (priority 100) to make room")
    assert book.messages == ([told] if at_pass else [told, told])
    assert w.state.booking("ns/high") is None  # nothing booked, nothing nominated
    assert book.evicted == ([] if at_pass else ["Pod:ns/seed"])


# ------------------------------------------------------------- across namespaces


def in_ns(ns: str, name: str, priority: int, cls: str | None = None) -> GPUWorkload:
    spec: dict[str, Any] = {"gpusPerReplica": 4, "priority": priority,
                            "schedulingStrategy": "priority"}
    if cls:
        spec["priorityClassName"] = cls
    return GPUWorkload.model_validate({"metadata": {"name": name, "namespace": ns,
                                                    "uid": f"uid-{ns}-{name}"}, "spec": spec})


def tenant_a_holds_both_nodes(**kw: Any) -> PlacementState:
    s = PlacementState(CUDA, priority_class_value={"team-high": 1000}.get, **kw)
    s.rebuild(lambda: ([node("node1", 4), node("node2", 4)], [], [], []))
    for n in ("x", "y"):
        assert s.decide(in_ns("a", n, 0)).ok
        s.commit(f"a/{n}")
    return s


def test_only_an_admins_priority_class_preempts_another_namespace() -> None:
    s = tenant_a_holds_both_nodes()
    assert s.decide(in_ns("b", "mine", 1000)).outcome == UNSCHEDULABLE  # a tenant's own
    assert s.decide(in_ns("b", "forged", 0, cls="unknown")).outcome == UNSCHEDULABLE
    assert s.decide(in_ns("b", "admin", 1000, cls="team-high")).outcome == PREEMPT
    no_classes = PlacementState(CUDA)  # no PriorityClass is known: nobody is an admin
    assert no_classes.admin_priority(in_ns("b", "forged", 0, cls="unknown")) is False


def test_an_admins_priority_class_reaches_the_queue_gate() -> None:
    gate = Queues(True)
    s = tenant_a_holds_both_nodes(queues=gate)
    gate.across.clear()
    s.decide(in_ns("b", "mine", 1000))
    s.decide(in_ns("b", "admin", 1000, cls="team-high"))
    assert gate.across == [False, True]


def test_a_decision_stale_every_time_is_made_under_the_lock_as_admin_still() -> None:
    s = tenant_a_holds_both_nodes()
    real, tries = s.assume_decision, []

    def always_stale(w: GPUWorkload, decision: Decision, mark: Any) -> Decision:
        tries.append(w.key)
        if len(tries) <= 3:
            raise StaleDecision("node node1 changed")
        return real(w, decision, mark)

    s.assume_decision = always_stale  # type: ignore[method-assign]
    locked = STALE_DECISIONS.labels("locked")._value.get()
    assert s.decide(in_ns("b", "admin", 1000, cls="team-high")).outcome == PREEMPT
    no_classes = PlacementState(CUDA)  # no PriorityClass is known: nobody is an admin
    assert no_classes.admin_priority(in_ns("b", "forged", 0, cls="unknown")) is False
    assert len(tries) == 4 and STALE_DECISIONS.labels("locked")._value.get() == locked + 1


def test_a_pass_that_raises_on_unchanged_inputs_is_raised_at_once() -> None:
    class Broken(Queues):
        def gate(self, w: GPUWorkload, ledger: Any, sched: Any, across: bool) -> Decision:
            raise RuntimeError("a bug in the gate")

    s = PlacementState(CUDA, queues=Broken(True))  # type: ignore[arg-type]
    s.rebuild(lambda: ([node("node1", 4)], [], [], []))
    retried = STALE_DECISIONS.labels("retried")._value.get()
    with pytest.raises(RuntimeError, match="a bug in the gate"):
        s.decide(gw("a", gpusPerReplica=1))
    assert STALE_DECISIONS.labels("retried")._value.get() == retried  # not taken for stale


def test_a_preemption_of_a_seed_pod_and_a_workload_takes_both() -> None:
    """The seed pod goes through its book (its booking stays till its pod is gone),
    the workload gives up its booking: both are victims, whichever comes first."""
    seed = Book(key="Pod:ns/seed", devices=(0, 1))
    w = World(pods=[child("low", "uid-low", "node1", "2,3"), BUSY_NODE2],
              workloads=[placed("low", [2, 3])], books=(seed,))
    d = w.state.decide(gw("high", gpusPerReplica=4, priority="high",
                          schedulingStrategy="priority"))
    assert d.outcome == PREEMPT and sorted(d.victims) == ["Pod:ns/seed", "ns/low"]
    assert seed.evicted == ["Pod:ns/seed"]
    assert w.state.booking("ns/low") is None and w.state.departing("ns/low")
    assert w.state.eviction("ns/low") == preempted_message("ns/high", 100)
