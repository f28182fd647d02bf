"""A tiny run of the benchmark (bench/): every system (bare pods, Jobs, ours) places
every unit, so does ours through a kill -9 of the controller, the numbers come out,
nothing is given twice, and everything it started is stopped.

It starts its own small control plane (it needs kube-scheduler, which the session
``cluster`` does not run), reusing the binaries that ``cluster`` was started with.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.__main__ import main
from hack.testenv import ControlPlane


def test_bench_smoke(cluster: ControlPlane, tmp_path: Path) -> None:
    out = tmp_path / "results"
    code = main(["--sizes", "4", "--burst", "20", "--rate", "20", "--duration", "1",
                 "--no-micro", "--out", str(out), "--bin-dir", str(cluster.bin)])
    assert code == 0
    doc = json.loads((out / "bench.json").read_text())
    (size,) = doc["e2e"]
    assert set(size["systems"]) == {"kube-scheduler", "kube-scheduler-jobs", "gpu-orchestrator"}
    killed = size["systems"]["gpu-orchestrator"]["burst_kill9"]
    assert killed["bound"] == 20 and killed["killed"]["old_pid"] != killed["killed"]["new_pid"]
    assert killed["double_booking"]["violations"] == 0, killed["double_booking"]
    for name, res in size["systems"].items():
        for phase, units in (("burst", 20), ("steady", 20)):
            r = res[phase]
            assert r["bound"] == units, (name, phase, r)
            assert r["double_booking"]["violations"] == 0, (name, phase, r["double_booking"])
            assert r["api_requests_own"] > 0, (name, phase)
            assert r["latency_p99_s"] is not None
        assert res["process"]["peak_rss_mib"] > 0
    try:
        import matplotlib  # noqa: F401  (the bench extra; make test installs dev only)
    except ImportError:
        pass
    else:
        assert (out / "bound_over_time.png").stat().st_size > 0
    assert "kube-scheduler" in (out / "table.md").read_text()


def test_bench_kueue_smoke(cluster: ControlPlane, tmp_path: Path) -> None:
    """Kueue (built on first use from its Go module, hack/testenv/peers.sh) and ours
    with one GPUQueue over the cluster are systems of the same run: Kueue admits every
    suspended Job through its Workload (its webhooks on 127.0.0.1 answered the
    creates), kube-scheduler binds the pods, and the ratio table compares them. The
    Job baseline after Kueue still gets its Jobs created: Kueue's webhooks (failure
    policy Fail) leave with it."""
    out = tmp_path / "results"
    systems = "kueue,kube-scheduler-jobs,gpu-orchestrator-queue"
    code = main(["--sizes", "4", "--burst", "12", "--rate", "12", "--duration", "1",
                 "--no-micro", "--no-kill", "--systems", systems,
                 "--out", str(out), "--bin-dir", str(cluster.bin)])
    assert code == 0
    doc = json.loads((out / "bench.json").read_text())
    (size,) = doc["e2e"]
    assert set(size["systems"]) == set(systems.split(","))
    for name, res in size["systems"].items():
        for phase in ("burst", "steady"):
            r = res[phase]
            assert r["bound"] == 12, (name, phase, r)
            assert r["double_booking"]["violations"] == 0, (name, phase, r["double_booking"])
    for phase in ("burst", "steady"):
        kueue = size["systems"]["kueue"][phase]["audit"]["detail"]["kueue"]
        assert kueue.get("create workloads", 0) >= 12, kueue  # one Workload per Job
        assert kueue.get("patch jobs", 0) >= 12, kueue  # each Job unsuspended by Kueue
    table = (out / "table.md").read_text()
    assert "ours with one queue / Kueue" in table
