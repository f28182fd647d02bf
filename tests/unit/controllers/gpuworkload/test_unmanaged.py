"""A restart, a flag change or a disabled feature never deletes running work
(controllers/gpuworkload/unmanaged.py): a ``deviceExposure: dra`` workload that runs when the
manager restarts without DRA is left running, its booking kept, reported once, and
managed again when DRA is back."""

from __future__ import annotations

from api.v1alpha1.keys import CHILDREN_FINALIZER, EXPOSURE_ANNOTATION
from api.v1alpha1.types import DeviceExposure
from tests.unit.controllers.fakes import NS, Env, forbidden


def running_dra_gang(env: Env) -> None:
    env.with_dra()
    env.workload("train", replicas=2, gpusPerReplica=2, deviceExposure="dra")
    env.settle("train")
    for i in (0, 1):
        env.set_phase(f"train-{i}", "Running")
    env.settle("train")
    assert env.status("train")["phase"] == "Running", env.status("train")
    assert env.pod("train-0")["metadata"]["annotations"][EXPOSURE_ANNOTATION] == "dra"


def test_a_restart_without_dra_leaves_a_running_dra_workload_running() -> None:
    env = Env(gpus=4)
    running_dra_gang(env)
    held = env.holders("node1")
    env.restart(dra=False)
    env.settle("train")
    env.settle("train")

    # nothing deleted, nothing created, no retry spent, the booking kept
    assert env.client.of("delete", "Pod") == []
    assert env.pod("train-0") is not None and env.pod("train-1") is not None
    st = env.status("train")
    assert st["phase"] == "Running" and st["retries"] == 0 and st["placements"]
    assert env.state.booking(f"{NS}/train") is not None
    assert env.holders("node1") == held
    managed = env.condition("train", "Managed")
    assert (managed["status"], managed["reason"]) == ("False", "DRAUnavailable")
    assert "--enable-dra" in managed["message"] and "left running" in managed["message"]
    assert env.condition("train", "Ready")["status"] == "True"
    # said once, not on every reconcile
    assert [r for r, _ in env.warnings("train")] == ["DRAUnavailable"]

    # back with DRA: managed as before, the condition says so
    env.restart(dra=True)
    env.settle("train")
    managed = env.condition("train", "Managed")
    assert (managed["status"], managed["reason"]) == ("True", "ManagedAgain")
    assert env.client.of("delete", "Pod") == []
    assert env.status("train")["phase"] == "Running"


def test_a_dra_workload_that_finishes_while_dra_is_off_says_its_claims_stay() -> None:
    env = Env(gpus=4)
    running_dra_gang(env)
    env.restart(dra=False)
    for i in (0, 1):
        env.set_phase(f"train-{i}", "Succeeded")
    env.settle("train")
    st = env.status("train")
    assert st["phase"] == "Succeeded"
    assert env.state.booking(f"{NS}/train") is None
    managed = env.condition("train", "Managed")
    assert managed["status"] == "False"
    assert "ResourceClaims stay allocated" in managed["message"]
    env.settle("train")  # a Succeeded workload keeps saying so while DRA is off
    assert env.condition("train", "Managed")["status"] == "False"
    env.restart(dra=True)
    env.settle("train")
    assert env.condition("train", "Managed")["status"] == "True"


def test_a_placed_dra_gang_without_children_goes_back_to_pending_spending_no_retry() -> None:
    env = Env(gpus=4)
    env.workload("gang", replicas=2, gpusPerReplica=1, deviceExposure="dra")
    # committed by a manager with DRA that stopped before making any pod
    env.edit("gang", lambda o: o.update(status={"phase": "Scheduled", "placements": [
        {"index": 0, "node": "node1", "devices": [0]},
        {"index": 1, "node": "node1", "devices": [1]}]}))
    env.restart(dra=False)
    env.settle("gang")
    st = env.status("gang")
    assert st["phase"] == "Pending" and not st.get("placements") and st["retries"] == 0
    cond = env.condition("gang", "Scheduled")
    assert (cond["status"], cond["reason"]) == ("False", "DRAUnavailable")
    assert env.client.of("create", "Pod") == []
    assert env.state.booking(f"{NS}/gang") is None and env.free() == 4


def test_a_changed_device_exposure_default_does_not_touch_a_running_attempt() -> None:
    env = Env(gpus=4)
    env.workload("w", gpusPerReplica=1)
    env.settle("w")
    env.set_phase("w-0", "Running")
    env.settle("w")
    # restarted with --device-exposure=dra (and DRA): the pod made with
    # CUDA_VISIBLE_DEVICES is this attempt's; no claim is made for it
    env.restart(dra=True)
    env.rec.options.default_exposure = DeviceExposure.DRA
    env.settle("w")
    assert env.rec.claims.ensured == []
    assert env.client.of("delete", "Pod") == []
    assert env.status("w")["phase"] == "Running"


def test_a_dra_pod_whose_status_write_was_lost_is_read_back_and_left_running() -> None:
    env = Env(gpus=4)
    env.with_dra()
    env.workload("one", gpusPerReplica=2, deviceExposure="dra")
    env.settle("one")
    env.set_phase("one-0", "Running")
    env.edit("one", lambda o: o.update(status={}))  # the write after the pod was lost
    env.restart(dra=False)
    env.settle("one")
    assert env.client.of("delete", "Pod") == []
    st = env.status("one")
    assert st["phase"] == "Running" and st["placements"][0]["devices"] == [0, 1]
    assert env.condition("one", "Managed")["status"] == "False"
    assert env.free() == 2


def test_a_spec_edit_while_dra_is_off_waits_for_dra_instead_of_deleting_the_pods() -> None:
    env = Env(gpus=4)
    running_dra_gang(env)
    env.restart(dra=False)
    env.edit("train", lambda o: o["spec"]["template"]["spec"]["containers"][0].update(
        image="busybox:1.37"))
    env.settle("train")
    assert env.client.of("delete", "Pod") == []
    managed = env.condition("train", "Managed")
    assert managed["status"] == "False" and "spec changed (template), applied then" in \
        managed["message"]
    env.restart(dra=True)
    env.settle("train")  # with DRA: the edit restarts the gang, as any spec change
    assert env.condition("train", "Scheduled")["reason"] == "SpecChanged"
    assert sorted(env.client.names("delete", "Pod")) == ["train-0", "train-1"]


def test_deleted_without_dra_by_a_manager_that_may_not_touch_claims_it_still_goes() -> None:
    env = Env(gpus=4)
    running_dra_gang(env)
    env.restart(dra=False)

    def refused(*args: object, **kw: object) -> None:
        raise forbidden('resourceclaims.resource.k8s.io is forbidden: User "manager" '
                        'cannot list resource "resourceclaims"')
    env.client.list_all = refused  # type: ignore[attr-defined]
    assert env.get("train")["metadata"]["finalizers"] == [CHILDREN_FINALIZER]
    env.delete_workload("train")
    env.settle("train")
    for i in (0, 1):
        env.pod_gone(f"train-{i}")
    env.settle("train")
    assert env.get("train") is None or not env.get("train")["metadata"].get("finalizers")
    (_, message), = [w for w in env.warnings("train") if w[0] == "ClaimsKept"]
    assert "(403 Forbidden)" in message and "--enable-dra releases them" in message


def test_a_running_dra_job_is_left_running_too() -> None:
    env = Env(gpus=4)
    env.with_dra()
    env.workload("job", gpusPerReplica=1, deviceExposure="dra", workloadKind="Job")
    env.settle("job")
    assert env.jobs.get_by_name("job-0", NS) is not None
    env.restart(dra=False)
    env.settle("job")
    assert env.client.of("delete", "Job") == []
    assert env.condition("job", "Managed")["status"] == "False"
    assert env.status("job")["retries"] == 0


def test_a_replica_that_fails_while_dra_is_off_is_reported_not_acted_on() -> None:
    env = Env(gpus=4)
    running_dra_gang(env)
    env.restart(dra=False)
    env.set_phase("train-1", "Failed")
    env.settle("train")
    assert env.client.of("delete", "Pod") == [] and env.status("train")["retries"] == 0
    assert env.status("train")["message"] == "replica(s) 1 failed; left as is, not retried"
    ready = env.condition("train", "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ReplicaFailed")
    # back with DRA: the failure is acted on as always (the attempt ends, a retry)
    env.restart(dra=True)
    env.settle("train")
    assert env.status("train")["retries"] == 1
    assert env.condition("train", "Scheduled")["reason"] == "ReplicaFailed"
