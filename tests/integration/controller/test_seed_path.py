"""The seed's deployment end to end on the local control plane: the StatefulSet of
config/samples with schedulerName gpu-scheduler and the gpu-scheduling-map
annotation, admitted through the webhook (called by URL on 127.0.0.1) and bound by
the pod-binding controller, Running through kwok."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hack.testenv import ControlPlane
from runtime import Client, NotFound
from tests.integration.controller.conftest import ROOT, Running
from tests.integration.controller.test_podbinding import SAMPLE, SEED, holder, wait_gone
from tests.integration.webhook.helpers import running_webhook
from tests.waiting import eventually

ARTIFACT = Path(ROOT) / "tests" / "artifacts" / "seed-path-statefulset-pods.txt"


@pytest.fixture(scope="module")
def seed_path(installed: ControlPlane, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[Running]:
    run = Running(installed, pod_binding=True).start()
    try:
        with running_webhook(installed, tmp_path_factory.mktemp("webhook")):
            yield run
    finally:
        run.stop()


def test_statefulset_pods_get_their_nodes_and_devices(
        seed_path: Running, admin: Client, namespace: str) -> None:
    eventually(lambda: all(holder(seed_path, n, d) is None
                           for n, ds in SEED.items() for d in ds),
               timeout=60, what="node1..node4's seed devices free")
    cluster = seed_path.cluster
    cluster.kubectl("apply", "-n", namespace, "-f", SAMPLE)
    try:
        names = [f"gpu-scheduler-check-{i}" for i in range(5)]

        def running() -> list[dict]:
            pods = [_pod(admin, n, namespace) for n in names]
            if all(p is not None and p["status"].get("phase") == "Running" for p in pods):
                return [p for p in pods if p is not None]
            # where each stands, for the failure message
            raise AssertionError("; ".join(
                f"{n}: not created yet" if p is None else
                f"{n}: {p['status'].get('phase')} on {p['spec'].get('nodeName') or 'no node'}"
                for n, p in zip(names, pods, strict=True)))

        # the StatefulSet makes its pods one at a time, each once the one before it is
        # Running (OrderedReady), and backs off after a refused create: on the 2 shared
        # cores with the rest of the suite this has taken over 90 s
        pods = eventually(running, timeout=180, what="5 pods Running")
        got = []
        for p in pods:
            env = {e["name"]: e.get("value") for e in p["spec"]["containers"][0]["env"]}
            got.append((p["metadata"]["name"], p["spec"]["nodeName"],
                        env.get("CUDA_VISIBLE_DEVICES")))
        assert got == [("gpu-scheduler-check-0", "node1", "0,1"),
                       ("gpu-scheduler-check-1", "node2", "2"),
                       ("gpu-scheduler-check-2", "node3", "0,1,2"),
                       ("gpu-scheduler-check-3", "node4", "3"),
                       ("gpu-scheduler-check-4", "node4", "3")]
        ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
        ARTIFACT.write_text(cluster.kubectl("get", "pod", "-o", "wide", "-n", namespace).stdout)
    finally:
        cluster.kubectl("delete", "-n", namespace, "-f", SAMPLE, "--wait=false")
        wait_gone(admin, namespace, "app=gpu-scheduler-check")


def _pod(admin: Client, name: str, namespace: str) -> dict | None:
    """The pod, or None while the StatefulSet controller has not made it yet."""
    try:
        return admin.get("v1", "Pod", name, namespace)
    except NotFound:
        return None
