"""Share floors and what a share counts against its queue (sharefloor.py), and
minGPUMemoryMiB for shares and MIG instances: pure, no server."""

from __future__ import annotations

import contextlib
import random
from fractions import Fraction

import pytest

from api.v1alpha1.types import Placement
from internal.scheduling.framework import UNSCHEDULABLE, schedule
from internal.scheduling.ledger import Ledger, LedgerConflict
from internal.scheduling.pods import PodHolding
from internal.scheduling.queue_usage import UsageIndex, by_owner, placements_held
from internal.scheduling.sharefloor import (
    DEFAULT_FLOORS,
    SHARE_BELOW_MINIMUM,
    ShareFloors,
)
from internal.scheduling.shares import Portion
from tests.unit.scheduling.helpers import cluster, gpunode, node, workload

GI = 1024


def _share(node_name: str, device: int, share: str, index: int = 0) -> Placement:
    return Placement(index=index, node=node_name, devices=[device], share=share)


def _led(gpus: int = 16) -> Ledger:
    _snap, led = cluster(node("n1", gpus), gpunodes=(gpunode("n1", gpus, memory=80 * GI),))
    return led


def test_the_flags_parse_and_zero_means_no_floor() -> None:
    assert ShareFloors.parse("1Gi", "0.05") == DEFAULT_FLOORS == ShareFloors(1024, Fraction(1, 20))
    assert ShareFloors.parse("0", "0") == ShareFloors(0, Fraction(0))
    for memory, fraction in (("lots", "0.05"), ("1Gi", "0.0001"), ("1Gi", "2")):
        with pytest.raises(ValueError, match="--min-share"):
            ShareFloors.parse(memory, fraction)


def test_a_share_below_a_floor_is_refused_with_the_flag_named() -> None:
    f = DEFAULT_FLOORS
    assert f.refusal(Portion(memory_mib=1)) == (
        "gpuShare memory 1Mi is below this cluster's smallest share, 1Gi (the manager's "
        "--min-share-memory); delete the workload and create it with a larger share")
    assert "fraction 0.001 is below this cluster's smallest share, 0.05" in (
        f.refusal(Portion(fraction=Fraction(1, 1000))) or "")
    assert f.refusal(Portion(memory_mib=GI)) is None
    assert f.refusal(Portion(fraction=Fraction(1, 20))) is None
    assert ShareFloors(0, Fraction(0)).refusal(Portion(fraction=Fraction(1, 1000))) is None


def test_shares_spread_over_devices_count_the_floor_on_each_packed_count_their_sum() -> None:
    """12 x 0.001 on 12 devices counted 0.012 GPU before; now 0.05 per device. Packed
    on one device they count their sum, floored once; 24 x 1Gi packed, 0.3."""
    led = _led()
    spread = [_share("n1", d, "fraction=0.001", d) for d in range(12)]
    assert placements_held(spread, led.sharing).count(DEFAULT_FLOORS) == Fraction(12, 20)
    packed = [_share("n1", 0, "fraction=0.001", i) for i in range(12)]
    assert placements_held(packed, led.sharing).count(DEFAULT_FLOORS) == Fraction(1, 20)
    small = [_share("n1", 0, "memory=1024Mi", i) for i in range(24)]
    assert placements_held(small, led.sharing).count(DEFAULT_FLOORS) == Fraction(24, 80)
    wide = [_share("n1", i % 16, "memory=1024Mi", i) for i in range(24)]
    held = placements_held(wide, led.sharing)
    assert held.count(DEFAULT_FLOORS) == Fraction(16, 20)
    assert held.floor_note(DEFAULT_FLOORS) == " (16 shared devices, each counts at least 0.05)"
    assert held.count(ShareFloors(0, Fraction(0))) == Fraction(24, 80)
    assert placements_held(small, led.sharing).floor_note(DEFAULT_FLOORS) == ""


def test_an_owners_pods_on_one_device_are_floored_together_as_its_booking() -> None:
    """A booking of 24 x 1Gi on one device and its 24 pods: the owner counts 0.3 once,
    not 24 x 0.05 for its pods."""
    led = _led()
    led.assume("ns-a/w", [_share("n1", 0, "memory=1024Mi", i) for i in range(24)],
               owner="uid-w#0")
    led.usage = index = UsageIndex(led, lambda a: "a")
    for i in range(24):
        led.set_pod(PodHolding(f"p{i}", f"ns-a/w-{i}", "n1", (0,), 0, "uid-w#0",
                               share="memory=1024Mi"))
    assert index.owners["uid-w#0"].gpus == Fraction(24, 80) == index.used["a"]
    assert by_owner(led.allocations().values(), led.sharing)["uid-w#0"].gpus == Fraction(24, 80)
    assert index.backed("uid-w#0")


def test_schedule_leaves_a_share_below_the_floor_waiting_with_its_reason() -> None:
    snap, led = cluster(node("n1"), gpunodes=(gpunode("n1", memory=80 * GI),))
    d = schedule(workload("tiny", gpuShare={"fraction": "0.001"}), snap, led)
    assert d.outcome == UNSCHEDULABLE and d.wait_reason == SHARE_BELOW_MINIMUM
    assert "--min-share-fraction" in d.message
    d = schedule(workload("byte", gpuShare={"memory": "1"}), snap, led)
    assert d.wait_reason == SHARE_BELOW_MINIMUM and "memory 1Mi is below" in d.message
    assert schedule(workload("ok", gpuShare={"fraction": "0.05"}), snap, led).ok
    assert schedule(workload("tiny", gpuShare={"fraction": "0.001"}), snap, led,
                    floors=ShareFloors(0, Fraction(0))).ok


def test_min_gpu_memory_holds_for_a_share() -> None:
    snap, led = cluster(node("n1"), node("n2"),
                        gpunodes=(gpunode("n1", memory=16 * GI), gpunode("n2", memory=80 * GI)))
    d = schedule(workload("s", gpuShare={"fraction": "0.25"}, minGPUMemoryMiB=20000,
                          schedulingStrategy="bestFit"), snap, led)
    assert d.ok and d.placements[0].node == "n2", d.message
    d = schedule(workload("s", gpuShare={"fraction": "0.25"}, minGPUMemoryMiB=90000),
                 snap, led)
    assert not d.ok
    assert d.reasons == {"n1": "no shared device with 0.25 free; 4 devices below 90000 MiB",
                         "n2": "no shared device with 0.25 free; 4 devices below 90000 MiB"}


def test_min_gpu_memory_holds_for_a_mig_instance() -> None:
    g = gpunode("n1", 2, memory=80 * GI)
    g["status"]["devices"][0].update(migMode=True, migInstances=[
        {"uuid": f"MIG-n1-0-{i}", "profile": "1g.10gb", "memoryTotalMiB": 9984}
        for i in range(7)])
    snap, led = cluster(node("n1", 2), gpunodes=(g,))
    d = schedule(workload("m", migProfile="1g.10gb", minGPUMemoryMiB=20000), snap, led)
    assert not d.ok and d.reasons == {
        "n1": "no free MIG instance 1g.10gb (7 below 20000 MiB)"}, d.message
    assert schedule(workload("m", migProfile="1g.10gb", minGPUMemoryMiB=9984), snap, led).ok


def test_the_index_floors_as_the_sum_done_again_after_any_changes() -> None:
    """Bookings placed and placed again, pods and departures of small shares (the
    floor raises most devices' counts): the index always equals the sum done again."""
    rng = random.Random(11)
    led = _led(8)
    led.usage = index = UsageIndex(led, lambda a: "a")
    live: list[str] = []
    raised = 0
    shares = ["fraction=0.01", "fraction=0.02", "fraction=0.25", "memory=1024Mi"]
    for step in range(500):
        if live and rng.random() < 0.35:
            key = live.pop(rng.randrange(len(live)))
            if key.startswith("pod:"):
                led.remove_holder(key)
            else:
                led.forget(key)
        else:
            owner = f"o{rng.randrange(6)}"
            placements = [_share("n1", rng.randrange(8), rng.choice(shares), i)
                          for i in range(rng.randrange(1, 4))]
            if rng.random() < 0.5:
                p = placements[0]
                h = PodHolding(f"u{step}", f"ns-a/p{step}", "n1", tuple(p.devices), 0, owner,
                               share=p.share or "")
                led.set_pod(h)
                live.append(h.key)
                continue
            key = rng.choice([k for k in live if not k.startswith("pod:")] or [f"ns-a/w{step}"])
            with contextlib.suppress(LedgerConflict):
                led.assume(key, placements, owner=owner, check_capacity=False)
                if key not in live:
                    live.append(key)
        full = by_owner(led.allocations().values(), led.sharing)
        assert {o: u.gpus for o, u in index.owners.items()} == {o: u.gpus for o, u in full.items()}
        assert index.used.get("a", 0) == sum((u.gpus for u in full.values()), Fraction(0))
        bare = by_owner(led.allocations().values(), led.sharing, ShareFloors(0, Fraction(0)))
        raised += any(bare[o].gpus < u.gpus for o, u in full.items())
    assert raised > 100, "the floor raised the count at many steps"
