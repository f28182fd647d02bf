"""The per-node work of a decision (``filter_node``, asked of every node it visits):
the NVLink links are read only when they can change the pick (a set of more than one
device with a topology), and the same devices and messages come out whatever the
memory floor and topology."""

from __future__ import annotations

from typing import Any

import pytest

from internal.scheduling import SCHEDULED, UNSCHEDULABLE, schedule
from internal.scheduling import filters as filters_mod
from tests.unit.scheduling.helpers import cluster, gpunode, node, workload

#: 0-1 and 2-3 linked, as an 4-GPU board of two NVLink pairs
PAIRS = {0: [1], 1: [0], 2: [3], 3: [2]}


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    seen: list[Any] = []
    real = filters_mod.pick_devices

    def spy(free: Any, n: int, **kw: Any) -> Any:
        seen.append(kw.get("nvlink_peers"))
        return real(free, n, **kw)

    monkeypatch.setattr(filters_mod, "pick_devices", spy)
    return seen


def test_a_one_gpu_replica_reads_no_links(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _spy(monkeypatch)
    snap, led = cluster(node("a"), node("b"), gpunodes=(gpunode("a", links=PAIRS),
                                                        gpunode("b", links=PAIRS)))
    for topology in ("None", "Preferred", "Required"):
        d = schedule(workload(gpusPerReplica=1, topology=topology), snap, led)
        assert d.outcome == SCHEDULED
    assert seen and all(peers is None for peers in seen)


def test_a_set_without_topology_reads_no_links(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _spy(monkeypatch)
    snap, led = cluster(node("a"), gpunodes=(gpunode("a", links=PAIRS),))
    d = schedule(workload(gpusPerReplica=2), snap, led)
    assert d.outcome == SCHEDULED
    assert seen == [None]


def test_a_set_with_topology_gets_the_nodes_links(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _spy(monkeypatch)
    snap, led = cluster(node("a"), gpunodes=(gpunode("a", links=PAIRS),))
    led.assume("x/other", [_placement("a", 1)])  # 0 free but unlinked to 2, 3
    d = schedule(workload(gpusPerReplica=2, topology="Required"), snap, led)
    assert d.outcome == SCHEDULED
    assert d.placements[0].devices == [2, 3]
    assert seen == [{0: frozenset({1}), 1: frozenset({0}), 2: frozenset({3}),
                     3: frozenset({2})}]


def _placement(n: str, *devices: int) -> Any:
    from api.v1alpha1.types import Placement
    return Placement(index=0, node=n, devices=list(devices))


@pytest.mark.parametrize(("spec", "held", "outcome", "devices", "reason"), [
    # no memory floor: every free device the node reports, the least fragmenting pick
    ({"gpusPerReplica": 1}, (1,), SCHEDULED, [0], None),
    ({"gpusPerReplica": 2}, (1,), SCHEDULED, [2, 3], None),
    # no floor, a topology: the linked pair, not the contiguous one
    ({"gpusPerReplica": 2, "topology": "Preferred"}, (0,), SCHEDULED, [2, 3], None),
    ({"gpusPerReplica": 3, "topology": "Required"}, (), UNSCHEDULABLE, None,
     "no NVLink-connected set of 3 free GPUs"),
    # a floor the devices meet, and one they do not (the count of those below it)
    ({"gpusPerReplica": 2, "minGPUMemoryMiB": 40000}, (), SCHEDULED, [0, 1], None),
    ({"gpusPerReplica": 1, "minGPUMemoryMiB": 90000}, (2,), UNSCHEDULABLE, None,
     "0 free GPUs, needs 1 (3 below 90000 MiB)"),
    # not enough free, no floor
    ({"gpusPerReplica": 4}, (1,), UNSCHEDULABLE, None, "3 free GPUs, needs 4"),
])
def test_the_same_devices_and_messages(spec: dict[str, Any], held: tuple[int, ...],
                                       outcome: str, devices: list[int] | None,
                                       reason: str | None) -> None:
    snap, led = cluster(node("a"), gpunodes=(gpunode("a", links=PAIRS),))
    if held:
        led.assume("x/other", [_placement("a", *held)])
    d = schedule(workload(**spec), snap, led)
    assert d.outcome == outcome
    if devices is not None:
        assert [p.devices for p in d.placements] == [devices]
    if reason is not None:
        assert d.reasons == {"a": reason}


def test_a_node_without_counted_holdings_counts_nobody() -> None:
    """``counted`` of a node nobody holds by count: empty, as when it had some."""
    from tests.unit.scheduling.helpers import foreign_pod
    _, led = cluster(node("a"), node("b"))
    assert dict(led.counted("a")) == {}
    foreign_pod(led, "ns/p", "b", 2)
    assert dict(led.counted("b")) == {"pod:ns/p": 2}
    assert dict(led.counted("a")) == {}
    foreign_pod(led, "ns/p", "b", 0)
    assert dict(led.counted("b")) == {}
