"""Two teams' namespaces and GPUQueues (nominal 8 each unless told, one cohort) for
the queue tests, removed afterwards."""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

from api.v1alpha1.types import API_VERSION
from hack.testenv import ControlPlane
from runtime import Client, NotFound
from tests.integration.controller.conftest import NodeGroup, delete_workload, workload
from tests.waiting import eventually

TEMPLATE = {"spec": {"terminationGracePeriodSeconds": 2,
                     "containers": [{"name": "main", "image": "busybox:1.36"}]}}


class Teams:
    def __init__(self, cluster: ControlPlane, admin: Client, nominal: int = 8) -> None:
        tag = uuid.uuid4().hex[:6]
        self.admin, self.cluster = admin, cluster
        self.cohort = f"research-{tag}"
        self.ns = {"a": f"team-a-{tag}", "b": f"team-b-{tag}"}
        self.queue = {"a": f"qa-{tag}", "b": f"qb-{tag}"}
        for team in ("a", "b"):
            code, body = cluster.api("POST", "/api/v1/namespaces", {
                "apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": self.ns[team]}})
            assert code == 201, body
            self.make_queue(self.queue[team], nominal, self.ns[team], cohort=self.cohort)

    def make_queue(self, name: str, nominal: int, ns: str, **spec: Any) -> None:
        self.admin.create({"apiVersion": API_VERSION, "kind": "GPUQueue",
                           "metadata": {"name": name},
                           "spec": {"nominalGPUs": nominal, **spec, "namespaceSelector": {
                               "matchLabels": {"kubernetes.io/metadata.name": ns}}}})

    def submit(self, team: str, name: str, group: NodeGroup, gpus: int = 4,
               template: dict[str, Any] | None = None, **spec: Any) -> None:
        self.admin.create(workload(name, self.ns[team], gpusPerReplica=gpus,
                                   nodeSelector=group.selector,
                                   template=template or TEMPLATE, **spec))

    def queue_status(self, team: str) -> dict[str, Any]:
        return self.admin.get(API_VERSION, "GPUQueue", self.queue[team]).get("status") or {}

    def wait_used(self, team: str, used: float, borrowed: float) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            s = self.queue_status(team)
            return s if (s.get("usedGPUs"), s.get("borrowedGPUs")) == (used, borrowed) else None
        return eventually(check, timeout=40,
                          what=f"queue {team}: {used} GPUs used, {borrowed} borrowed")

    def cleanup(self) -> None:
        for team in ("a", "b"):
            for w in self.admin.list(API_VERSION, "GPUWorkload",
                                     namespace=self.ns[team])["items"]:
                delete_workload(self.admin, self.ns[team], w["metadata"]["name"])
            with contextlib.suppress(NotFound):
                self.admin.delete(API_VERSION, "GPUQueue", self.queue[team])
            self.cluster.api("DELETE", f"/api/v1/namespaces/{self.ns[team]}")
