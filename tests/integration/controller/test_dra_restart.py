"""A restart without ``--enable-dra`` (a values change) never tears down a running
``deviceExposure: dra`` workload: its pods stay, no retry is spent, its claims stay
allocated and reserved for them, and it says so (``Managed=False DRAUnavailable``, a
Warning Event, ``gpu_orchestrator_unmanaged_workloads``); one deleted meanwhile
releases its claims once its pods are gone. Restarted with DRA it is managed as
before."""

from __future__ import annotations

from prometheus_client import REGISTRY

from hack.testenv import ControlPlane
from runtime import Client
from tests.integration.controller.conftest import (
    NodeGroup,
    Running,
    delete_workload,
    events_for,
    pods_of,
    wait_condition,
    wait_phase,
    workload,
)
from tests.integration.controller.test_dra import (  # noqa: F401 (fixtures)
    allocated,
    claims_in,
    dra_controller,
    dra_group,
    publish,
    tpl,
)
from tests.waiting import eventually


def reserved_for(admin: Client, ns: str) -> dict[str, list[str]]:
    return {c["metadata"]["name"]: sorted(r["name"] for r in (c.get("status") or {}).get(
        "reservedFor") or ()) for c in claims_in(admin, ns) if allocated(c)}


def test_a_restart_without_dra_leaves_running_dra_work_alone_and_dra_picks_it_up(
        installed: ControlPlane, dra_controller: Running, admin: Client,  # noqa: F811
        namespace: str, dra_group: NodeGroup) -> None:  # noqa: F811
    nodes = dra_controller.wait_nodes(dra_group.add(1, gpus=4))
    publish(admin, dra_controller, nodes, 4)
    for name in ("train", "gone"):
        admin.create(workload(name, namespace, replicas=2, gpusPerReplica=1,
                              deviceExposure="dra", nodeSelector=dra_group.selector,
                              template=tpl()))
        wait_phase(admin, namespace, name, "Running", timeout=60)
    uids = {p["metadata"]["name"]: p["metadata"]["uid"]
            for name in ("train", "gone") for p in pods_of(admin, namespace, name)}
    want = {f"{n}-{i}-gpus-0": [f"{n}-{i}"] for n in ("train", "gone") for i in (0, 1)}
    eventually(lambda: reserved_for(admin, namespace) == want, timeout=30,
               what="four claims reserved for their pods")

    # the manager restarted without --enable-dra
    dra_controller.stop()
    plain = Running(installed).start()
    try:
        for name in ("train", "gone"):
            cond = wait_condition(admin, namespace, name, "Managed", "DRAUnavailable")
            # as docs/dra.md shows it
            assert (cond["status"], cond["message"]) == ("False", (
                "deviceExposure dra is unavailable (the controller runs without "
                "--enable-dra): its 2 child(ren) are left running as they are (none "
                "created or deleted, its ResourceClaims stay allocated) until the "
                "controller runs with DRA again")), cond
        w = admin.get("gpu.orchestrator.dev/v1alpha1", "GPUWorkload", "train", namespace)
        assert w["status"]["phase"] == "Running" and w["status"]["retries"] == 0, w["status"]
        assert {p["metadata"]["name"]: p["metadata"]["uid"] for name in ("train", "gone")
                for p in pods_of(admin, namespace, name)} == uids, "a pod was replaced"
        assert all(not p["metadata"].get("deletionTimestamp")
                   for p in pods_of(admin, namespace, "train"))
        assert reserved_for(admin, namespace) == want
        assert [e["reason"] for e in events_for(admin, namespace, "train")].count(
            "DRAUnavailable") == 1
        assert REGISTRY.get_sample_value("gpu_orchestrator_unmanaged_workloads",
                                         {"reason": "DRAUnavailable"}) == 2
        # deleted while DRA is off: its pods go, then its claims (no claim controller
        # runs, so its deletion releases them); the running one's stay reserved
        delete_workload(admin, namespace, "gone")
        eventually(lambda: sorted(c["metadata"]["name"] for c in claims_in(admin, namespace))
                   == ["train-0-gpus-0", "train-1-gpus-0"], timeout=30,
                   what="the deleted workload's claims released and deleted")
        assert reserved_for(admin, namespace) == {k: v for k, v in want.items()
                                                  if k.startswith("train-")}
    finally:
        plain.stop()

    # back with DRA: managed again, nothing replaced, its claims kept
    dra_controller.start()
    cond = wait_condition(admin, namespace, "train", "Managed", "ManagedAgain", timeout=60)
    assert cond["status"] == "True"
    assert sorted(c["metadata"]["name"] for c in claims_in(admin, namespace)) == \
        ["train-0-gpus-0", "train-1-gpus-0"]
    assert {p["metadata"]["uid"] for p in pods_of(admin, namespace, "train")} == \
        {uids["train-0"], uids["train-1"]}
    w = admin.get("gpu.orchestrator.dev/v1alpha1", "GPUWorkload", "train", namespace)
    assert w["status"]["phase"] == "Running" and w["status"]["retries"] == 0
    delete_workload(admin, namespace, "train")
