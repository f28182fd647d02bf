"""A cluster without the GPUQueue CRD (an install that predates queues, or one that
left it out): the manager starts, reads no GPUQueues or Namespaces (their informers
would never sync, and the manager would stop at its cache-sync timeout), and
places workloads as without queues. The CRD is put back afterwards for the other
tests."""

from __future__ import annotations

import contextlib
import os

from api.v1alpha1.types import API_VERSION
from hack.testenv import ControlPlane
from runtime import Client
from tests.integration.controller.conftest import (
    ROOT,
    NodeGroup,
    Running,
    delete_workload,
    workload,
)
from tests.waiting import eventually

CRD = "crd/gpuqueues.gpu.orchestrator.dev"


def test_a_manager_without_the_gpuqueue_crd_starts_and_places_as_without_queues(
        installed: ControlPlane, admin: Client, namespace: str, group: NodeGroup) -> None:
    installed.kubectl("delete", CRD, "--wait=true")
    run = None
    try:
        eventually(lambda: installed.api("GET", "/apis/gpu.orchestrator.dev/v1alpha1/gpuqueues")[0]
                   == 404, timeout=30, what="GPUQueues no longer served")
        run = Running(installed).start()  # would not start if its informers never synced
        run.wait_nodes(group.add(1, gpus=4))
        admin.create(workload("w", namespace, gpusPerReplica=2, queueName="nowhere",
                              nodeSelector=group.selector))
        admin.create(workload("plain", namespace, gpusPerReplica=2,
                              nodeSelector=group.selector))

        def running() -> bool:
            return all((admin.get(API_VERSION, "GPUWorkload", n, namespace).get("status")
                        or {}).get("phase") == "Running" for n in ("w", "plain"))
        eventually(running, timeout=60, what="both workloads Running")
        assert run.reconciler is not None and run.reconciler.state is not None
        assert run.reconciler.state.queues is None  # no gate
        for n in ("w", "plain"):
            delete_workload(admin, namespace, n)
        eventually(lambda: not admin.list(API_VERSION, "GPUWorkload",
                                          namespace=namespace)["items"],
                   timeout=60, what="workloads gone")
    finally:
        if run is not None:
            run.stop()
        installed.kubectl("apply", "-k", os.path.join(ROOT, "config"))
        with contextlib.suppress(Exception):
            installed.kubectl("wait", "--for=condition=Established", "--timeout=60s", CRD)
