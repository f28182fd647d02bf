"""The child checked as the API server would check it, before any placement.

A GPUWorkload's template is schemaless in the CRD (a PodTemplateSpec is too large to
copy into it), so the API server accepts templates it would refuse as a Pod or a Job:
a port of 700000, a quantity that does not parse. The admission policies catch the
common cases in words (api/v1alpha1/door.py); this catches the rest: before a
workload's first placement of a spec (its ``generation``), its highest-index child is
created with ``dryRun=All`` (nothing is stored; every admission plugin and policy
runs). A 400 or 422 answer is the spec's fault: the workload is reported
``InvalidSpec`` with the API server's own message and no retry is spent, instead of
ending every attempt with ``ChildCreateFailed``. Any other answer (a quota, a
priority class not there yet, the API unreachable) says nothing about the template:
the placement goes on and the real create reports it.

One dry run per namespace and spec, remembered: workloads of one namespace whose specs
are equal make the same children but for their names (whose length and form the
``gpuworkload-scheduling-map`` admission policy checks), so a burst of a thousand workloads from
one template costs the API server one dry run, not a thousand (a dry-run create costs
as much as a create). Workers that ask while that one dry run is in flight wait for
its verdict instead of sending their own (a burst's first workloads reach the workers
together: 16 dry runs of one spec before, measured in the benchmark's audit log).
DRA children are not dry-run (their ResourceClaims do not exist yet).
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any

import structlog

from api.v1alpha1.types import DeviceExposure, GPUWorkload, Placement
from controllers.gpuworkload.children import build_child
from internal.objects import JSON
from runtime import ApiError

log = structlog.get_logger("controllers.gpuworkload.template_check")

#: remembered verdicts, beyond which the oldest are dropped
MAX_REMEMBERED = 10_000


class ChildDryRun:
    """``check(w, raw)``: None when the API server would accept ``w``'s children,
    else why not, in its words."""

    def __init__(self, client: Any, default_exposure: DeviceExposure) -> None:
        self.client = client
        self.default_exposure = default_exposure
        self._seen: dict[tuple[str, str, str], str | None] = {}
        self._flights: dict[tuple[str, str, str], threading.Event] = {}
        self._lock = threading.Lock()

    def check(self, w: GPUWorkload, raw: JSON) -> str | None:
        exposure = w.spec.device_exposure or self.default_exposure
        if exposure is DeviceExposure.DRA:
            return None
        key = (str(w.metadata.namespace or ""), exposure.value, _spec_digest(raw))
        while True:
            with self._lock:
                if key in self._seen:
                    return self._seen[key]
                flight = self._flights.get(key)
                if flight is None:
                    flight = self._flights[key] = threading.Event()
                    break
            # another worker's dry run of this spec: its verdict, or (it raised) a
            # dry run of our own
            flight.wait()
        try:
            verdict = self._dry_run(w, raw, exposure)
            with self._lock:
                if len(self._seen) >= MAX_REMEMBERED:
                    self._seen.pop(next(iter(self._seen)))
                self._seen[key] = verdict
            return verdict
        finally:
            with self._lock:
                del self._flights[key]
            flight.set()

    def _dry_run(self, w: GPUWorkload, raw: JSON, exposure: DeviceExposure) -> str | None:
        last = Placement(index=w.spec.replicas - 1, node="dry-run",
                         devices=[] if exposure is DeviceExposure.DEVICE_PLUGIN
                         else list(range(w.spec.gpus)))
        child = build_child(w, raw, last, exposure, _uuids, int(w.status.retries or 0))
        try:
            self.client.create(child, dry_run=True)
        except ApiError as exc:
            if exc.status not in (400, 422):
                log.info("template.dry_run.inconclusive", workload=w.key, code=exc.status)
                return None
            return (f"spec.template: the API server refuses its children "
                    f"({child['kind']} {child['metadata']['name']}): {exc.message or exc}")
        return None


def _spec_digest(raw: JSON) -> str:
    """The spec, as what the children are made from."""
    body = json.dumps(raw.get("spec") or {}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()


def _uuids(node: str, devices: list[int]) -> list[str]:
    """Stand-in UUIDs for nvidia-visible-devices (the dry run's node has none)."""
    return [f"GPU-dry-run-{d}" for d in devices]
