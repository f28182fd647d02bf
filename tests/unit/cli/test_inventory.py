"""The plugin's GPU picture from raw objects, and its output, without a server."""

from __future__ import annotations

import argparse
import io
from datetime import UTC, datetime, timedelta

import yaml

from api.v1alpha1.types import GPUWorkload
from internal.cli import cmd_template, inventory
from internal.cli.output import Printer
from internal.scheduling import Ledger
from internal.scheduling.framework import STALE_REASON, UNSCHEDULABLE, schedule
from internal.scheduling.snapshot import Snapshot
from tests.unit.scheduling import helpers


def node(name: str, gpus: int) -> dict:
    return {"metadata": {"name": name}, "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}}}


def workload(name: str, placements: list[dict], phase: str = "Running", gpus: int = 1,
             ns: str = "team") -> dict:
    return {"metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}"},
            "spec": {"gpusPerReplica": gpus, "replicas": len(placements) or 1},
            "status": {"phase": phase, "placements": placements}}


def test_devices_free_or_held_and_totals() -> None:
    nodes = [node("n1", 4), node("n2", 2), node("cpu", 0)]
    wls = [
        workload("a", [{"index": 0, "node": "n1", "devices": [0, 1]}], gpus=2),
        workload("done", [{"index": 0, "node": "n1", "devices": [2]}], phase="Succeeded"),
        workload("dp", [{"index": 0, "node": "n2", "devices": []}], gpus=1),  # device-plugin
        workload("p", [], phase="Pending", gpus=8),
    ]
    pods = [
        {"metadata": {"name": "x", "namespace": "other"},
         "spec": {"nodeName": "n1", "containers": [
             {"resources": {"limits": {"nvidia.com/gpu": "1"}}}]}, "status": {"phase": "Running"}},
        {"metadata": {"name": "gone", "namespace": "other"},  # finished: holds nothing
         "spec": {"nodeName": "n2", "containers": [
             {"resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
         "status": {"phase": "Succeeded"}},
        # seed path: a StatefulSet pod with the webhook's annotation, no workload label
        {"metadata": {"name": "sts-0", "namespace": "seed",
                      "annotations": {"gpu.orchestrator.dev/devices": "3"}},
         "spec": {"nodeName": "n1", "containers": [{}]}, "status": {"phase": "Running"}},
        # a child of `a`: the same owner as its placement (one holder, not two)
        {"metadata": {"name": "a-0", "namespace": "team", "uid": "pod-a-0",
                      "ownerReferences": [{"kind": "GPUWorkload", "name": "a",
                                           "uid": "uid-a", "controller": True}],
                      "labels": {"gpu.orchestrator.dev/workload": "a",
                                 "gpu.orchestrator.dev/attempt": "0"},
                      "annotations": {"gpu.orchestrator.dev/devices": "0,1"}},
         "spec": {"nodeName": "n1", "containers": [{}]}, "status": {"phase": "Running"}},
    ]
    view = {n.name: n for n in inventory.node_gpus(nodes, [], wls, pods)}
    assert set(view) == {"n1", "n2"}, "nodes without GPUs are left out"
    n1 = view["n1"]
    assert [d.holder for d in n1.devices] == ["team/a[0]", "team/a[0]", None, "seed/pod/sts-0"]
    assert n1.counted == {"other/pod/x": 1}
    assert (n1.total, n1.allocated, n1.free) == (4, 4, 0)
    n2 = view["n2"]
    assert n2.counted == {"team/dp[0]": 1} and n2.free == 1
    t = inventory.totals(list(view.values()), wls)
    assert (t.total, t.allocated, t.free) == (6, 5, 1)
    assert t.workloads == {"Pending": 1, "Running": 2, "Succeeded": 1}


def test_gpunode_devices_and_health_win_over_allocatable() -> None:
    g = {"metadata": {"name": "n1"}, "status": {
        "lastHeartbeatTime": "2024-01-01T00:00:00Z",
        "devices": [{"index": 0, "healthy": True, "model": "H100", "memoryTotalMiB": 80},
                    {"index": 1, "healthy": False, "model": "H100"}]}}
    now = datetime(2024, 1, 1, 0, 0, 30, tzinfo=UTC)  # heartbeat 30 s old: fresh
    (n1,) = inventory.node_gpus([node("n1", 8)], [g], [], [], now=now)
    assert n1.source == "GPUNode" and n1.total == 2 and n1.unhealthy == 1
    assert n1.free == 1, "an unhealthy device is not free"
    assert [d.health for d in n1.devices] == ["Healthy", "Unhealthy"]
    assert n1.to_dict()["devices"][0]["memory_total_mib"] == 80


def test_a_second_claim_on_a_device_is_a_problem_and_two_pods_both_show() -> None:
    """Two placements naming one device: the controller books the older and refuses
    the other (its attempt ends); two running pods on one device both hold it."""
    wls = [workload("a", [{"index": 0, "node": "n1", "devices": [0]}]),
           workload("b", [{"index": 0, "node": "n1", "devices": [0]}])]
    pic = inventory.picture([node("n1", 1)], [], wls, [])
    (n1,) = pic.nodes
    assert n1.devices[0].holder == "team/a[0]"
    assert pic.problems == ["team/b: placement not booked: n1: device(s) 0 held by team/a"]
    pods = [{"metadata": {"name": n, "namespace": "x", "uid": n,
                          "annotations": {"gpu.orchestrator.dev/devices": "0"}},
             "spec": {"nodeName": "n1", "containers": [{}]}, "status": {"phase": "Running"}}
            for n in ("p", "q")]
    (n1,) = inventory.node_gpus([node("n1", 1)], [], [], pods)
    assert n1.devices[0].holder == "x/pod/p, x/pod/q" and n1.free == 0


def test_pending_reason_and_placements_text() -> None:
    w = workload("w", [{"index": 1, "node": "n2", "devices": [3]},
                       {"index": 0, "node": "n1", "devices": [0, 1]}])
    assert inventory.placements_text(w) == "0=n1:0,1 1=n2:3"
    w["status"]["conditions"] = [{"type": "Unschedulable", "status": "True",
                                  "message": "n1: 0 free"}]
    assert inventory.pending_reason(w) == "n1: 0 free"
    w["status"]["conditions"] = [{"type": "Scheduled", "status": "False",
                                  "reason": "Unschedulable", "message": "n2: cordoned"}]
    assert inventory.pending_reason(w) == "n2: cordoned"
    assert inventory.pending_reason({"metadata": {}}) == "not yet seen by the controller"


def test_plain_table_when_not_a_terminal() -> None:
    buf = io.StringIO()
    Printer("table", buf).table(["node", "gpu"], [["n1", 0], ["node-long", None]])
    assert buf.getvalue().splitlines() == ["NODE        GPU", "n1          0", "node-long   -"]


def test_rich_table_on_a_terminal() -> None:
    buf = io.StringIO()
    Printer("table", buf, rich=True).table(["node", "gpu"], [["n1", 0]])
    assert "node" in buf.getvalue() and "n1" in buf.getvalue()


def test_template_is_a_valid_workload() -> None:
    args = argparse.Namespace(name="x", replicas=3, gpus=2, strategy="bestFit",
                              image="img", namespace=None)
    text = cmd_template.render(args)
    assert text.count("#") > 10, "commented"
    w = GPUWorkload.model_validate(yaml.safe_load(text))
    assert (w.spec.replicas, w.spec.gpus, w.spec.scheduling_strategy) == (3, 2, "bestFit")


def test_free_unhealthy_and_stale_agree_with_the_scheduler() -> None:
    """kubectl gpu and the controller judge the same objects the same way: a node
    with an unhealthy device offers one GPU less, a node whose agent stopped
    reporting offers none, and the scheduler's reasons say so."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    fresh = (now - timedelta(seconds=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    old = (now - timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    nodes = [helpers.node("sick"), helpers.node("silent"), helpers.node("bare")]
    sick = helpers.gpunode("sick", unhealthy=(2,))
    sick["status"]["lastHeartbeatTime"] = fresh
    silent = helpers.gpunode("silent")
    silent["status"]["lastHeartbeatTime"] = old
    view = {n.name: n for n in inventory.node_gpus(nodes, [sick, silent], [], [], now=now)}
    assert (view["sick"].free, view["sick"].unhealthy, view["sick"].stale) == (3, 1, 0)
    assert [d.health for d in view["sick"].devices] == [
        "Healthy", "Healthy", "Unhealthy", "Healthy"]
    assert (view["silent"].free, view["silent"].stale) == (0, 4)
    assert {d.health for d in view["silent"].devices} == {"Stale"}
    assert (view["bare"].free, view["bare"].source) == (4, "allocatable")

    ledger = Ledger()
    snap = Snapshot.build_at(nodes, [sick, silent], now, ledger=ledger)
    d = schedule(helpers.workload(gpusPerReplica=4,
                                  nodeSelector={}), snap, ledger, "leastLoaded")
    assert d.ok and d.nodes == ["bare"]
    d.assume(ledger, helpers.workload(gpusPerReplica=4))
    d = schedule(helpers.workload("w2", gpusPerReplica=4), snap, ledger, "leastLoaded")
    assert d.outcome == UNSCHEDULABLE
    assert d.reasons["sick"] == "3 free GPUs (1 unhealthy), needs 4"
    assert d.reasons["silent"] == STALE_REASON
    d = schedule(helpers.workload("w3", gpusPerReplica=3), snap, ledger, "leastLoaded")
    assert d.ok and d.placements[0].node == "sick" and 2 not in d.placements[0].devices


def test_dra_slices_are_the_devices_and_foreign_claims_hold_them() -> None:
    from hack.testenv.dra import DRIVER, nvidia_slice

    def claim(name: str, device: str, node: str = "n1", ours: bool = False) -> dict:
        meta: dict = {"name": name, "namespace": "ml", "uid": f"uid-{name}"}
        if ours:
            meta["ownerReferences"] = [{"kind": "GPUWorkload", "name": "w", "uid": "uid-w",
                                        "controller": True}]
        return {"metadata": meta, "status": {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": DRIVER, "pool": node, "device": device}]}}}}

    claims = [claim("theirs", "gpu-1"),
              claim("ours", "gpu-2", ours=True),  # shown by its workload's placement
              claim("odd", "nvme-0"),  # unreadable: the controller reports it
              claim("other-driver", "gpu-0") | {"status": {"allocation": {"devices": {
                  "results": [{"driver": "x.example.com", "pool": "n1", "device": "gpu-0"}]}}}}]
    wls = [workload("w", [{"index": 0, "node": "n1", "devices": [2]}])]
    view = {n.name: n for n in inventory.node_gpus(
        [node("n1", 0), node("sliced-only", 0)], [], wls, [],
        slices=[nvidia_slice("n1", 4), nvidia_slice("sliced-only", 2)], claims=claims)}
    n1 = view["n1"]
    assert n1.source == "ResourceSlice"
    assert [d.holder for d in n1.devices] == [None, "ml/claim/theirs", "team/w[0]", None]
    assert (n1.total, n1.allocated, n1.free) == (4, 2, 2)
    assert view["sliced-only"].total == 2
    # Without the slices the same node has no GPUs to show.
    assert inventory.node_gpus([node("n1", 0)], [], [], [], claims=claims) == []


def test_nodes_show_shares_and_mig_instances_per_device() -> None:
    g = helpers.gpunode("n1", 3, memory=81920)
    g["status"]["lastHeartbeatTime"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    g["status"]["devices"][2].update(migMode=True, migInstances=[
        {"uuid": f"MIG-{i}", "profile": "1g.10gb", "memoryTotalMiB": 9984} for i in range(7)])
    wls = [{"metadata": {"name": f"s{i}", "namespace": "team", "uid": f"uid-s{i}"},
            "spec": {"gpuShare": {"memory": "20Gi"}},
            "status": {"phase": "Running", "placements": [
                {"index": 0, "node": "n1", "devices": [0], "share": "memory=20480Mi"}]}}
           for i in range(3)]
    wls.append({"metadata": {"name": "m", "namespace": "team", "uid": "uid-m"},
                "spec": {"migProfile": "1g.10gb"},
                "status": {"phase": "Running", "placements": [
                    {"index": 0, "node": "n1", "devices": [2], "mig": "MIG-3"}]}})
    n1, = inventory.node_gpus([helpers.node("n1", 3)], [g], wls, [])
    d0, d1, d2 = n1.devices
    assert d0.sharing == "3 shares, 60Gi of 80Gi" and not d0.free
    assert d1.sharing is None and d1.free
    assert d2.sharing == "MIG: 1 of 7 instances held" and not d2.offered
    assert n1.free == 1


def test_a_node_reporting_a_million_gpus_is_a_problem_not_a_million_rows() -> None:
    pic = inventory.picture([node("n1", 2), node("n9", 1_000_000)], [], [], [])
    assert [n.name for n in pic.nodes] == ["n1"]
    assert pic.problems == ["node n9: reports 1000000 GPUs, more than 64; excluded "
                            "(its Node's status nvidia.com/gpu)"]


def test_one_namespace_s_holders_never_make_a_device_free() -> None:
    """A tenant reads its namespace's holders only: a device none of them holds may
    be another namespace's, so it is unknown, never free, and FREE an upper bound."""
    wls = [workload("a", [{"index": 0, "node": "n1", "devices": [0]}])]
    everyone = inventory.picture([node("n1", 4)], [], wls, [])
    assert [d.free for d in everyone.nodes[0].devices] == [False, True, True, True]
    pic = inventory.picture([node("n1", 4)], [], wls, [], holders_from="team")
    n1 = pic.nodes[0]
    assert pic.holders_from == "team" and n1.partial
    assert [d.free for d in n1.devices] == [False] * 4
    assert [d.unknown for d in n1.devices] == [False, True, True, True]
    data = n1.to_dict()
    assert data["free"] is None and data["freeAtMost"] == 3
    assert "unknown" not in data["devices"][0] and data["devices"][1]["unknown"] is True
    assert "unknown" not in everyone.nodes[0].to_dict()["devices"][1]
    assert inventory.totals(pic.nodes, wls).partial
    assert not inventory.totals(everyone.nodes, wls).partial
