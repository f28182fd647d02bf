"""The example of docs/framework.md, run as written against the local control plane:
editing a ConfigMap reconciles it (the example once filtered ConfigMap updates on
metadata.generation, which ConfigMaps do not have, so edits never reconciled)."""

from __future__ import annotations

import re
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from hack.testenv import ControlPlane
from tests.waiting import eventually

ROOT = Path(__file__).resolve().parents[3]


def example() -> str:
    text = (ROOT / "docs" / "framework.md").read_text(encoding="utf-8")
    section = text.split("## A controller in a few lines", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_example_binds_loopback_and_watches_only_configmaps() -> None:
    code = example()
    assert 'metrics_bind_address="127.0.0.1:' in code
    assert 'health_probe_bind_address="127.0.0.1:' in code
    assert "GenerationChangedPredicate()" not in code
    assert re.findall(r"\.(?:for_|owns|watches)\(\"v1\", \"(\w+)\"", code) == ["ConfigMap"]


def _seen(cluster: ControlPlane, ns: str, name: str) -> list[str]:
    code, body = cluster.api(
        "GET", f"/api/v1/namespaces/{ns}/events?fieldSelector=involvedObject.name={name},"
               "reason=Seen")
    assert code == 200, body
    return [e["message"] for e in body["items"]]


def test_editing_a_configmap_reconciles_it(cluster: ControlPlane, namespace: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
    code = example()
    code = code.replace("raise SystemExit(mgr.start(install_signal_handlers=True))", "")
    code = code.replace('"127.0.0.1:8080"', '"127.0.0.1:0"').replace(
        '"127.0.0.1:8081"', '"127.0.0.1:0"')
    code = code.replace('leader_election_id="demo"',
                        f'leader_election_id="demo-{uuid.uuid4().hex[:8]}"')
    scope: dict[str, Any] = {}
    exec(compile(code, "docs/framework.md", "exec"), scope)
    mgr = scope["mgr"]
    thread = threading.Thread(target=mgr.start, daemon=True, name="doc-example")
    thread.start()
    try:
        eventually(mgr.elected.is_set, timeout=60, what="the example's manager leads")
        cm = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": {"name": "settings", "namespace": namespace}, "data": {"a": "1"}}
        status, body = cluster.api("POST", f"/api/v1/namespaces/{namespace}/configmaps", cm)
        assert status == 201, body
        eventually(lambda: "1 keys" in _seen(cluster, namespace, "settings"), timeout=60,
                   what="the new ConfigMap reconciled")
        status, body = cluster.api(
            "PATCH", f"/api/v1/namespaces/{namespace}/configmaps/settings",
            {"data": {"a": "1", "b": "2"}}, content_type="application/merge-patch+json")
        assert status == 200, body
        eventually(lambda: "2 keys" in _seen(cluster, namespace, "settings"), timeout=60,
                   what="the edited ConfigMap reconciled")
    finally:
        mgr.stop()
        thread.join(30)
    assert not thread.is_alive()
