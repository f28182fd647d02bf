"""Fixtures for the fault tests: the fault-injecting proxy in front of kube-apiserver
(the manager run as a real process, to be killed, is tests/integration/manager_process.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hack.testenv import ControlPlane
from hack.testenv.faultproxy import FaultProxy
from runtime import Client
from tests.integration.controller.conftest import (  # noqa: F401 (fixtures)
    admin,
    env_of,
    group,
    installed,
    pods_of,
)


@pytest.fixture(scope="module")
def proxy(installed: ControlPlane,  # noqa: F811 (the imported fixture)
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultProxy]:
    cp = installed
    p = FaultProxy(cp.ports["apiserver"], cp.ca, cp.admin,
                   tmp_path_factory.mktemp("faultproxy")).start()
    yield p
    p.stop()


def lease_holder(c: Client, namespace: str, lease: str) -> str:
    try:
        lease_obj = c.request(
            "GET", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{lease}")
    except Exception:  # not created yet
        return ""
    return (lease_obj.get("spec") or {}).get("holderIdentity") or ""


def device_holders(c: Client, namespace: str, names: list[str]) -> list[tuple[str, str]]:
    """(node, device) of every pod of these workloads; exactly one pod each."""
    held = []
    for n in names:
        pods = pods_of(c, namespace, n)
        assert len(pods) == 1, f"{n}: {len(pods)} pods"
        devs = env_of(pods[0], "CUDA_VISIBLE_DEVICES") or ""
        held += [(pods[0]["spec"]["nodeName"], d) for d in devs.split(",") if d]
    return held
