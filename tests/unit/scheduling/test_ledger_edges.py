"""The ledger at its edges: a rebuild reports the later of two pods whatever order the
cache lists them in; a pod whose devices annotation changed keeps its devices, its
owner, its priority and its workload attempt; a nomination that ends stops waiting
for its victims elsewhere; the over-commit, MIG and conflict messages; the queries
on a node that holds nothing or is gone."""

from __future__ import annotations

from typing import Any

import pytest

from api.v1alpha1.keys import ATTEMPT_LABEL, DEVICES_ANNOTATION
from api.v1alpha1.types import Placement
from internal.scheduling import Ledger
from internal.scheduling.ledger import LedgerConflict
from internal.scheduling.ledger_core import is_conflict
from internal.scheduling.queue_usage import UsageIndex, used_by_queue
from internal.scheduling.shares import MigInstance, NodeSharing
from tests.unit.scheduling.test_pod_holdings import gw_ref, pod


def P(node: str, *devices: int, share: str | None = None) -> Placement:
    return Placement(index=0, node=node, devices=list(devices), share=share)


def ledger(*nodes: str, gpus: int = 4) -> Ledger:
    led = Ledger()
    for n in nodes or ("n1",):
        led.set_node_devices(n, range(gpus))
    return led


def created(p: dict[str, Any], when: str) -> dict[str, Any]:
    p["metadata"]["creationTimestamp"] = when
    return p


def test_a_rebuild_reports_the_later_of_two_pods_whatever_order_they_are_listed_in() -> None:
    older = created(pod("zz-older", uid="u-old", devices="0"), "2026-01-01T00:00:00Z")
    newer = created(pod("aa-newer", uid="u-new", devices="0"), "2026-01-02T00:00:00Z")
    _, problems = Ledger.rebuild([], [newer, older], {"n1": range(4)})
    assert problems == ["pod team/aa-newer: n1: device 0 also held by team/zz-older"]


def ours(devices: str | None, *, orphan: bool = False, gpus: int | None = None,
         **kw: Any) -> dict[str, Any]:
    """A pod of workload attempt w-uid#1 (orphaned: its ownerReference taken away)."""
    return pod(uid="u1", devices=devices, gpus=gpus, ref=None if orphan else gw_ref(),
               labels={ATTEMPT_LABEL: "1"}, **kw)


def booked(led: Ledger) -> None:
    led.assume("team/w", [P("n1", 0, 1)], owner="w-uid#1")


def test_a_re_annotated_pod_keeps_its_devices_owner_priority_and_attempt() -> None:
    led = ledger()
    booked(led)
    assert led.sync_pod(ours("0,1", gpus=3)) == []  # 2 named, 1 counted
    assert led.sync_pod(ours("2,3", gpus=3), priority=7) == [
        f"pod team/p: annotation {DEVICES_ANNOTATION} changed to 2,3 after it was given "
        "0,1; it keeps holding those"]
    assert led.device_owners("n1", 0) == frozenset({"w-uid#1"})
    assert led.holder("n1", 1) == "team/w" and led.pod("u1").name == "team/p"
    assert led.free_count("n1") == 1 and led.priority_of("pod:u1") == 7
    # orphaned afterwards (--cascade=orphan): still the attempt's pod, no conflict
    problems = led.sync_pod(ours("2,3", gpus=3, orphan=True))
    assert problems == [
        f"pod team/p: annotation {DEVICES_ANNOTATION} changed to 2,3 after it was given "
        "0,1; it keeps holding those"]


def test_a_pod_whose_annotation_is_removed_is_told_it_keeps_its_devices() -> None:
    led = ledger()
    led.sync_pod(pod(uid="u1", devices="0,1"))
    assert led.sync_pod(pod(uid="u1", devices=None)) == [
        f"pod team/p: annotation {DEVICES_ANNOTATION} changed to nothing after it was "
        "given 0,1; it keeps holding those"]
    assert led.free_devices("n1") == frozenset({2, 3})


def test_an_unreadable_annotation_keeps_a_pods_owner_and_attempt() -> None:
    led = ledger()
    booked(led)
    led.sync_pod(ours("0,1", gpus=2))
    bad = f"pod team/p: annotation {DEVICES_ANNOTATION}='x,y' is not a list of device indices"
    assert led.sync_pod(ours("x,y", gpus=2)) == [bad]
    assert led.device_owners("n1", 0) == frozenset({"w-uid#1"})
    assert led.sync_pod(ours("x,y", gpus=2, orphan=True)) == [bad]
    # still the attempt's pod once orphaned (what the intruder check reads)
    assert led.pod("u1").child_of == "w-uid#1"


def test_an_unreadable_pod_of_the_same_name_that_holds_nothing_frees_the_old_one() -> None:
    # a pod without uid is keyed by its name: one recreated on another node, its
    # annotation unreadable and requesting nothing, holds nothing
    led = ledger("n1", "n2")
    led.sync_pod(pod("p", node="n2", devices="0"))
    assert led.free_count("n2") == 3
    problems = led.sync_pod(pod("p", node="n1", devices="x"))
    assert len(problems) == 1 and led.free_count("n2") == 4 and led.free_count("n1") == 4


def nominated(led: Ledger) -> None:
    led.sync_pod(pod("lo-0", uid="lo0", devices="0", ref=gw_ref("lo"),
                     labels={ATTEMPT_LABEL: "0"}))
    led.sync_pod(pod("lo-1", node="n2", uid="lo1", devices="0", ref=gw_ref("lo"),
                     labels={ATTEMPT_LABEL: "0"}))
    led.assume("team/hi", [P("n1", 0)], owner="hi#0", overlap=["lo#0"])


def test_an_ended_nomination_waits_only_for_its_own_devices() -> None:
    led = ledger("n1", "n2")
    nominated(led)
    assert led.blockers("team/hi") == {"n1": ["team/lo-0"], "n2": ["team/lo-1"]}
    led.usage = usage = UsageIndex(led, lambda a: "q")
    before = (dict(usage.used), {o: u.gpus for o, u in usage.owners.items()})
    holds = led.stamps.holds
    assert led.end_nomination("team/hi")
    hi = led.allocation("team/hi")
    assert hi is not None and hi.overlap == frozenset() and led.stamps.holds == holds + 1
    # the queues' usage does not read an overlap: the same, and the same as summed again
    assert (dict(usage.used), {o: u.gpus for o, u in usage.owners.items()}) == before
    assert usage.used == used_by_queue(led, lambda a: "q")
    assert led.blockers("team/hi") == {"n1": ["team/lo-0"]}
    assert not led.end_nomination("team/hi") and not led.end_nomination("team/none")
    assert led.stamps.holds == holds + 1


def test_a_nomination_does_not_wait_elsewhere_for_a_victim_booked_again() -> None:
    led = ledger("n1", "n2", "n3")
    nominated(led)
    led.assume("team/lo", [P("n3", 0)], owner="lo#0")  # placed again, same attempt
    assert led.blockers("team/hi") == {"n1": ["team/lo-0"]}


def test_which_problems_are_device_conflicts() -> None:
    assert is_conflict("pod team/b: n1: device 0 also held by team/a")
    assert is_conflict("n1: over-committed: 6 GPUs held on its 4 devices (counted 6)")
    assert not is_conflict(f"pod team/p: annotation {DEVICES_ANNOTATION}='x' is not a list")


def test_the_over_commit_names_every_holder() -> None:
    led = ledger()
    led.sync_pod(pod("a", uid="a", devices="0"))
    led.sync_pod(pod("b", uid="b", devices="1"))
    led.sync_pod(pod("c", uid="c", gpus=2))
    assert led.sync_pod(pod("d", uid="d", gpus=2)) == [
        "pod team/d: n1: over-committed: 6 GPUs held on its 4 devices "
        "(named 0,1 by team/a, team/b; counted 4 (device plugin): team/c 2, team/d 2)"]


def test_a_mig_enabled_device_is_refused_whole_with_its_reason() -> None:
    led = Ledger()
    mig = {d: {f"MIG-{d}": MigInstance(f"MIG-{d}", "3g.40gb")} for d in (2, 3)}
    led.set_node_devices("n1", [0, 1], NodeSharing(mig=mig), size=4)
    with pytest.raises(LedgerConflict) as e:
        led.refuse_mig(P("n1", 1, 2, 3))
    assert str(e.value) == ("n1: device(s) 2,3 MIG-enabled: offered only as MIG instances "
                            "(spec.migProfile)")


def test_a_share_of_a_free_device_needs_a_free_gpu() -> None:
    led = ledger(gpus=2)
    led.assume("team/x", [P("n1", 0)], owner="x")
    led.sync_pod(pod("y", uid="y", gpus=1))  # the device plugin's: takes device 1
    with pytest.raises(LedgerConflict, match="n1: 0 free GPU"):
        led.assume("team/s", [P("n1", 1, share="fraction=0.5")], owner="s")


def test_queries_on_a_node_without_holders_or_gone() -> None:
    led = Ledger()
    assert led.size("n9") == 0 and led.share_use("n9") == {} and led.device_use("n9") == {}
    led.set_node_devices("n1", [0, 1], NodeSharing(memory={0: 81920}), size=4)
    assert led.size("n1") == 4 and led.sharing("n1").memory == {0: 81920}
    led.remove_node("n1")
    assert led.size("n1") == 0 and led.sharing("n1") == NodeSharing()


def test_who_holds_a_node_by_name_and_as_what() -> None:
    led = ledger()
    led.assume("team/w", [P("n1", 0)], owner="w#0")
    led.sync_pod(pod("w-0", uid="p0", devices="0", ref=gw_ref("w"),
                     labels={ATTEMPT_LABEL: "0"}))
    assert led.named_holder("n1") == "team/w"
    assert led.named_holder("n1", frozenset({"w#0"})) is None
    assert [(o, booking) for o, booking, _ in led.device_holds("n1", 0)] == [
        ("w#0", True), ("w#0", False)]


def test_a_departing_holding_keeps_one_entry_per_holder_in_the_queues_usage() -> None:
    led = ledger()
    led.usage = usage = UsageIndex(led, lambda a: "q")
    led.assume("team/w", [P("n1", 0)], owner="w#0")
    led.depart("team/w")
    led.assume("team/w", [P("n1", 1)], owner="w#0")
    led.depart("team/w")  # departed twice: both held, under one key
    assert list(led.allocations()) == ["departing:team/w"]
    assert usage.used == {"q": 2} == used_by_queue(led, lambda a: "q")
    assert led.free_devices("n1") == frozenset({2, 3})


def test_an_updated_pod_keeps_its_over_commit_verdict_and_the_earlier_one_none() -> None:
    led = ledger()
    assert led.sync_pod(pod("a", uid="a", gpus=2)) == []
    over = led.sync_pod(pod("b", uid="b", gpus=4))
    assert len(over) == 1 and "over-committed" in over[0]
    # each updated (a new priority: booked again), the later one is still the one
    assert led.sync_pod(pod("a", uid="a", gpus=2), priority=3) == []
    assert led.sync_pod(pod("b", uid="b", gpus=4), priority=3) == over
    assert led.sync_pod(pod("b", uid="b", gpus=4), priority=3) == over  # unchanged


def test_a_victims_pod_updated_under_a_nomination_is_no_conflict() -> None:
    led = ledger("n1", "n2")
    nominated(led)
    assert led.sync_pod(pod("lo-0", uid="lo0", devices="0", ref=gw_ref("lo"),
                            labels={ATTEMPT_LABEL: "0"}), priority=2) == []


def test_an_unchanged_update_reports_what_it_did_and_nothing_for_kin() -> None:
    led = ledger()
    a = pod("a", uid="a", devices="0")
    b = pod("b", uid="b", devices="0")
    led.sync_pod(a)
    conflict = ["pod team/b: n1: device 0 also held by team/a"]
    assert led.sync_pod(b) == conflict
    assert led.sync_pod(b) == conflict  # said again
    # two pods of one workload attempt on one device (an annotation map), then one
    # of them orphaned: kin each time, unchanged or not
    led = ledger()
    booked(led)
    led.sync_pod(ours("0,1"))
    two = pod("p2", uid="u2", devices="0", ref=gw_ref(), labels={ATTEMPT_LABEL: "1"})
    assert led.sync_pod(two) == [] and led.sync_pod(two) == []
    assert led.sync_pod(ours("0,1", orphan=True)) == []
    assert led.sync_pod(ours("0,1", orphan=True)) == []
