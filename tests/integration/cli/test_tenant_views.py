"""A tenant opens every view: a user bound to the built-in ``edit`` role in its
namespace (which our ``gpuworkload-editor`` extends) and, with a ClusterRoleBinding,
to ``gpu-orchestrator-viewer`` runs ``kubectl gpu nodes``, ``status`` and ``queues``
through impersonation (``--as``) on the real kube-apiserver. It sees the cluster's
devices and queues, its own namespace's holders by name, and no other namespace's
names (docs/security.md, "What a tenant sees"). Without the viewer role each view
says in one line which role it needs."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from hack.testenv import ControlPlane
from tests.integration.cli.test_plugin import (  # noqa: F401  (fixture)
    API,
    Plugin,
    crds,
    create_child,
    create_workload,
)
from tests.waiting import eventually

ROOT = Path(__file__).resolve().parents[3]
VIEWER = "gpu-orchestrator-viewer"
#: edit in its namespace and the viewer role cluster-wide
JANE = f"jane-{uuid.uuid4().hex[:6]}"
#: edit in its namespace only
JOE = f"joe-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def gpu(cluster: ControlPlane, capsys: pytest.CaptureFixture[str], crds: None) -> Plugin:  # noqa: F811
    return Plugin(cluster, capsys)


def _namespace(cluster: ControlPlane, prefix: str) -> str:
    ns = f"{prefix}-{uuid.uuid4().hex[:6]}"
    code, body = cluster.api("POST", "/api/v1/namespaces", {
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    assert code == 201, body
    return ns


def _viewer_rules(cluster: ControlPlane) -> set[str]:
    role = json.loads(cluster.kubectl("get", "clusterrole", VIEWER, "-o", "json").stdout)
    return {r for rule in role.get("rules") or () for r in rule.get("resources") or ()}


@pytest.fixture(scope="module")
def tenancy(cluster: ControlPlane, crds: None) -> Iterator[dict]:  # noqa: F811
    """config/rbac's user roles; the tenant's namespace holding node4:0 with ``mine``,
    another namespace holding node4:1 with ``theirs``; a GPUQueue."""
    cluster.kubectl("apply", "-f", str(ROOT / "config" / "rbac" / "user_roles.yaml"))
    # kube-controller-manager's aggregation controller fills the viewer's rules
    eventually(lambda: {"gpunodes", "gpuqueues", "nodes"} <= _viewer_rules(cluster),
               what=f"{VIEWER} aggregated")
    mine, theirs = _namespace(cluster, "tenant"), _namespace(cluster, "other")
    queue = f"team-{uuid.uuid4().hex[:6]}"
    try:
        for user in (JANE, JOE):
            cluster.kubectl("create", "rolebinding", f"{user}-edit", "--clusterrole=edit",
                            f"--user={user}", "-n", mine)
        cluster.kubectl("create", "clusterrolebinding", f"{JANE}-viewer",
                        f"--clusterrole={VIEWER}", f"--user={JANE}")
        placed = {"phase": "Running", "gpus": 1, "nodes": "node4"}
        create_workload(cluster, mine, "mine", 1, 1, status={
            **placed, "placements": [{"index": 0, "node": "node4", "devices": [0]}]})
        create_child(cluster, mine, "mine", 0, "node4", [0])
        create_workload(cluster, theirs, "theirs", 1, 1, status={
            **placed, "placements": [{"index": 0, "node": "node4", "devices": [1]}]})
        create_child(cluster, theirs, "theirs", 0, "node4", [1])
        code, body = cluster.api("POST", f"{API}/gpuqueues", {
            "apiVersion": "gpu.orchestrator.dev/v1alpha1", "kind": "GPUQueue",
            "metadata": {"name": queue},
            "spec": {"nominalGPUs": 4, "namespaceSelector": {
                "matchLabels": {"kubernetes.io/metadata.name": mine}}}})
        assert code == 201, body
        yield {"mine": mine, "theirs": theirs, "queue": queue}
    finally:
        cluster.kubectl("delete", "clusterrolebinding", f"{JANE}-viewer", check=False)
        cluster.api("DELETE", f"{API}/gpuqueues/{queue}")
        for ns in (mine, theirs):
            cluster.api("DELETE", f"/api/v1/namespaces/{ns}")


@pytest.mark.parametrize("view", ["nodes", "status", "queues"])
def test_without_the_viewer_role_a_view_names_the_role_it_needs(
        gpu: Plugin, tenancy: dict, view: str) -> None:
    code, out, err = gpu(view, "-n", tenancy["mine"], "--as", JOE, ok=False)
    assert (code, out) == (1, ""), err
    assert err.startswith(f"error: kubectl gpu {view} needs the ClusterRole {VIEWER}, bound "
                          "to you with a ClusterRoleBinding"), err
    assert err.count("\n") == 1 and "Traceback" not in err and "{" not in err, err
    assert f'"{JOE}"' in err, "the API server's own reason follows"


def test_a_tenant_sees_the_devices_and_its_own_holders_only(
        gpu: Plugin, tenancy: dict) -> None:
    mine, theirs = tenancy["mine"], tenancy["theirs"]
    data = gpu.json("nodes", "-n", mine, "--as", JANE)
    assert data["holdersFrom"] == mine
    node4 = {d["index"]: d for n in data["nodes"] if n["name"] == "node4"
             for d in n["devices"]}
    assert len(node4) == 4, "every device of the node, with its state"
    assert f"{mine}/mine[0]" in (node4[0]["holder"] or "")
    _, table, _ = gpu("nodes", "-n", mine, "--as", JANE)
    assert f"{mine}/mine[0]" in table
    assert theirs not in json.dumps(data) and theirs not in table, \
        "no name from a namespace the tenant may not read"
    assert (f"holders: namespace {mine} only (you may not list pods and GPUWorkloads in "
            "every namespace)") in table


def _row(table: str, node: str, gpu: str) -> str:
    return next(line for line in table.splitlines() if line.split()[:2] == [node, gpu])


def test_a_tenant_is_never_told_a_device_another_namespace_holds_is_free(
        gpu: Plugin, tenancy: dict) -> None:
    """node4:1 is held by a pod of a namespace the tenant may not read, and nothing
    the viewer role reads says which devices are held: the device is ``unknown``,
    never ``free``, and the node's free count is an upper bound, never a count."""
    mine, theirs = tenancy["mine"], tenancy["theirs"]
    # whoever reads every namespace sees node4:1 held and two devices free
    admin = {n["name"]: n for n in gpu.json("nodes")["nodes"]}["node4"]
    assert f"{theirs}/theirs[0]" in (admin["devices"][1].get("holder") or "")
    assert admin["free"] == 2

    data = gpu.json("nodes", "-n", mine, "--as", JANE)
    node4 = {n["name"]: n for n in data["nodes"]}["node4"]
    devices = {d["index"]: d for d in node4["devices"]}
    assert not devices[1]["free"] and "holder" not in devices[1], devices[1]
    assert devices[1]["unknown"] is True
    assert node4["free"] is None and node4["freeAtMost"] == 3, node4
    _, table, _ = gpu("nodes", "-n", mine, "--as", JANE)
    for index in ("1", "2", "3"):
        row = _row(table, "node4", index)
        assert "free" not in row and "unknown" in row, row
    assert f"{mine}/mine[0]" in _row(table, "node4", "0")
    assert "<=3" in next(line for line in table.splitlines()
                         if line.split()[:1] == ["node4"] and "Ready" in line.split())
    assert ("a device no holder of namespace " + mine + " holds shows unknown, "
            "not free: another namespace may hold it") in table

    status = gpu.json("status", "-n", mine, "--as", JANE)
    assert status["gpus"]["free"] is None and status["gpus"]["freeAtMost"] >= 3
    _, out, _ = gpu("status", "-n", mine, "--as", JANE)
    assert "Free:" in out and "at most" in out, out


def test_a_tenant_opens_status_and_queues(gpu: Plugin, tenancy: dict) -> None:
    mine, theirs = tenancy["mine"], tenancy["theirs"]
    _, out, _ = gpu("status", "-n", mine, "--as", JANE)
    assert "GPUs:" in out and theirs not in out
    assert f"holders: namespace {mine} only" in out
    _, out, _ = gpu("queues", "--as", JANE)
    assert tenancy["queue"] in out


def test_a_tenant_asking_for_every_namespace_is_told_the_role(
        gpu: Plugin, tenancy: dict) -> None:
    code, _, err = gpu("workloads", "-A", "--as", JANE, ok=False)
    assert code == 1 and err.count("\n") == 1, err
    assert err.startswith("error: kubectl gpu workloads needs the ClusterRole view (or "
                          "gpuworkload-viewer) bound with a ClusterRoleBinding"), err


def test_the_viewer_role_reads_no_namespace(cluster: ControlPlane, tenancy: dict) -> None:
    """What the role grants: the cluster-scoped inventory and queues, read only."""
    rules = json.loads(cluster.kubectl("get", "clusterrole", VIEWER, "-o", "json").stdout)
    for rule in rules["rules"]:
        assert set(rule["verbs"]) <= {"get", "list", "watch"}, rule
    assert _viewer_rules(cluster) == {"gpunodes", "gpuqueues", "nodes", "resourceslices"}
    can = cluster.kubectl("auth", "can-i", "list", "pods", "--all-namespaces",
                          f"--as={JANE}", check=False)
    assert can.stdout.strip() == "no"
