"""Domain metrics of gpu-orchestrator (prometheus-client), served on the manager's
/metrics next to the framework's workqueue_* and controller_runtime_* series."""

from internal.metrics.domain import (
    BAD_OBJECTS,
    CHILD_CREATES,
    CREATE_TO_BOUND,
    DECISION_LATENCY,
    DEVICE_CONFLICTS,
    FAILURES,
    METRIC_NAMES,
    PREEMPTIONS,
    RETRIES,
    SCHEDULING_ATTEMPTS,
    STATE,
    STATUS_COALESCED,
    STATUS_DROPPED,
    STATUS_QUEUED,
    STATUS_WRITE_LAG,
    STATUS_WRITES,
)

__all__ = [
    "BAD_OBJECTS",
    "CHILD_CREATES",
    "CREATE_TO_BOUND",
    "DECISION_LATENCY",
    "DEVICE_CONFLICTS",
    "FAILURES",
    "METRIC_NAMES",
    "PREEMPTIONS",
    "RETRIES",
    "SCHEDULING_ATTEMPTS",
    "STATE",
    "STATUS_COALESCED",
    "STATUS_DROPPED",
    "STATUS_QUEUED",
    "STATUS_WRITES",
    "STATUS_WRITE_LAG",
]
