"""Manager against the real API server: leader election, events, metrics and probes."""

from __future__ import annotations

import threading
import time
import urllib.request

from runtime import EXIT_LOST_LEASE, Builder, Manager, Options, Request
from runtime.client import Client
from tests.integration.runtime.conftest import configmap
from tests.waiting import eventually

LEASE = {"lease_duration": 3.0, "renew_deadline": 2.0, "retry_period": 0.5}


def start(mgr: Manager) -> tuple[threading.Thread, list[int]]:
    codes: list[int] = []
    t = threading.Thread(target=lambda: codes.append(mgr.start()), daemon=True)
    t.start()
    return t, codes


def make_manager(client: Client, ns: str, seen: list, who: str, **opts: object) -> Manager:
    o = Options(
        namespace=ns,
        metrics_bind_address="0",
        health_probe_bind_address="0",
        leader_elect=True,
        leader_election_id=f"le-{ns}",
        leader_election_namespace=ns,
        identity=who,
        graceful_shutdown_timeout=5,
        **LEASE,  # type: ignore[arg-type]
    )
    for k, v in opts.items():
        setattr(o, k, v)
    mgr = Manager(client, o)

    def reconcile(req: Request) -> None:
        seen.append((who, req.name))

    Builder(mgr).named(f"cm-{who}").for_("v1", "ConfigMap").complete(reconcile)
    return mgr


def test_leader_election_one_runs_then_failover(client: Client, namespace: str) -> None:
    seen: list[tuple[str, str]] = []
    a = make_manager(client, namespace, seen, "a")
    b = make_manager(client, namespace, seen, "b")
    ta, _ = start(a)
    eventually(a.is_leader, timeout=15, what="a leads")
    tb, codes_b = start(b)
    client.create(configmap(namespace, "one", "1"))
    eventually(lambda: ("a", "one") in seen, timeout=15)
    time.sleep(1.0)
    assert not b.is_leader()
    assert [w for w, _ in seen] == ["a"] * len(seen)

    killed = time.monotonic()
    a.kill()  # stops renewing without releasing the lease
    eventually(b.is_leader, timeout=LEASE["lease_duration"] + 3, interval=0.05, what="b takes over")
    takeover = time.monotonic() - killed
    assert takeover <= LEASE["lease_duration"] + 2 * LEASE["retry_period"] + 0.5
    client.create(configmap(namespace, "two", "2"))
    eventually(lambda: ("b", "two") in seen, timeout=15)
    assert ("a", "two") not in seen
    b.stop()
    tb.join(10)
    ta.join(10)
    assert codes_b == [0]


def test_leader_that_loses_its_lease_exits_nonzero(client: Client, namespace: str) -> None:
    seen: list = []
    m = make_manager(client, namespace, seen, "solo")
    t, codes = start(m)
    eventually(m.is_leader, timeout=15)
    path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/le-{namespace}"
    lease = client.request("GET", path)
    lease["spec"]["holderIdentity"] = "usurper"
    client.request("PUT", path, body=lease)
    t.join(LEASE["renew_deadline"] + 5)
    assert codes == [EXIT_LOST_LEASE]
    assert not m.is_leader()


def test_events_and_metrics_endpoint(client: Client, namespace: str) -> None:
    mgr = Manager(
        client,
        Options(
            namespace=namespace,
            metrics_bind_address="127.0.0.1:0",
            health_probe_bind_address="127.0.0.1:0",
            graceful_shutdown_timeout=5,
        ),
    )
    rec = mgr.event_recorder("runtime-test")
    done = threading.Event()

    def reconcile(req: Request) -> None:
        obj = mgr.informer_for("v1", "ConfigMap").indexer.get_by_name(req.name, req.namespace)
        if obj is not None:
            rec.normal(obj, "Seen", f"configmap {req.name} reconciled")
            done.set()

    Builder(mgr).named("metrics-test").for_("v1", "ConfigMap").complete(reconcile)
    t, codes = start(mgr)
    eventually(mgr.elected.is_set, timeout=15)
    cm = client.create(configmap(namespace, "ev", "1"))
    eventually(done.is_set, timeout=15)
    rec.warning(cm, "Odd", "same message")
    rec.warning(cm, "Odd", "same message")
    rec.warning(cm, "Odd", "same message")
    assert rec.flush(10)

    evs = client.list("v1", "Event", namespace, field_selector="involvedObject.name=ev")["items"]
    odd = [e for e in evs if e["reason"] == "Odd"]
    assert len(odd) == 1 and odd[0]["count"] == 3 and odd[0]["type"] == "Warning"
    assert odd[0]["involvedObject"]["uid"] == cm["metadata"]["uid"]
    assert odd[0]["involvedObject"]["kind"] == "ConfigMap"
    assert odd[0]["source"]["component"] == "runtime-test"
    assert any(e["reason"] == "Seen" for e in evs)

    base = f"http://127.0.0.1:{mgr.metrics_port}"
    body = urllib.request.urlopen(base + "/metrics", timeout=5).read().decode()
    for series in (
        'workqueue_adds_total{name="metrics-test"}',
        'workqueue_depth{name="metrics-test"}',
        'workqueue_queue_duration_seconds_bucket{le="1e-08",name="metrics-test"}',
        "workqueue_work_duration_seconds",
        "workqueue_unfinished_work_seconds",
        "workqueue_longest_running_processor_seconds",
        "workqueue_retries_total",
        'controller_runtime_reconcile_total{controller="metrics-test",result="success"}',
        "controller_runtime_reconcile_errors_total",
        "controller_runtime_reconcile_time_seconds_bucket",
        'controller_runtime_max_concurrent_reconciles{controller="metrics-test"} 1.0',
        'controller_runtime_active_workers{controller="metrics-test"}',
    ):
        assert series in body, series
    hbase = f"http://127.0.0.1:{mgr.health_port}"
    assert urllib.request.urlopen(hbase + "/healthz", timeout=5).read() == b"ok"
    assert urllib.request.urlopen(hbase + "/readyz", timeout=5).status == 200
    mgr.stop()
    t.join(10)
    assert codes == [0]
