"""`kubectl gpu nodes` and the placing controller's ledger, built from the same
objects, agree device by device: on a node with a seed pod whose devices
annotation cannot be read, an unhealthy device, a stranded ResourceClaim, a pod
annotated with a non-ASCII digit, and on a node whose agent went silent."""

from __future__ import annotations

import argparse
import io
from datetime import UTC, datetime, timedelta

from api.v1alpha1.types import DeviceExposure
from controllers.placement.state import PlacementState
from controllers.podbinding.seedbook import SeedBook
from hack.testenv.dra import DRIVER, nvidia_slice
from internal.cli import cmd_nodes, inventory
from internal.cli.output import Printer
from internal.scheduling.framework import STALE_REASON, UNSCHEDULABLE, schedule
from tests.unit.scheduling import helpers

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def gpu_pod(name: str, ns: str, node: str, devices: str | None, gpus: int = 1,
            seed: bool = False) -> dict:
    meta: dict = {"name": name, "namespace": ns, "uid": f"uid-{name}", "annotations": {}}
    if devices is not None:
        meta["annotations"]["gpu.orchestrator.dev/devices"] = devices
    spec: dict = {"nodeName": node, "containers": [
        {"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}
    if seed:
        spec["schedulerName"] = "gpu-scheduler"
        meta["ownerReferences"] = [{"kind": "StatefulSet", "name": name.rsplit("-", 1)[0],
                                    "uid": "sts", "controller": True}]
    return {"metadata": meta, "spec": spec, "status": {"phase": "Running"}}


def objects() -> dict:
    node4 = helpers.gpunode("node4", unhealthy=(3,))
    node4["status"]["lastHeartbeatTime"] = stamp(NOW - timedelta(seconds=5))
    silent = helpers.gpunode("silent")
    silent["status"]["lastHeartbeatTime"] = stamp(NOW - timedelta(hours=1))
    train = {"metadata": {"name": "train", "namespace": "demo", "uid": "uid-train",
                          "creationTimestamp": stamp(NOW)},
             "spec": {"gpusPerReplica": 1, "replicas": 1},
             "status": {"phase": "Running",
                        "placements": [{"index": 0, "node": "node4", "devices": [0]}]}}
    stranded = {  # a claim of a workload that is gone: it holds until deallocated
        "metadata": {"name": "gone-0", "namespace": "demo", "uid": "uid-claim",
                     "ownerReferences": [{"kind": "GPUWorkload", "name": "gone",
                                          "uid": "uid-gone", "controller": True}]},
        "status": {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": DRIVER, "pool": "node4", "device": "gpu-2"}]}}}}
    return {
        "nodes": [helpers.node("node4"), helpers.node("silent")],
        "gpunodes": [node4, silent],
        "workloads": [train],
        "pods": [gpu_pod("bad-seed-0", "pb", "node4", "0,x", seed=True),
                 gpu_pod("odd", "pb", "node4", "\u00b2")],
        "slices": [nvidia_slice("node4", 4)],
        "claims": [stranded],
    }


def controller_state(o: dict) -> PlacementState:
    state = PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES, clock=lambda: NOW,
                           dra_driver=DRIVER, pod_books=[SeedBook()], stale_after=90.0)
    state.rebuild(lambda: (o["nodes"], o["gpunodes"], o["workloads"], o["pods"]),
                  lambda: (o["slices"], o["claims"]))
    return state


def test_the_plugin_shows_what_the_controller_books() -> None:
    o = objects()
    state = controller_state(o)
    pic = inventory.picture(o["nodes"], o["gpunodes"], o["workloads"], o["pods"], now=NOW,
                            stale_after=90.0, slices=o["slices"], claims=o["claims"],
                            driver=DRIVER)
    view = {n.name: n for n in pic.nodes}
    ledger = state.view()
    for name, n in view.items():
        assert n.free == ledger.free_count(name), name
        for d in n.devices:
            assert d.held == bool(ledger.device_owners(name, d.index)), (name, d.index)
            # a device nobody names is never shown free beside counted GPUs: one of
            # them may be it
            assert d.free == (d.index in ledger.free_devices(name)
                              and not ledger.counted_total(name)), (name, d.index)
        assert sum(n.counted.values()) == ledger.counted_total(name), name

    node4 = view["node4"]
    # device 0: the workload only; the seed pod's '0,x' names nothing readable, so
    # the controller counts its one requested GPU (and the "²" pod's), unnamed
    assert [d.holder for d in node4.devices] == ["demo/train[0]", None,
                                                 "demo/claim/gone-0", None]
    assert node4.counted == {"pb/pod/bad-seed-0": 1, "pb/pod/odd": 1}
    assert [d.health for d in node4.devices][3] == "Unhealthy" and not node4.devices[3].free
    assert node4.free == 0, "device 1 is free but two unnamed GPUs are held"
    assert (view["silent"].free, view["silent"].stale) == (0, 4)
    assert any("bad-seed-0" in p and "'0,x'" in p for p in pic.problems)
    assert any("pb/odd" in p for p in pic.problems)

    # and the controller refuses what the plugin shows no room for
    d = schedule(helpers.workload("two", gpusPerReplica=1), state._snapshot, state._ledger,
                 "leastLoaded")
    assert d.outcome == UNSCHEDULABLE
    assert d.reasons["silent"] == STALE_REASON
    assert "node4" in d.reasons


def test_nodes_table_never_says_free_where_the_controller_would_refuse() -> None:
    o = objects()

    class FakeKube:
        all_namespaces = True
        namespace = "default"

        def workloads(self, all_namespaces: bool = False) -> list:
            return o["workloads"]

        def nodes(self) -> list:
            return o["nodes"]

        def gpunodes(self) -> list:
            return o["gpunodes"]

        def pods(self, _namespace: str | None = None, **_kw: object) -> list:
            return o["pods"]

        def workload_jobs(self, _namespace: str | None = None) -> list:
            return []

        def resource_slices(self) -> list:
            return o["slices"]

        def claims(self, _namespace: str | None = None) -> list:
            return o["claims"]

    # the command judges heartbeats at the current time: a threshold that keeps
    # node4's (5 s before NOW) fresh today, and silent's an hour older than that
    age = (datetime.now(UTC) - NOW).total_seconds() + 60
    silent = o["gpunodes"][1]
    silent["status"]["lastHeartbeatTime"] = stamp(NOW - timedelta(seconds=age + 3600))
    buf = io.StringIO()
    args = argparse.Namespace(node=[], gpunode_stale_after=age, dra_driver=DRIVER)
    assert cmd_nodes.run(args, FakeKube(), Printer("table", buf)) == 0  # type: ignore[arg-type]
    rows = [ln.split() for ln in buf.getvalue().splitlines()]
    devices = [r for r in rows if len(r) >= 4 and r[0] in ("node4", "silent")
               and r[1].isdigit()]
    assert devices, buf.getvalue()
    for r in devices:
        if r[3] in ("Unhealthy", "Stale"):
            assert r[2] != "free", r
    # device 1 is named by nobody, but two GPUs are held unnamed on node4: held
    assert devices[1][:3] == ["node4", "1", "counted"]
    assert devices[3][:4] == ["node4", "3", "-", "Unhealthy"]
    assert "pb/pod/bad-seed-0 (1 GPU, no device index)" in buf.getvalue()
    assert "annotation gpu.orchestrator.dev/devices='0,x'" in buf.getvalue()
