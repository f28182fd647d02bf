"""The GPUWorkload controller running in-process against the local control plane,
as its own ServiceAccount (so config/rbac is what it gets), plus node groups that
isolate each test's capacity: kwok nodes with a unique label the test's workloads
select, deleted afterwards."""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from api.v1alpha1.types import API_VERSION, DeviceExposure
from controllers.gpuworkload.reconciler import GPUWorkloadReconciler
from controllers.podbinding.controller import PodBindingOptions
from controllers.setup import ControllerOptions, setup_controllers
from hack.testenv import ControlPlane
from internal.scheduling.snapshot import NodeInfo
from runtime import Client, Forbidden, Manager, NotFound, Options, RestConfig
from runtime.errors import TooManyRequests
from tests.waiting import eventually, watched

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
SA = "system:serviceaccount:gpu-orchestrator-system:gpu-orchestrator"
SA_GROUPS = ["system:serviceaccounts", "system:serviceaccounts:gpu-orchestrator-system",
             "system:authenticated"]
GROUP_LABEL = "test.gpu-orchestrator.dev/group"
#: the hostile tenant of the tenancy tests (test_tenant_isolation, test_tenant_attacks)
TENANT = "tenant-a"


@pytest.fixture(scope="session")
def installed(cluster: ControlPlane) -> ControlPlane:
    cluster.kubectl("apply", "-k", os.path.join(ROOT, "config"))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                    "crd/gpuworkloads.gpu.orchestrator.dev", "crd/gpunodes.gpu.orchestrator.dev",
                    "crd/gpuqueues.gpu.orchestrator.dev")
    return cluster


@pytest.fixture(scope="session")
def admin(installed: ControlPlane) -> Client:
    return Client(RestConfig.from_kubeconfig(str(installed.kubeconfig)))


class Running:
    """A manager with the GPUWorkload controller, on a thread; restartable. With
    ``pod_binding`` (True or PodBindingOptions) it also runs the pod-binding
    controller of the seed path, on the same ledger."""

    def __init__(self, cluster: ControlPlane,
                 pod_binding: bool | PodBindingOptions = False, leader_elect: bool = False,
                 **opts: Any) -> None:
        self.cluster = cluster
        self.opts = opts
        self.pod_binding = pod_binding
        #: hold the product's Lease as a deployed replica does (what `helm test` reads)
        self.leader_elect = leader_elect
        self.mgr: Manager | None = None
        self.thread: threading.Thread | None = None
        self.codes: list[int] = []
        self.reconciler: GPUWorkloadReconciler | None = None

    def start(self) -> Running:
        config = RestConfig.from_kubeconfig(str(self.cluster.kubeconfig)).impersonating(
            SA, SA_GROUPS)
        config.qps, config.burst = 200, 400
        # no leader election unless asked (one manager per test module), but it still
        # looks for a live leader of the product's Lease, which its Role lets it read
        self.mgr = Manager(config, Options(metrics_bind_address="127.0.0.1:0",
                                           health_probe_bind_address="127.0.0.1:0",
                                           graceful_shutdown_timeout=10,
                                           leader_elect=self.leader_elect,
                                           leader_election_namespace="gpu-orchestrator-system",
                                           leader_election_id="gpu-orchestrator-leader"))
        pb = None
        if self.pod_binding:
            pb = self.pod_binding if isinstance(self.pod_binding, PodBindingOptions) else \
                PodBindingOptions(max_backoff=5.0)
        built = setup_controllers(self.mgr, ControllerOptions(**{"workers": 4, **self.opts}),
                                  pod_binding=pb)
        self.reconciler, self.binder = built.reconciler, built.binder
        mgr = self.mgr
        self.thread = threading.Thread(target=lambda: self.codes.append(mgr.start()),
                                       daemon=True, name="test-manager")
        self.thread.start()
        eventually(mgr.elected.is_set, timeout=60, what="manager started its controllers")
        return self

    def wait_nodes(self, names: list[str]) -> list[str]:
        """Waits until this controller's snapshot has ``names`` Ready and untainted (its informers
        lag the API by a moment); returns them, so ``wait_nodes(group.add(...))``."""
        def seen() -> bool:
            state = self.reconciler.state if self.reconciler is not None else None
            if state is None or not state.ready:
                return True  # its rebuild will read them from the cache
            infos = [state.node_info(n) for n in names]
            return all(i is not None and i.ready and not i.taints for i in infos)
        eventually(seen, timeout=30, what=f"controller sees nodes {names} Ready")
        return names

    def sees(self, node: str, check: Callable[[NodeInfo], object], what: str) -> NodeInfo:
        """Waits until this controller's snapshot of ``node`` satisfies ``check`` (a
        GPUNode written by a test reaches it a moment later, longer when its watch is
        re-opening), and returns that view."""
        assert self.reconciler is not None
        state = self.reconciler.ensure_state()  # built from the caches on first use

        def ok() -> NodeInfo | None:
            info = state.node_info(node)
            return info if info is not None and check(info) else None
        return eventually(ok, timeout=30, what=f"controller sees {node}: {what}")

    def stop(self) -> None:
        if self.mgr is not None:
            self.mgr.stop()
            assert self.thread is not None
            self.thread.join(30)
            assert not self.thread.is_alive(), "manager did not stop"
            self.mgr = None


@pytest.fixture(scope="module")
def controller(installed: ControlPlane) -> Iterator[Running]:
    run = Running(installed).start()
    yield run
    run.stop()


@dataclass
class NodeGroup:
    """kwok nodes named ``<id>-<i>`` labelled ``GROUP_LABEL=<id>``."""

    cluster: ControlPlane
    id: str = field(default_factory=lambda: f"g{uuid.uuid4().hex[:6]}")
    names: list[str] = field(default_factory=list)

    @property
    def selector(self) -> dict[str, str]:
        return {GROUP_LABEL: self.id}

    def add(self, count: int, gpus: int, labels: dict[str, str] | None = None) -> list[str]:
        names = [f"{self.id}-{len(self.names) + i}" for i in range(count)]
        self.cluster.create_nodes(names, gpus, labels={**self.selector, **(labels or {})})
        self.names += names
        return names

    def delete(self) -> None:
        for n in self.names:
            self.cluster.api("DELETE", f"/api/v1/nodes/{n}")


@pytest.fixture
def group(installed: ControlPlane) -> Iterator[NodeGroup]:
    g = NodeGroup(installed)
    yield g
    g.delete()


@pytest.fixture
def tenant(installed: ControlPlane, admin: Client, namespace: str) -> Client:
    """``tenant-a``, bound to ``edit`` in ``namespace`` only, once the aggregation
    controller has folded gpuworkload-editor into ``edit``."""
    admin.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                  "metadata": {"name": "tenant-edit", "namespace": namespace},
                  "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                              "name": "edit"},
                  "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                                "name": TENANT}]})
    c = admin.impersonate(TENANT, ["system:authenticated"])

    def may_list() -> bool:
        try:
            c.list(API_VERSION, "GPUWorkload", namespace=namespace)
            return True
        except (Forbidden, TooManyRequests):  # not yet aggregated / synced
            return False
    eventually(may_list, timeout=60, what="gpuworkload-editor aggregated into edit")
    return c



# ---------------------------------------------------------------------- helpers


def workload(name: str, namespace: str, annotations: dict[str, str] | None = None,
             **spec: Any) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "GPUWorkload",
            "metadata": {"name": name, "namespace": namespace,
                         "annotations": annotations or {}},
            "spec": spec}


def get_workload(c: Client, ns: str, name: str) -> dict[str, Any]:
    return c.get(API_VERSION, "GPUWorkload", name, ns)


def wait_phase(c: Client, ns: str, name: str, *phases: str, timeout: float = 30) -> dict:
    def check(w: dict) -> dict | None:
        return w if (w.get("status") or {}).get("phase") in phases else None
    return watched(c, API_VERSION, "GPUWorkload", ns, name, check, timeout=timeout,
                   what=f"{ns}/{name} in {phases}")


def wait_condition(c: Client, ns: str, name: str, type_: str, reason: str,
                   timeout: float = 30) -> dict:
    def check(w: dict) -> dict | None:
        for cond in (w.get("status") or {}).get("conditions") or ():
            if cond["type"] == type_ and cond.get("reason") == reason:
                return cond
        return None
    return watched(c, API_VERSION, "GPUWorkload", ns, name, check, timeout=timeout,
                   what=f"{ns}/{name} {type_}={reason}")


def pods_of(c: Client, ns: str, name: str) -> list[dict]:
    pods = c.list("v1", "Pod", namespace=ns,
                  label_selector=f"gpu.orchestrator.dev/workload={name}")["items"]
    return sorted(pods, key=lambda p: p["metadata"]["name"])


def env_of(pod: dict, var: str, container: int = 0) -> str | None:
    for e in pod["spec"]["containers"][container].get("env") or ():
        if e["name"] == var:
            return e.get("value")
    return None


def events_for(c: Client, ns: str, name: str) -> list[dict]:
    return c.list("v1", "Event", namespace=ns,
                  field_selector=f"involvedObject.name={name}")["items"]


def wait_events(c: Client, ns: str, name: str, *reasons: str, timeout: float = 30) -> list[dict]:
    """The Events of ``ns/name`` once one of each ``reasons`` is there (Events are
    sent asynchronously, on their own client, after the status they go with)."""
    def check() -> list[dict] | None:
        events = events_for(c, ns, name)
        have = {e["reason"] for e in events}
        return events if all(r in have for r in reasons) else None
    return eventually(check, timeout=timeout, what=f"{ns}/{name} events {reasons}")


def delete_workload(c: Client, ns: str, name: str) -> None:
    with contextlib.suppress(NotFound):
        c.delete(API_VERSION, "GPUWorkload", name, namespace=ns,
                 propagation_policy="Background")


EXPOSURES = [e.value for e in DeviceExposure]


def drop_finalizers(c: Client, api_version: str, kind: str, name: str, ns: str, *,
                    missing_ok: bool = False) -> None:
    """Lets an object a test held with a finalizer of its own go (``missing_ok``: in a
    ``finally``, so that no namespace is left stuck on it)."""
    try:
        c.patch(api_version, kind, name, {"metadata": {"finalizers": None}}, namespace=ns,
                patch_type="merge")
    except NotFound:
        if not missing_ok:
            raise


@contextlib.contextmanager
def cleanup_gpunodes(admin: Client, *names: str) -> Iterator[None]:
    """GPUNodes a test writes for its nodes are deleted when it ends."""
    try:
        yield
    finally:
        for n in names:
            with contextlib.suppress(NotFound):
                admin.delete(API_VERSION, "GPUNode", n)


@contextlib.contextmanager
def namespace_queue(admin: Client, namespace: str, nominal: int,
                    name: str | None = None) -> Iterator[str]:
    """A GPUQueue of ``nominal`` GPUs (no cohort) selecting ``namespace`` alone,
    deleted when the block ends; yields its name."""
    name = name or f"q-{uuid.uuid4().hex[:6]}"
    admin.create({"apiVersion": API_VERSION, "kind": "GPUQueue", "metadata": {"name": name},
                  "spec": {"nominalGPUs": nominal, "namespaceSelector": {
                      "matchLabels": {"kubernetes.io/metadata.name": namespace}}}})
    try:
        yield name
    finally:
        with contextlib.suppress(NotFound):
            admin.delete(API_VERSION, "GPUQueue", name)
