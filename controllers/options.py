"""The manager's options for the controllers it runs (``main.py``'s flags), read by
the composition root (``controllers/setup.py``) and the controllers' setups."""

from __future__ import annotations

from dataclasses import dataclass, field

from api.v1alpha1.types import DeviceExposure
from controllers.dra.claims import DraOptions
from controllers.gpuworkload.backstop import DEFAULT_PERIOD
from controllers.status.pacing import PacingOptions
from internal.scheduling.bounds import MAX_GPUS_PER_NODE
from internal.scheduling.sharefloor import DEFAULT_FLOORS, ShareFloors


@dataclass
class ControllerOptions:
    workers: int = 16  # kube-scheduler's parallelism: a worker waits on its pod create
    default_exposure: DeviceExposure = DeviceExposure.CUDA_VISIBLE_DEVICES
    stale_after: float = 90.0  # seconds without a GPUNode heartbeat before it is stale
    stale_check_period: float = 10.0
    #: GPUs a node may report before it is refused (internal/scheduling/bounds.py)
    max_gpus_per_node: int = MAX_GPUS_PER_NODE
    default_strategy: str | None = None  # for specs that name no schedulingStrategy
    #: place only GPUWorkloads of these namespaces (empty: all); every pod and every
    #: workload's placements are still read and counted, wherever they are
    namespaces: frozenset[str] = frozenset()
    #: Dynamic Resource Allocation (``deviceExposure: dra``, ResourceSlice inventory,
    #: claims as holders); None: off (the API may not serve resource.k8s.io/v1)
    dra: DraOptions | None = None
    #: seconds after which an unsettled workload nobody reconciled is reconciled
    #: again (controllers/gpuworkload/backstop.py); 0: no backstop
    resync_unsettled: float = DEFAULT_PERIOD
    #: evict pods that name devices no controller or webhook of ours gave them
    #: (controllers/gpuworkload/intruders.py); the manager's --evict-conflicting-pods, on by default
    evict_conflicting_pods: bool = False
    #: before placing a spec, create its highest-index child with dryRun=All and report
    #: a template the API server refuses as InvalidSpec (controllers/gpuworkload/template_check.py)
    dry_run_children: bool = True
    async_status: bool = True  # status written by the StatusWriter, off the workers' client
    status_writers: int = 4  # writer threads (each waits on one write at a time)
    require_queue: bool = False  # a workload in no GPUQueue waits (NoQueue) instead of placed
    #: the smallest share placed and the least a share counts against its queue
    share_floors: ShareFloors = DEFAULT_FLOORS
    #: when the status writer sends (controllers/status/pacing.py): the lag a
    #: Scheduled status waits for a newer one, the rate while placing
    status_pacing: PacingOptions = field(default_factory=PacingOptions)
