"""``helm lint`` and ``helm template`` of both charts: good values render what they
say, and bad values fail with a message that names the value (values.schema.json, or
the chart's own check where a schema cannot say it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from api.v1alpha1.types import DeviceExposure, SchedulingStrategy
from tests.integration.install.conftest import CHARTS, by_key, docs, render, run_helm

SEED_MAP = "0=node1:0,1\n1=node2:2\n2=node3:0,1,2\n3=node4:3\n4=node4:3"


def _fails(helm: Path, chart: str, *args: str) -> str:
    proc = run_helm(helm, "template", "gpu", str(CHARTS / chart), *args, check=False)
    assert proc.returncode != 0, f"helm template {' '.join(args)} succeeded:\n{proc.stdout[:500]}"
    return proc.stderr


@pytest.mark.parametrize("chart", ["gpu-orchestrator", "gpu-scheduler-check"])
def test_lint_is_clean(helm: Path, chart: str) -> None:
    out = run_helm(helm, "lint", "--strict", str(CHARTS / chart)).stdout
    assert "1 chart(s) linted, 0 chart(s) failed" in out


def test_schema_enums_are_the_apis() -> None:
    import json

    schema = json.loads((CHARTS / "gpu-orchestrator" / "values.schema.json").read_text())
    manager = schema["properties"]["manager"]["properties"]
    assert manager["defaultStrategy"]["enum"] == [s.value for s in SchedulingStrategy]
    assert manager["deviceExposure"]["enum"] == [e.value for e in DeviceExposure]


def _statefulset(objs: list[dict]) -> dict:
    return by_key(objs)[("StatefulSet", "gpu-scheduler-check")]


def _map(objs: list[dict]) -> str:
    return _statefulset(objs)["spec"]["template"]["metadata"]["annotations"][
        "gpu-scheduling-map"]


def test_seed_list_form_becomes_the_annotation(helm: Path, tmp_path: Path) -> None:
    values = tmp_path / "v.yaml"
    # The seed's values file, with gpuDevices as a string, a number and a list.
    values.write_text("""
replicaCount: 3
logInterval: 5
gpuScheduling:
  schedulingMap:
  - {podIndex: 2, nodeName: node3, gpuDevices: [0, 1]}
  - {podIndex: 0, nodeName: node1, gpuDevices: "0,1"}
  - {podIndex: 1, nodeName: node2, gpuDevices: 3}
""")
    objs = render(helm, "gpu-scheduler-check", "-f", str(values))
    assert _map(objs) == "0=node1:0,1\n1=node2:3\n2=node3:0,1"
    sts = _statefulset(objs)
    assert sts["spec"]["replicas"] == 3
    assert sts["spec"]["template"]["spec"]["schedulerName"] == "gpu-scheduler"
    assert sts["spec"]["template"]["spec"]["containers"][0]["args"] == ["--interval=5"]


def test_default_map_is_the_seeds(helm: Path) -> None:
    assert _map(render(helm, "gpu-scheduler-check")) == SEED_MAP


def test_text_form_is_accepted(helm: Path, tmp_path: Path) -> None:
    (tmp_path / "map").write_text("0=node1:0\n\n 1 = node2 : 1,2\n")
    objs = render(helm, "gpu-scheduler-check", "--set", "replicaCount=2",
                  "--set-file", f"gpuScheduling.schedulingMap={tmp_path / 'map'}")
    assert _map(objs) == "0=node1:0\n\n 1 = node2 : 1,2"


def test_image_digest_pins_every_workload(helm: Path) -> None:
    digest = "sha256:" + "ab" * 32
    objs = render(helm, "gpu-orchestrator", "--set", "image.repository=reg.example/gpu-orch",
                  "--set", f"image.digest={digest}", "--set", "webhook.enabled=true")
    images = {c["image"] for o in objs if o["kind"] in ("Deployment", "DaemonSet")
              for c in o["spec"]["template"]["spec"]["containers"]}
    assert images == {f"reg.example/gpu-orch@{digest}"}


def test_flags_reach_the_manager(helm: Path) -> None:
    objs = render(helm, "gpu-orchestrator", "--set", "manager.defaultStrategy=bestFit",
                  "--set", "manager.deviceExposure=nvidia-visible-devices",
                  "--set", "manager.podBinding=false", "--set", "manager.schedulerName=mine",
                  "--set", "manager.replicas=3")
    dep = by_key(objs)[("Deployment", "gpu-orchestrator-manager")]
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--default-strategy=bestFit" in args
    assert "--device-exposure=nvidia-visible-devices" in args
    assert "--enable-pod-binding" not in args
    assert "--scheduler-name=mine" in args
    assert dep["spec"]["replicas"] == 3


def test_plain_metrics_are_served_and_scraped_over_http(helm: Path) -> None:
    monitor = ["--set", "metrics.serviceMonitor.enabled=true"]
    secure = by_key(render(helm, "gpu-orchestrator", *monitor))
    plain = by_key(render(helm, "gpu-orchestrator", *monitor, "--set", "metrics.secure=false"))
    dep = ("Deployment", "gpu-orchestrator-manager")
    sm = ("ServiceMonitor", "gpu-orchestrator")
    assert "--metrics-secure" in secure[dep]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert secure[sm]["spec"]["endpoints"][0]["scheme"] == "https"
    args = plain[dep]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--no-metrics-secure" in args and "--metrics-secure" not in args
    assert "scheme" not in plain[sm]["spec"]["endpoints"][0]
    assert "bearerTokenFile" not in plain[sm]["spec"]["endpoints"][0]


def test_another_namespace_reaches_every_reference_to_it(helm: Path) -> None:
    """Installed elsewhere than gpu-orchestrator-system, the admission policies' CEL
    names the release's service accounts, and the certificate Job its namespace."""
    text = run_helm(helm, "template", "gpu", str(CHARTS / "gpu-orchestrator"),
                    "--namespace", "gpu-ops", "--set", "webhook.enabled=true").stdout
    assert "gpu-orchestrator-system" not in text
    objs = by_key(docs(text))
    policy = objs[("ValidatingAdmissionPolicy", "manager-writes.gpu.orchestrator.dev")]
    assert "system:serviceaccount:gpu-ops:gpu-orchestrator'" in json.dumps(policy)
    job = objs[("Job", "gpu-orchestrator-webhook-certs")]
    assert job["metadata"]["namespace"] == "gpu-ops"
    assert "--namespace=$(POD_NAMESPACE)" in job["spec"]["template"]["spec"][
        "containers"][0]["args"]


def test_the_webhook_gets_no_token_and_no_self_signing(helm: Path) -> None:
    for mode in (["--set", "webhook.certificates.mode=selfSigned"],
                 ["--set", "webhook.certificates.mode=certManager"]):
        objs = by_key(render(helm, "gpu-orchestrator", "--set", "webhook.enabled=true", *mode))
        pod = objs[("Deployment", "gpu-orchestrator-webhook")]["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False
        assert {"--no-self-signed-certs", "--no-patch-ca-bundle"} <= set(
            pod["containers"][0]["args"])
        assert ("ClusterRole", "gpu-orchestrator-webhook") not in objs
    # cert-manager mode: no certificate Job, and none of its rights.
    assert not any(name == "gpu-orchestrator-webhook-certs" for _, name in objs)


def test_crds_are_kept_on_uninstall_unless_asked(helm: Path) -> None:
    kept = by_key(render(helm, "gpu-orchestrator"))
    crd = kept[("CustomResourceDefinition", "gpuworkloads.gpu.orchestrator.dev")]
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    gone = by_key(render(helm, "gpu-orchestrator", "--set", "crds.keep=false"))
    assert "annotations" not in gone[("CustomResourceDefinition",
                                      "gpuworkloads.gpu.orchestrator.dev")]["metadata"]


@pytest.mark.parametrize(("args", "message"), [
    (["--set", "manager.replicas=-1"], "/manager/replicas"),
    (["--set", "manager.defaultStrategy=fastest"], "/manager/defaultStrategy"),
    (["--set", "manager.deviceExposure=all"], "/manager/deviceExposure"),
    (["--set", "manager.leaderElect=false"], "/manager/replicas"),
    (["--set", "manger.replicas=2"], "manger"),
    (["--set", "image.digest=latest"], "/image/digest"),
    (["--set", "webhook.certificates.renewSchedule=daily"],
     "/webhook/certificates/renewSchedule"),
    (["--set", "webhook.maxInFlight=0"], "/webhook/maxInFlight"),
    (["--set", "manager.namespaces={Team_A}"], "/manager/namespaces/0"),
    (["--set", "networkPolicy.metricsFrom={}"], "/networkPolicy/metricsFrom"),
    (["--set", "webhook.certificates.mode=secret", "--set", "webhook.certificates.secretName=s"],
     "caBundle"),
    (["--set", "metrics.serviceMonitor.interval=often"], "/metrics/serviceMonitor/interval"),
    (["--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.service.enabled=false"],
     "/metrics/service/enabled"),
])
def test_bad_orchestrator_values_fail_with_the_schema_message(
        helm: Path, args: list[str], message: str) -> None:
    err = _fails(helm, "gpu-orchestrator", *args)
    assert "values don't meet the specifications of the schema" in err
    assert message in err, err


@pytest.mark.parametrize(("args", "message"), [
    (["--set", "replicaCount=-1"], "/replicaCount"),
    (["--set", "gpuScheduling.schedulingMap[0].podIndex=0",
      "--set", "gpuScheduling.schedulingMap[0].gpuDevices=0"], "nodeName"),
    (["--set", "gpuScheduling.schedulingMap[0].nodeName=node1",
      "--set", "gpuScheduling.schedulingMap[0].podIndex=0",
      "--set-string", "gpuScheduling.schedulingMap[0].gpuDevices=zero"], "gpuDevices"),
])
def test_bad_check_values_fail_with_the_schema_message(
        helm: Path, args: list[str], message: str) -> None:
    err = _fails(helm, "gpu-scheduler-check", *args)
    assert "values don't meet the specifications of the schema" in err
    assert message in err, err


def test_a_replica_without_a_map_entry_is_refused(helm: Path) -> None:
    err = _fails(helm, "gpu-scheduler-check", "--set", "replicaCount=6")
    assert "no entry for podIndex 5: pod gpu-scheduler-check-5 would never be placed" in err


def test_a_bad_line_of_the_text_form_is_named(helm: Path, tmp_path: Path) -> None:
    (tmp_path / "map").write_text("0=node1:0\n1=node2\n")
    err = _fails(helm, "gpu-scheduler-check",
                 "--set-file", f"gpuScheduling.schedulingMap={tmp_path / 'map'}")
    assert 'line 2 "1=node2": expected <index>=<node>:<dev>,<dev>' in err


def test_the_check_pods_have_probes(helm: Path) -> None:
    """Ready once the webhook gave the pod its devices, live while its loop logs: the
    probes run the check service itself (--probe), bounded by the log interval."""
    sts = _statefulset(render(helm, "gpu-scheduler-check", "--set", "logInterval=5"))
    c = sts["spec"]["template"]["spec"]["containers"][0]
    assert c["readinessProbe"]["exec"]["command"] == [
        "python", "-m", "internal.check", "--probe=ready"]
    assert c["livenessProbe"]["exec"]["command"] == [
        "python", "-m", "internal.check", "--probe=live", "--max-age=25"]
    beat = {e["name"]: e.get("value") for e in c["env"]}["CHECK_HEARTBEAT"]
    mount, = c["volumeMounts"]
    assert beat.startswith(mount["mountPath"] + "/")
    vol, = sts["spec"]["template"]["spec"]["volumes"]
    assert vol["name"] == mount["name"] and vol["emptyDir"]["medium"] == "Memory"
