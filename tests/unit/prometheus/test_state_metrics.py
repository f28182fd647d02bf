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


def test_each_held_device_reports_its_shares_mig_instances_and_holders() -> None:
    """Per device: the shares on it, the MIG instances held of it, and one
    ``device_holder`` series per holder (the dashboard's holder table)."""
    from internal.scheduling.holdings import DeviceUse

    state = StateCollector()
    state.set_sources(dict, lambda: ({}, {}), devices=lambda: [
        ("n1", 0, DeviceUse("mig", ("team/a", "team/b"), migs=3)),
        ("n1", 1, DeviceUse("share", ("team/c", "team/d"))),
        ("n2", 2, DeviceUse("whole", ("team/e",)))])
    registry = CollectorRegistry()
    registry.register(state)
    text = generate_latest(registry).decode()
    assert 'gpu_orchestrator_device_mig_instances_allocated{device="0",node="n1"} 3.0' in text
    assert 'gpu_orchestrator_device_shares{device="1",node="n1"} 2.0' in text
    assert 'gpu_orchestrator_device_shares{device="0",node="n1"}' not in text
    assert ('gpu_orchestrator_device_holder{device="2",holder="team/e",kind="whole",'
            'node="n2"} 1.0') in text
    assert text.count("gpu_orchestrator_device_holder{") == 5
    assert {"gpu_orchestrator_device_shares", "gpu_orchestrator_device_mig_instances_allocated",
            "gpu_orchestrator_device_holder"} <= METRIC_NAMES
