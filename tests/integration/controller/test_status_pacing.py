"""The paced status writer (controllers/status/pacing.py) as a user sees it, with a
manager on the local control plane: a workload whose pod starts within the lag gets
one status write, Running, and `kubectl get` shows Running as soon as the pod runs,
well within the lag; nothing else of the workload is held back.

Both ways a workload gets our finalizer: in the create, as config/admission-finalizer
leaves it (the session cluster serves no MutatingAdmissionPolicy), and by the
manager's patch (the fallback), which is sent at once while the status it came with
is held like any other."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from api.v1alpha1.keys import CHILDREN_FINALIZER
from controllers.status.pacing import PacingOptions
from hack.testenv import ControlPlane
from internal import metrics as m
from runtime import Client, NotFound
from tests.integration.controller.conftest import (
    NodeGroup,
    Running,
    delete_workload,
    get_workload,
    pods_of,
    workload,
)
from tests.waiting import eventually

#: long enough for a kwok pod to start under load, short enough for a test
LAG = 4.0


def value(metric: Any) -> float:
    return metric._value.get()


@pytest.fixture(scope="module")
def paced(installed: ControlPlane) -> Iterator[Running]:
    # no busy rate: the hold alone decides (a token wait could coalesce by chance)
    run = Running(installed, status_pacing=PacingOptions(lag=LAG, busy_qps=0.0,
                                                         max_lag=10.0)).start()
    yield run
    run.stop()


@pytest.mark.parametrize("by_admission", [True, False], ids=["admission", "patch"])
def test_a_user_sees_running_through_kubectl_one_write_within_the_lag(
        paced: Running, admin: Client, namespace: str, group: NodeGroup,
        by_admission: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    paced.wait_nodes(group.add(1, gpus=2))
    # the status writes of this workload that this process sends (the manager runs in
    # it): the writer's counters are the whole process's, and other tests' workloads
    # on the shared control plane may be written meanwhile
    writes: list[object] = []
    patch = Client.patch

    def recording(self: Client, api_version: str, kind: str, name: str, body: object,
                  namespace_: str | None = None, *a: object, **kw: object) -> object:
        ns = namespace_ if namespace_ is not None else kw.get("namespace")
        if kind == "GPUWorkload" and name == "w" and ns == namespace and \
                kw.get("subresource") == "status":
            writes.append(body)
        if namespace_ is not None:
            return patch(self, api_version, kind, name, body, namespace_, *a,  # type: ignore[arg-type]
                         **kw)
        return patch(self, api_version, kind, name, body, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Client, "patch", recording)
    coalesced = value(m.STATUS_COALESCED)
    w = workload("w", namespace, gpusPerReplica=1, nodeSelector=group.selector,
                 template={"spec": {"containers": [{"name": "c", "image": "busybox"}]}})
    if by_admission:
        w["metadata"]["finalizers"] = [CHILDREN_FINALIZER]
    admin.create(w)
    seen: dict[str, float] = {}  # what was first seen when: the pod running, each phase

    def running() -> bool:
        now = time.monotonic()
        if "pod" not in seen and any((p.get("status") or {}).get("phase") == "Running"
                                     for p in pods_of(admin, namespace, "w")):
            seen["pod"] = now
        phase = paced.cluster.kubectl("get", "gw", "w", "-n", namespace,
                                      "-o", "jsonpath={.status.phase}").stdout.strip()
        seen.setdefault(phase or "(none)", time.monotonic())
        return phase == "Running"

    eventually(running, timeout=60, interval=0.05, what="kubectl get gw shows Running")
    pod_running = seen.get("pod", seen["Running"])
    assert seen["Running"] - pod_running < LAG  # Running is never held
    assert "Scheduled" not in seen  # held, and replaced by Running before it was sent
    assert len(writes) == 1, writes
    assert value(m.STATUS_COALESCED) - coalesced >= 1
    assert CHILDREN_FINALIZER in get_workload(admin, namespace, "w")["metadata"]["finalizers"]
    delete_workload(admin, namespace, "w")

    def gone() -> bool:  # nothing of it left to count in the next test's writes
        try:
            get_workload(admin, namespace, "w")
        except NotFound:
            return True
        return False
    eventually(gone, timeout=30, what="the workload deleted")
