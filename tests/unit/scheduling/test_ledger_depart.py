"""A booking released while its children may still be made (``Ledger.depart``):
its devices stay held under ``departing:<key>`` until ``release_departed``
(docs/architecture.md, invariant 3)."""

from __future__ import annotations

import pytest

from internal.scheduling import LedgerConflict
from internal.scheduling.ledger import departing_key
from tests.unit.scheduling.test_ledger_free import P, ledger


def test_a_departed_booking_holds_its_devices_until_released() -> None:
    led = ledger(n1=4)
    led.assume("ns/v", [P("n1", 0, 1)], priority=7, owner="v#0", uid="uid-v")
    released = led.depart("ns/v")
    assert released is not None and released.key == "ns/v"
    assert led.allocation("ns/v") is None  # the booking is gone...
    held = led.allocation(departing_key("ns/v"))
    assert held is not None  # ...what it booked is held on, as the same owner
    assert held.holder and held.owner == "v#0" and held.priority == 7
    assert held.name == departing_key("ns/v") and held.uid == "uid-v"
    assert [p.devices for p in held.placements] == [[0, 1]]
    assert led.free_devices("n1") == frozenset({2, 3}) and led.free_count("n1") == 2
    with pytest.raises(LedgerConflict):
        led.assume("ns/third", [P("n1", 1)], owner="third#0")
    assert led.release_departed("ns/v") is True
    assert led.allocation(departing_key("ns/v")) is None
    assert led.free_devices("n1") == frozenset(range(4)) and led.free_count("n1") == 4
    assert led.release_departed("ns/v") is False
    led.assume("ns/third", [P("n1", 1)], owner="third#0")


def test_counted_gpus_stay_counted_while_departing() -> None:
    led = ledger(n1=8)
    led.assume("ns/v", [P("n1"), P("n1", i=1)], gpus_per_replica=3, owner="v#0")
    assert led.free_count("n1") == 2
    led.depart("ns/v")
    assert led.free_count("n1") == 2
    assert led.allocation(departing_key("ns/v")).counted == {"n1": 6}
    assert led.release_departed("ns/v")
    assert led.free_count("n1") == 8


def test_nothing_to_depart_changes_nothing() -> None:
    led = ledger(n1=4)
    assert led.depart("ns/none") is None
    assert led.allocation(departing_key("ns/none")) is None
    led.assume("ns/v", [P("n1", 0)], owner="v#0")
    led.depart("ns/v")
    # a holding is not a booking: departing it again is nothing
    assert led.depart(departing_key("ns/v")) is None
    assert led.free_devices("n1") == frozenset({1, 2, 3})


def test_departing_twice_keeps_both_attempts_devices() -> None:
    led = ledger(n1=4)
    led.assume("ns/v", [P("n1", 0)], gpus_per_replica=1, owner="v#0")
    led.depart("ns/v")
    led.assume("ns/v", [P("n1", 2)], gpus_per_replica=1, owner="v#1")
    led.depart("ns/v")
    held = led.allocation(departing_key("ns/v"))
    assert sorted(d for p in held.placements for d in p.devices) == [0, 2]
    assert held.owner == "v#1"
    assert led.free_devices("n1") == frozenset({1, 3})
    assert led.release_departed("ns/v")
    assert led.free_devices("n1") == frozenset(range(4))


def test_departing_twice_counts_the_larger_share_per_node() -> None:
    led = ledger(n1=8, n2=8)
    led.assume("ns/v", [P("n1"), P("n2", i=1)], gpus_per_replica=2, owner="v#0")
    led.depart("ns/v")
    led.assume("ns/v", [P("n1")], gpus_per_replica=3, owner="v#1")
    led.depart("ns/v")
    assert led.allocation(departing_key("ns/v")).counted == {"n1": 3, "n2": 2}
    assert led.free_count("n1") == 5 and led.free_count("n2") == 6


def test_a_nomination_over_the_owner_waits_for_its_departing_holding() -> None:
    led = ledger(n1=4)
    led.assume("ns/v", [P("n1", 0, 1)], owner="v#0")
    led.depart("ns/v")
    led.assume("ns/pre", [P("n1", 0, 1)], owner="pre#0", overlap=["v#0"])
    assert led.blockers("ns/pre")  # waits for what the victim held on to
    led.release_departed("ns/v")
    assert led.blockers("ns/pre") == {}
