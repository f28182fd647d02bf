"""The charts installed with helm into a local control plane of their own, as a user
would: install, the demo's GPUWorkloads and the seed StatefulSet placed (the manager
and the webhook run as local processes, as in ``make demo``: kwok runs no
containers), ``kubectl logs`` of a check pod, ``helm test`` (kube-scheduler runs
here and binds its pod; its script runs as the pod would: helm_test_pod.py), upgrade,
and an uninstall that leaves nothing of ours behind."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from hack.testenv import ControlPlane, signals_stop
from internal.webhook.certjob import SECRET_NAME, ensure
from internal.webhook.certs import service_hosts
from runtime import Client, RestConfig, errors
from tests.integration.controller.conftest import Running
from tests.integration.install.conftest import CHARTS, NS, ROOT, run_helm
from tests.integration.install.helm_test_pod import serve
from tests.integration.webhook.helpers import running_webhook
from tests.waiting import eventually

SEED = [("gpu-scheduler-check-0", "node1", "0,1"), ("gpu-scheduler-check-1", "node2", "2"),
        ("gpu-scheduler-check-2", "node3", "0,1,2"), ("gpu-scheduler-check-3", "node4", "3"),
        ("gpu-scheduler-check-4", "node4", "3")]


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """Its own control plane: the chart owns the CRDs here, and its uninstall deletes
    them, which the session cluster's other tests must never see."""
    cp = ControlPlane(tmp_path_factory.mktemp("helm-plane"), nodes=4, gpus=4, scheduler=True)
    with signals_stop():
        cp.start()
        try:
            yield cp
        finally:
            cp.stop()


def _pods(cp: ControlPlane, ns: str) -> list[dict]:
    return json.loads(cp.kubectl("get", "pods", "-n", ns, "-o", "json").stdout)["items"]


def _running(cp: ControlPlane, ns: str, count: int) -> list[dict] | None:
    pods = [p for p in _pods(cp, ns) if p["status"].get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")]
    return pods if len(pods) == count else None


def _phases(cp: ControlPlane, ns: str) -> set[str]:
    gws = json.loads(cp.kubectl("get", "gw", "-n", ns, "-o", "json").stdout)["items"]
    return {(g.get("status") or {}).get("phase", "") for g in gws}


def _ours(cp: ControlPlane, ns: str = NS) -> list[str]:
    """Everything a release of ours could have left: our API group, our cluster-wide
    objects, anything in our namespace but what Kubernetes puts in every namespace."""
    left = []
    crds = json.loads(cp.kubectl("get", "crd", "-o", "json").stdout)["items"]
    left += [c["metadata"]["name"] for c in crds if c["spec"]["group"] == "gpu.orchestrator.dev"]
    for kind in ("clusterroles", "clusterrolebindings", "mutatingwebhookconfigurations",
                 "validatingadmissionpolicies", "validatingadmissionpolicybindings"):
        items = json.loads(cp.kubectl("get", kind, "-o", "json").stdout)["items"]
        left += [f"{kind}/{i['metadata']['name']}" for i in items
                 if "gpu-orchestrator" in i["metadata"]["name"]
                 or "gpu.orchestrator.dev" in i["metadata"]["name"]]
    out = cp.kubectl("get", "all,sa,role,rolebinding,cm,secret,networkpolicy", "-n", ns,
                     "-o", "name", check=False).stdout.split()
    left += [o for o in out if o not in ("serviceaccount/default", "configmap/kube-root-ca.crt")
             and not o.startswith("secret/sh.helm.release")]
    left += cp.kubectl("get", "secret", "-A", "-l", "owner=helm", "-o", "name").stdout.split()
    return left


def test_install_place_upgrade_uninstall(plane: ControlPlane, helm: Path,
                                         tmp_path: Path) -> None:
    kc = plane.kubeconfig
    # 1. Install. kwok runs no containers: the manager that acts runs as a local
    # process below, holding the release's Lease; the Deployment's one replica is
    # bound by kube-scheduler to a fake node, which reports it ready.
    out = run_helm(helm, "install", "gpu-orchestrator", str(CHARTS / "gpu-orchestrator"),
                   "-n", NS, "--create-namespace", "--set", "crds.keep=false",
                   "--set", "manager.replicas=1", kubeconfig=kc).stdout
    assert "STATUS: deployed" in out
    plane.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                  "crd/gpuworkloads.gpu.orchestrator.dev", "crd/gpunodes.gpu.orchestrator.dev",
                  "crd/gpuqueues.gpu.orchestrator.dev")
    admin = Client(RestConfig.from_kubeconfig(str(kc)))
    # The chart's RBAC is what the in-process manager gets (it impersonates the
    # release's ServiceAccount gpu-orchestrator-system:gpu-orchestrator).
    manager = Running(plane, pod_binding=True, leader_elect=True).start()
    try:
        with running_webhook(plane, tmp_path / "webhook"):
            # 2. The demo's GPUWorkloads: the seed map first, then one per strategy.
            plane.kubectl("create", "namespace", "demo")
            plane.kubectl("apply", "-n", "demo", "-f",
                          str(ROOT / "config/samples/gpuworkload_annotationmap_seed.yaml"))
            eventually(lambda: _running(plane, "demo", 5), timeout=90, what="seed map's 5 pods")
            plane.kubectl("apply", "-n", "demo", "-k", str(ROOT / "config/samples"))
            eventually(lambda: _running(plane, "demo", 11), timeout=90, what="11 sample pods")
            # Status is written after the pods run: wait for it rather than race it.
            eventually(lambda: _phases(plane, "demo") == {"Running"} or None, timeout=60,
                       what="every GPUWorkload Running")
            plane.kubectl("delete", "-n", "demo", "-k", str(ROOT / "config/samples"),
                          "--wait=true", "--timeout=90s")
            eventually(lambda: _running(plane, "demo", 0) is not None and not _pods(plane, "demo"),
                       timeout=90, what="the samples' pods gone")

            # 3. The seed's StatefulSet from its chart.
            out = run_helm(helm, "install", "check", str(CHARTS / "gpu-scheduler-check"),
                           "-n", "seed-path", "--create-namespace", kubeconfig=kc).stdout
            assert "STATUS: deployed" in out
            pods = eventually(lambda: _running(plane, "seed-path", 5), timeout=120,
                              what="the check StatefulSet's 5 pods Running")
            got = sorted((p["metadata"]["name"], p["spec"]["nodeName"],
                          {e["name"]: e.get("value") for e in p["spec"]["containers"][0]["env"]}
                          .get("CUDA_VISIBLE_DEVICES")) for p in pods)
            assert got == SEED
            # The check service's own output, as `kubectl logs` prints it.
            logs = eventually(lambda: plane.kubectl("logs", "-n", "seed-path",
                                                    "gpu-scheduler-check-3", check=False).stdout,
                              timeout=30, what="logs of gpu-scheduler-check-3")
            first = logs.splitlines()[0]
            assert "node=node4" in first and "CUDA_VISIBLE_DEVICES=3" in first, logs
            assert "pod=gpu-scheduler-check-3" in first, logs

            # 4. helm test: kube-scheduler binds its pod to a node, and its script runs
            # here as the pod would (helm_test_pod.py); the pod ends by its exit code.
            with ThreadPoolExecutor(1) as pool:
                helm_test = pool.submit(run_helm, helm, "test", "gpu-orchestrator", "-n", NS,
                                        "--timeout", "120s", kubeconfig=kc, check=False)
                script = serve(plane, NS, "gpu-orchestrator-test", tmp_path / "test-sa")
                out = helm_test.result(timeout=150)
            assert script.returncode == 0, script.stdout + script.stderr
            assert "ok   manager: 1 of 1 replicas ready (/readyz)" in script.stdout, script.stdout
            assert re.search(r"^ok   leader: \S+, renewed \d+s ago$", script.stdout, re.M), \
                script.stdout
            assert out.returncode == 0, out.stdout + out.stderr
            assert re.search(r"^Phase:\s+Succeeded$", out.stdout, re.M), out.stdout

            # 5. Upgrade: a changed value reaches the Deployment.
            out = run_helm(helm, "upgrade", "gpu-orchestrator", str(CHARTS / "gpu-orchestrator"),
                           "-n", NS, "--reuse-values", "--set", "manager.workers=8",
                           kubeconfig=kc).stdout
            assert "REVISION: 2" in out
            dep = admin.get("apps/v1", "Deployment", "gpu-orchestrator-manager", NS)
            assert "--workers=8" in dep["spec"]["template"]["spec"]["containers"][0]["args"]

            run_helm(helm, "uninstall", "check", "-n", "seed-path", "--wait", kubeconfig=kc)
            eventually(lambda: not _pods(plane, "seed-path"), timeout=90,
                       what="the check pods gone")
    finally:
        manager.stop()

    # 6. Uninstall: nothing of ours is left (crds.keep=false; the default keeps them).
    run_helm(helm, "uninstall", "gpu-orchestrator", "-n", NS, "--wait", kubeconfig=kc)
    left = eventually(lambda: _ours(plane) == [] or None, timeout=60,
                      what=f"nothing of ours left (last: {_ours(plane)})")
    assert left
    # The check service's processes went with their pods, and so did their Logs.
    eventually(lambda: plane.kubectl("get", "logs.kwok.x-k8s.io", "-A", "-o", "name"
                                     ).stdout == "", timeout=30, what="no kwok Logs left")


def test_certificate_job_of_a_release_in_another_namespace(plane: ControlPlane, helm: Path) -> None:
    """webhook.enabled with selfSigned certificates, installed into a namespace of its
    own: what the chart's certificate Job does (``main.py webhook-certs``, run here in
    process as the Job's service account: kwok runs no containers) makes the Secret
    and publishes the CA bundle into the chart's webhook configuration, with the
    chart's RBAC; the webhook's account may read neither. Uninstall leaves nothing."""
    ns, kc = "gpu-ops", plane.kubeconfig
    # No webhook pods (kwok would give them pod IPs the API server then dials) and no
    # manager; the configuration intercepts only annotated pods, and none is created.
    run_helm(helm, "install", "gpu-orchestrator", str(CHARTS / "gpu-orchestrator"), "-n", ns,
             "--create-namespace", "--set", "crds.keep=false", "--set", "manager.replicas=0",
             "--set", "webhook.enabled=true", "--set", "webhook.replicas=0", kubeconfig=kc)
    try:
        admin = Client(RestConfig.from_kubeconfig(str(kc)))
        mwc = ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration",
               "gpu-orchestrator-mutating-webhook")
        groups = ["system:serviceaccounts", f"system:serviceaccounts:{ns}",
                  "system:authenticated"]
        job = admin.impersonate(f"system:serviceaccount:{ns}:gpu-orchestrator-webhook-certs",
                                groups)
        out = ensure(job, namespace=ns, secret_name=SECRET_NAME,
                     hosts=service_hosts("gpu-orchestrator-webhook", ns),
                     webhook_config_name=mwc[2])
        assert out.new_ca and out.new_serving and out.bundle_in_place
        secret = admin.get("v1", "Secret", SECRET_NAME, ns)
        assert set(secret["data"]) >= {"ca.crt", "tls.crt", "tls.key"}
        hook = admin.get(*mwc)["webhooks"][0]["clientConfig"]
        assert hook["caBundle"] == secret["data"]["ca.crt"]
        assert hook["service"]["namespace"] == ns
        webhook = admin.impersonate(f"system:serviceaccount:{ns}:gpu-orchestrator-webhook",
                                    groups)
        for args in (mwc, ("v1", "Secret", SECRET_NAME, ns)):
            with pytest.raises(errors.Forbidden):
                webhook.get(*args)
        # An upgrade keeps what the Job wrote (neither field is in the chart).
        run_helm(helm, "upgrade", "gpu-orchestrator", str(CHARTS / "gpu-orchestrator"), "-n", ns,
                 "--reuse-values", "--set", "webhook.maxInFlight=8", kubeconfig=kc)
        assert admin.get(*mwc)["webhooks"][0]["clientConfig"]["caBundle"] == \
            secret["data"]["ca.crt"]
        assert admin.get("v1", "Secret", SECRET_NAME, ns)["data"] == secret["data"]
    finally:
        run_helm(helm, "uninstall", "gpu-orchestrator", "-n", ns, "--wait", kubeconfig=kc)
    eventually(lambda: _ours(plane, ns) == [] or None, timeout=60,
               what=f"nothing of ours left in {ns}")
