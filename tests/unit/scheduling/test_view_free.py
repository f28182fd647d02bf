"""What one decision sees as free (``View``): a usable device no other owner holds
(its own owner's and the released victims' holdings do not count) and this decision
has not taken yet; the whole node's answer is the same as asking device by device."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from api.v1alpha1.types import Placement
from internal.scheduling import Ledger
from internal.scheduling.view import View

OWNERS = ("a", "b", "c", "d")

# bookings: owner -> the devices of n1 it holds (owners never share a device here)
bookings = st.lists(st.tuples(st.sampled_from(OWNERS), st.sets(st.integers(0, 7), max_size=3)),
                    max_size=4)


def ledger_of(books: list[tuple[str, set[int]]]) -> Ledger:
    led = Ledger()
    led.set_node_devices("n1", range(7))  # device 7 is not usable
    held: set[int] = set()
    for i, (owner, devices) in enumerate(books):
        devs = sorted(devices - held - {7})
        if devs:
            led.assume(f"ns/w{i}", [Placement(index=0, node="n1", devices=devs)],
                       owner=owner)
            held.update(devs)
    return led


@given(books=bookings, owner=st.sampled_from(OWNERS),
       released=st.sets(st.sampled_from(OWNERS)), taken=st.sets(st.integers(0, 7)))
def test_free_devices_are_those_no_other_owner_holds_and_not_taken(
        books: list[tuple[str, set[int]]], owner: str, released: set[str],
        taken: set[int]) -> None:
    led = ledger_of(books)
    view = View(led, owner, released)
    view.take("n1", taken)
    by_device = {d for d in range(7) if d not in taken and not view.held_by_other("n1", d)}
    expected = {d for d in range(7) if d not in taken and
                led.device_owners("n1", d) <= {owner, *released}}
    free = view.free_devices("n1")
    assert free == by_device == expected
    assert view.free_count("n1", free) == view.free_count("n1") == len(expected)


def test_a_node_nobody_holds_anything_on_is_all_free_and_an_unknown_one_has_none() -> None:
    led = ledger_of([])
    assert View(led, "a").free_devices("n1") == set(range(7))
    assert View(led, "a").free_devices("n9") == set()


# counted bookings (device-plugin mode): owner -> how many GPUs of n1 it holds by count
counted_books = st.lists(st.tuples(st.sampled_from(OWNERS), st.integers(1, 3)), max_size=3)


@given(books=counted_books, owner=st.sampled_from(OWNERS),
       released=st.sets(st.sampled_from(OWNERS)), takes=st.lists(st.integers(1, 2), max_size=3))
def test_the_counted_load_is_the_other_owners_counted_gpus_and_this_decisions_takes(
        books: list[tuple[str, int]], owner: str, released: set[str], takes: list[int]) -> None:
    """What a decision counts as taken by count on a node: every other owner's GPUs
    held without naming devices, plus the replicas it placed there by count itself;
    the same on a node nobody holds anything on by count (the usual node)."""
    led = Ledger()
    led.set_node_devices("n1", range(8))
    led.set_node_devices("n2", range(8))
    for i, (holder, gpus) in enumerate(books):
        led.assume(f"ns/c{i}", [Placement(index=0, node="n1", devices=[])],
                   gpus_per_replica=gpus, owner=holder, check_capacity=False)
    view = View(led, owner, released)
    for n in takes:
        view.take("n1", (), n)
        view.take("n2", (), n)
    others = sum(g for holder, g in books if holder != owner and holder not in released)
    assert view.counted_load("n1") == others + sum(takes)
    assert view.counted_load("n2") == sum(takes)
    assert view.free_count("n2") == max(0, 8 - sum(takes))
