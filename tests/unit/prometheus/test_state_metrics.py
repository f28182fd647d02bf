"""The gauges read from the controller's state at scrape time: what a shared device
has given out, per device (issue: metrics of allocated memory per device)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from internal.metrics.domain import METRIC_NAMES, StateCollector


def test_shared_devices_report_their_part_and_memory() -> None:
    state = StateCollector()
    state.set_sources(dict, lambda: ({}, {}),
                      shares=lambda: [("n1", 1, 0.75, 81920), ("n2", 0, 0.5, None)])
    registry = CollectorRegistry()
    registry.register(state)
    text = generate_latest(registry).decode()
    assert 'gpu_orchestrator_device_share_allocated_ratio{device="1",node="n1"} 0.75' in text
    assert 'gpu_orchestrator_device_share_allocated_ratio{device="0",node="n2"} 0.5' in text
    assert ('gpu_orchestrator_device_share_allocated_memory_mib{device="1",node="n1"} 61440.0'
            in text)
    assert 'memory_mib{device="0",node="n2"}' not in text  # its memory is unknown
    assert {"gpu_orchestrator_device_share_allocated_ratio",
            "gpu_orchestrator_device_share_allocated_memory_mib"} <= METRIC_NAMES
