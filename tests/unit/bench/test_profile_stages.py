"""bench/profile_stages.py: a unit's latency split into stages from a kept run's
audit log and the controller's log, ours and kube-scheduler's alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import profile_stages as ps

T = "2026-11-28T12:44:20."


def _event(verb: str, resource: str, name: str, got: str, done: str, *, ns: str = "steady",
           agent: str = "runtime-client/0.1", sub: str | None = None, code: int = 201) -> dict:
    ref = {"resource": resource, "namespace": ns, "name": name}
    if sub:
        ref["subresource"] = sub
    return {"verb": verb, "objectRef": ref, "userAgent": agent,
            "responseStatus": {"code": code},
            "requestReceivedTimestamp": T + got + "Z", "stageTimestamp": T + done + "Z"}


def test_ours_unit_is_split_at_the_workload_create_and_our_pod_create() -> None:
    events = [
        _event("create", "gpuworkloads", "u-1", "100000", "140000", agent="gpu-bench/0.1"),
        # a refused first try of the pod create is not the unit's pod
        _event("create", "pods", "u-1-0", "150000", "151000", code=409),
        _event("create", "pods", "u-1-0", "190000", "230000"),
        _event("patch", "gpuworkloads", "u-1", "300000", "310000", sub="status", code=200),
    ]
    committed = ps.committed_times([
        f"{T}231500Z [info     ] placement.committed            "
        "placements=0=n1:3 workload=steady/u-1"])
    stages = ps.unit_stages(events, committed)[("steady", "u-1")]
    assert stages["create"] == pytest.approx(0.040, abs=1e-6)
    assert stages["to_pod"] == pytest.approx(0.050, abs=1e-6)
    assert stages["pod"] == pytest.approx(0.040, abs=1e-6)
    assert stages["total"] == pytest.approx(0.130, abs=1e-6)
    assert stages["booked"] == pytest.approx(0.0015, abs=1e-6)


def test_a_bare_pod_is_split_at_its_binding() -> None:
    events = [
        _event("create", "pods", "u-7", "000000", "002000", agent="gpu-bench/0.1"),
        _event("create", "pods", "u-7", "010000", "012000", sub="binding",
               agent="kube-scheduler/v1.34.4"),
    ]
    stages = ps.unit_stages(events, {})[("steady", "u-7")]
    assert stages == pytest.approx({"create": 0.002, "to_pod": 0.008, "pod": 0.002,
                                    "total": 0.012}, abs=1e-6)


def test_the_slowest_units_say_which_stage_made_them_slow() -> None:
    stages = {("s", f"u-{i}"): {"create": 0.001, "to_pod": 0.001 * i, "pod": 0.001,
                                "total": 0.002 + 0.001 * i} for i in range(100)}
    out = ps.summary(stages, slowest=2)
    assert out["stages"]["to_pod"]["p50"] == 50.0
    assert out["stages"]["to_pod"]["max"] == 99.0
    assert out["stages"]["booked"]["n"] == 0
    assert [u["unit"] for u in out["slowest"]] == ["s/u-99", "s/u-98"]
    assert out["slowest"][0]["to_pod"] == 99.0
    assert "| to_pod | 100 | 50.0 |" in ps.markdown("s", out)


def test_the_audit_log_is_read_per_namespace_and_a_torn_line_skipped(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    lines = [json.dumps(_event("create", "gpuworkloads", "u-1", "1", "2", ns="a")),
             json.dumps(_event("create", "gpuworkloads", "u-1", "1", "2", ns="b")),
             '{"verb": "create", "objectRef": {"namespace": "a"']
    log.write_text("\n".join(lines) + "\n")
    got = list(ps.audit_events(log, {"a"}))
    assert [e["objectRef"]["namespace"] for e in got] == ["a"]
