"""Our admission never fails closed on our account (docs/security.md): while a
restarted kube-apiserver has not rediscovered GPUQueue, and while GPUQueues are not
served at all, no pod is denied that our policies would admit: a tenant's plain
pod in a namespace no GPUQueue selects, the cluster admin's pod in ``default``, a
tenant's GPU pod where no queue holds it, the admin's GPU pod in a queue's
namespace, a tenant's GPUWorkload in its own queue. A tenant's GPU pod in its
queue's namespace is still refused. Its own module: one controller at a time."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from api.v1alpha1.keys import QUEUED_LABEL
from api.v1alpha1.types import API_VERSION
from hack.testenv import ControlPlane
from runtime import Client, errors
from tests.integration.controller.conftest import (  # noqa: F401 (fixtures)
    ROOT,
    TENANT,
    Running,
    namespace_queue,
    tenant,
    workload,
)
from tests.waiting import eventually

CRD = "crd/gpuqueues.gpu.orchestrator.dev"
POLICIES = os.path.join(ROOT, "config", "crd", "tenant-isolation-admission-policies.yaml")
#: restarts, and seconds of probing after each: a policy with GPUQueue params was a
#: configuration error for up to 30 s after one (the API server's admission refreshes
#: its discovery every 30 s)
RESTARTS, PROBE_SECONDS = 3, 35.0


def _pod(ns: str, gpus: str | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "c", "image": "busybox:1.36"}
    if gpus is not None:
        c["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "probe-", "namespace": ns}, "spec": {"containers": [c]}}


def _edit(admin: Client, namespace: str) -> None:
    admin.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                  "metadata": {"name": "tenant-edit", "namespace": namespace},
                  "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                              "name": "edit"},
                  "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                                "name": TENANT}]})


@pytest.fixture
def plain(installed: ControlPlane, admin: Client) -> Iterator[str]:
    """A namespace no GPUQueue selects, where the tenant may ``edit`` too."""
    name = f"plain-{uuid.uuid4().hex[:6]}"
    admin.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    _edit(admin, name)
    yield name
    admin.delete("v1", "Namespace", name)


@pytest.fixture
def queued(admin: Client, namespace: str) -> Iterator[str]:
    """A GPUQueue selecting ``namespace``, deleted afterwards."""
    with namespace_queue(admin, namespace, 4) as name:
        yield name


@pytest.fixture
def manager(installed: ControlPlane) -> Iterator[Running]:
    run = Running(installed).start()
    yield run
    run.stop()


def _burn(n: int) -> list[subprocess.Popen[bytes]]:
    """``n`` busy processes: the window opened only on a loaded machine."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        p.kill()
        p.wait()


class Probes:
    """Dry-run creates that must be admitted, each counted when it is denied (an
    answer of 403 or 422: a policy's, or an admission error); a request the API
    server did not answer (it is starting) is no denial."""

    def __init__(self, creates: dict[str, Callable[[], Any]]) -> None:
        self.creates = creates
        self.sent = dict.fromkeys(creates, 0)
        self.denied: dict[str, list[str]] = {k: [] for k in creates}

    def run(self, seconds: float) -> None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            for kind, create in self.creates.items():
                try:
                    create()
                    self.sent[kind] += 1
                except (errors.Forbidden, errors.Invalid) as e:
                    self.sent[kind] += 1
                    self.denied[kind].append(f"{time.monotonic() - t0:.1f}s: {e}")
                except Exception:  # not answered: no admission decision
                    pass
            time.sleep(0.2)

    def report(self) -> str:
        return "; ".join(f"{k}: {len(v)} of {self.sent[k]} denied" + (f" ({v[0]})" if v else "")
                         for k, v in self.denied.items())


def _probes(admin: Client, user: Client, plain: str, queued_ns: str,
            queue: str | None) -> Probes:
    creates: dict[str, Callable[[], Any]] = {
        "plain pod": lambda: user.create(_pod(plain), dry_run=True),
        "admin's pod in default": lambda: admin.create(_pod("default"), dry_run=True),
        "GPU pod outside any queue": lambda: user.create(_pod(plain, "1"), dry_run=True),
        "admin's GPU pod in the queue": lambda: admin.create(_pod(queued_ns, "1"), dry_run=True),
        "GPUWorkload in its queue": lambda: user.create(
            workload(f"probe-{uuid.uuid4().hex[:6]}", queued_ns, gpusPerReplica=1,
                     queueName=queue), dry_run=True),
    }
    if queue is None:  # no queue: the gate's business, not admission's
        del creates["GPUWorkload in its queue"]
    return Probes(creates)


def _held(admin: Client, user: Client, namespace: str, queue: str) -> None:
    """The manager marked the queue's namespace, and a tenant's GPU pod there is refused."""
    eventually(lambda: QUEUED_LABEL in (admin.get("v1", "Namespace", namespace)["metadata"]
                                        .get("labels") or {}),
               timeout=30, what=f"namespace {namespace} marked")
    with pytest.raises(errors.Forbidden, match=f"is in GPUQueue {queue}: a pod may not"):
        user.create(_pod(namespace, "1"), dry_run=True)


def test_no_pod_we_would_admit_is_denied_across_apiserver_restarts_under_load(
        installed: ControlPlane, admin: Client, tenant: Client, namespace: str,  # noqa: F811
        plain: str, queued: str, manager: Running) -> None:
    _held(admin, tenant, namespace, queued)
    probes = _probes(admin, tenant, plain, namespace, queued)
    burners = _burn(2)
    try:
        for n in range(RESTARTS):
            installed.restart_apiserver()
            probes.run(PROBE_SECONDS)
            print(f"restart {n + 1}: {probes.report()}", file=sys.stderr)
    finally:
        _stop(burners)
    assert all(probes.sent.values()), probes.sent
    assert {k: len(v) for k, v in probes.denied.items()} == dict.fromkeys(probes.denied, 0), \
        probes.report()
    _held(admin, tenant, namespace, queued)  # and the queue still holds its namespace


def test_no_pod_is_denied_while_gpuqueues_are_not_served(
        installed: ControlPlane, admin: Client, tenant: Client, namespace: str,  # noqa: F811
        plain: str) -> None:
    """Our policies created while the GPUQueue CRD is not served (an install whose CRD
    is not established yet, a reinstall after an uninstall that took the CRD): plain
    pods are created as on a cluster without us. The CRD is put back afterwards for
    the other tests."""
    probes = _probes(admin, tenant, plain, namespace, None)
    installed.kubectl("delete", CRD, "--wait=true")
    try:
        eventually(lambda: installed.api("GET", f"/apis/{API_VERSION}/gpuqueues")[0] == 404,
                   timeout=30, what="GPUQueues no longer served")
        installed.kubectl("delete", "-f", POLICIES, "--wait=true")
        installed.kubectl("apply", "-f", POLICIES)
        probes.run(PROBE_SECONDS)
        print(f"GPUQueue not served: {probes.report()}", file=sys.stderr)
    finally:
        installed.kubectl("apply", "-k", os.path.join(ROOT, "config"))
        installed.kubectl("wait", "--for=condition=Established", "--timeout=60s", CRD)
    assert all(probes.sent.values()), probes.sent
    assert {k: len(v) for k, v in probes.denied.items()} == dict.fromkeys(probes.denied, 0), \
        probes.report()
