"""Usage counted from the ledger's holders: one owner counts once (the largest of
its booking, pods and Jobs), and the incremental index always equals the sum done
again from scratch, whatever order holders come and go in."""

from __future__ import annotations

import contextlib
import random
from fractions import Fraction

from api.v1alpha1.types import Placement
from internal.scheduling.ledger import Allocation, Ledger, LedgerConflict
from internal.scheduling.pods import PodHolding
from internal.scheduling.queue_usage import UsageIndex, by_owner, namespace_of, used_by_queue


def queue_of(a: Allocation) -> str | None:
    return {"ns-a": "a", "ns-b": "b"}.get(namespace_of(a))


def ledger_of(nodes: int = 4, gpus: int = 4) -> Ledger:
    led = Ledger()
    for i in range(nodes):
        led.set_node_devices(f"n{i}", range(gpus))
    return led


def test_a_booking_and_its_pods_count_once() -> None:
    led = ledger_of()
    led.assume("ns-a/w", [Placement(index=0, node="n0", devices=[0, 1])], owner="uid-w#0")
    led.set_pod(PodHolding("p1", "ns-a/w-0", "n0", (0, 1), 0, "uid-w#0"))
    owners = by_owner(led.allocations().values(), led.sharing)
    assert owners["uid-w#0"].gpus == 2 and not owners["uid-w#0"].holder.holder
    assert used_by_queue(led, queue_of) == {"a": 2}


def test_the_index_equals_the_sum_done_again_after_any_changes() -> None:
    rng = random.Random(7)
    led = ledger_of()
    led.usage = index = UsageIndex(led, queue_of)  # counted by the ledger from now on
    live: list[str] = []
    for step in range(400):
        if live and rng.random() < 0.4:
            key = live.pop(rng.randrange(len(live)))
            if key.startswith("pod:"):
                led.remove_holder(key)
            else:
                led.forget(key)
        else:
            bookings = [k for k in live if not k.startswith("pod:")]
            if bookings and rng.random() < 0.2:  # a booking replaced (placed again)
                key = rng.choice(bookings)
                a = led.allocation(key)
                assert a is not None
                with contextlib.suppress(LedgerConflict):
                    led.assume(key, [Placement(index=0, node=f"n{rng.randrange(4)}",
                                               devices=[rng.randrange(4)])],
                               owner=a.owner, check_capacity=False)
                continue
            ns = rng.choice(["ns-a", "ns-b", "ns-c"])
            node, dev = f"n{rng.randrange(4)}", rng.randrange(4)
            owner = f"o{rng.randrange(12)}"
            if rng.random() < 0.5:
                h = PodHolding(f"u{step}", f"{ns}/p{step}", node, (dev,), rng.randrange(2),
                               owner)
                led.set_pod(h)
                live.append(h.key)
            else:
                key = f"{ns}/w{step}"
                try:
                    led.assume(key, [Placement(index=0, node=node, devices=[dev],
                                               share="fraction=0.25")],
                               owner=owner, check_capacity=False)
                except LedgerConflict:
                    continue  # refused, the ledger unchanged: so must the index be
                live.append(key)
        again = used_by_queue(led, queue_of)
        assert {q: g for q, g in index.used.items() if g} == {q: g for q, g in again.items() if g}
        full = by_owner(led.allocations().values(), led.sharing)
        assert {o: u.gpus for o, u in index.owners.items()} == {o: u.gpus for o, u in full.items()}
    assert sum(index.used.values(), Fraction(0)) > 0  # the run left something held
