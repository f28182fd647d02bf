"""Pydantic models of the gpu.orchestrator.dev/v1alpha1 API: GPUWorkload and GPUNode.

The models are the single source of truth: the CRD YAML in ``config/crd`` and
``docs/api.md`` are generated from them (``python -m api.v1alpha1.crd``). Every field
therefore carries a description, which ends up in ``kubectl explain``.

Field names are snake_case in Python and camelCase on the wire (``alias``).
``Model.model_validate(raw_dict)`` parses an API object; ``model.to_api()`` dumps it
back in wire form without unset optionals.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    field_validator,
    model_serializer,
    model_validator,
)

from api.v1alpha1.keys import GROUP, SCHEDULING_MAP_ANNOTATION, WORKLOAD_LABEL
from api.v1alpha1.sharing import MIG_PROFILE_PATTERN, GPUShare, MigInstance

VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"


def pod_selector(workload_name: str) -> str:
    """status.selector of a workload: the label selector of its pods, as a string."""
    return f"{WORKLOAD_LABEL}={workload_name}"


#: Named priorities accepted in ``spec.priority`` (the seed's spellings).
PRIORITY_NAMES: dict[str, int] = {"low": 0, "medium": 50, "high": 100}
MAX_PRIORITY = 1_000_000_000

#: RE2 of a DNS-1123 subdomain (the name of a PriorityClass)
DNS1123_SUBDOMAIN = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"

#: Upper bounds of the numbers of a spec (each refused above it by the CRD, with a
#: message; the controller also clamps what an older object stored above them).
MAX_REPLICAS = 512
MAX_GPUS_PER_REPLICA = 64
MAX_RETRIES = 1000
MAX_BACKOFF_SECONDS = 86_400  # one day
MAX_GPU_MEMORY_MIB = 16 * 1024 * 1024  # 16 TiB
#: the longest name a child can carry (a DNS-1123 label, a label value)
MAX_CHILD_NAME = 63
#: the largest template (as JSON) a child is made from: etcd stores objects up to
#: 1.5 MiB, and the child adds its labels, annotations, env and managed fields
MAX_TEMPLATE_BYTES = 1 << 20

#: Upper bound of the schedulingMap text, so that CEL cost estimates stay bounded.
SCHEDULING_MAP_MAX_LENGTH = 4096

#: RE2/Python regex a well-formed schedulingMap matches as a whole (syntax only; the
#: parser in internal/scheduling/mapparser.py gives line-by-line messages). Its only
#: escapes (\t, \r, \n) mean the same in a CEL string literal, so it embeds verbatim.
#: A map's node is a Node's name (a DNS-1123 subdomain, so lower case), and its devices
#: are host indices up to MAX_DEVICE_INDEX: what no node can have is refused at the door
#: (the parser in mapparser.py applies the same two patterns and says which is wrong).
MAX_DEVICE_INDEX = 999
MAP_NODE_PATTERN = "[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
MAP_DEVICE_PATTERN = f"[0-9]{{1,{len(str(MAX_DEVICE_INDEX))}}}"
SCHEDULING_MAP_PATTERN = (
    "^([ \\t\\r]*([0-9]+[ \\t]*=[ \\t]*" + MAP_NODE_PATTERN + "[ \\t]*:[ \\t]*"
    + MAP_DEVICE_PATTERN + "([ \\t]*,[ \\t]*" + MAP_DEVICE_PATTERN + ")*)?[ \\t\\r]*(\\n|$))*$"
)


class _Base(BaseModel):
    model_config = ConfigDict(
        populate_by_name=True,
        extra="ignore",
        use_enum_values=False,
        validate_default=False,
    )

    def to_api(self) -> dict[str, Any]:
        """Wire form (camelCase), unset optionals left out, enums as strings."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


def format_time(value: datetime) -> str:
    """RFC 3339 with second precision and a ``Z``, the way Kubernetes writes times."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# The field types every model shares (one definition each, not a validator or a
# serializer per model): the CRD generator reads the plain type under them.

#: a list the API may send as null: read as empty
NullAsEmptyList = BeforeValidator(lambda v: [] if v is None else v)
#: a map the API may send as null: read as empty
NullAsEmptyDict = BeforeValidator(lambda v: {} if v is None else v)
#: a time, written as Kubernetes writes times (``format_time``)
Time = Annotated[datetime | None,
                 PlainSerializer(lambda v: None if v is None else format_time(v))]


# --------------------------------------------------------------------------- enums


class SchedulingStrategy(StrEnum):
    """How nodes and devices are chosen for a workload."""

    LEAST_LOADED = "leastLoaded"
    BEST_FIT = "bestFit"
    PRIORITY = "priority"
    ROUND_ROBIN = "roundRobin"
    ANNOTATION_MAP = "annotationMap"
    RANDOM = "random"
    COST_OPTIMIZED = "costOptimized"


class Topology(StrEnum):
    """NVLink topology requirement for the devices of one replica."""

    NONE = "None"
    PREFERRED = "Preferred"
    REQUIRED = "Required"


class WorkloadKind(StrEnum):
    """Kind of child object created per replica."""

    POD = "Pod"
    JOB = "Job"


class DeviceExposure(StrEnum):
    """How a replica's container is shown its devices (docs/architecture.md, "How a
    replica sees its devices")."""

    CUDA_VISIBLE_DEVICES = "cuda-visible-devices"
    NVIDIA_VISIBLE_DEVICES = "nvidia-visible-devices"
    DEVICE_PLUGIN = "device-plugin"
    DRA = "dra"


class Phase(StrEnum):
    """Lifecycle phase of a GPUWorkload."""

    PENDING = "Pending"
    SCHEDULED = "Scheduled"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


# ------------------------------------------------------------------------ metadata


class ObjectMeta(_Base):
    """The subset of Kubernetes ObjectMeta the controller reads."""

    model_config = ConfigDict(populate_by_name=True, extra="allow")

    name: str = Field("", description="Name of the object.")
    namespace: str | None = Field(None, description="Namespace of the object.")
    uid: str | None = Field(None, description="UID assigned by the API server.")
    resource_version: str | None = Field(
        None, alias="resourceVersion", description="Opaque version for optimistic concurrency."
    )
    generation: int | None = Field(None, description="Sequence number of spec changes.")
    labels: Annotated[dict[str, str], NullAsEmptyDict] = Field(
        default_factory=dict, description="Labels.")
    annotations: Annotated[dict[str, str], NullAsEmptyDict] = Field(
        default_factory=dict, description="Annotations.")
    creation_timestamp: str | None = Field(
        None, alias="creationTimestamp", description="Creation time (RFC 3339)."
    )
    deletion_timestamp: str | None = Field(
        None, alias="deletionTimestamp", description="Deletion time, set when deleting."
    )


# ---------------------------------------------------------------------- GPUWorkload


class RetryPolicy(_Base):
    """How often and how fast an unschedulable or failed workload is retried."""

    max_retries: int = Field(
        5,
        alias="maxRetries",
        ge=0,
        le=MAX_RETRIES,
        description=(
            "Attempts after the first before the workload is marked Failed: an "
            "unschedulable attempt or a failed replica (which restarts the whole gang) "
            "spends one. 0 means Failed on the first unschedulable attempt or failed "
            "replica, with no retry."
        ),
    )
    backoff_seconds: int = Field(
        10,
        alias="backoffSeconds",
        ge=1,
        le=MAX_BACKOFF_SECONDS,
        description=(
            "Base delay in seconds. Retry n (from 1) waits a random time between "
            "backoffSeconds and min(maxBackoffSeconds, backoffSeconds * 2^(n-1)): "
            "exponential backoff with jitter."
        ),
    )
    max_backoff_seconds: int = Field(
        300,
        alias="maxBackoffSeconds",
        ge=1,
        le=MAX_BACKOFF_SECONDS,
        description="Upper bound in seconds of a single retry delay.",
    )

    model_config = ConfigDict(
        populate_by_name=True,
        extra="ignore",
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": (
                        "!has(self.maxBackoffSeconds) || !has(self.backoffSeconds) || "
                        "self.maxBackoffSeconds >= self.backoffSeconds"
                    ),
                    "message": "maxBackoffSeconds must be >= backoffSeconds",
                }
            ]
        },
    )

    @field_validator("backoff_seconds", "max_backoff_seconds", mode="before")
    @classmethod
    def _clamp(cls, v: Any) -> Any:
        """An object stored before the CRD's maximum still reads, at the maximum:
        a delay of 2^40 s would overflow the next retry time."""
        if isinstance(v, int) and not isinstance(v, bool) and v > MAX_BACKOFF_SECONDS:
            return MAX_BACKOFF_SECONDS
        return v


def _parse_priority(v: Any) -> int:
    if isinstance(v, bool):
        raise ValueError("priority must be an integer or one of low, medium, high")
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        s = v.strip().lower()
        if s in PRIORITY_NAMES:
            return PRIORITY_NAMES[s]
        if re.fullmatch(r"[0-9]+", s):
            return int(s)
    raise ValueError(f"priority must be an integer or one of low, medium, high, got {v!r}")


class GPUWorkloadSpec(_Base):
    """Desired state of a GPUWorkload: how many replicas, how many GPUs each, and how
    to choose nodes and devices for them."""

    replicas: int = Field(
        1,
        ge=1,
        le=MAX_REPLICAS,
        description=(
            "Number of replicas. More than one makes a gang: all replicas are placed "
            "together or none is."
        ),
    )
    gpus_per_replica: int | None = Field(
        None,
        alias="gpusPerReplica",
        ge=1,
        le=MAX_GPUS_PER_REPLICA,
        description="GPU devices per replica. Defaults to gpuCount, else 1.",
    )
    gpu_count: int | None = Field(
        None,
        alias="gpuCount",
        ge=1,
        le=MAX_GPUS_PER_REPLICA,
        description=(
            "Seed spelling of gpusPerReplica, accepted for compatibility. If both are "
            "set they must be equal."
        ),
    )
    min_gpu_memory_mib: int = Field(
        0,
        alias="minGPUMemoryMiB",
        ge=0,
        le=MAX_GPU_MEMORY_MIB,
        description=(
            "Only devices with at least this much total memory (MiB) are used; with "
            "gpuShare the device's memory, with migProfile the MIG instance's."
        ),
    )
    gpu_share: GPUShare | None = Field(
        None,
        alias="gpuShare",
        description=(
            "Each replica takes a share of exactly one device instead of whole devices: "
            "a memory figure or a fraction, time-sliced or through MPS. Not with "
            "gpusPerReplica > 1, migProfile or an annotation map."
        ),
    )
    mig_profile: str | None = Field(
        None,
        alias="migProfile",
        description=(
            "Each replica takes one MIG instance of this profile (NVIDIA's names, e.g. "
            "1g.10gb) on a MIG-enabled device. Not with gpusPerReplica > 1, gpuShare "
            "or an annotation map."
        ),
        json_schema_extra={"pattern": MIG_PROFILE_PATTERN},
    )
    priority: int = Field(
        0,
        description=(
            "Scheduling priority: an integer >= 0 or one of low (0), medium (50), "
            "high (100). Higher priority places first; the priority strategy may "
            "preempt lower-priority workloads."
        ),
        json_schema_extra={
            "crd_schema": {"x-kubernetes-int-or-string": True},
            "x-kubernetes-validations": [
                {
                    "rule": (
                        "type(self) == int ? (self >= 0 && self <= 1000000000) : "
                        "self in ['low', 'medium', 'high']"
                    ),
                    "message": (
                        "priority must be an integer in [0, 1000000000] or one of low, medium, high"
                    ),
                    # the value, not the API server's `Invalid value: ""` (an
                    # int-or-string schema has no type name to print)
                    "messageExpression": (
                        "'priority must be an integer in [0, 1000000000] or one of low, "
                        "medium, high, got ' + (type(self) == int ? string(self) : "
                        "'\"' + string(self) + '\"')"
                    ),
                    "reason": "FieldValueForbidden",
                }
            ],
        },
    )
    priority_class_name: str | None = Field(
        None,
        alias="priorityClassName",
        max_length=253,
        description=(
            "A Kubernetes PriorityClass whose value is this workload's priority "
            "(spec.priority must then equal it), copied to the children's pods. Only a "
            "priority from a PriorityClass, which an admin controls, may preempt "
            "workloads of other namespaces; without one, a workload preempts only in "
            "its own namespace."
        ),
        json_schema_extra={"pattern": DNS1123_SUBDOMAIN},
    )
    scheduling_strategy: SchedulingStrategy | None = Field(
        None,
        alias="schedulingStrategy",
        description=(
            "Placement strategy; unset: the manager's --default-strategy (leastLoaded "
            "unless the manager says otherwise), shown in status.strategy. leastLoaded: "
            "lowest GPU utilization (from GPUNode), "
            "then most free GPUs. bestFit: smallest GPUs that meet minGPUMemoryMiB "
            "when nodes report memory, then the fullest node that still fits. "
            "priority: like leastLoaded, may preempt "
            "lower-priority workloads. roundRobin: rotates across nodes. annotationMap: "
            "exact nodes and devices from schedulingMap. random: uniform among feasible "
            "nodes. costOptimized: cheap nodes first."
        ),
    )
    scheduling_map: str | None = Field(
        None,
        alias="schedulingMap",
        max_length=SCHEDULING_MAP_MAX_LENGTH,
        description=(
            "Exact placement for the annotationMap strategy, one replica per line: "
            "'<index>=<node>:<dev>,<dev>' (e.g. '0=node1:0,1'). Blank lines and spaces "
            "are ignored. If unset, the gpu-scheduling-map annotation is read."
        ),
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": f"self.matches('{SCHEDULING_MAP_PATTERN}')",
                    "message": (
                        "schedulingMap must be lines of '<index>=<node>:<dev>,<dev>', "
                        "e.g. '0=node1:0,1'"
                    ),
                }
            ]
        },
    )
    node_selector: Annotated[dict[str, str], NullAsEmptyDict] = Field(
        default_factory=dict,
        alias="nodeSelector",
        description="Only nodes whose labels match all of these are considered.",
    )
    topology: Topology = Field(
        Topology.NONE,
        description=(
            "NVLink requirement for a replica's devices. None: ignore topology. "
            "Preferred: use an NVLink-connected set when one is free. Required: only "
            "NVLink-connected sets (needs topology reported by the GPUNode agent)."
        ),
    )
    template: dict[str, Any] | None = Field(
        None,
        description=(
            "Pod template (a PodTemplateSpec) for each replica. The controller sets "
            "nodeName, the device environment, labels and owner references. Unset (or "
            "without containers): one container main running busybox:1.36 with the "
            "image's own command, for trying a placement (a DefaultTemplate Event says "
            "so). At most 1 MiB as JSON (larger: InvalidSpec, the children could not be "
            "stored)."
        ),
        json_schema_extra={
            "crd_schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        },
    )
    workload_kind: WorkloadKind = Field(
        WorkloadKind.POD,
        alias="workloadKind",
        description="Child object per replica: Pod, or Job (a one-pod Job per replica).",
    )
    device_exposure: DeviceExposure | None = Field(
        None,
        alias="deviceExposure",
        description=(
            "How the container sees its devices; overrides the controller's "
            "--device-exposure. cuda-visible-devices: host indices in "
            "CUDA_VISIBLE_DEVICES. nvidia-visible-devices: device UUIDs in "
            "NVIDIA_VISIBLE_DEVICES. device-plugin: request nvidia.com/gpu and let the "
            "kubelet pick. dra: a ResourceClaim per replica, allocated by the controller "
            "to exactly the placement's devices (Dynamic Resource Allocation); the DRA "
            "driver isolates them."
        ),
    )
    retry_policy: RetryPolicy = Field(
        default_factory=RetryPolicy,
        alias="retryPolicy",
        description="Retries with exponential backoff when the workload cannot be placed.",
    )
    queue_name: str | None = Field(
        None,
        alias="queueName",
        max_length=253,
        description=(
            "The GPUQueue whose quota admits this workload (docs/queues.md). Unset: the "
            "queue whose namespaceSelector selects the workload's namespace, if any."
        ),
    )
    model_name: str | None = Field(
        None,
        alias="modelName",
        max_length=253,
        description="Free text naming the model served or trained; shown, never interpreted.",
    )

    model_config = ConfigDict(
        populate_by_name=True,
        extra="ignore",
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": (
                        "!has(self.gpuCount) || !has(self.gpusPerReplica) || "
                        "self.gpuCount == self.gpusPerReplica"
                    ),
                    "message": "gpuCount and gpusPerReplica must be equal when both are set",
                },
            ]
        },
    )

    @field_validator("priority", mode="before")
    @classmethod
    def _priority(cls, v: Any) -> int:
        p = _parse_priority(v)
        if not 0 <= p <= MAX_PRIORITY:
            raise ValueError(f"priority must be in [0, {MAX_PRIORITY}], got {p}")
        return p

    @field_validator("template")
    @classmethod
    def _template_size(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        """No CEL can measure an object: the controller refuses (InvalidSpec, no retry
        spent) a template its children could not be stored with."""
        if v is not None:
            size = len(json.dumps(v, separators=(",", ":")))
            if size > MAX_TEMPLATE_BYTES:
                raise ValueError(f"the template is {size} bytes as JSON; a child is made "
                                 f"from it only up to {MAX_TEMPLATE_BYTES} (etcd stores "
                                 "objects up to 1.5 MiB)")
        return v

    @model_validator(mode="after")
    def _gpus(self) -> GPUWorkloadSpec:
        if (
            self.gpus_per_replica is not None
            and self.gpu_count is not None
            and self.gpus_per_replica != self.gpu_count
        ):
            raise ValueError("gpuCount and gpusPerReplica must be equal when both are set")
        if (self.gpu_share is not None or self.mig_profile) and self.gpus != 1:
            raise ValueError("gpuShare and migProfile take part of one device: "
                             "gpusPerReplica must be 1")
        if self.gpu_share is not None and self.mig_profile:
            raise ValueError("gpuShare and migProfile cannot be set together")
        return self

    @property
    def gpus(self) -> int:
        """Effective GPUs per replica: gpusPerReplica, else gpuCount, else 1."""
        if self.gpus_per_replica is not None:
            return self.gpus_per_replica
        if self.gpu_count is not None:
            return self.gpu_count
        return 1


class Placement(_Base):
    """Where one replica runs: a node and the host indices of its devices."""

    index: int = Field(..., ge=0, description="Replica index, 0-based.")
    node: str = Field(..., description="Name of the node the replica is bound to.")
    devices: list[int] = Field(
        default_factory=list,
        description=(
            "Host indices of the replica's GPU devices. Empty in device-plugin mode, "
            "where the kubelet picks the devices."
        ),
        json_schema_extra={"item_minimum": 0},
    )
    share: str | None = Field(
        None,
        max_length=64,
        description=(
            "The replica's share of its one device (spec.gpuShare): "
            "memory=<MiB>Mi or fraction=<decimal>. Unset: the devices are held whole."
        ),
    )
    mig: str | None = Field(
        None,
        max_length=96,
        description="UUID (MIG-...) of the MIG instance the replica holds (spec.migProfile).",
    )

    @model_serializer(mode="wrap")
    def _drop_unset_parts(self, handler: Any) -> Any:
        """A whole-device placement is written as before: no ``share``/``mig`` keys."""
        out = handler(self)
        for k in ("share", "mig"):
            if isinstance(out, dict) and out.get(k) is None:
                out.pop(k, None)
        return out


class Condition(_Base):
    """A Kubernetes-style condition."""

    type: str = Field(..., description="Condition type, e.g. Scheduled, Ready, Unschedulable.")
    status: ConditionStatus = Field(..., description="True, False or Unknown.")
    reason: str = Field("", description="Machine-readable CamelCase reason.")
    message: str = Field("", description="Human-readable explanation.")
    last_transition_time: Time = Field(
        None,
        alias="lastTransitionTime",
        description="When the condition last changed status.",
    )
    observed_generation: int | None = Field(
        None,
        alias="observedGeneration",
        ge=0,
        description="metadata.generation the condition was computed from.",
    )


class NodeRejection(_Base):
    """A node whose kubelet rejected one of the workload's pods at admission."""

    node: str = Field(..., description="The node whose kubelet rejected the pod.")
    reason: str = Field(
        ...,
        max_length=128,
        description="The kubelet's reason: OutOfcpu, OutOfmemory, OutOfpods, NodeAffinity, "
        "NodePorts, TaintToleration, ...",
    )
    message: str = Field("", max_length=1024, description="The kubelet's message.")
    time: Time = Field(
        None,
        description="When the pod was rejected. Placement avoids the node for this workload "
        "until 5 minutes after it.",
    )


class GPUWorkloadStatus(_Base):
    """Observed state of a GPUWorkload, written by the controller."""

    phase: Phase = Field(
        Phase.PENDING,
        description="Pending, Scheduled, Running, Succeeded or Failed.",
    )
    placements: Annotated[list[Placement], NullAsEmptyList] = Field(
        default_factory=list,
        description=(
            "Node and devices per replica. Writing it is the commit point of a "
            "placement: children are created from it."
        ),
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["index"],
        },
    )
    conditions: Annotated[list[Condition], NullAsEmptyList] = Field(
        default_factory=list,
        description=(
            "Conditions: Scheduled (False: why it is not placed, or why it failed), "
            "Ready, Failed, Preempted, PlacementTrusted, and Managed (False while the "
            "controller's configuration leaves it running as it is)."
        ),
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    )
    nominated_over: Annotated[list[str], NullAsEmptyList] = Field(
        default_factory=list,
        alias="nominatedOver",
        description=(
            "Set while a placement made by preemption waits for what its victims "
            "still hold on its devices: the holders it was nominated over (each "
            "victim's attempt as <workload uid>#<attempt>, or a seed-path owner "
            "such as StatefulSet:<namespace>/<name>). Its children are created once "
            "none of theirs is left there; a restarted controller books the "
            "nomination again from it. Cleared when the children are created."
        ),
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    rejections: Annotated[list[NodeRejection], NullAsEmptyList] = Field(
        default_factory=list,
        description=(
            "Nodes whose kubelet rejected a pod of this workload at admission (a node "
            "that changed after the placement): the attempt ended with the kubelet's "
            "reason, and the next attempts avoid each node for 5 minutes after."
        ),
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["node"],
        },
    )
    retries: int = Field(0, ge=0, description="Scheduling retries made so far.")
    next_retry_time: Time = Field(
        None,
        alias="nextRetryTime",
        description="When the next scheduling attempt is due.",
    )
    observed_generation: int | None = Field(
        None,
        alias="observedGeneration",
        ge=0,
        description="metadata.generation the status was computed from.",
    )
    message: str | None = Field(None, description="Human-readable summary of the state.")
    gpus: int | None = Field(
        None,
        ge=0,
        description=(
            "GPUs the workload's placement holds: the distinct devices its placements "
            "name (a schedulingMap may give replicas different counts, or one device to "
            "several replicas), plus gpusPerReplica for each device-plugin replica; 0 "
            "while it is not placed."
        ),
    )
    strategy: str | None = Field(
        None,
        description=(
            "The placement strategy the controller uses for it: spec.schedulingStrategy, "
            "else the manager's --default-strategy."
        ),
    )
    gpu_summary: str | None = Field(
        None,
        alias="gpuSummary",
        description=(
            "What kubectl get shows in GPUS: gpus, or for gpuShare and migProfile each "
            "replica's share of its device (20Gi, 0.25) or MIG profile (1g.10gb)."
        ),
    )
    nodes: str | None = Field(
        None,
        description="Comma-separated names of the nodes the replicas are placed on.",
    )
    replicas: int | None = Field(
        None,
        ge=0,
        description=(
            "Replicas that hold a placement now (never more than spec.replicas); "
            "the scale subresource's status.replicas."
        ),
    )
    selector: str | None = Field(
        None,
        description=(
            "Label selector of the workload's pods "
            "(gpu.orchestrator.dev/workload=<name>), for the scale subresource."
        ),
    )

    def condition(self, type_: str) -> Condition | None:
        for c in self.conditions:
            if c.type == type_:
                return c
        return None

    def remove_condition(self, type_: str) -> bool:
        before = len(self.conditions)
        self.conditions = [c for c in self.conditions if c.type != type_]
        return len(self.conditions) != before


class GPUWorkload(_Base):
    """A workload that needs GPUs on exact nodes and exact devices. The controller
    places its replicas, records the placement in status, and creates one Pod (or Job)
    per replica bound to its node with the device environment injected."""

    api_version: str = Field(API_VERSION, alias="apiVersion", description="API version.")
    kind: str = Field("GPUWorkload", description="Kind.")
    metadata: ObjectMeta = Field(default_factory=ObjectMeta, description="Object metadata.")
    spec: GPUWorkloadSpec = Field(default_factory=GPUWorkloadSpec, description="Desired state.")
    status: GPUWorkloadStatus = Field(
        default_factory=GPUWorkloadStatus, description="Observed state."
    )

    @property
    def key(self) -> str:
        """``namespace/name``, the ledger's workload key."""
        return f"{self.metadata.namespace or 'default'}/{self.metadata.name}"

    def scheduling_map_text(self) -> str | None:
        """spec.schedulingMap, else the gpu-scheduling-map annotation, else None."""
        if self.spec.scheduling_map is not None and self.spec.scheduling_map.strip():
            return self.spec.scheduling_map
        ann = self.metadata.annotations.get(SCHEDULING_MAP_ANNOTATION)
        if ann is not None and ann.strip():
            return ann
        return None


# -------------------------------------------------------------------------- GPUNode


class GPUDevice(_Base):
    """One GPU device of a node as reported by NVML."""

    index: int = Field(..., ge=0, description="Host index of the device (NVML index).")
    uuid: str = Field("", description="Device UUID, e.g. GPU-8d6c....")
    model: str = Field("", description="Product name, e.g. NVIDIA H100 80GB HBM3.")
    memory_total_mib: int = Field(0, alias="memoryTotalMiB", ge=0, description="Total memory, MiB.")
    memory_used_mib: int = Field(0, alias="memoryUsedMiB", ge=0, description="Used memory, MiB.")
    utilization: int = Field(
        0, ge=0, le=100, description="GPU utilization over the last sample, percent."
    )
    temperature: int = Field(0, description="Core temperature, degrees Celsius.")
    power_watts: float = Field(0.0, alias="powerWatts", ge=0, description="Power draw, watts.")
    ecc_errors: int = Field(
        0, alias="eccErrors", ge=0, description="Uncorrected volatile ECC errors."
    )
    healthy: bool = Field(True, description="False when the agent considers the device unusable.")
    mig_mode: bool = Field(False, alias="migMode", description="True when MIG mode is enabled.")
    mig_instances: list[MigInstance] | None = Field(
        None,
        alias="migInstances",
        description=(
            "The MIG instances of a MIG-enabled device. Such a device is offered only "
            "as these instances (spec.migProfile), never whole nor shared."
        ),
    )
    nvlink_peers: Annotated[list[int], NullAsEmptyList] = Field(
        default_factory=list,
        alias="nvlinkPeers",
        description="Host indices of devices this one has an active NVLink to.",
        json_schema_extra={"item_minimum": 0},
    )


class GPUNodeSpec(_Base):
    """Desired state of a GPUNode; the object is named after its node."""

    node_name: str | None = Field(
        None, alias="nodeName", description="Node this object describes (defaults to its name)."
    )


class GPUNodeStatus(_Base):
    """Devices of a node, written periodically by the NVML agent."""

    model_config = ConfigDict(
        populate_by_name=True,
        extra="ignore",
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    # 0 is the default of a status that reports devices alone
                    "rule": ("self.deviceCount == 0 || "
                             "self.deviceCount == (has(self.devices) ? size(self.devices) : 0)"),
                    "message": ("deviceCount must equal the number of devices listed in "
                                "devices (or be 0)"),
                    "reason": "FieldValueInvalid",
                },
                {
                    "rule": ("self.healthyCount <= "
                             "(has(self.devices) ? size(self.devices) : 0)"),
                    "message": "healthyCount cannot exceed the number of devices listed",
                    "reason": "FieldValueInvalid",
                },
            ]
        },
    )

    devices: Annotated[list[GPUDevice], NullAsEmptyList] = Field(
        default_factory=list,
        description="GPU devices of the node.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["index"],
        },
    )
    device_count: int = Field(0, alias="deviceCount", ge=0, description="Number of devices.")
    healthy_count: int = Field(
        0, alias="healthyCount", ge=0, description="Number of healthy devices."
    )
    driver_version: str | None = Field(
        None, alias="driverVersion", description="NVIDIA driver version."
    )
    cuda_version: str | None = Field(
        None, alias="cudaVersion", description="CUDA driver API version."
    )
    topology_known: bool = Field(
        False,
        alias="topologyKnown",
        description="True when nvlinkPeers were read from NVML (topology can be trusted).",
    )
    last_heartbeat_time: Time = Field(
        None, alias="lastHeartbeatTime", description="When the agent last reported."
    )


class GPUNode(_Base):
    """GPU inventory of one node (cluster-scoped, named after the node), written by
    the NVML agent and read by the scheduling strategies."""

    api_version: str = Field(API_VERSION, alias="apiVersion", description="API version.")
    kind: str = Field("GPUNode", description="Kind.")
    metadata: ObjectMeta = Field(default_factory=ObjectMeta, description="Object metadata.")
    spec: GPUNodeSpec = Field(default_factory=GPUNodeSpec, description="Desired state.")
    status: GPUNodeStatus = Field(default_factory=GPUNodeStatus, description="Observed state.")

    @property
    def node_name(self) -> str:
        return self.spec.node_name or self.metadata.name
