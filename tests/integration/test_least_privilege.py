"""Least privilege, proven: what each of our service accounts may do, as
``kubectl auth can-i --list`` reports it on the local control plane with config/
installed, equals the committed list in tests/integration/rbac_expected/.

A change to config/ RBAC that widens (or narrows) an account fails here until the
list is regenerated and reviewed:

    GPU_ORCH_UPDATE_RBAC_EXPECTED=1 .venv/bin/pytest tests/integration/test_least_privilege.py

Each account is listed in a tenant's namespace (a fresh one, written ``<tenant>``)
and in gpu-orchestrator-system. The lists include what Kubernetes grants every
authenticated account (self reviews, discovery).
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from hack.testenv import ControlPlane

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = Path(__file__).resolve().parent / "rbac_expected"
NS = "gpu-orchestrator-system"
ACCOUNTS = ["gpu-orchestrator", "gpu-orchestrator-agent", "gpu-orchestrator-webhook",
            "gpu-orchestrator-webhook-certs"]
UPDATE = os.environ.get("GPU_ORCH_UPDATE_RBAC_EXPECTED") == "1"


@pytest.fixture(scope="module")
def rbac(cluster: ControlPlane) -> Iterator[str]:
    """config/ applied, plus the webhook's and the certificate Job's RBAC (not the
    webhook itself: its configuration would intercept every other test's pods);
    yields a fresh tenant namespace."""
    cluster.kubectl("apply", "-k", str(ROOT / "config"))
    docs = [d for f in ("rbac.yaml", "certs_job.yaml")
            for d in yaml.safe_load_all((ROOT / "config" / "webhook" / f).read_text())
            if d["kind"] not in ("Job", "CronJob")]
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
    tenant = f"lp-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", tenant)
    yield tenant
    cluster.kubectl("delete", "namespace", tenant, "--wait=false")


def normalize(out: str, tenant: str) -> str:
    """kubectl's table with single spaces, rows sorted, and the items of each
    ``[...]`` sorted (kubectl merges rules in no stable order)."""
    def row(line: str) -> str:
        line = " ".join(line.split())
        return re.sub(r"\[([^\]]*)\]",
                      lambda m: "[" + " ".join(sorted(m.group(1).split())) + "]", line)
    lines = [row(line) for line in out.splitlines() if line.strip()]
    return "\n".join([lines[0], *sorted(lines[1:])]).replace(tenant, "<tenant>") + "\n"


def can_i_list(cluster: ControlPlane, account: str, namespace: str, tenant: str) -> str:
    out = cluster.kubectl("auth", "can-i", "--list",
                          f"--as=system:serviceaccount:{NS}:{account}",
                          f"--namespace={namespace}").stdout
    return normalize(out, tenant)


@pytest.mark.parametrize("account", ACCOUNTS)
@pytest.mark.parametrize("where", ["tenant", NS])
def test_each_account_may_do_exactly_what_is_committed(
        cluster: ControlPlane, rbac: str, account: str, where: str) -> None:
    namespace = rbac if where == "tenant" else NS
    got = can_i_list(cluster, account, namespace, rbac)
    path = EXPECTED / f"{account}.{where}.txt"
    if UPDATE:
        EXPECTED.mkdir(exist_ok=True)
        path.write_text(got)
    assert path.exists(), f"{path} missing: run with GPU_ORCH_UPDATE_RBAC_EXPECTED=1"
    assert got == path.read_text(), (
        f"{account} in {where} may do other than {path.relative_to(ROOT)} says; if intended, "
        f"regenerate it (see this module's docstring) and review the diff.\ngot:\n{got}")


def test_the_webhook_may_do_nothing_but_what_everyone_may(
        cluster: ControlPlane, rbac: str) -> None:
    """The webhook has no RBAC of its own: its list is the one every account gets."""
    webhook = can_i_list(cluster, "gpu-orchestrator-webhook", rbac, rbac)
    nobody = cluster.kubectl("auth", "can-i", "--list",
                             f"--as=system:serviceaccount:{rbac}:nobody",
                             f"--namespace={rbac}").stdout
    assert webhook == normalize(nobody, rbac)
