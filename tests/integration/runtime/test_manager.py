"""Manager against the real API server: leader election, events, metrics and probes."""

from __future__ import annotations

import sys
import threading
import time
import urllib.error
import urllib.request

from runtime import EXIT_LOST_LEASE, Builder, Manager, NotLeader, Options, Request
from runtime.client import Client, RestConfig
from runtime.leaderelection import micro_time
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
    eventually(b.is_leader, timeout=60, interval=0.05, what="b takes over")
    print(f"takeover after a crash: {time.monotonic() - killed:.2f}s "
          f"(lease {LEASE['lease_duration']}s)", file=sys.stderr)
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


def take_lease(client: Client, namespace: str, holder: str) -> None:
    """A rival writes itself into the Lease, freshly renewed."""
    path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/le-{namespace}"
    lease = client.request("GET", path)
    now = micro_time()
    lease["spec"].update(holderIdentity=holder, renewTime=now, acquireTime=now,
                         leaseDurationSeconds=3600)
    client.request("PUT", path, body=lease)


def test_reconcile_in_flight_when_the_lease_is_taken_never_writes(
    client: Client, namespace: str
) -> None:
    gate, entered = threading.Event(), threading.Event()
    outcome: list[str] = []
    holder: list[Manager] = []

    def reconcile(req: Request) -> None:
        if req.name != "slow":
            return
        entered.set()
        gate.wait(120)
        try:
            holder[0].client.patch("v1", "ConfigMap", "slow", {"data": {"v": "late"}}, namespace)
            outcome.append("wrote")
        except NotLeader:
            outcome.append("refused")

    mgr = make_manager(client, namespace, [], "old")
    Builder(mgr).named("inflight").for_("v1", "ConfigMap").complete(reconcile)
    holder.append(mgr)
    t, codes = start(mgr)
    eventually(mgr.is_leader, timeout=30, what="old leads")
    client.create(configmap(namespace, "slow", "1"))
    eventually(entered.is_set, timeout=30, what="reconcile in flight")
    take_lease(client, namespace, "rival")
    t.join(60)
    assert codes == [EXIT_LOST_LEASE]  # it noticed, and stopped at once
    gate.set()  # the reconcile that was in flight now tries its write
    eventually(lambda: outcome, timeout=30, what="the late write's outcome")
    assert outcome == ["refused"]
    assert client.get("v1", "ConfigMap", "slow", namespace)["data"] == {"v": "1"}


def test_an_exception_in_the_elector_ends_leadership(cluster, namespace: str) -> None:  # type: ignore[no-untyped-def]
    """A credential plugin that starts failing (any exception, not an API error) while
    leading: leadership ends and the manager exits, rather than leading on blindly."""
    config = RestConfig.from_kubeconfig(str(cluster.kubeconfig))
    mgr = make_manager(Client(config), namespace, [], "solo")
    t, codes = start(mgr)
    eventually(mgr.is_leader, timeout=30, what="solo leads")

    def broken() -> str:
        raise RuntimeError("exec credential plugin exited 1")

    config.bearer = broken  # type: ignore[method-assign]
    t.join(60)
    assert codes == [EXIT_LOST_LEASE]
    assert not mgr.is_leader()
    try:
        mgr.client.patch("v1", "ConfigMap", "x", {"data": {}}, namespace)
        raise AssertionError("a write passed after leadership ended")
    except NotLeader:
        pass


def test_without_leader_election_a_manager_refuses_while_another_leads(
    client: Client, namespace: str
) -> None:
    seen: list[tuple[str, str]] = []
    a = make_manager(client, namespace, seen, "a")
    ta, _ = start(a)
    eventually(a.is_leader, timeout=30, what="a leads")
    b = make_manager(client, namespace, seen, "b", leader_elect=False,
                     health_probe_bind_address="127.0.0.1:0")
    tb, codes_b = start(b)
    eventually(lambda: b.refusal, timeout=30, what="b refuses")
    assert "another manager (a) leads lease" in (b.refusal or "")
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{b.health_port}/readyz", timeout=5)
        raise AssertionError("/readyz passed while refusing")
    except urllib.error.HTTPError as e:
        assert e.code == 500 and "another manager (a)" in e.read().decode()

    client.create(configmap(namespace, "c", "1"))
    eventually(lambda: ("a", "c") in seen, timeout=30)
    eventually(lambda: b.informer_for("v1", "ConfigMap").indexer.get_by_name("c", namespace),
               timeout=30, what="b's cache has it too")
    assert [w for w, _ in seen] == ["a"] * len(seen) and not b.elected.is_set()

    a.stop()  # releases the lease: nobody leads, so b may place
    ta.join(30)
    eventually(b.elected.is_set, timeout=60, what="b starts once alone")
    eventually(lambda: ("b", "c") in seen, timeout=30)
    assert b.refusal is None
    b.stop()
    tb.join(30)
    assert codes_b == [0]


def test_lease_released_on_stop_names_no_holder(client: Client, namespace: str) -> None:
    m = make_manager(client, namespace, [], "leaving")
    t, codes = start(m)
    eventually(m.is_leader, timeout=30)
    m.stop()
    t.join(30)
    assert codes == [0]
    path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/le-{namespace}"
    assert not client.request("GET", path)["spec"].get("holderIdentity")
