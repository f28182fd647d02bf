"""Shares of a device and MIG instances: the arithmetic, the ledger's three kinds of
device, what a pod's annotations say it holds, and where the strategies put them."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from api.v1alpha1.types import Placement
from internal.scheduling import Ledger, schedule
from internal.scheduling.ledger import LedgerConflict
from internal.scheduling.pods import BadShare, pod_holding
from internal.scheduling.shares import (
    Hold,
    Portion,
    compatible,
    over,
    owner_use,
    parse_mig,
    parse_share,
)
from tests.unit.scheduling.helpers import cluster, gpunode, node, workload

GI = 1024


def test_share_text_reads_back() -> None:
    assert parse_share("memory=20Gi") == Portion(memory_mib=20 * GI)
    assert parse_share("memory=20480Mi").text() == "memory=20480Mi"
    assert parse_share("fraction=0.25") == Portion(fraction=Fraction(1, 4))
    assert parse_share(Portion(fraction=Fraction(1, 4)).text()).fraction == Fraction(1, 4)
    assert parse_mig("MIG-abc-1").mig == "MIG-abc-1"


@pytest.mark.parametrize("bad", ["memory=", "memory=-1Gi", "fraction=0", "fraction=1.5",
                                 "fraction=0.2500", "cores=3", "20Gi", ""])
def test_unreadable_share_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_share(bad)


def test_sum_of_shares_never_above_the_device() -> None:
    a = Hold(portions=[Portion(memory_mib=60 * GI)])
    used, unknown = owner_use([("a", True, a)], 80 * GI)
    assert (used, unknown) == (Fraction(3, 4), 0)
    assert over(used, [Portion(memory_mib=20 * GI)], 80 * GI) is None
    assert over(used, [Portion(fraction=Fraction(1, 4))], 80 * GI) is None
    assert over(used, [Portion(memory_mib=20 * GI + 1)], 80 * GI) == "20Gi free of the device"
    # memory shares need the device's memory; fractions do not
    assert over(Fraction(0), [Portion(memory_mib=GI)], None) is not None
    assert over(Fraction(1, 2), [Portion(fraction=Fraction(1, 2))], None) is None


def test_a_booking_and_its_pod_are_one_share_not_two() -> None:
    share = Hold(portions=[Portion(memory_mib=40 * GI)])
    used, _ = owner_use([("w#0", True, share), ("w#0", False, share)], 80 * GI)
    assert used == Fraction(1, 2)


def test_which_holds_may_stand_side_by_side() -> None:
    whole, share = Hold(whole=True), Hold(portions=[Portion(fraction=Fraction(1, 4))])
    mig_a, mig_b = Hold(portions=[Portion(mig="MIG-a")]), Hold(portions=[Portion(mig="MIG-b")])
    assert compatible(share, share)
    assert compatible(mig_a, mig_b)
    assert not compatible(mig_a, mig_a)
    assert not compatible(whole, share) and not compatible(share, whole)
    assert not compatible(share, mig_a)


def _share(node: str, dev: int, text: str, index: int = 0) -> Placement:
    return Placement(index=index, node=node, devices=[dev], share=text)


def _ledger_80g() -> Ledger:
    _snap, ledger = cluster(node("n1"), gpunodes=(gpunode("n1", memory=80 * GI),))
    return ledger


def test_ledger_shares_one_device_up_to_its_memory() -> None:
    ledger = _ledger_80g()
    for i in range(4):
        ledger.assume(f"ns/w{i}", [_share("n1", 0, "memory=20480Mi")], owner=f"w{i}#0")
    with pytest.raises(LedgerConflict, match="n1: device 0: 0Gi free"):
        ledger.assume("ns/w5", [_share("n1", 0, "fraction=0.01")], owner="w5#0")
    # a whole request never gets a device with a share held
    with pytest.raises(LedgerConflict, match=r"device\(s\) 0 held by"):
        ledger.assume("ns/whole", [Placement(index=0, node="n1", devices=[0])], owner="x#0")
    assert 0 not in ledger.free_devices("n1")
    assert ledger.free_count("n1") == 3


def test_a_share_never_lands_on_a_device_held_whole() -> None:
    ledger = _ledger_80g()
    ledger.assume("ns/whole", [Placement(index=0, node="n1", devices=[1])], owner="x#0")
    with pytest.raises(LedgerConflict, match="held by ns/whole"):
        ledger.assume("ns/s", [_share("n1", 1, "fraction=0.1")], owner="s#0")


def _pod(uid: str, node: str, devices: str, **ann: str) -> dict[str, Any]:
    annotations = {"gpu.orchestrator.dev/devices": devices}
    annotations.update({f"gpu.orchestrator.dev/{k}": v for k, v in ann.items()})
    return {"metadata": {"name": uid, "namespace": "ns", "uid": uid, "annotations": annotations},
            "spec": {"nodeName": node}, "status": {"phase": "Running"}}


def test_a_terminating_pods_share_is_still_held() -> None:
    ledger = _ledger_80g()
    pod = _pod("p1", "n1", "0", share="memory=61440Mi")
    pod["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    assert ledger.sync_pod(pod) == []
    with pytest.raises(LedgerConflict, match="20Gi free"):
        ledger.assume("ns/w", [_share("n1", 0, "memory=40960Mi")], owner="w#0")
    ledger.assume("ns/w", [_share("n1", 0, "memory=20480Mi")], owner="w#0")
    ledger.remove_pod("p1")  # gone: its share is free again
    ledger.assume("ns/w2", [_share("n1", 0, "memory=61440Mi")], owner="w2#0")


def test_a_pod_whose_share_cannot_be_read_holds_its_device_whole() -> None:
    pod = _pod("p1", "n1", "2", share="memory=lots")
    with pytest.raises(BadShare) as exc:
        pod_holding(pod)
    assert exc.value.holding.devices == (2,) and not exc.value.holding.share
    ledger = _ledger_80g()
    problems = ledger.sync_pod(pod)
    assert problems and "memory=lots" in problems[0]
    with pytest.raises(LedgerConflict):
        ledger.assume("ns/s", [_share("n1", 2, "fraction=0.1")], owner="s#0")


def test_rebuild_reads_the_same_shares_back() -> None:
    pods = [_pod(f"p{i}", "n1", "3", share="fraction=0.25") for i in range(4)]
    ledger, problems = Ledger.rebuild([], pods, {"n1": range(4)})
    assert problems == []
    with pytest.raises(LedgerConflict, match="device 3"):
        ledger.assume("ns/w", [_share("n1", 3, "fraction=0.001")], owner="w#0")


MIG_UUIDS = [f"MIG-n1-0-{i}" for i in range(7)]


def _mig_gpunode() -> dict[str, Any]:
    g = gpunode("n1", memory=80 * GI)
    g["status"]["devices"][0].update(
        migMode=True,
        migInstances=[{"uuid": u, "profile": "1g.10gb", "memoryTotalMiB": 9984}
                      for u in MIG_UUIDS])
    return g


def test_a_mig_device_is_offered_only_as_its_instances() -> None:
    snap, ledger = cluster(node("n1"), gpunodes=(_mig_gpunode(),))
    assert ledger.usable("n1") == frozenset({1, 2, 3})
    got = []
    for i in range(7):
        w = workload(f"m{i}", migProfile="1g.10gb", schedulingStrategy="bestFit")
        d = schedule(w, snap, ledger)
        assert d.ok, d.message
        d.assume(ledger, w)
        got.append(d.placements[0].mig)
        assert d.placements[0].devices == [0]
    assert sorted(got) == MIG_UUIDS
    d = schedule(workload("m8", migProfile="1g.10gb"), snap, ledger)
    assert not d.ok and "no free MIG instance 1g.10gb (7 held)" in d.message
    whole = schedule(workload("w", gpusPerReplica=3), snap, ledger)
    assert whole.ok and 0 not in whole.placements[0].devices
    assert not schedule(workload("w4", gpusPerReplica=4), snap, ledger).ok


def test_bestfit_packs_shares_leastloaded_spreads_them() -> None:
    snap, ledger = cluster(node("n1"), node("n2"),
                           gpunodes=(gpunode("n1", memory=80 * GI), gpunode("n2", memory=80 * GI)))
    used = set()
    for i in range(8):
        w = workload(f"s{i}", gpuShare={"memory": "20Gi"}, schedulingStrategy="bestFit")
        d = schedule(w, snap, ledger)
        assert d.ok, d.message
        d.assume(ledger, w)
        p = d.placements[0]
        assert p.share == "memory=20480Mi"
        used.add((p.node, p.devices[0]))
    assert used == {("n1", 0), ("n1", 1)}
    # a 4-GPU whole workload fits only on the node with no shares
    big = schedule(workload("big", gpusPerReplica=4), snap, ledger)
    assert big.ok and big.placements[0].node == "n2"
    full = schedule(workload("s9", gpuShare={"memory": "20Gi"}, nodeSelector={"x": "y"}),
                    snap, ledger)
    assert not full.ok
    snap2, ledger2 = cluster(node("n1"), gpunodes=(gpunode("n1", memory=80 * GI),))
    spread = set()
    for i in range(4):
        w = workload(f"l{i}", gpuShare={"fraction": "0.5"}, schedulingStrategy="leastLoaded")
        d = schedule(w, snap2, ledger2)
        d.assume(ledger2, w)
        spread.add(d.placements[0].devices[0])
    assert spread == {0, 1, 2, 3}


def test_why_pending_names_devices_held_whole() -> None:
    snap, ledger = cluster(node("n1"), gpunodes=(gpunode("n1", memory=80 * GI),))
    ledger.assume("ns/whole", [Placement(index=0, node="n1", devices=[0, 1, 2])], owner="x#0")
    ledger.assume("ns/s", [_share("n1", 3, "memory=71680Mi")], owner="s#0")
    d = schedule(workload("w", gpuShare={"memory": "20Gi"}), snap, ledger)
    assert not d.ok
    assert "n1: no shared device with 20Gi free; 3 devices held whole" in d.message


def test_device_plugin_and_dra_refuse_shares() -> None:
    snap, ledger = cluster(node("n1"), gpunodes=(gpunode("n1"),))
    for mode in ("device-plugin", "dra"):
        d = schedule(workload("w", gpuShare={"fraction": "0.5"}, deviceExposure=mode),
                     snap, ledger)
        assert not d.ok and f"deviceExposure {mode}" in d.message


def test_a_seed_pod_never_takes_a_mig_device_whole() -> None:
    _snap, ledger = cluster(node("n1"), gpunodes=(_mig_gpunode(),))
    with pytest.raises(LedgerConflict, match="MIG-enabled"):
        ledger.refuse_mig(Placement(index=0, node="n1", devices=[0, 1]))
    ledger.refuse_mig(Placement(index=0, node="n1", devices=[1, 2]))


def test_a_jobs_template_share_is_held_as_a_share() -> None:
    from internal.scheduling.jobs import job_holding

    ref = {"kind": "GPUWorkload", "uid": "w1", "controller": True}
    job = {"metadata": {"name": "j", "namespace": "ns", "uid": "j1", "ownerReferences": [ref]},
           "spec": {"template": {"metadata": {"annotations": {
               "gpu.orchestrator.dev/devices": "1",
               "gpu.orchestrator.dev/share": "fraction=0.5"}},
               "spec": {"nodeName": "n1"}}}}
    h = job_holding(job)
    assert h is not None and h.share == "fraction=0.5"
    ledger = _ledger_80g()
    assert ledger.sync_job(job) == []
    ledger.assume("ns/w", [_share("n1", 1, "fraction=0.5")], owner="w#0")
    job["spec"]["template"]["metadata"]["annotations"]["gpu.orchestrator.dev/share"] = "half"
    ledger.forget("ns/w")
    problems = ledger.sync_job(job)
    assert problems and "half" in problems[0]
    with pytest.raises(LedgerConflict):  # unreadable: held whole, never nothing
        ledger.assume("ns/w", [_share("n1", 1, "fraction=0.1")], owner="w#0")


def test_a_whole_gpu_preemptor_frees_lower_priority_shares() -> None:
    snap, ledger = cluster(node("n1", gpus=1), gpunodes=(gpunode("n1", 1, memory=80 * GI),))
    for i in range(2):
        w = workload(f"s{i}", gpuShare={"fraction": "0.5"}, priority=0)
        d = schedule(w, snap, ledger)
        d.assume(ledger, w)
    d = schedule(workload("big", priority=100, schedulingStrategy="priority"), snap, ledger)
    assert d.outcome == "Preempting" and sorted(d.victims) == ["default/s0", "default/s1"]
    assert d.placements[0].devices == [0] and d.placements[0].share is None


def test_each_held_device_says_how_it_is_held_and_by_whom() -> None:
    """``device_use``, what the metrics and the dashboard's holder table read: a MIG
    device's instances held, a shared device's holders, a device held whole."""
    snap, ledger = cluster(node("n1"), gpunodes=(_mig_gpunode(),))
    for i in range(3):
        w = workload(f"m{i}", migProfile="1g.10gb")
        schedule(w, snap, ledger).assume(ledger, w)
    for i in range(2):
        w = workload(f"s{i}", gpuShare={"memory": "20Gi"}, schedulingStrategy="bestFit")
        schedule(w, snap, ledger).assume(ledger, w)
    w = workload("big", gpusPerReplica=2)
    schedule(w, snap, ledger).assume(ledger, w)
    use = ledger.device_use("n1")
    assert (use[0].kind, use[0].migs, use[0].holders) == \
        ("mig", 3, ("default/m0", "default/m1", "default/m2"))
    shared = [u for u in use.values() if u.kind == "share"]
    assert [u.holders for u in shared] == [("default/s0", "default/s1")]
    assert sorted(u.holders for u in use.values() if u.kind == "whole") == \
        [("default/big",), ("default/big",)]
