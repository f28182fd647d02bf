"""Pure parts of the install tooling: the chart's copies of config/, make deploy's
image references, the checkov waivers, and which pods the local control plane runs
the check service for (and with what environment)."""

from __future__ import annotations

import pytest

from hack import charts, checkmanifests, deploy
from hack.testenv.checkpods import container_env, is_check_image, wants_process


def test_chart_copies_are_in_step_with_config() -> None:
    assert charts.stale() == [], "run `make charts`"


def test_a_changed_copy_is_reported(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    for rel in charts.COPIED:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes((charts.ROOT / "config" / rel).read_bytes())
    (tmp_path / "rbac/role.yaml").write_text("edited by hand\n")
    (tmp_path / "stray.yaml").write_text("x\n")
    monkeypatch.setattr(charts, "CHART_FILES", tmp_path)
    assert charts.stale() == ["rbac/role.yaml", "stray.yaml"]
    assert charts.main(["--check"]) == 1


@pytest.mark.parametrize(("ref", "entry"), [
    ("gpu-orchestrator:0.2.0", {"newName": "gpu-orchestrator", "newTag": "0.2.0"}),
    ("reg.io:5000/team/gpu-orchestrator:v1",
     {"newName": "reg.io:5000/team/gpu-orchestrator", "newTag": "v1"}),
    ("reg.io:5000/team/gpu-orchestrator", {"newName": "reg.io:5000/team/gpu-orchestrator"}),
    ("reg.io/g@sha256:" + "a" * 64, {"newName": "reg.io/g", "digest": "sha256:" + "a" * 64}),
])
def test_deploy_image_entries(ref: str, entry: dict) -> None:
    assert deploy.image_entry("gpu-orchestrator", ref) == {"name": "gpu-orchestrator", **entry}


@pytest.mark.parametrize("ref", ["", "a b", "reg/x@md5:1"])
def test_deploy_refuses_what_is_no_image(ref: str) -> None:
    with pytest.raises(ValueError):
        deploy.image_entry("gpu-orchestrator", ref)


def test_every_waiver_says_why() -> None:
    waivers = checkmanifests.load_waivers()
    assert waivers and all(len(reason) > 40 for reason in waivers.values())
    assert checkmanifests.resource_key(
        "Deployment.gpu-orchestrator-system.gpu-orchestrator-manager") == \
        "Deployment.gpu-orchestrator-manager"
    assert checkmanifests.resource_key(
        "Pod.default.gpu-scheduler-check.app-gpu-scheduler-check") == "Pod.gpu-scheduler-check"


@pytest.mark.parametrize(("image", "ours"), [
    ("gpu-scheduler-check:0.1.0", True),
    ("gpu-scheduler-check", True),
    ("reg.io:5000/team/gpu-scheduler-check:latest", True),
    ("reg.io/gpu-scheduler-check@sha256:" + "b" * 64, True),
    ("busybox:1.36", False),
    ("gpu-scheduler-check-evil:1", False),
    ("evil/gpu-scheduler-checker", False),
])
def test_only_the_check_image_is_run(image: str, ours: bool) -> None:
    assert is_check_image(image) is ours


def _pod(**status) -> dict:
    return {
        "metadata": {"name": "gpu-scheduler-check-3", "namespace": "seed", "uid": "u-1"},
        "spec": {"nodeName": "node4", "containers": [{
            "name": "check", "image": "gpu-scheduler-check:0.1.0",
            "env": [
                {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "CUDA_VISIBLE_DEVICES", "value": "3"},
                {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                {"name": "PYTHONPATH", "value": "/tmp/evil"},
                {"name": "LD_PRELOAD", "value": "/tmp/evil.so"},
            ]}]},
        "status": status,
    }


def test_the_check_sees_its_pods_environment_and_nothing_that_steers_python() -> None:
    pod = _pod(phase="Running")
    assert container_env(pod, pod["spec"]["containers"][0]) == {
        "HOSTNAME": "gpu-scheduler-check-3", "NODE_NAME": "node4",
        "POD_NAME": "gpu-scheduler-check-3", "CUDA_VISIBLE_DEVICES": "3"}


def test_a_process_only_while_the_pod_runs() -> None:
    assert wants_process(_pod(phase="Running"))
    assert not wants_process(_pod(phase="Pending"))
    assert not wants_process(_pod(phase="Succeeded"))
    deleting = _pod(phase="Running")
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert not wants_process(deleting)
    unbound = _pod(phase="Running")
    del unbound["spec"]["nodeName"]
    assert not wants_process(unbound)
