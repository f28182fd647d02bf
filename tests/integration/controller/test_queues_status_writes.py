"""What a GPUQueue's status costs while its usage moves: one write per look
(``STATUS_PERIOD``), not one per workload placed. The queue-status controller's
own status write used to bring the queue back to it through its watch, and with
usage moved meanwhile it wrote again, as fast as a write's round trip: 25 writes in
the benchmark's 400-unit burst (bench/README.md, "Round 12: a queue's cost")."""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from typing import Any

import pytest

from api.v1alpha1.types import API_VERSION
from controllers.queues import status as queue_status
from runtime import Client
from tests.integration.controller.conftest import NodeGroup, Running, workload
from tests.integration.controller.queue_teams import TEMPLATE
from tests.waiting import eventually

UNITS = 80
PERIOD = 0.5


class StatusWrites:
    """Every version of one GPUQueue whose status differs from the one before, with
    the time it came (a watch from the queue's first read)."""

    def __init__(self, admin: Client, name: str) -> None:
        self.admin, self.name = admin, name
        self.times: list[float] = []
        self.last: Any = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        obj = self.admin.get(API_VERSION, "GPUQueue", self.name)
        self.last, rv = obj.get("status"), obj["metadata"]["resourceVersion"]
        while not self._stop.is_set():
            stream = self.admin.watch(API_VERSION, "GPUQueue", resource_version=rv,
                                      timeout_seconds=5,
                                      field_selector=f"metadata.name={self.name}")
            for event in stream:
                if event.get("type") != "MODIFIED":
                    continue
                new = event["object"]
                rv = new["metadata"]["resourceVersion"]
                if new.get("status") != self.last:
                    self.times.append(time.monotonic())
                    self.last = new.get("status")
                if self._stop.is_set():
                    break
            stream.close()

    def __enter__(self) -> StatusWrites:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join(10)


def test_a_queues_status_is_written_once_per_look_while_its_usage_moves(
        controller: Running, admin: Client, namespace: str, group: NodeGroup,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """80 one-GPU workloads placed at once in a queue looked at every 0.5 s: its
    status is written at most once per look. Before, each write's own echo made the
    next while usage moved: 5 writes in 50 ms here (at 1.01, 1.03, 1.04, 1.05 and
    1.06 s of a 1.4 s burst, looked at every second)."""
    monkeypatch.setattr(queue_status, "STATUS_PERIOD", PERIOD)
    controller.wait_nodes(group.add(UNITS // 8, gpus=8))
    name = f"q-{uuid.uuid4().hex[:6]}"
    admin.create({"apiVersion": API_VERSION, "kind": "GPUQueue", "metadata": {"name": name},
                  "spec": {"nominalGPUs": UNITS, "namespaceSelector": {
                      "matchLabels": {"kubernetes.io/metadata.name": namespace}}}})
    try:
        with StatusWrites(admin, name) as writes:
            start = time.monotonic()
            for i in range(UNITS):
                admin.create(workload(f"w{i}", namespace, gpusPerReplica=1,
                                      nodeSelector=group.selector, template=TEMPLATE))

            def placed() -> bool:
                items = admin.list(API_VERSION, "GPUWorkload", namespace=namespace)["items"]
                return sum(bool((w.get("status") or {}).get("placements"))
                           for w in items) == UNITS
            eventually(placed, timeout=120, interval=0.2, what=f"{UNITS} workloads placed")
            done = time.monotonic()
            eventually(lambda: (writes.last or {}).get("usedGPUs") == UNITS, timeout=30,
                       what=f"the queue's status: {UNITS} GPUs used")
        times = [round(t - start, 2) for t in writes.times]
        assert all(b - a >= PERIOD / 2 for a, b in itertools.pairwise(times)), (
            f"status writes of GPUQueue {name} at {times} s of placing {UNITS} workloads "
            f"in {done - start:.1f} s, looked at every {PERIOD} s: one write per look, "
            f"none {PERIOD / 2} s after another")
    finally:  # the workloads go with the namespace
        admin.delete(API_VERSION, "GPUQueue", name)
