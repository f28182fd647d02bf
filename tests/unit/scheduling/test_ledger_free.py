"""When a device is free, as the ledger answers it: a device is free only when no
holder holds it; counted GPUs of one owner are the larger of what its bookings and
its pods count, never both; a preemptor's nominated booking may share its victims'
devices and names them as what it waits for; and the rebuild after a restart books
pods first, then committed placements oldest first, each under its attempt's owner."""

from __future__ import annotations

from typing import Any

import pytest

from api.v1alpha1.keys import ATTEMPT_LABEL, DEVICES_ANNOTATION
from api.v1alpha1.types import GPUWorkload, Placement
from internal.scheduling import Ledger, LedgerConflict
from internal.scheduling.pods import PodHolding


def P(node: str, *devices: int, i: int = 0) -> Placement:
    return Placement(index=i, node=node, devices=list(devices))


def ledger(**nodes: int) -> Ledger:
    led = Ledger()
    for n, gpus in (nodes or {"n1": 4}).items():
        led.set_node_devices(n, range(gpus))
    return led


def pod(name: str, node: str = "n1", *, devices: str | None = None, gpus: int = 0,
        workload_uid: str | None = None, attempt: int = 0) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "team", "uid": f"u-{name}"}
    if devices is not None:
        meta["annotations"] = {DEVICES_ANNOTATION: devices}
    if workload_uid is not None:
        meta["ownerReferences"] = [{"kind": "GPUWorkload", "name": "w", "uid": workload_uid,
                                    "controller": True}]
        meta["labels"] = {ATTEMPT_LABEL: str(attempt)}
    return {"metadata": meta,
            "spec": {"nodeName": node,
                     "containers": [{"resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
            "status": {"phase": "Running"}}


# ------------------------------------------------------------ free and counted


def test_a_device_is_free_only_when_nobody_holds_it() -> None:
    led = ledger(n1=4)
    assert led.free_devices("n1") == frozenset(range(4)) and led.free_count("n1") == 4
    led.sync_pod(pod("a-0", devices="1", workload_uid="a", attempt=0))
    led.assume("ns/a", [P("n1", 1)], owner="a#0")
    assert led.free_devices("n1") == frozenset({0, 2, 3}) and led.free_count("n1") == 3
    # messages name the booking before its pods
    assert led.holder("n1", 1) == "ns/a" and dict(led.holders("n1")) == {1: "ns/a"}
    led.forget("ns/a")  # the booking goes: its pod still holds device 1
    assert led.free_devices("n1") == frozenset({0, 2, 3}) and led.free_count("n1") == 3
    assert led.device_owners("n1", 1) == frozenset({"a#0"})
    assert led.holder("n1", 1) == "team/a-0"
    assert led.remove_pod("u-a-0") is True
    assert led.free_devices("n1") == frozenset(range(4)) and led.free_count("n1") == 4
    assert led.device_owners("n1", 1) == frozenset() and led.holder("n1", 1) is None
    assert led.remove_pod("u-a-0") is False


def test_holders_are_named_in_order_pods_by_name() -> None:
    led = ledger(n1=4)
    led.sync_pod(pod("b", devices="0"))
    led.sync_pod(pod("a", devices="0"))
    assert led.holder("n1", 0) == "team/a"


def test_removing_what_is_not_there_is_harmless() -> None:
    led = ledger(n1=4)
    led.assume("ns/a", [P("n1", 0)])
    assert led.remove_holder("ns/a") is False  # a booking is not a pod's holding
    assert led.holder("n1", 0) == "ns/a"
    assert led.remove_holder("pod:nobody") is False and led.remove_pod("nobody") is False
    led.sync_pod(pod("p", devices="1"))
    assert led.remove_holder("pod:u-p") is True and led.free_devices("n1") == {1, 2, 3}
    led.remove_node("n9")  # never known
    assert led.known_nodes() == ["n1"]
    with pytest.raises(KeyError, match="ns/unknown"):
        led.commit("ns/unknown")


def test_a_pod_recorded_directly_is_committed_with_priority_zero() -> None:
    led = ledger(n1=4)
    led.set_pod(PodHolding("u1", "team/p", "n1", (2,), 1, "pod:u1"))
    assert led.priority_of("pod:u1") == 0 and led.is_committed("pod:u1")
    assert led.free_count("n1") == 2 and led.counted("n1") == {"pod:u1": 1}


def test_a_booking_records_the_workload_uid_it_was_made_for() -> None:
    led = ledger(n1=4)
    assert led.assume("ns/a", [P("n1", 0)]).uid == ""
    assert led.assume("ns/b", [P("n1", 1)], uid="b-uid").uid == "b-uid"
    assert led.allocation("ns/b").uid == "b-uid"


def test_unknown_nodes_and_unusable_devices_are_never_free() -> None:
    led = ledger(n1=2)
    assert led.free_devices("nx") == frozenset() and led.free_count("nx") == 0
    assert led.free_count_without("nx", frozenset()) == 0
    led.sync_pod(pod("p", devices="5"))  # a device the node does not offer
    assert led.free_devices("n1") == frozenset({0, 1}) and led.free_count("n1") == 2
    assert led.free_count_without("n1", frozenset()) == 2


def test_more_counted_than_free_is_zero_free_not_negative() -> None:
    led = ledger(n1=2)
    led.sync_pod(pod("big", gpus=3))
    assert led.free_count("n1") == 0 and led.index.get("n1") == 0
    assert led.free_count_without("n1", frozenset()) == 0
    assert led.free_count_without("n1", frozenset({"pod:u-big"})) == 2


def test_a_booking_and_its_own_pod_count_once() -> None:
    led = ledger(n1=8)
    led.assume("ns/dp", [P("n1")], gpus_per_replica=2, owner="dp#0")
    assert led.counted("n1") == {"dp#0": 2} and led.free_count("n1") == 6
    led.sync_pod(pod("dp-0", gpus=3, workload_uid="dp", attempt=0))
    # the larger of the booking (2) and the pod (3), not 5
    assert led.counted("n1") == {"dp#0": 3} and led.free_count("n1") == 5
    led.sync_pod(pod("dp-1", gpus=1, workload_uid="dp", attempt=0))
    # its pods add up (4) against its booking (2)
    assert led.counted("n1") == {"dp#0": 4} and led.free_count("n1") == 4
    led.sync_pod(pod("other", gpus=1))
    assert led.counted("n1") == {"dp#0": 4, "pod:u-other": 1} and led.free_count("n1") == 3
    assert led.counted_total("n1") == 5
    led.remove_pod("u-dp-0")
    led.remove_pod("u-dp-1")
    assert led.counted("n1") == {"dp#0": 2, "pod:u-other": 1} and led.free_count("n1") == 5


def test_two_bookings_of_one_owner_add_up() -> None:
    led = ledger(n1=8)
    led.assume("ns/a", [P("n1"), P("n1", i=1)], gpus_per_replica=1, owner="o")
    led.assume("ns/b", [P("n1")], gpus_per_replica=2, owner="o")
    assert led.counted("n1") == {"o": 4} and led.free_count("n1") == 4


def test_free_count_without_some_owners() -> None:
    led = ledger(n1=6)
    led.sync_pod(pod("v", devices="0,1", gpus=3))  # victim: 2 named + 1 counted
    led.sync_pod(pod("x", devices="2"))
    led.sync_pod(pod("y", devices="3"))
    led.sync_pod(pod("z", devices="3"))  # 3 shared by y and z
    led.sync_pod(pod("c", gpus=1))
    assert led.free_count("n1") == 0  # {4, 5} free, 2 counted
    assert led.priority_of("pod:u-c") == 0
    v, y, c = "pod:u-v", "pod:u-y", "pod:u-c"
    assert led.free_count_without("n1", frozenset()) == 0
    assert led.free_count_without("n1", frozenset({v})) == 3  # 0, 1, 4, 5 minus c's 1
    assert led.free_count_without("n1", frozenset({v, c})) == 4
    assert led.free_count_without("n1", frozenset({y})) == 0  # z still holds 3
    assert led.free_count_without("n1", frozenset({y, "pod:u-z", c})) == 2
    assert led.free_count_without("n1", frozenset({"nobody"})) == 0


# ------------------------------------------------------------------- bookings


def test_a_conflict_names_the_devices_and_their_holders() -> None:
    led = ledger(n1=4)
    led.sync_pod(pod("p", devices="0,2"))
    led.assume("ns/b", [P("n1", 3)], owner="b#0")
    with pytest.raises(LedgerConflict) as err:
        led.assume("ns/c", [P("n1", 3, 2, 1)])
    assert str(err.value) == "n1: device(s) 2,3 held by ns/b, team/p"
    assert led.allocation("ns/c") is None and led.free_devices("n1") == frozenset({1})


def test_a_booking_may_share_its_own_owners_devices() -> None:
    led = ledger(n1=4)
    led.sync_pod(pod("w-0", devices="0,1", workload_uid="w", attempt=2))
    # a device shared with its own pods: no conflict, no capacity taken twice
    led.assume("ns/w", [P("n1", 0, 1), P("n1", 1, i=1)], owner="w#2")
    assert led.free_devices("n1") == frozenset({2, 3}) and led.free_count("n1") == 2
    # the previous attempt is someone else
    with pytest.raises(LedgerConflict, match=r"^n1: device\(s\) 0,1 held by team/w-0$"):
        led.assume("ns/w", [P("n1", 0, 1)], owner="w#3")


@pytest.mark.parametrize(
    ("placements", "gpus", "message"),
    [
        ([P("n1", 0, 1), P("n1", i=1)], 1, "n1: 2 free GPU(s), needs 3"),
        ([P("n1", 0, 1, 2)], 0, "n1: 2 free GPU(s), needs 3"),
        ([P("n1"), P("n1", i=1), P("n1", i=2)], 1, "n1: 2 free GPU(s), needs 3"),
        ([P("n1", 0, 4)], 0, "n1: device(s) 4 not usable"),
        ([P("n1", 5, 0, 4)], 0, "n1: device(s) 4,5 not usable"),
        ([P("n9", 0)], 0, "n9: unknown node"),
        ([P("n9")], 1, "n9: unknown node"),
    ],
)
def test_capacity_is_checked_with_a_clear_message(placements: list, gpus: int,
                                                  message: str) -> None:
    led = ledger(n1=4)
    led.sync_pod(pod("c", gpus=2))
    with pytest.raises(LedgerConflict) as err:
        led.assume("ns/a", placements, gpus_per_replica=gpus)
    assert str(err.value) == message
    assert led.allocation("ns/a") is None and led.free_count("n1") == 2


def test_capacity_fits_exactly() -> None:
    led = ledger(n1=4)
    led.sync_pod(pod("c", gpus=2))
    led.assume("ns/a", [P("n1", 0), P("n1", i=1)], gpus_per_replica=1)
    assert led.free_count("n1") == 0
    led.assume("ns/a", [P("n1", 0, 1)])  # rebooked in place: its own old booking is gone
    assert led.free_count("n1") == 0 and led.free_devices("n1") == frozenset({2, 3})


def test_unchecked_capacity_still_refuses_a_taken_device() -> None:
    led = ledger(n1=2)
    led.sync_pod(pod("c", gpus=2))
    led.assume("ns/a", [P("n1", 0, 1), P("n7", 3)], check_capacity=False)
    assert led.free_count("n1") == 0 and led.holder("n7", 3) == "ns/a"
    with pytest.raises(LedgerConflict, match="device"):
        led.assume("ns/b", [P("n1", 1)], check_capacity=False)


# ----------------------------------------------------------------- nominations


def test_a_nomination_shares_its_victims_devices_and_waits_for_them() -> None:
    led = ledger(n1=4, n2=4)
    led.sync_pod(pod("v1", devices="0,1"))
    led.sync_pod(pod("v2", "n2", gpus=2))
    led.sync_pod(pod("bystander", devices="2"))
    victims = ["pod:u-v1", "pod:u-v2"]
    with pytest.raises(LedgerConflict):
        led.assume("ns/pre", [P("n1", 0, 1)], owner="pre#0")  # without the nomination
    led.assume("ns/pre", [P("n1", 0, 1, i=0), P("n2", i=1)], gpus_per_replica=2,
               owner="pre#0", overlap=victims)
    assert led.blockers("ns/pre") == {"n1": ["team/v1"], "n2": ["team/v2"]}
    # nobody else may take the victims' devices
    assert led.free_devices("n1") == frozenset({3})
    with pytest.raises(LedgerConflict, match="n1: device"):
        led.assume("ns/third", [P("n1", 1)], owner="third#0")
    led.remove_pod("u-v1")
    assert led.blockers("ns/pre") == {"n2": ["team/v2"]}
    led.remove_pod("u-v2")
    assert led.blockers("ns/pre") == {}


def test_blockers_list_every_victim_once_sorted() -> None:
    led = ledger(n1=4)
    led.sync_pod(pod("vb", devices="0,1"))
    led.sync_pod(pod("va", devices="1"))
    led.sync_pod(pod("bystander", devices="3"))
    led.sync_pod(pod("vc", gpus=1))
    led.assume("ns/pre", [P("n1", 0, 1)], owner="pre#0",
               overlap=["pod:u-va", "pod:u-vb", "pod:u-vc"], check_capacity=False)
    # every victim, also one that holds none of its devices (vc: counted, not named)
    assert led.blockers("ns/pre") == {"n1": ["team/va", "team/vb", "team/vc"]}
    led.assume("ns/pre", [P("n1", 0, 1), P("n1", i=1)], gpus_per_replica=1,
               owner="pre#0", overlap=["pod:u-va", "pod:u-vb", "pod:u-vc"],
               check_capacity=False)
    assert led.blockers("ns/pre") == {"n1": ["team/va", "team/vb", "team/vc"]}


def test_a_booking_waits_for_nothing_unless_nominated() -> None:
    led = ledger(n1=4)
    led.sync_pod(pod("w-0", devices="0", workload_uid="w", attempt=0))
    led.assume("ns/w", [P("n1", 0)], owner="w#0")
    assert led.blockers("ns/w") == {} and led.blockers("ns/unknown") == {}
    # nominated over its own owner: it does not wait for itself
    led.assume("ns/w", [P("n1", 0), P("n1", i=1)], gpus_per_replica=1, owner="w#0",
               overlap=["w#0"])
    assert led.blockers("ns/w") == {"n1": ["team/w-0"]}


def test_a_nomination_waits_for_its_victims_pods_after_they_change_owner() -> None:
    """Orphaned (``--cascade=orphan``): the victim's pods lose their ownerReference
    and become their own owners; they still hold the devices, and the nomination
    still waits for them."""
    led = ledger(n1=4)
    led.sync_pod(pod("v-0", devices="0,1", workload_uid="v"))
    led.assume("ns/pre", [P("n1", 0, 1)], owner="pre#0", overlap=["v#0"])
    assert led.blockers("ns/pre") == {"n1": ["team/v-0"]}
    conflicts = led.sync_pod(pod("v-0", devices="0,1"))  # the orphan: owner pod:u-v-0
    assert conflicts and "also held by ns/pre" in conflicts[0]
    assert led.blockers("ns/pre") == {"n1": ["team/v-0"]}
    led.remove_pod("u-v-0")
    assert led.blockers("ns/pre") == {}


def test_a_booking_waits_for_a_pod_that_came_to_hold_its_devices() -> None:
    led = ledger(n1=4)
    led.assume("ns/w", [P("n1", 0), P("n1", i=1)], gpus_per_replica=2, owner="w#0")
    assert led.blockers("ns/w") == {}
    led.sync_pod(pod("bare", devices="0"))
    assert led.blockers("ns/w") == {"n1": ["team/bare"]}
    led.remove_pod("u-bare")
    led.sync_pod(pod("counted", gpus=1))  # 1 named + 2 counted + 1 other: room
    assert led.blockers("ns/w") == {}
    led.sync_pod(pod("counted2", gpus=1))  # now the node lacks one of its GPUs
    assert led.blockers("ns/w") == {"n1": ["team/counted", "team/counted2"]}


# --------------------------------------------------------------------- rebuild


def wl(name: str, placements: list[dict[str, Any]], *, uid: str | None = None,
       created: str | None = None, phase: str = "Running", retries: int = 0,
       deleting: bool = False, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns"}
    if uid:
        meta["uid"] = uid
    if created:
        meta["creationTimestamp"] = created
    if deleting:
        meta["deletionTimestamp"] = "2026-11-23T10:00:00Z"
    return {"apiVersion": "gpu.orchestrator.dev/v1alpha1", "kind": "GPUWorkload",
            "metadata": meta, "spec": {"gpusPerReplica": 1, **spec},
            "status": {"phase": phase, "placements": placements, "retries": retries}}


def dev(node: str, *devices: int, i: int = 0) -> dict[str, Any]:
    return {"index": i, "node": node, "devices": list(devices)}


def test_the_older_workload_wins_a_collision_after_a_restart() -> None:
    newer = wl("a-newer", [dev("n1", 0)], created="2026-11-23T10:00:00Z")
    older = wl("z-older", [dev("n1", 0, 1)], created="2026-11-23T09:00:00Z")
    led, problems = Ledger.rebuild([newer, older], (), {"n1": range(4)})
    assert led.holder("n1", 0) == "ns/z-older" and led.allocation("ns/a-newer") is None
    assert problems == ["ns/a-newer: placement not booked: n1: device(s) 0 held by ns/z-older"]


def test_without_creation_times_the_key_orders_the_rebuild() -> None:
    b = wl("b", [dev("n1", 0)])
    a = wl("a", [dev("n1", 0)])
    led, problems = Ledger.rebuild([b, a], (), {"n1": range(4)})
    assert led.holder("n1", 0) == "ns/a"
    assert problems == ["ns/b: placement not booked: n1: device(s) 0 held by ns/a"]
    # one without a creation time (never from the API) comes first: the same every time
    dated = wl("a", [dev("n1", 1)], created="2026-11-23T09:00:00Z")
    undated = wl("z", [dev("n1", 1)])
    led, problems = Ledger.rebuild([dated, undated], (), {"n1": range(4)})
    assert led.holder("n1", 1) == "ns/z" and len(problems) == 1


def test_a_running_pod_wins_over_a_committed_placement() -> None:
    w = wl("w", [dev("n1", 1, 2)], uid="w-uid")
    stranger = pod("stranger", devices="2")
    led, problems = Ledger.rebuild([w], [stranger], {"n1": range(4)})
    assert led.allocation("ns/w") is None and led.holder("n1", 2) == "team/stranger"
    assert led.free_devices("n1") == frozenset({0, 1, 3})
    assert problems == ["ns/w: placement not booked: n1: device(s) 2 held by team/stranger"]


def test_a_rebuilt_booking_belongs_to_its_current_attempt() -> None:
    w = wl("w", [dev("n1", 1)], uid="w-uid", retries=2, priority=9)
    mine = pod("w-0", devices="1", workload_uid="w-uid", attempt=2)
    led, problems = Ledger.rebuild([w], [mine], {"n1": range(4)})
    assert problems == []
    a = led.allocation("ns/w")
    assert a is not None and a.committed and a.owner == "w-uid#2" and a.uid == "w-uid"
    assert a.priority == 9 and led.priority_of("ns/w") == 9
    assert led.device_owners("n1", 1) == frozenset({"w-uid#2"})
    # an earlier attempt's pod holds the device for someone else
    old = pod("w-old", devices="1", workload_uid="w-uid", attempt=1)
    led, problems = Ledger.rebuild([w], [old], {"n1": range(4)})
    assert led.allocation("ns/w") is None and len(problems) == 1


def test_a_rebuilt_workload_without_uid_owns_by_key() -> None:
    led, _ = Ledger.rebuild([wl("w", [dev("n1", 1)], retries=1)], (), {"n1": range(4)})
    assert led.device_owners("n1", 1) == frozenset({"ns/w#1"})
    assert led.allocation("ns/w").uid == ""


def test_a_rebuilt_device_plugin_workload_counts_per_replica() -> None:
    w = wl("dp", [dev("n1", i=0), dev("n1", i=1)], uid="dp", gpusPerReplica=3)
    led, problems = Ledger.rebuild([w], (), {"n1": range(8)})
    assert problems == [] and led.counted("n1") == {"dp#0": 6} and led.free_count("n1") == 2


def test_the_rebuild_books_beyond_capacity_rather_than_lose_a_booking() -> None:
    w = wl("w", [dev("n1", i=0)], gpusPerReplica=3)
    led, problems = Ledger.rebuild([w], [pod("c", gpus=2)], {"n1": range(4)})
    assert problems == [] and led.free_count("n1") == 0 and led.is_committed("ns/w")


@pytest.mark.parametrize(
    ("kwargs", "holds"),
    [
        ({}, True),
        ({"phase": "Pending"}, True),
        ({"phase": "Succeeded"}, False),
        ({"phase": "Failed"}, False),
        ({"deleting": True}, False),
    ],
)
def test_which_workloads_hold_after_a_restart(kwargs: dict, holds: bool) -> None:
    w = wl("w", [dev("n1", 0)], **kwargs)
    led, problems = Ledger.rebuild([w], (), {"n1": range(4)})
    assert problems == []
    assert (led.holder("n1", 0) == "ns/w") is holds
    assert led.free_count("n1") == (3 if holds else 4)


def test_a_workload_object_and_its_raw_form_rebuild_alike() -> None:
    raw = wl("w", [dev("n1", 2)], uid="w-uid", retries=1)
    led, problems = Ledger.rebuild([GPUWorkload.model_validate(raw)], (), {"n1": range(4)})
    assert problems == [] and led.device_owners("n1", 2) == frozenset({"w-uid#1"})
    assert led.is_committed("ns/w")


def test_an_invalid_workload_keeps_its_attempt_and_uid() -> None:
    raw = wl("w", [dev("n1", 2)], uid="w-uid", retries=3, replicas=-1)
    mine = pod("w-0", devices="2", workload_uid="w-uid", attempt=3)
    led, problems = Ledger.rebuild([raw], [mine], {"n1": range(4)})
    assert len(problems) == 1 and problems[0].startswith("ns/w: invalid spec, placements kept: ")
    assert led.device_owners("n1", 2) == frozenset({"w-uid#3"})
    assert led.allocation("ns/w").uid == "w-uid"


def test_an_invalid_workload_without_retries_is_its_first_attempt() -> None:
    raw = wl("w", [dev("n1", 2)], uid="w-uid", replicas=-1)
    del raw["status"]["retries"]
    led, problems = Ledger.rebuild([raw], (), {"n1": range(4)})
    assert len(problems) == 1 and led.device_owners("n1", 2) == frozenset({"w-uid#0"})


def test_an_invalid_workload_without_status_holds_nothing() -> None:
    raw = {"metadata": {"name": "w", "namespace": "ns"}, "spec": {"replicas": -1}}
    led, problems = Ledger.rebuild([raw], (), {"n1": range(4)})
    assert led.allocations() == {} and len(problems) == 1
    assert problems[0].startswith("ns/w: invalid spec, placements kept: ")


def test_an_invalid_workload_without_metadata_is_reported() -> None:
    raw = {"spec": {"replicas": -1}, "status": {"placements": [dev("n1", 0)]}}
    led, problems = Ledger.rebuild([raw], (), {"n1": range(4)})
    assert problems == ["default/: invalid spec, placements kept: "
                        "Input should be greater than or equal to 1"]
    assert led.holder("n1", 0) == "default/"


def test_the_rebuild_reports_pod_problems_with_the_rest() -> None:
    pods = [pod("a", devices="0"), pod("b", devices="0"), pod("c", devices="bad", gpus=1)]
    bad = wl("w", [dev("n1", 3)], replicas=-1)
    led, problems = Ledger.rebuild([bad], pods, {"n1": range(4)})
    assert problems[:2] == [
        "pod team/b: n1: device 0 also held by team/a",
        f"pod team/c: annotation {DEVICES_ANNOTATION}='bad' is not a list of device indices",
    ]
    assert len(problems) == 3 and problems[2].startswith("ns/w: invalid spec")
    assert led.free_devices("n1") == frozenset({1, 2}) and led.free_count("n1") == 1


def test_a_rebuild_without_nodes_still_books() -> None:
    led, problems = Ledger.rebuild([wl("w", [dev("n1", 0)])], [pod("p", devices="1")])
    assert problems == [] and led.known_nodes() == []
    assert led.holder("n1", 0) == "ns/w" and led.holder("n1", 1) == "team/p"


def test_what_holds_a_node_and_who_holds_what() -> None:
    led = ledger(n1=4, n2=4)
    led.assume("ns/a", [P("n1", 0)], owner="a#0")
    led.assume("ns/dp", [P("n2")], gpus_per_replica=1, owner="dp#0")
    led.sync_pod(pod("a-0", devices="0", workload_uid="a", attempt=0))
    led.sync_pod(pod("stranger", "n2", gpus=1))
    # the bookings on a node, named or counted; pods are not bookings
    assert led.keys_on("n1") == {"ns/a"} and led.keys_on("n2") == {"ns/dp"}
    assert led.keys_on("n9") == set()
    assert [a.key for a in led.bookings()] == ["ns/a", "ns/dp"]
    assert sorted(a.key for a in led.held_by_owner("a#0")) == ["ns/a", "pod:u-a-0"]
    # a pod's holding is found as one; a booking is not
    assert led.holding("pod:u-a-0") is not None and led.holding("pod:u-a-0").holder
    assert led.holding("ns/a") is None and led.holding("pod:nobody") is None


def test_the_free_index_follows_pods_that_name_no_device() -> None:
    led = ledger(n1=4)
    led.sync_pod(pod("c", gpus=3))
    assert led.index.get("n1") == 1 and list(led.index.iter_nodes(2)) == []
    led.remove_pod("u-c")
    assert led.index.get("n1") == 4 and list(led.index.iter_nodes(4)) == ["n1"]
    led.sync_pod(pod("c", gpus=3))
    led.sync_pod(pod("c", gpus=3) | {"status": {"phase": "Succeeded"}})
    assert led.index.get("n1") == 4


def test_a_booking_that_counts_no_gpu_takes_none() -> None:
    led = ledger(n1=4)
    led.assume("ns/a", [P("n1")], gpus_per_replica=0, owner="a#0")
    assert led.counted("n1") == {"a#0": 0} and led.free_count("n1") == 4
    assert led.free_count_without("n1", frozenset()) == 4
