"""The GPUWorkload controller talking to kube-apiserver through the fault proxy: 429s
with Retry-After, 5xx (an HTML 502 among them), resets, lost answers, stalls, cut and
truncated watches. Placements still happen, none is lost or given twice, and the
controller never crashes. Its own module: one controller at a time."""

from __future__ import annotations

import sys
import time
import urllib.request
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from hack.testenv import ControlPlane
from hack.testenv.faultproxy import HTML_502, FaultProxy, Rule
from runtime import Client
from tests.integration.controller.conftest import NodeGroup, Running, wait_phase, workload
from tests.integration.faults.conftest import device_holders

READS = frozenset({"GET"})
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@pytest.fixture
def through_proxy(installed: ControlPlane, proxy: FaultProxy) -> Iterator[Running]:
    run = Running(SimpleNamespace(kubeconfig=proxy.write_kubeconfig())).start()  # type: ignore[arg-type]
    yield run
    proxy.clear()
    run.stop()


def placed(admin: Client, namespace: str, names: list[str], timeout: float) -> None:
    for n in names:
        wait_phase(admin, namespace, n, "Running", timeout=timeout)


def test_placements_survive_throttling_errors_resets_and_lost_answers(
        admin: Client, namespace: str, group: NodeGroup, proxy: FaultProxy,
        through_proxy: Running) -> None:
    group.add(3, gpus=4)
    proxy.add(
        Rule("status", code=429, retry_after=1, watch=False, probability=0.15),
        Rule("status", code=503, watch=False, probability=0.08),
        Rule("status", code=502, body=HTML_502, content_type="text/html", watch=False,
             probability=0.05),
        Rule("status", code=500, methods=WRITES, probability=0.05),
        Rule("reset", watch=False, probability=0.05),
        # The server applies these, but the answer never arrives.
        Rule("lose_answer", methods=frozenset({"POST"}), path="/pods", probability=0.3),
        Rule("lose_answer", methods=WRITES, path="gpuworkloads", probability=0.15),
        Rule("truncate", methods=READS, watch=False, probability=0.05),
        Rule("stall", seconds=2.0, watch=False, probability=0.05),
    )
    names = [f"f-{i:02d}" for i in range(12)]
    started = time.monotonic()
    for n in names:
        admin.create(workload(n, namespace, nodeSelector=group.selector))
    placed(admin, namespace, names, timeout=300)
    print(f"12 placements through faults: {time.monotonic() - started:.1f}s; "
          f"faults {proxy.counts}", file=sys.stderr)

    held = device_holders(admin, namespace, names)
    assert len(held) == len(set(held)) == 12, "a device given twice"
    for action in ("status", "reset", "lose_answer"):
        assert proxy.count(action) > 0, f"no {action} fault happened: {proxy.counts}"
    assert through_proxy.thread is not None and through_proxy.thread.is_alive()
    assert through_proxy.codes == []

    mgr = through_proxy.mgr
    assert mgr is not None
    body = urllib.request.urlopen(f"http://127.0.0.1:{mgr.metrics_port}/metrics",
                                  timeout=5).read().decode()
    host = f"127.0.0.1:{proxy.port}"
    assert f'rest_client_requests_total{{code="429",host="{host}",method=' in body
    assert "rest_client_request_retries_total" in body
    assert f'rest_client_request_duration_seconds_bucket{{host="{host}"' in body


def test_cut_and_truncated_watches_resume_and_nothing_is_missed(
        admin: Client, namespace: str, group: NodeGroup, proxy: FaultProxy,
        through_proxy: Running) -> None:
    group.add(3, gpus=4)  # 12 GPUs for 9 workloads
    proxy.add(
        Rule("truncate", watch=True, probability=0.3),
        Rule("status", code=502, body=HTML_502, content_type="text/html", watch=True,
             probability=0.2),
        Rule("drop_watch", watch=True, seconds=3.0, probability=0.3),
    )
    names = [f"w-{i:02d}" for i in range(8)]
    for i, n in enumerate(names):
        admin.create(workload(n, namespace, nodeSelector=group.selector))
        if i % 2:
            proxy.drop_watches()
    placed(admin, namespace, names, timeout=300)
    assert proxy.count("truncate") + proxy.count("drop_watch") > 0, proxy.counts

    # With the faults gone, the informers are current again: a new workload is placed.
    proxy.clear()
    admin.create(workload("after", namespace, nodeSelector=group.selector))
    placed(admin, namespace, ["after"], timeout=120)
    held = device_holders(admin, namespace, [*names, "after"])
    assert len(held) == len(set(held)) == 9
    assert through_proxy.thread is not None and through_proxy.thread.is_alive()
