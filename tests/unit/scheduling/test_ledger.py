import pytest

from api.v1alpha1.types import Placement
from internal.scheduling import Ledger, LedgerConflict
from internal.scheduling.ledger import FreeIndex, pod_gpu_request
from tests.unit.scheduling.helpers import SEED_MAP, foreign_pod


def P(i: int, node: str, *devs: int) -> Placement:
    return Placement(index=i, node=node, devices=list(devs))


def ledger4() -> Ledger:
    led = Ledger()
    for i in range(1, 5):
        led.set_node_devices(f"node{i}", range(4))
    return led


def test_assume_commit_forget() -> None:
    led = ledger4()
    led.assume("ns/a", [P(0, "node1", 0, 1)])
    assert led.free_count("node1") == 2
    assert not led.is_committed("ns/a")
    led.commit("ns/a")
    assert led.is_committed("ns/a")
    assert led.holder("node1", 0) == "ns/a"
    led.forget("ns/a")
    assert led.free_count("node1") == 4 and led.allocation("ns/a") is None


def test_device_never_held_by_two_workloads() -> None:
    led = ledger4()
    led.assume("ns/a", [P(0, "node1", 0, 1)])
    with pytest.raises(LedgerConflict, match="node1: device\\(s\\) 1 held by ns/a"):
        led.assume("ns/b", [P(0, "node2", 0), P(1, "node1", 1, 2)])
    # nothing of b was booked
    assert led.allocation("ns/b") is None
    assert led.free_count("node2") == 4 and led.holder("node1", 2) is None


def test_own_map_may_share_a_device() -> None:
    from internal.scheduling.mapparser import parse_scheduling_map

    led = ledger4()
    entries = parse_scheduling_map(SEED_MAP)
    led.assume("ns/seed", [P(e.index, e.node, *e.devices) for e in entries.values()])
    assert led.holder("node4", 3) == "ns/seed"
    assert led.free_count("node4") == 3


def test_reassume_replaces_and_failed_reassume_restores() -> None:
    led = ledger4()
    led.assume("ns/a", [P(0, "node1", 0)])
    led.assume("ns/b", [P(0, "node2", 0)])
    led.assume("ns/a", [P(0, "node1", 3)])
    assert led.holder("node1", 0) is None and led.holder("node1", 3) == "ns/a"
    with pytest.raises(LedgerConflict):
        led.assume("ns/a", [P(0, "node2", 0)])
    assert led.holder("node1", 3) == "ns/a"


def test_capacity_checked() -> None:
    led = ledger4()
    foreign_pod(led, "ns/other", "node1", 3)
    assert led.free_count("node1") == 1
    with pytest.raises(LedgerConflict, match="1 free GPU"):
        led.assume("ns/a", [P(0, "node1", 0, 1)])
    with pytest.raises(LedgerConflict, match="unknown node"):
        led.assume("ns/a", [P(0, "nodeX", 0)])
    with pytest.raises(LedgerConflict, match="not usable"):
        led.assume("ns/a", [P(0, "node2", 9)])


def test_counted_mode() -> None:
    led = ledger4()
    led.assume("ns/dp", [P(0, "node1"), P(1, "node1")], gpus_per_replica=2)
    assert led.free_count("node1") == 0
    assert led.counted("node1") == {"ns/dp": 4}  # by owner: the key, when none is given
    led.forget("ns/dp")
    assert led.free_count("node1") == 4


def test_foreign_pods_counted_and_removed() -> None:
    led = ledger4()
    foreign_pod(led, "x/p", "node2", 2)
    assert led.free_count("node2") == 2
    assert led.has_pod("x/p") and led.pod("x/p").counted == {"node2": 2}
    foreign_pod(led, "x/p", "node3", 1)  # moved / updated
    assert led.free_count("node2") == 4 and led.free_count("node3") == 3
    led.remove_pod("x/p")
    assert led.free_count("node3") == 4


def test_index_buckets_follow_changes() -> None:
    led = ledger4()
    assert led.index.counts() == {4: 4}
    led.assume("ns/a", [P(0, "node2", 0, 1, 2)])
    assert led.index.counts() == {4: 3, 1: 1}
    assert list(led.index.iter_nodes(2)) == ["node1", "node3", "node4"]
    assert next(iter(led.index.iter_nodes(0, most_free_first=False))) == "node2"
    led.remove_node("node4")
    assert "node4" not in led.index


def test_free_index_sorted_buckets() -> None:
    idx = FreeIndex()
    for n, f in [("c", 1), ("a", 1), ("b", 2)]:
        idx.set(n, f)
    assert list(idx.iter_nodes(0)) == ["b", "a", "c"]
    idx.set("b", 1)
    assert list(idx.iter_nodes(0)) == ["a", "b", "c"]
    assert idx.count_below(2) == 3


def _wl(name: str, placements: list, phase: str = "Running", **spec) -> dict:
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": spec,
        "status": {"phase": phase, "placements": placements},
    }


def _pod(
    name: str, node: str | None, gpus: int, *, ours: bool = False, phase: str = "Running"
) -> dict:
    labels = {"gpu.orchestrator.dev/workload": "w"} if ours else {}
    return {
        "metadata": {"name": name, "namespace": "ns", "labels": labels},
        "spec": {
            "nodeName": node,
            "containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": phase},
    }


def test_rebuild_from_cache() -> None:
    workloads = [
        _wl("a", [{"index": 0, "node": "node1", "devices": [0, 1]}]),
        _wl("done", [{"index": 0, "node": "node2", "devices": [0]}], phase="Succeeded"),
        _wl("dp", [{"index": 0, "node": "node3", "devices": []}], gpusPerReplica=2),
        _wl("clash", [{"index": 0, "node": "node1", "devices": [1]}]),
        _wl("pending", []),
    ]
    pods = [
        _pod("foreign", "node4", 1),
        _pod("ours", "node1", 2, ours=True),
        _pod("finished", "node4", 2, phase="Succeeded"),
        _pod("unbound", None, 2),
    ]
    led, problems = Ledger.rebuild(workloads, pods, {f"node{i}": range(4) for i in range(1, 5)})
    assert led.is_committed("ns/a")
    assert led.holder("node1", 0) == "ns/a"
    # a's two devices, plus the 2 GPUs its pod requests: a label is not ownership
    assert led.free_count("node1") == 0
    assert led.free_count("node2") == 4  # succeeded workload released its devices
    assert led.free_count("node3") == 2  # device-plugin workload counted
    assert led.free_count("node4") == 3  # foreign pod counted
    assert problems and "ns/clash" in problems[0] and "held by ns/a" in problems[0]


def test_pod_gpu_request() -> None:
    pod = {
        "spec": {
            "containers": [
                {"resources": {"requests": {"nvidia.com/gpu": "1"}}},
                {"resources": {"limits": {"nvidia.com/gpu": 2}}},
            ],
            "initContainers": [{"resources": {"limits": {"nvidia.com/gpu": "4"}}}],
        }
    }
    assert pod_gpu_request(pod) == 4
    assert pod_gpu_request({"spec": {"containers": [{}]}}) == 0


def test_rebuild_keeps_placements_of_invalid_objects() -> None:
    bad = _wl("bad", [{"index": 0, "node": "node1", "devices": [2]}], priority="urgent")
    led, problems = Ledger.rebuild([bad], (), {"node1": range(4)})
    assert led.holder("node1", 2) == "ns/bad"
    assert problems and problems[0].startswith("ns/bad: invalid spec, placements kept")
