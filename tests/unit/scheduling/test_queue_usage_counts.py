"""What a queue counts of each holder (internal/scheduling/queue_usage.py): whole
devices, MIG instances by their compute slices, shares by their part (whole where the
part cannot be weighed), the share floor and the note a quota message adds for it,
Jobs counted apart from pods, and when an owner's pods back its booking."""

from __future__ import annotations

from fractions import Fraction as F
from typing import Any

from api.v1alpha1.types import Placement
from internal.scheduling.ledger import Allocation
from internal.scheduling.queue_usage import (
    Held,
    UsageIndex,
    by_owner,
    holder_gpus,
    namespace_of,
    placement_gpus,
    placements_held,
    used_by_queue,
)
from internal.scheduling.sharefloor import DEFAULT_FLOORS, ShareFloors
from internal.scheduling.shares import MigInstance, NodeSharing

MIG = "MIG-5c1a2b3d-0000-1111-2222-333344445555"
OTHER_MIG = "MIG-00000000-0000-1111-2222-333344445555"
SHARING = NodeSharing(memory={0: 81920, 1: 81920, 2: None},
                      mig={1: {MIG: MigInstance(MIG, "3g.40gb", 40960)}})


def sharing(node: str) -> NodeSharing:
    return SHARING if node == "n1" else NodeSharing()


def P(node: str, *devices: int, share: str | None = None, mig: str | None = None,
      i: int = 0) -> Placement:
    return Placement(index=i, node=node, devices=list(devices), share=share, mig=mig)


def test_whole_devices_count_one_each() -> None:
    assert placement_gpus(P("n1", 0, 1), SHARING) == 2
    assert placements_held([P("n1", 0, 1), P("n1", 2, i=1)], sharing) == Held(F(3), {})


def test_a_mig_instance_counts_its_compute_slices_out_of_7() -> None:
    assert placement_gpus(P("n1", 1, mig=MIG), SHARING) == F(3, 7)
    held = placements_held([P("n1", 1, mig=MIG), P("n1", 0, i=1)], sharing)
    assert held == Held(F(10, 7), {})


def test_a_mig_instance_not_reported_counts_whole() -> None:
    assert placement_gpus(P("n1", 1, mig=OTHER_MIG), SHARING) == 1
    assert placement_gpus(P("n1", 0, mig=MIG), SHARING) == 1  # not on that device
    assert placement_gpus(P("n2", 1, mig=MIG), NodeSharing()) == 1


def test_a_share_counts_its_part_and_whole_where_the_memory_is_unknown() -> None:
    assert placement_gpus(P("n1", 0, share="memory=20Gi"), SHARING) == F(1, 4)
    assert placement_gpus(P("n1", 0, share="fraction=0.5"), SHARING) == F(1, 2)
    assert placement_gpus(P("n1", 2, share="memory=20Gi"), SHARING) == 1
    assert placement_gpus(P("n1", share="memory=20Gi"), SHARING) == 1  # no device named
    held = placements_held([P("n1", 0, share="memory=20Gi"),
                            P("n1", 2, share="memory=20Gi", i=1)], sharing)
    assert held == Held(F(1), {("n1", 0): F(1, 4)})


def test_a_small_share_counts_the_floor_and_the_message_says_why() -> None:
    tiny = Allocation("ns-a/w", (P("n1", 0, share="fraction=0.01"),))
    assert holder_gpus(tiny, sharing) == F(1, 20)
    assert holder_gpus(tiny, sharing, ShareFloors(fraction=F(1, 10))) == F(1, 10)
    one = Held(F(0), {("n1", 0): F(1, 100)})
    assert one.floor_note(DEFAULT_FLOORS) == " (1 shared device, each counts at least 0.05)"
    two = Held(F(0), {("n1", 0): F(1, 100), ("n1", 1): F(1, 2)})
    assert two.floor_note(DEFAULT_FLOORS) == " (2 shared devices, each counts at least 0.05)"
    at_floor = Held(F(0), {("n1", 0): F(1, 20)})
    assert at_floor.floor_note(DEFAULT_FLOORS) == ""


def test_gpus_counted_without_devices_add_to_those_named() -> None:
    a = Allocation("ns-a/w", (P("n1", 0),), counted={"n2": 3})
    assert holder_gpus(a, sharing) == 4


def test_used_by_queue_counts_shares_with_the_floors_it_is_given() -> None:
    class Led:
        sharing = staticmethod(sharing)

        def allocations(self) -> dict[str, Allocation]:
            return {"ns-a/w": Allocation("ns-a/w", (P("n1", 0, share="fraction=0.01"),))}

    led: Any = Led()
    assert used_by_queue(led, lambda a: "a") == {"a": F(1, 20)}
    assert used_by_queue(led, lambda a: "a", floors=ShareFloors(fraction=F(1, 4))) == {
        "a": F(1, 4)}


def test_a_holders_namespace_is_read_from_its_name_departing_or_not() -> None:
    assert namespace_of(Allocation("k", (), name="ns-a/w")) == "ns-a"
    assert namespace_of(Allocation("departing:k", (), name="departing:ns-a/w")) == "ns-a"
    assert namespace_of(Allocation("k", (), name="w")) == ""


def booking(gpus: int) -> Allocation:
    return Allocation("ns-a/w", tuple(P("n1", d, i=d) for d in range(gpus)), owner="o")


def job(gpus: int) -> Allocation:
    return Allocation("job:ns-a/j", (), counted={"n1": gpus}, owner="o", holder=True,
                      job=True, name="ns-a/j")


def pod(gpus: int) -> Allocation:
    return Allocation("pod:ns-a/p", tuple(P("n1", d, i=d) for d in range(gpus)), owner="o",
                      holder=True, name="ns-a/p")


def test_an_owners_job_and_its_pods_count_once() -> None:
    assert by_owner([job(2), pod(2)], sharing)["o"].gpus == 2
    assert by_owner([booking(2), job(2), pod(2)], sharing)["o"].gpus == 2


class FakeLedger:
    """What UsageIndex reads of a ledger: its holders, its sharing."""

    def __init__(self) -> None:
        self.sharing = sharing

    def allocations(self) -> dict[str, Allocation]:
        return {}


def index() -> UsageIndex:
    led: Any = FakeLedger()
    return UsageIndex(led, lambda a: "a")


def test_a_booking_is_backed_once_its_pods_or_its_job_hold_as_much() -> None:
    ix = index()
    assert not ix.backed("o") and not ix.backed("nobody")
    ix.apply(booking(1))
    assert not ix.backed("o")  # pods not made yet
    ix.apply(job(1))
    assert ix.backed("o")
    ix.release(job(1))
    ix.apply(pod(1))
    assert ix.backed("o")
    assert ix.owners["o"].holder.key == "ns-a/w"  # the booking says whose they are
    assert ix.used == {"a": 1}
