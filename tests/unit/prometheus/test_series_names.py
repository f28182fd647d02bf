"""``series_names``: the domain metrics' exported names come from the metrics
themselves, so a metric added to internal/metrics/domain.py is known to the dashboard
and alert checks without a second list to keep in step."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from internal.metrics.domain import METRIC_NAMES, STATE, series_names


def test_names_are_read_from_the_metrics_labelled_or_not() -> None:
    reg = CollectorRegistry()
    metrics = [Counter("x_things", "x", ["kind"], registry=reg),  # no sample yet
               Histogram("x_wait_seconds", "x", registry=reg),
               Gauge("x_queued", "x", registry=reg)]
    assert series_names(metrics) == {"x_things_total", "x_wait_seconds", "x_queued"}


def test_every_domain_metric_is_named() -> None:
    assert series_names([STATE]) <= METRIC_NAMES
    assert {"gpu_orchestrator_bad_objects_total", "gpu_orchestrator_status_writes_queued",
            "gpu_orchestrator_create_to_bound_seconds"} <= METRIC_NAMES
