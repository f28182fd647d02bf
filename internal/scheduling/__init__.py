"""Pure placement logic: snapshot, ledger, filters, strategies, device picker.

No API calls, no threads, no clock. Typical use by the controller::

    ledger, problems = Ledger.rebuild(workloads, pods)      # before placing anything
    snapshot = Snapshot.build(nodes, gpunodes, ledger)       # then upsert_* on events
    scheduler = Scheduler(snapshot, ledger, rng=random.Random(seed))
    decision = scheduler.schedule(workload)                  # pure
    if decision.ok:
        decision.assume(ledger, workload)                    # book, then write status
        ...; ledger.commit(workload.key)                     # status written or pod created
    elif decision.outcome == PREEMPT:
        ...ledger.forget(each victim); decision.assume(...)  # nominated over their pods
"""

from api.v1alpha1.keys import WORKLOAD_LABEL
from internal.scheduling.devicepicker import Pick, pick_devices
from internal.scheduling.framework import (
    INVALID_MAP,
    PREEMPT,
    SCHEDULED,
    UNSCHEDULABLE,
    Decision,
    group_reasons,
    order_by_priority,
    plan_preemption,
    schedule,
)
from internal.scheduling.ledger import (
    Allocation,
    FreeIndex,
    Ledger,
    LedgerConflict,
    is_controller_pod,
    pod_gpu_request,
)
from internal.scheduling.mapparser import (
    MapEntry,
    MapParseError,
    check_map_against,
    format_scheduling_map,
    parse_scheduling_map,
)
from internal.scheduling.scheduler import Scheduler
from internal.scheduling.snapshot import COST_LABEL, DeviceInfo, NodeInfo, Snapshot
from internal.scheduling.strategies import Strategy, create, names

__all__ = [
    "COST_LABEL",
    "INVALID_MAP",
    "PREEMPT",
    "SCHEDULED",
    "UNSCHEDULABLE",
    "WORKLOAD_LABEL",
    "Allocation",
    "Decision",
    "DeviceInfo",
    "FreeIndex",
    "Ledger",
    "LedgerConflict",
    "MapEntry",
    "MapParseError",
    "NodeInfo",
    "Pick",
    "Scheduler",
    "Snapshot",
    "Strategy",
    "check_map_against",
    "create",
    "format_scheduling_map",
    "group_reasons",
    "is_controller_pod",
    "names",
    "order_by_priority",
    "parse_scheduling_map",
    "pick_devices",
    "plan_preemption",
    "pod_gpu_request",
    "schedule",
]
