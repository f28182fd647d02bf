"""The metrics a GPU platform team watches. Names are stable: alerts
(config/prometheus) and the dashboard (config/grafana) are built on them."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
                    30, 60, 120, 300)



class DeviceUse(Protocol):
    """How a device is held (``internal.scheduling.holdings.DeviceUse``)."""

    kind: str  # whole, share or mig
    holders: tuple[str, ...]
    migs: int


#: (node, device, how it is held) for every device held by name
DeviceRows = Callable[[], list[tuple[str, int, DeviceUse]]]


class StateCollector(Collector):
    """Gauges read from the controller's state at scrape time, so they never drift:
    workloads by phase (from the cache), GPUs per node and those held (from the
    ledger). ``set_sources`` points it at the running controller."""

    def __init__(self) -> None:
        self._phases: Callable[[], dict[str, int]] = dict
        self._gpus: Callable[[], tuple[dict[str, int], dict[str, int]]] = lambda: ({}, {})
        self._heartbeats: Callable[[], dict[str, float]] = dict
        self._unmanaged: Callable[[], dict[str, int]] = dict
        self._shares: Callable[[], list[tuple[str, int, float, int | None]]] = list
        self._devices: DeviceRows = list

    def set_sources(self, phases: Callable[[], dict[str, int]],
                    gpus: Callable[[], tuple[dict[str, int], dict[str, int]]],
                    heartbeats: Callable[[], dict[str, float]] = dict,
                    unmanaged: Callable[[], dict[str, int]] = dict,
                    shares: Callable[[], list[tuple[str, int, float, int | None]]] = list,
                    devices: DeviceRows = list,
                    ) -> None:
        self._phases, self._gpus, self._heartbeats = phases, gpus, heartbeats
        self._unmanaged, self._shares, self._devices = unmanaged, shares, devices

    def collect(self) -> Iterator[GaugeMetricFamily]:
        workloads = GaugeMetricFamily("gpu_orchestrator_workloads", "GPUWorkloads by phase.",
                                      labels=["phase"])
        counts = self._phases()
        for phase in PHASES:
            workloads.add_metric([phase], counts.get(phase, 0))
        yield workloads
        total, held = self._gpus()
        t = GaugeMetricFamily("gpu_orchestrator_node_gpus", "GPUs a node offers (healthy "
                              "GPUNode devices, or nvidia.com/gpu allocatable).", labels=["node"])
        a = GaugeMetricFamily("gpu_orchestrator_node_gpus_allocated", "GPUs of a node held in "
                              "the ledger, by our workloads or by other pods' nvidia.com/gpu "
                              "requests.", labels=["node"])
        for node, n in sorted(total.items()):
            t.add_metric([node], n)
            a.add_metric([node], held.get(node, 0))
        yield t
        yield a
        age = GaugeMetricFamily(
            "gpu_orchestrator_gpunode_heartbeat_age_seconds", "Seconds since a GPUNode's "
            "status.lastHeartbeatTime (its NVML agent's last report), as seen by the "
            "controller.", labels=["node"])
        for node, seconds in sorted(self._heartbeats().items()):
            age.add_metric([node], seconds)
        yield age
        left = GaugeMetricFamily(
            "gpu_orchestrator_unmanaged_workloads", "Placed GPUWorkloads left running "
            "as they are because this controller's configuration cannot manage them "
            "(condition Managed=False), by reason.", labels=["reason"])
        for reason, n in sorted(self._unmanaged().items()):
            left.add_metric([reason], n)
        yield left
        part = GaugeMetricFamily(
            "gpu_orchestrator_device_share_allocated_ratio", "Part of a shared device "
            "(held by gpuShare workloads, never whole) its shares take, 0 to 1.",
            labels=["node", "device"])
        mib = GaugeMetricFamily(
            "gpu_orchestrator_device_share_allocated_memory_mib", "Memory of a shared device "
            "its shares take, MiB (devices whose GPUNode reports their memory).",
            labels=["node", "device"])
        for node, device, used, memory in sorted(self._shares()):
            part.add_metric([node, str(device)], used)
            if memory:
                mib.add_metric([node, str(device)], used * memory)
        yield part
        yield mib
        yield from self._device_use()

    def _device_use(self) -> Iterator[GaugeMetricFamily]:
        shares = GaugeMetricFamily(
            "gpu_orchestrator_device_shares", "gpuShare holders on a shared device.",
            labels=["node", "device"])
        migs = GaugeMetricFamily(
            "gpu_orchestrator_device_mig_instances_allocated", "MIG instances of a "
            "MIG-enabled device held by migProfile workloads.", labels=["node", "device"])
        holder = GaugeMetricFamily(
            "gpu_orchestrator_device_holder", "1 for each holder of a device held by name "
            "(a workload ns/name, or a pod, Job or claim as kubectl gpu nodes names it), "
            "with how it holds it (whole, share, mig).",
            labels=["node", "device", "holder", "kind"])
        for node, device, use in sorted(self._devices(), key=lambda r: r[:2]):
            if use.kind == "share":
                shares.add_metric([node, str(device)], len(use.holders))
            if use.kind == "mig":
                migs.add_metric([node, str(device)], use.migs)
            for name in use.holders:
                holder.add_metric([node, str(device), name, use.kind], 1)
        yield shares
        yield migs
        yield holder


PHASES = ("Pending", "Scheduled", "Running", "Succeeded", "Failed")
STATE = StateCollector()
REGISTRY.register(STATE)


class QueueCollector(Collector):
    """Per-GPUQueue gauges read at scrape time (controllers/queues/status.py points it at
    the queues): nominal, used and borrowed GPUs, and workloads pending."""

    SERIES = (("nominal", "GPUs guaranteed to the queue (spec.nominalGPUs)."),
              ("used", "GPUs the queue's workloads and its namespaces' GPU pods hold."),
              ("borrowed", "GPUs the queue uses above its nominal, borrowed from its cohort."),
              ("pending", "The queue's workloads waiting for quota or capacity."))

    def __init__(self) -> None:
        self._rows: Callable[[], dict[str, dict[str, float]]] = dict

    def set_source(self, rows: Callable[[], dict[str, dict[str, float]]]) -> None:
        """``rows()``: queue -> {nominal, used, borrowed, pending}."""
        self._rows = rows

    def collect(self) -> Iterator[GaugeMetricFamily]:
        rows = self._rows()
        for what, doc in self.SERIES:
            g = GaugeMetricFamily(f"gpu_orchestrator_queue_{what}", doc, labels=["queue"])
            for queue, row in sorted(rows.items()):
                g.add_metric([queue], row.get(what, 0.0))
            yield g


QUEUES = QueueCollector()
REGISTRY.register(QUEUES)


class PodGroupCollector(Collector):
    """Pod groups (other controllers' gangs the pod binding places whole) by state,
    read from the live pods at scrape time (``controllers/podbinding/group_metrics.py``)."""

    STATES = ("waiting", "placed", "refused")

    def __init__(self) -> None:
        self._counts: Callable[[], dict[str, int]] = dict

    def set_source(self, counts: Callable[[], dict[str, int]]) -> None:
        """``counts()``: state -> groups in it."""
        self._counts = counts

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            counts = self._counts()
        except Exception:  # a pod it cannot read must not fail the whole scrape
            logging.getLogger(__name__).exception("pod group gauge: source failed")
            return
        g = GaugeMetricFamily(
            "gpu_orchestrator_pod_groups", "Pod groups by state: waiting (a member "
            "missing or not yet bound; a group holds nothing until it is placed), placed "
            "(every member bound, or bound with the slots its leader holds for the members "
            "made later), refused (its members disagree on the group, or its "
            "size cannot be read).", labels=["state"])
        for state in self.STATES:
            g.add_metric([state], counts.get(state, 0))
        yield g


POD_GROUPS = PodGroupCollector()
REGISTRY.register(POD_GROUPS)
QUEUE_ADMISSION_WAIT = Histogram(
    "gpu_orchestrator_queue_admission_wait_seconds", "From a queued GPUWorkload's "
    "creationTimestamp to its admission by its GPUQueue (quota and devices found).",
    ["queue"], buckets=(*_LATENCY_BUCKETS, 600, 1800, 3600), registry=REGISTRY)

SCHEDULING_ATTEMPTS = Counter(
    "gpu_orchestrator_scheduling_attempts", "Placement decisions by strategy and result "
    "(scheduled, unschedulable, invalid, preempting).", ["strategy", "result"],
    registry=REGISTRY)
DECISION_LATENCY = Histogram(
    "gpu_orchestrator_scheduling_decision_seconds", "Time to compute one placement decision "
    "(filter, score, pick devices), without API calls.", ["strategy"],
    buckets=_LATENCY_BUCKETS, registry=REGISTRY)
CREATE_TO_BOUND = Histogram(
    "gpu_orchestrator_create_to_bound_seconds", "From a GPUWorkload's creationTimestamp to its "
    "last child created bound to its node.", buckets=_LATENCY_BUCKETS, registry=REGISTRY)
STALE_DECISIONS = Counter(
    "gpu_orchestrator_stale_decisions", "Scheduling passes made outside the placement "
    "cache's lock whose inputs changed before the decision could be booked, by what was "
    "done: retried (passed again on the new state), locked (the last try decided under "
    "the lock).", ["action"], registry=REGISTRY)
RETRIES = Counter(
    "gpu_orchestrator_retries", "Placement retries scheduled by a workload's retryPolicy.",
    registry=REGISTRY)
FAILURES = Counter(
    "gpu_orchestrator_failures", "Workloads that ended Failed, by reason.", ["reason"],
    registry=REGISTRY)
PREEMPTIONS = Counter(
    "gpu_orchestrator_preemptions", "Workloads evicted by the priority strategy to make room.",
    registry=REGISTRY)
DEVICE_CONFLICTS = Counter(
    "gpu_orchestrator_device_conflicts", "Pods found bound by someone else onto devices "
    "another workload holds, or over-committing their node (named + counted + claimed GPUs "
    "above its devices), by action (reported, evicted, evict_failed).", ["action"],
    registry=REGISTRY)

POD_GROUP_TIMEOUTS = Counter(
    "gpu_orchestrator_pod_group_timeouts", "Pod groups (another controller's gangs) "
    "reported for waiting longer than the pod binding's group timeout for their "
    "members; they hold nothing meanwhile.", registry=REGISTRY)

BAD_OBJECTS = Counter(
    "gpu_orchestrator_bad_objects", "Objects skipped because they could not be read (a "
    "malformed devices annotation, an unreadable placement), by kind.", ["kind"],
    registry=REGISTRY)

CHILD_CREATES = Counter(
    "gpu_orchestrator_child_creates", "Child (Pod, Job) creates sent, by result: created, "
    "already_exists (a create for a child that was there: the cache lagged).", ["result"],
    registry=REGISTRY)

STATUS_WRITE_LAG = Histogram(
    "gpu_orchestrator_status_write_lag_seconds",
    "From the first time a reconcile asked for a GPUWorkload status to that status "
    "written (the asynchronous status writer).",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
    registry=REGISTRY)
STATUS_WRITES = Counter(
    "gpu_orchestrator_status_writes", "Writes of the asynchronous status writer, by result: "
    "written, error (retried), gone (the workload was deleted or replaced); a refusal "
    "given up on is counted in gpu_orchestrator_status_writes_dropped.", ["result"],
    registry=REGISTRY)
STATUS_DROPPED = Counter(
    "gpu_orchestrator_status_writes_dropped", "Status writes of the asynchronous status "
    "writer given up on, by the API server's refusal: Invalid (422), Forbidden (403), "
    "BadRequest (400), RequestEntityTooLarge (413). Each is sent once: the workload gets a "
    "StatusRefused Warning Event, and its next reconcile writes again.", ["reason"],
    registry=REGISTRY)
STATUS_COALESCED = Counter(
    "gpu_orchestrator_status_writes_coalesced", "Desired statuses replaced by a newer one "
    "before they were written.", registry=REGISTRY)
STATUS_QUEUED = Gauge(
    "gpu_orchestrator_status_writes_queued", "Workloads whose desired status is not "
    "written yet.", registry=REGISTRY)


BACKSTOP_RECONCILES = Counter(
    "gpu_orchestrator_backstop_reconciles", "Reconciles of unsettled GPUWorkloads that the "
    "backstop started because no reconcile looked at them for a whole period, by outcome: "
    "idle (nothing changed), acted (the status changed: a requeue was lost; should stay 0).",
    ["outcome"], registry=REGISTRY)


def series_names(collectors: Iterable[Collector]) -> frozenset[str]:
    """The series names ``collectors`` export, read from the metrics themselves (a
    counter's gain ``_total``; a histogram's is its base name), labelled or not."""
    names: set[str] = set()
    for c in collectors:
        families = c.describe() if isinstance(c, MetricWrapperBase) else c.collect()
        names |= {f.name + "_total" if f.type == "counter" else f.name for f in families}
    return frozenset(names)


#: The exported series names, for tests that check the dashboard and the alerts only
#: name metrics that exist: every metric declared above, never a second list of names.
METRIC_NAMES = series_names(v for v in list(globals().values())
                            if isinstance(v, MetricWrapperBase | StateCollector
                                          | QueueCollector))
