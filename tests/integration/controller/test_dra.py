"""``deviceExposure: dra`` on the local control plane (resource.k8s.io/v1 is GA and
served in v1.34): ResourceSlices shaped like the NVIDIA driver's are published for a
test node group; each replica gets a ResourceClaim allocated by the controller to
exactly its devices and reserved for its pod; kube-scheduler's claims and ours never
share a GPU. What a kubelet and the driver would then do with a claim cannot run
here (kwok runs the pods)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from controllers.dra.claims import DraOptions, claim_name
from hack.testenv import ControlPlane
from hack.testenv.dra import DRA, DRIVER, device_class, nvidia_slice
from internal.cli.main import main as kubectl_gpu
from runtime import Client, Conflict, NotFound
from tests.integration.controller.conftest import (
    NodeGroup,
    Running,
    delete_workload,
    env_of,
    events_for,
    pods_of,
    wait_condition,
    wait_phase,
    workload,
)
from tests.integration.controller.holders import HolderWatch
from tests.waiting import eventually

GRACE = 3


def tpl(grace: int = GRACE) -> dict:
    return {"spec": {"terminationGracePeriodSeconds": grace,
                     "containers": [{"name": "main", "image": "busybox:1.36"}]}}


@pytest.fixture(scope="module")
def dra_controller(installed: ControlPlane, admin: Client) -> Iterator[Running]:
    with contextlib.suppress(Exception):
        admin.create(device_class())
    run = Running(installed, dra=DraOptions()).start()
    yield run
    run.stop()


@pytest.fixture
def dra_group(installed: ControlPlane, admin: Client) -> Iterator[NodeGroup]:
    g = NodeGroup(installed)
    yield g
    for n in g.names:
        with contextlib.suppress(NotFound):
            admin.delete(DRA, "ResourceSlice", f"{n}-{DRIVER}")
    g.delete()


def publish(admin: Client, run: Running, nodes: list[str], gpus: int) -> None:
    for n in nodes:
        admin.create(nvidia_slice(n, gpus))

    def seen() -> bool:
        state = run.reconciler.state if run.reconciler is not None else None
        if state is None or not state.ready:
            return True  # its rebuild will read them from the cache
        return all((i := state.node_info(n)) is not None and i.dra_driver == DRIVER
                       and len(i.devices) == gpus for n in nodes)
    eventually(seen, timeout=30, what=f"controller sees the slices of {nodes}")


def claims_in(admin: Client, ns: str) -> list[dict]:
    return sorted(admin.list(DRA, "ResourceClaim", namespace=ns)["items"],
                  key=lambda c: c["metadata"]["name"])


def allocated(claim: dict) -> list[tuple[str, str]]:
    alloc = (claim.get("status") or {}).get("allocation") or {}
    return sorted((r["pool"], r["device"]) for r in (alloc.get("devices") or {}).get(
        "results") or ())


class ClaimLog:
    """Watches ResourceClaims of one namespace; ``log`` holds (time, type, name,
    allocated) for every event."""

    def __init__(self, client: Client, ns: str) -> None:
        self.client, self.ns = client, ns
        self.log: list[tuple[float, str, str, bool]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._ready = threading.Event()

    def start(self) -> ClaimLog:
        self._thread.start()
        self._ready.wait(30)
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(40)

    def first_free(self, name: str) -> float | None:
        """When ``name`` first lost its allocation, or was deleted."""
        return next((t for t, e, n, a in self.log if n == name and (e == "DELETED" or not a)
                     and e != "ADDED"), None)

    def _run(self) -> None:
        # Each watch goes on from the last resourceVersion seen, so no event falls
        # between two watches; only an error (410 Gone included) lists again.
        rv = ""
        while not self._stop.is_set():
            try:
                if not rv:
                    rv = self.client.list(DRA, "ResourceClaim", namespace=self.ns)[
                        "metadata"]["resourceVersion"]
                    self._ready.set()
                for ev in self.client.watch(DRA, "ResourceClaim", namespace=self.ns,
                                            resource_version=rv, timeout_seconds=5):
                    obj = ev["object"]
                    rv = obj["metadata"].get("resourceVersion") or rv
                    if ev["type"] == "BOOKMARK":
                        continue
                    self.log.append((time.monotonic(), ev["type"], obj["metadata"]["name"],
                                     bool((obj.get("status") or {}).get("allocation"))))
            except Exception:
                rv = ""
                time.sleep(0.2)


def test_dra_replicas_get_claims_allocated_to_exactly_their_devices(
        installed: ControlPlane, dra_controller: Running, admin: Client, namespace: str,
        dra_group: NodeGroup, capsys: pytest.CaptureFixture[str]) -> None:
    nodes = dra_controller.wait_nodes(dra_group.add(2, gpus=4))
    publish(admin, dra_controller, nodes, 4)
    admin.create(workload("train", namespace, replicas=2, gpusPerReplica=2,
                          deviceExposure="dra", nodeSelector=dra_group.selector,
                          template=tpl()))
    w = wait_phase(admin, namespace, "train", "Running", timeout=60)
    pods = pods_of(admin, namespace, "train")
    claims = {c["metadata"]["name"]: c for c in claims_in(admin, namespace)}
    assert sorted(claims) == [claim_name("train", 0, 0), claim_name("train", 1, 0)]
    for p in w["status"]["placements"]:
        name = claim_name("train", p["index"], 0)
        pod = next(x for x in pods if x["metadata"]["name"] == f"train-{p['index']}")

        def reserved(name: str = name, pod: dict = pod) -> dict | None:
            c = admin.get(DRA, "ResourceClaim", name, namespace)
            r = (c.get("status") or {}).get("reservedFor") or []
            return c if [(x["name"], x["uid"]) for x in r] == \
                [(pod["metadata"]["name"], pod["metadata"]["uid"])] else None
        claim = eventually(reserved, timeout=30, what=f"{name} reserved for its pod")
        # exactly the placement's devices, on the placement's node
        assert allocated(claim) == sorted((p["node"], f"gpu-{d}") for d in p["devices"])
        alloc = claim["status"]["allocation"]
        assert alloc["devices"]["results"][0]["driver"] == DRIVER
        assert alloc["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == \
            [p["node"]]
        assert claim["metadata"]["ownerReferences"][0]["uid"] == w["metadata"]["uid"]
        req = claim["spec"]["devices"]["requests"][0]["exactly"]
        assert req["count"] == 2 and "GPU-" in req["selectors"][0]["cel"]["expression"]
        # the pod uses the claim: no device plugin request, no host-index env
        assert pod["spec"]["resourceClaims"] == [{"name": "gpus", "resourceClaimName": name}]
        c0 = pod["spec"]["containers"][0]
        assert c0["resources"]["claims"] == [{"name": "gpus"}]
        assert "nvidia.com/gpu" not in (c0["resources"].get("limits") or {})
        assert env_of(pod, "CUDA_VISIBLE_DEVICES") is None
    # kubectl gpu describe shows each replica's claim and its state
    capsys.readouterr()
    assert kubectl_gpu(["describe", "train", "-n", namespace, "--kubeconfig",
                        str(installed.kubeconfig)]) == 0
    shown = capsys.readouterr().out
    for p in w["status"]["placements"]:
        devs = ",".join(f"gpu-{d}" for d in p["devices"])
        assert claim_name("train", p["index"], 0) in shown
        assert f"allocated {p['node']}/{devs}, reserved for train-{p['index']}" in shown, shown
    # deleting the workload frees the devices only once its pods are gone
    pod_watch = HolderWatch(admin).start()
    claim_log = ClaimLog(admin, namespace).start()
    try:
        delete_workload(admin, namespace, "train")
        eventually(lambda: not claims_in(admin, namespace), timeout=60,
                   what="claims released and deleted")
    finally:
        pod_watch.stop()
        claim_log.stop()
    for i in (0, 1):
        gone = pod_watch.first("DELETED", f"{namespace}/train-{i}")
        freed = claim_log.first_free(claim_name("train", i, 0))
        assert gone is not None and freed is not None
        assert freed > gone, f"claim of replica {i} freed before its pod was gone"
        print(f"\nreplica {i}: claim freed {freed - gone:.2f}s after its pod was gone")


def test_dra_on_nodes_without_slices_is_a_reason_per_node(
        dra_controller: Running, admin: Client, namespace: str, dra_group: NodeGroup) -> None:
    bare = dra_controller.wait_nodes(dra_group.add(1, gpus=4))
    admin.create(workload("noslice", namespace, gpusPerReplica=1, deviceExposure="dra",
                          nodeSelector=dra_group.selector, template=tpl()))
    cond = wait_condition(admin, namespace, "noslice", "Scheduled", "Unschedulable")
    assert f"{bare[0]}: no ResourceSlices of the DRA driver" in cond["message"], cond
    assert not claims_in(admin, namespace)
    # the driver publishes the node's GPUs: it is placed there
    publish(admin, dra_controller, bare, 4)
    admin.patch("gpu.orchestrator.dev/v1alpha1", "GPUWorkload", "noslice",
                {"metadata": {"annotations": {"poke": "1"}}}, namespace=namespace)
    wait_phase(admin, namespace, "noslice", "Running", timeout=90)
    assert [c["metadata"]["name"] for c in claims_in(admin, namespace)] == \
        [claim_name("noslice", 0, 0)]
    delete_workload(admin, namespace, "noslice")


def test_a_claim_edited_by_hand_ends_the_attempt_and_is_replaced(
        dra_controller: Running, admin: Client, namespace: str, dra_group: NodeGroup) -> None:
    nodes = dra_controller.wait_nodes(dra_group.add(1, gpus=4))
    publish(admin, dra_controller, nodes, 4)
    admin.create(workload("edited", namespace, gpusPerReplica=1, deviceExposure="dra",
                          nodeSelector=dra_group.selector, template=tpl(1),
                          retryPolicy={"maxRetries": 3, "backoffSeconds": 1}))
    w = wait_phase(admin, namespace, "edited", "Running", timeout=60)
    name = claim_name("edited", 0, 0)
    claim = eventually(lambda: (c := admin.get(DRA, "ResourceClaim", name, namespace))
                       .get("status", {}).get("reservedFor") and c, what="claim reserved")
    # by hand: unreserved and deallocated under its running pod
    admin.update_status({**claim, "status": {"allocation": None}})
    wait_condition(admin, namespace, "edited", "Scheduled", "ClaimMismatch", timeout=30)
    w = wait_phase(admin, namespace, "edited", "Running", timeout=90)
    assert w["status"]["retries"] == 1
    new = claim_name("edited", 0, 1)
    eventually(lambda: [c["metadata"]["name"] for c in claims_in(admin, namespace)] == [new],
               timeout=60, what="only the new attempt's claim is left")
    claim = admin.get(DRA, "ResourceClaim", new, namespace)
    p = w["status"]["placements"][0]
    assert allocated(claim) == sorted((p["node"], f"gpu-{d}") for d in p["devices"])
    reasons = [e["reason"] for e in events_for(admin, namespace, "edited")]
    assert "ClaimMismatch" in reasons
    delete_workload(admin, namespace, "edited")


def test_a_controller_stopped_between_claim_and_pod_leaves_one_claim(
        installed: ControlPlane, dra_controller: Running, admin: Client, namespace: str,
        dra_group: NodeGroup) -> None:
    nodes = dra_controller.wait_nodes(dra_group.add(1, gpus=2))
    publish(admin, dra_controller, nodes, 2)
    # A second controller, stopped dead right after the claim is allocated (as a
    # kill -9 would stop it); the module's controller is paused meanwhile.
    dra_controller.stop()
    victim = Running(installed, dra=DraOptions()).start()
    stopped = threading.Event()
    release = threading.Event()
    assert victim.reconciler is not None
    ensure = victim.reconciler.claims.ensure

    def ensure_then_die(*args: Any, **kw: Any) -> Any:
        name = ensure(*args, **kw)
        stopped.set()
        release.wait(120)  # frozen here until the process is gone
        raise RuntimeError(f"killed after allocating {name}")

    victim.reconciler.claims.ensure = ensure_then_die
    try:
        admin.create(workload("crash", namespace, gpusPerReplica=2, deviceExposure="dra",
                              nodeSelector=dra_group.selector, template=tpl()))
        assert stopped.wait(60), "the claim was never allocated"
        victim.stop()  # gives up on the frozen reconcile after its grace period
    finally:
        release.set()
    before = claims_in(admin, namespace)
    assert [c["metadata"]["name"] for c in before] == [claim_name("crash", 0, 0)]
    assert allocated(before[0]), "the claim was allocated before the stop"
    assert not pods_of(admin, namespace, "crash")
    # a new process repairs it: one pod, one claim, allocated to its devices
    dra_controller.start()
    w = wait_phase(admin, namespace, "crash", "Running", timeout=60)

    def one_claim_reserved() -> dict | None:
        cs = claims_in(admin, namespace)
        ok = len(cs) == 1 and (cs[0].get("status") or {}).get("reservedFor")
        return cs[0] if ok else None
    claim = eventually(one_claim_reserved, timeout=60, what="one claim, reserved")
    p = w["status"]["placements"][0]
    assert claim["metadata"]["name"] == claim_name("crash", 0, 0), \
        [(e["reason"], e["message"]) for e in events_for(admin, namespace, "crash")]
    assert allocated(claim) == sorted((p["node"], f"gpu-{d}") for d in p["devices"])
    assert len(pods_of(admin, namespace, "crash")) == 1
    delete_workload(admin, namespace, "crash")
    eventually(lambda: not claims_in(admin, namespace), timeout=60, what="claim released")


def test_kube_scheduler_claims_and_ours_never_share_a_gpu(
        installed: ControlPlane, dra_controller: Running, admin: Client, namespace: str,
        dra_group: NodeGroup) -> None:
    nodes = dra_controller.wait_nodes(dra_group.add(1, gpus=2))
    node = nodes[0]
    publish(admin, dra_controller, nodes, 2)
    installed.start_scheduler()
    try:
        _kube_scheduler_and_us(admin, namespace, dra_group, node)
    finally:
        installed.stop_scheduler()


def _foreign(admin: Client, ns: str, name: str, group: NodeGroup) -> None:
    """A pod kube-scheduler places, with its own claim for one GPU of the driver."""
    admin.create({"apiVersion": DRA, "kind": "ResourceClaim",
                  "metadata": {"name": name, "namespace": ns},
                  "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                      "deviceClassName": DRIVER, "count": 1}}]}}})
    admin.create({"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": name, "namespace": ns},
                  "spec": {"nodeSelector": group.selector,
                           "terminationGracePeriodSeconds": 0,
                           "tolerations": [{"operator": "Exists"}],
                           "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
                           "containers": [{"name": "main", "image": "busybox:1.36",
                                           "resources": {"claims": [{"name": "gpu"}]}}]}})


def _kube_scheduler_and_us(admin: Client, ns: str, group: NodeGroup, node: str) -> None:
    # kube-scheduler first: its claim holds one GPU against us
    _foreign(admin, ns, "theirs", group)
    theirs = eventually(lambda: allocated(c := admin.get(DRA, "ResourceClaim", "theirs", ns))
                        and c, timeout=60, what="kube-scheduler allocated its claim")
    eventually(lambda: admin.get("v1", "Pod", "theirs", ns)["spec"].get("nodeName") == node,
               timeout=60, what="kube-scheduler bound its pod")
    (_, their_dev), = allocated(theirs)
    admin.create(workload("ours", ns, gpusPerReplica=1, deviceExposure="dra",
                          nodeSelector=group.selector, template=tpl(1)))
    w = wait_phase(admin, ns, "ours", "Running", timeout=60)
    our_dev = f"gpu-{w['status']['placements'][0]['devices'][0]}"
    assert our_dev != their_dev
    # both GPUs are taken: another of ours waits, and says who holds them
    admin.create(workload("more", ns, gpusPerReplica=1, deviceExposure="dra",
                          nodeSelector=group.selector, template=tpl(1),
                          retryPolicy={"maxRetries": 20, "backoffSeconds": 60}))
    cond = wait_condition(admin, ns, "more", "Scheduled", "Unschedulable", timeout=30)
    assert node in cond["message"]
    delete_workload(admin, ns, "more")
    # the reverse: kube-scheduler cannot give our GPU to its next pod
    _foreign(admin, ns, "theirs2", group)

    def unschedulable() -> bool:
        pod = admin.get("v1", "Pod", "theirs2", ns)
        return any(c["type"] == "PodScheduled" and c["status"] == "False"
                   for c in (pod.get("status") or {}).get("conditions") or ())
    eventually(unschedulable, timeout=60, what="kube-scheduler finds no free GPU")
    assert not allocated(admin.get(DRA, "ResourceClaim", "theirs2", ns))
    # once our workload and its pod are gone, our claim goes, and only then does
    # kube-scheduler give that GPU to its waiting pod
    claim_log = ClaimLog(admin, ns).start()
    try:
        delete_workload(admin, ns, "ours")
        theirs2 = eventually(lambda: allocated(c := admin.get(DRA, "ResourceClaim", "theirs2",
                                                              ns)) and c,
                             timeout=120, what="kube-scheduler allocates our freed GPU")
        # the watch delivers the allocation we just read, before the log stops
        eventually(lambda: any(n == "theirs2" and a for _, _, n, a in claim_log.log),
                   timeout=30, what="the claim log saw theirs2 allocated")
    finally:
        claim_log.stop()
    assert allocated(theirs2) == [(node, our_dev)]
    freed = claim_log.first_free(claim_name("ours", 0, 0))
    taken = next(t for t, e, n, a in claim_log.log if n == "theirs2" and a)
    assert freed is not None and taken > freed
    print(f"\nkube-scheduler allocated the GPU {taken - freed:.2f}s after our claim freed it")
    for name in ("theirs", "theirs2"):
        _drop_foreign(admin, ns, name)


def _drop_foreign(admin: Client, ns: str, name: str) -> None:
    """Its pod goes: kube-controller-manager's resourceclaim controller takes the pod
    out of the claim's reservedFor and, as kube-scheduler's finalizer is on it,
    deallocates it and drops that finalizer; the claim, made by hand, is deleted by
    hand."""
    with contextlib.suppress(NotFound):
        admin.delete("v1", "Pod", name, namespace=ns, grace_period_seconds=0)

    def released() -> bool:
        c = admin.get(DRA, "ResourceClaim", name, ns)
        return not (c.get("status") or {}).get("allocation") \
            and not (c.get("status") or {}).get("reservedFor") \
            and not c["metadata"].get("finalizers")
    eventually(released, timeout=60, what=f"kube-controller-manager released {name}")
    admin.delete(DRA, "ResourceClaim", name, namespace=ns)


def test_job_mode_reserves_the_claim_for_the_jobs_pod(
        dra_controller: Running, admin: Client, namespace: str, dra_group: NodeGroup) -> None:
    nodes = dra_controller.wait_nodes(dra_group.add(1, gpus=2))
    publish(admin, dra_controller, nodes, 2)
    admin.create(workload("batch", namespace, gpusPerReplica=2, deviceExposure="dra",
                          workloadKind="Job", nodeSelector=dra_group.selector, template=tpl()))
    wait_phase(admin, namespace, "batch", "Running", timeout=60)
    job = admin.get("batch/v1", "Job", "batch-0", namespace)
    name = claim_name("batch", 0, 0)
    assert job["spec"]["template"]["spec"]["resourceClaims"] == \
        [{"name": "gpus", "resourceClaimName": name}]

    def reserved() -> list[str]:
        c = admin.get(DRA, "ResourceClaim", name, namespace)
        return [r["name"] for r in (c.get("status") or {}).get("reservedFor") or ()]
    users = eventually(reserved, timeout=30, what="claim reserved for the Job's pod")
    assert len(users) == 1 and users[0].startswith("batch-0-")
    delete_workload(admin, namespace, "batch")
    eventually(lambda: not claims_in(admin, namespace), timeout=60, what="claim released")


def test_a_claim_whose_workload_is_gone_is_released_and_deleted(
        dra_controller: Running, admin: Client, namespace: str, dra_group: NodeGroup) -> None:
    nodes = dra_controller.wait_nodes(dra_group.add(1, gpus=2))
    publish(admin, dra_controller, nodes, 2)
    # as a crashed controller of an earlier time would have left it: ours (finalizer,
    # a GPUWorkload controls it), allocated, and its workload long gone. Made while
    # no controller runs (kube-controller-manager's garbage collector may already
    # ask it to go: our finalizer keeps it until its allocation is removed).
    dra_controller.stop()
    admin.create({
        "apiVersion": DRA, "kind": "ResourceClaim",
        "metadata": {"name": "left-0-gpus-0", "namespace": namespace,
                     "finalizers": ["gpu.orchestrator.dev/claim-in-use"],
                     "labels": {"gpu.orchestrator.dev/replica-index": "0",
                                "gpu.orchestrator.dev/attempt": "0"},
                     "annotations": {"gpu.orchestrator.dev/node": nodes[0],
                                     "gpu.orchestrator.dev/devices": "1"},
                     "ownerReferences": [{"apiVersion": "gpu.orchestrator.dev/v1alpha1",
                                          "kind": "GPUWorkload", "name": "left",
                                          "uid": "00000000-0000-0000-0000-000000000000",
                                          "controller": True}]},
        "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
            "deviceClassName": DRIVER, "count": 1}}]}}})
    allocation = {
        "devices": {"results": [{"request": "gpus", "driver": DRIVER, "pool": nodes[0],
                                 "device": "gpu-1"}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [nodes[0]]}]}]}}

    def allocate() -> bool:
        claim = admin.get(DRA, "ResourceClaim", "left-0-gpus-0", namespace)
        with contextlib.suppress(Conflict):
            admin.update_status({**claim, "status": {"allocation": allocation}})
            return True
        return False  # the garbage collector wrote it meanwhile
    eventually(allocate, timeout=30, what="orphan allocated")
    dra_controller.start()
    eventually(lambda: not claims_in(admin, namespace), timeout=60,
               what="the orphaned claim released and deleted")
    # and its GPU is ours to give again
    admin.create(workload("after", namespace, gpusPerReplica=2, deviceExposure="dra",
                          nodeSelector=dra_group.selector, template=tpl()))
    wait_phase(admin, namespace, "after", "Running", timeout=60)
    delete_workload(admin, namespace, "after")


def test_kubectl_gpu_nodes_shows_a_foreign_claims_gpu_as_held(
        dra_controller: Running, admin: Client, namespace: str, dra_group: NodeGroup,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A claim no GPUWorkload controls (kube-scheduler's, anybody's), allocated to
    gpu-1: the controller's ledger holds it, and ``kubectl gpu nodes`` says by whom."""
    node, = dra_controller.wait_nodes(dra_group.add(1, gpus=2))
    publish(admin, dra_controller, [node], 2)
    claim = admin.create({
        "apiVersion": DRA, "kind": "ResourceClaim",
        "metadata": {"name": "theirs", "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": DRIVER, "count": 1}}]}}})
    admin.update_status({**claim, "status": {"allocation": {
        "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": node,
                                 "device": "gpu-1"}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}})

    def ledger_holder() -> str | None:
        state = dra_controller.reconciler.ensure_state()
        return state.view().holder(node, 1)
    eventually(lambda: ledger_holder() == f"claim {namespace}/theirs", timeout=30,
               what="the controller's ledger holds gpu-1 for the claim")

    def plugin(*args: str) -> str:
        capsys.readouterr()
        assert kubectl_gpu(["nodes", node, *args, "--kubeconfig",
                            str(dra_controller.cluster.kubeconfig)]) == 0
        return capsys.readouterr().out

    (view,) = json.loads(plugin("-o", "json"))["nodes"]
    assert (view["source"], view["total"], view["allocated"], view["free"]) == \
        ("ResourceSlice", 2, 1, 1)
    assert [(d["index"], d.get("holder")) for d in view["devices"]] == \
        [(0, None), (1, f"{namespace}/claim/theirs")]
    table = plugin()
    row = next(line for line in table.splitlines() if f"{namespace}/claim/theirs" in line)
    assert row.split()[:2] == [node, "1"], table
    admin.update_status({**admin.get(DRA, "ResourceClaim", "theirs", namespace),
                         "status": {"allocation": None}})
    eventually(lambda: ledger_holder() is None, timeout=30, what="gpu-1 free again")
