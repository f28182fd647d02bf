"""The agent's Prometheus metrics, on a registry of its own.

Per device (labels ``node``, ``gpu`` = host index, ``uuid``, ``model``), read from
the latest sample at scrape time, so a device that disappears leaves no stale series:

- ``gpu_orchestrator_agent_device_memory_used_bytes``
- ``gpu_orchestrator_agent_device_memory_total_bytes``
- ``gpu_orchestrator_agent_device_utilization_ratio`` (0..1)
- ``gpu_orchestrator_agent_device_temperature_celsius``
- ``gpu_orchestrator_agent_device_power_watts``
- ``gpu_orchestrator_agent_device_ecc_errors_total`` (volatile uncorrected; a counter
  mirrored from NVML, reset when the driver reloads)
- ``gpu_orchestrator_agent_device_healthy`` (1 or 0)

Per agent: ``gpu_orchestrator_agent_reports_total{result}`` (GPUNode status writes),
``gpu_orchestrator_agent_last_report_timestamp_seconds`` and
``gpu_orchestrator_agent_polls_total{result}`` (NVML polls).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from internal.agent.nvml.types import NodeSample

PREFIX = "gpu_orchestrator_agent_device_"
LABELS = ["node", "gpu", "uuid", "model"]


class _DeviceCollector(Collector):
    def __init__(self, node: str) -> None:
        self.node = node
        self._lock = threading.Lock()
        self._sample: NodeSample | None = None

    def set(self, s: NodeSample) -> None:
        with self._lock:
            self._sample = s

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            s = self._sample
        fams = {
            "memory_used_bytes": GaugeMetricFamily(
                PREFIX + "memory_used_bytes", "Device memory in use, bytes.", labels=LABELS),
            "memory_total_bytes": GaugeMetricFamily(
                PREFIX + "memory_total_bytes", "Device memory, bytes.", labels=LABELS),
            "utilization_ratio": GaugeMetricFamily(
                PREFIX + "utilization_ratio", "GPU utilization over the last sample, 0..1.",
                labels=LABELS),
            "temperature_celsius": GaugeMetricFamily(
                PREFIX + "temperature_celsius", "Core temperature, Celsius.", labels=LABELS),
            "power_watts": GaugeMetricFamily(
                PREFIX + "power_watts", "Power draw, watts.", labels=LABELS),
            "ecc_errors": CounterMetricFamily(
                PREFIX + "ecc_errors", "Volatile uncorrected ECC errors.", labels=LABELS),
            "healthy": GaugeMetricFamily(
                PREFIX + "healthy", "1 when the device is healthy, else 0.", labels=LABELS),
        }
        for d in s.devices if s is not None else ():
            lv = [self.node, str(d.index), d.uuid, d.model]
            fams["memory_used_bytes"].add_metric(lv, d.memory_used_bytes)
            fams["memory_total_bytes"].add_metric(lv, d.memory_total_bytes)
            fams["utilization_ratio"].add_metric(lv, d.utilization / 100.0)
            fams["temperature_celsius"].add_metric(lv, d.temperature_c)
            fams["power_watts"].add_metric(lv, d.power_watts)
            fams["ecc_errors"].add_metric(lv, d.ecc_errors)
            fams["healthy"].add_metric(lv, 1.0 if d.healthy else 0.0)
        yield from fams.values()

    def describe(self) -> Iterator[Metric]:
        return iter(())


class AgentMetrics:
    def __init__(self, node: str, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._devices = _DeviceCollector(node)
        self.registry.register(self._devices)
        self.reports = Counter(
            "gpu_orchestrator_agent_reports", "GPUNode status writes by result.",
            ["result"], registry=self.registry)
        self.polls = Counter(
            "gpu_orchestrator_agent_polls", "NVML polls by result.", ["result"],
            registry=self.registry)
        self.last_report = Gauge(
            "gpu_orchestrator_agent_last_report_timestamp_seconds",
            "Unix time of the last successful GPUNode status write.", registry=self.registry)

    def observe(self, s: NodeSample) -> None:
        self._devices.set(s)
