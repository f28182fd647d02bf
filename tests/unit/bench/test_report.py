"""The benchmark's report: CPU per unit of each system and of kube-apiserver in the
table and the ratios, and a plot with a panel for every phase that ran and none
empty (the kill -9 burst runs at the first size only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench import report


def row(bound: int, cpu_s: float, apiserver_s: float) -> dict[str, Any]:
    return {"units": bound, "bound": bound, "throughput_per_s": 10.0,
            "latency_p50_s": 0.01, "latency_p99_s": 0.02, "cpu_s": cpu_s,
            "cpu_s_control_plane": {"kube-apiserver": apiserver_s, "etcd": 1.0},
            "bound_curve_s": [0.1 * i for i in range(bound)],
            "double_booking": {"violations": 0}, "api_requests_per_unit_own": 2.0}


def doc() -> dict[str, Any]:
    def size(nodes: int, kill: bool) -> dict[str, Any]:
        ours = {"burst": row(100, 0.8, 2.0), "steady": {**row(50, 0.3, 1.0), "rate_per_s": 50},
                "process": {"peak_rss_mib": 90}}
        if kill:
            ours["burst_kill9"] = row(100, 0.5, 2.5)
        return {"nodes": nodes, "gpus_per_node": 8, "systems": {
            "kube-scheduler": {"burst": row(100, 0.2, 1.0),
                               "steady": {**row(50, 0.1, 0.5), "rate_per_s": 50},
                               "process": {"peak_rss_mib": 80}},
            "gpu-orchestrator": ours}}
    return {"machine": {}, "e2e": [size(100, True), size(1000, False)]}


def test_cpu_per_unit_is_per_bound_unit_in_milliseconds() -> None:
    r = row(100, 0.8, 2.0)
    assert report.cpu_ms_per_unit(r) == 8.0
    assert report.cpu_ms_per_unit(r, "kube-apiserver") == 20.0
    assert report.cpu_ms_per_unit({**r, "bound": 0}) is None
    assert report.cpu_ms_per_unit(None) is None


def test_the_table_and_ratios_carry_both_cpus_per_unit() -> None:
    text = report.markdown(doc())
    assert "controller CPU ms/unit burst / steady" in text
    assert "| 8.0 / 6.0 | 20.0 / 20.0 |" in text  # ours: controller, kube-apiserver
    assert "| 2.0 / 2.0 | 10.0 / 10.0 |" in text  # kube-scheduler
    assert "| 4.00x, 3.00x | 2.00x, 2.00x |" in text  # ours / kube-scheduler


def test_panels_exist_only_where_there_is_data() -> None:
    assert report.panels(doc()) == [(0, "burst"), (0, "steady"), (0, "burst_kill9"),
                                    (0, "cpu"), (1, "burst"), (1, "steady"), (1, "cpu")]


def test_the_plot_has_no_empty_panel(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt  # a dev dependency: the plot is checked in CI

    saved: list[Any] = []
    real = plt.close
    plt.close = lambda fig=None: saved.append(fig)  # type: ignore[assignment]
    try:
        assert report.plot(doc(), tmp_path / "p.png")
    finally:
        plt.close = real  # type: ignore[assignment]
    fig = saved[0]
    assert len(fig.axes) == 7
    for ax in fig.axes:
        assert ax.lines or ax.patches, f"empty panel: {ax.get_title()}"
    real(fig)
    assert (tmp_path / "p.png").stat().st_size > 0
