"""DRA availability: the discovery decision, and what a ``deviceExposure: dra``
workload is told when DRA cannot be served (the gate in front of the reconciler)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from api.v1alpha1.types import DeviceExposure
from controllers.dra.availability import (
    NOT_ENABLED,
    TEMPLATES_FORBIDDEN,
    DraUnavailableGate,
    dra_unavailable,
    templates_readable,
)
from runtime import NotFound, Request
from runtime.errors import ApiError, Forbidden
from runtime.store import Indexer

NOW = datetime(2026, 1, 1, tzinfo=UTC)


class Discovery:
    def __init__(self, error: Exception | None) -> None:
        self.error, self.asked = error, []

    def resource_for(self, api_version: str, kind: str) -> Any:
        self.asked.append((api_version, kind))
        if self.error is not None:
            raise self.error
        return object()


@pytest.mark.parametrize("error, unavailable", [
    (None, False),
    (NotFound(404, "NotFound", "404 page not found"), True),
    (ApiError(503, "ServiceUnavailable", "try again"), False),  # the informers retry
    (ApiError(0, "ConnectionError", "refused"), False),
])
def test_only_a_404_from_discovery_turns_dra_off(error: Exception | None,
                                                 unavailable: bool) -> None:
    client = Discovery(error)
    why = dra_unavailable(client)
    assert (why is not None) == unavailable
    if unavailable:
        assert why.startswith("the API server does not serve resource.k8s.io/v1 "
                              "(ResourceSlice: ")
    assert client.asked[0] == ("resource.k8s.io/v1", "ResourceSlice")


class Gate:
    def __init__(self, default: DeviceExposure = DeviceExposure.CUDA_VISIBLE_DEVICES,
                 why: str = NOT_ENABLED) -> None:
        self.workloads = Indexer()
        self.passed: list[str] = []
        self.written: list[tuple[str, dict[str, Any]]] = []
        self.events: list[tuple[str, str, str]] = []
        self.gate = DraUnavailableGate(
            lambda req: self.passed.append(req.name), self.workloads, default, why, self,
            lambda raw, status: self.written.append((raw["metadata"]["name"], status)),
            self.pending, clock=lambda: NOW)

    def pending(self, raw: Any) -> Any:
        """As the status writer's ``view``: the status last handed over, until cached."""
        mine = [s for n, s in self.written if n == raw["metadata"]["name"]]
        return {**raw, "status": mine[-1]} if mine and not raw.get("status") else None

    def warning(self, obj: Any, reason: str, message: str) -> None:
        self.events.append((obj["metadata"]["name"], reason, message))

    def add(self, name: str, status: dict[str, Any] | None = None, **spec: Any) -> None:
        self.workloads.add({
            "apiVersion": "gpu.orchestrator.dev/v1alpha1", "kind": "GPUWorkload",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "generation": 1},
            "spec": {"gpusPerReplica": 1, **spec}, "status": status or {}})

    def run(self, name: str) -> None:
        self.gate.reconcile(Request("ns", name))


def test_a_dra_workload_is_told_why_once_and_others_pass() -> None:
    g = Gate()
    g.add("plain")
    g.add("cuda", deviceExposure="cuda-visible-devices")
    g.add("wants-dra", deviceExposure="dra")
    for name in ("plain", "cuda", "wants-dra", "gone", "wants-dra"):  # again: not cached yet
        g.run(name)
    assert g.passed == ["plain", "cuda", "gone"]
    message = "deviceExposure dra is unavailable: the controller runs without --enable-dra"
    assert g.events == [("wants-dra", "DRAUnavailable", message)]
    (name, status), = g.written
    assert (name, status["phase"], status["message"]) == ("wants-dra", "Pending", message)
    cond, = status["conditions"]
    assert (cond["type"], cond["status"], cond["reason"], cond["message"]) == \
        ("Scheduled", "False", "DRAUnavailable", message)
    # Read again with that status: nothing new to write or say.
    g.add("wants-dra", status, deviceExposure="dra")
    g.run("wants-dra")
    assert len(g.written) == 1 and len(g.events) == 1


def test_the_default_exposure_counts_and_placed_or_invalid_workloads_pass() -> None:
    g = Gate(DeviceExposure.DRA, why="the API server does not serve resource.k8s.io/v1")
    g.add("by-default")
    g.add("placed", {"phase": "Running",
                     "placements": [{"index": 0, "node": "n1", "devices": [0]}]})
    g.add("done", {"phase": "Succeeded"})
    g.add("invalid", gpusPerReplica=0)  # its InvalidSpec says more
    for name in ("by-default", "placed", "done", "invalid"):
        g.run(name)
    assert g.passed == ["placed", "done", "invalid"]
    assert [e[0] for e in g.events] == ["by-default"]
    assert g.events[0][2].endswith("does not serve resource.k8s.io/v1")


def test_a_dra_workload_whose_pod_exists_goes_to_the_reconciler_to_be_left_running() -> None:
    # its one pod was made, the status write after it was lost: the pod is its
    # placement, and the reconciler leaves it running (controllers/gpuworkload/unmanaged.py)
    g = Gate()
    g.gate.has_children = lambda raw: raw["metadata"]["name"] == "has-pod"
    g.add("has-pod", deviceExposure="dra")
    g.add("no-pod", deviceExposure="dra")
    g.run("has-pod")
    g.run("no-pod")
    assert g.passed == ["has-pod"]
    assert [e[0] for e in g.events] == ["no-pod"]


class Lister:
    def __init__(self, error: Exception | None) -> None:
        self.error, self.asked = error, []

    def list(self, api_version: str, kind: str, **kw: Any) -> Any:
        self.asked.append((api_version, kind, kw.get("limit")))
        if self.error is not None:
            raise self.error
        return {"items": []}


@pytest.mark.parametrize("error, readable", [
    (None, True),
    (Forbidden(403, "Forbidden", 'resourceclaimtemplates.resource.k8s.io is forbidden: '
                                 'User "system:serviceaccount:gpu-orchestrator-system:'
                                 'gpu-orchestrator" cannot list resource'), False),
    (ApiError(503, "ServiceUnavailable", "try again"), True),  # the informer retries
])
def test_only_a_403_leaves_the_claim_templates_unread(error: Exception | None,
                                                      readable: bool) -> None:
    """A manager run with an older release's DRA role (no ResourceClaimTemplates)
    would wait for an informer that never syncs and stop at its cache-sync timeout;
    it runs without that informer instead, asked once with a one-item list."""
    client = Lister(error)
    assert templates_readable(client) is readable
    assert client.asked == [("resource.k8s.io/v1", "ResourceClaimTemplate", 1)]


def test_a_member_not_made_yet_is_refused_with_why_when_templates_are_unread() -> None:
    from controllers.podbinding.memberclaims import MemberClaimsReader

    reader = MemberClaimsReader(claims=Indexer(), device_class="gpu.nvidia.com",
                                templates=None)
    spec = {"resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "t"}],
            "containers": [{"name": "c", "resources": {"claims": [{"name": "gpus"}]}}]}
    claims = reader.read_slot(spec, "team", "pod team/x-1")
    assert claims is not None and claims.refused == TEMPLATES_FORBIDDEN
    assert "config/rbac/dra_role.yaml" in claims.refused
