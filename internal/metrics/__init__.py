"""Domain metrics of gpu-orchestrator (prometheus-client), served on the manager's
/metrics next to the framework's workqueue_* and controller_runtime_* series."""

from internal.metrics.domain import (
    BAD_OBJECTS,
    CREATE_TO_BOUND,
    DECISION_LATENCY,
    DEVICE_CONFLICTS,
    FAILURES,
    METRIC_NAMES,
    PREEMPTIONS,
    RETRIES,
    SCHEDULING_ATTEMPTS,
    STATE,
)

__all__ = [
    "BAD_OBJECTS",
    "CREATE_TO_BOUND",
    "DECISION_LATENCY",
    "DEVICE_CONFLICTS",
    "FAILURES",
    "METRIC_NAMES",
    "PREEMPTIONS",
    "RETRIES",
    "SCHEDULING_ATTEMPTS",
    "STATE",
]
