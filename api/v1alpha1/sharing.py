"""The fields of a GPUWorkload that ask for part of a device: ``spec.gpuShare`` (a
memory or fraction share, time-sliced or through MPS) and ``spec.migProfile`` (one
MIG instance of a profile). Each replica then takes part of exactly one device
(docs/api.md, "Sharing a GPU")."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

#: a memory quantity (``20Gi``, ``20480Mi``, ``0.5Gi``)
MEMORY_PATTERN = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$"
#: a fraction of a device in (0, 1], at most three decimals
FRACTION_PATTERN = r"^(0?\.[0-9]{1,3}|1(\.0{1,3})?)$"
#: the API's own floor of a memory share, whatever the manager's --min-share-memory:
#: the ledger books whole MiB, so a smaller figure (``memory: "1"``, one byte) is not
#: a share anyone can mean
MEMORY_FLOOR_RULE = "!isQuantity(self) || quantity(self).compareTo(quantity('1Mi')) >= 0"
MEMORY_FLOOR_MESSAGE = "memory must be at least 1Mi"
#: NVIDIA's MIG profile names (``1g.10gb``, ``3g.40gb``, ``1g.12gb+me``)
MIG_PROFILE_PATTERN = r"^[1-8]g\.[0-9]+gb(\+me)?$"


class ShareMode(StrEnum):
    """How the replicas sharing one device run on it."""

    TIME_SLICING = "timeSlicing"
    MPS = "mps"


class GPUShare(BaseModel):
    """A share of one device per replica: a memory figure or a fraction, not both."""

    model_config = ConfigDict(
        populate_by_name=True,
        extra="ignore",
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.memory) != has(self.fraction)",
                    "message": "gpuShare needs exactly one of memory and fraction",
                }
            ]
        },
    )

    memory: str | None = Field(
        None,
        description=(
            "Device memory per replica, a quantity (e.g. 20Gi), at least 1Mi and at "
            "least the cluster's --min-share-memory (1Gi by default; a smaller share "
            "waits, ShareBelowMinimum). The device's memory must be reported by its "
            "GPUNode or by the DRA driver's ResourceSlice; the sum of the shares on a "
            "device never exceeds it."
        ),
        json_schema_extra={
            "pattern": MEMORY_PATTERN,
            "x-kubernetes-validations": [
                {"rule": MEMORY_FLOOR_RULE, "message": MEMORY_FLOOR_MESSAGE}
            ],
        },
    )
    fraction: str | None = Field(
        None,
        description=(
            "Part of the device per replica, a decimal in (0, 1] with at most three "
            "decimals (e.g. \"0.25\"), at least the cluster's --min-share-fraction "
            "(0.05 by default; a smaller share waits, ShareBelowMinimum); the sum on a "
            "device never exceeds 1."
        ),
        json_schema_extra={
            "pattern": FRACTION_PATTERN,
            "x-kubernetes-validations": [
                {"rule": "double(self) > 0.0", "message": "fraction must be above 0"}
            ],
        },
    )
    mode: ShareMode = Field(
        ShareMode.TIME_SLICING,
        description=(
            "timeSlicing: the replicas take turns on the device, with no memory "
            "isolation (a replica can use more than its share). mps: NVIDIA MPS, with "
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT and CUDA_MPS_ACTIVE_THREAD_PERCENTAGE set "
            "from the share (an MPS control daemon must run on the node)."
        ),
    )

    def text(self) -> str:
        """The share as ``kubectl get gw`` shows it: ``20Gi`` or ``0.25``."""
        return self.memory or self.fraction or ""


#: the cross-field rules of spec (CEL), mirrored by GPUWorkloadSpec's validator
SHARING_RULES = [
    {
        "rule": (
            "!has(self.gpuShare) || ((!has(self.gpusPerReplica) || self.gpusPerReplica == 1)"
            " && (!has(self.gpuCount) || self.gpuCount == 1))"
        ),
        "message": "gpuShare takes part of one device: gpusPerReplica must be 1",
    },
    {
        "rule": (
            "!has(self.migProfile) || ((!has(self.gpusPerReplica) || self.gpusPerReplica == 1)"
            " && (!has(self.gpuCount) || self.gpuCount == 1))"
        ),
        "message": "migProfile takes one MIG instance: gpusPerReplica must be 1",
    },
    {
        "rule": "!has(self.gpuShare) || !has(self.migProfile)",
        "message": "gpuShare and migProfile cannot be set together",
    },
    {
        "rule": (
            "!(has(self.gpuShare) || has(self.migProfile)) || "
            "!has(self.schedulingStrategy) || self.schedulingStrategy != 'annotationMap'"
        ),
        "message": "gpuShare and migProfile cannot be placed by an annotation map",
    },
    {
        "rule": (
            "!(has(self.gpuShare) || has(self.migProfile)) || !has(self.deviceExposure) || "
            "!(self.deviceExposure in ['device-plugin', 'dra'])"
        ),
        "message": (
            "gpuShare and migProfile need deviceExposure cuda-visible-devices or "
            "nvidia-visible-devices (device-plugin and dra cannot express a share)"
        ),
    },
]


class MigInstance(BaseModel):
    """One MIG instance of a MIG-enabled device, as NVML reports it."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    uuid: str = Field(..., description="Instance UUID, e.g. MIG-8d6c.... Named to the container.")
    profile: str = Field(..., description="GPU instance profile, e.g. 1g.10gb.")
    memory_total_mib: int = Field(
        0, alias="memoryTotalMiB", ge=0, description="Memory of the instance, MiB."
    )
    placement: str = Field(
        "", description="Where the instance sits on the device: '<start>:<size>' in slices."
    )


#: the section of docs/api.md that sets the three kinds of request side by side
DOC_SECTION = [
    "## Whole GPUs, shares and MIG instances",
    "",
    "Each replica asks for one of three things; the controller's ledger keeps all three "
    "and a pod holds what it was given until it is gone.",
    "",
    "| spec | each replica gets | the device is | GPUS shows |",
    "| --- | --- | --- | --- |",
    "| `gpusPerReplica: 2` (default 1) | that many whole devices | held by this workload "
    "alone | `2` per replica, summed |",
    "| `gpuShare: {memory: 20Gi}` or `{fraction: \"0.25\"}`, `mode: timeSlicing` (default) "
    "or `mps` | a share of exactly one device | shared with other shares, never with a "
    "whole-GPU holder; the shares on it never add up to more than the device's memory "
    "(or 1) | `20Gi` / `0.25` |",
    "| `migProfile: 1g.10gb` | one MIG instance of that profile (by UUID) | MIG-enabled: "
    "offered only as its instances, each to one replica; never whole, never shared "
    "| `1g.10gb` |",
    "",
    "Time-slicing has **no memory isolation**: a replica can allocate more than its share "
    "and push its neighbours out of memory. The ledger never books more than the "
    "device, but only MPS (`CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`, with an MPS control daemon "
    "on the node) or MIG enforce the limit. A memory share needs the device's memory "
    "reported, by its GPUNode or, with `--enable-dra`, by the DRA driver's ResourceSlice "
    "(capacity `memory`); a fraction does not. Shares and MIG instances are refused at "
    "admission with `gpusPerReplica` > 1, with each other, with an annotation map and "
    "with `deviceExposure` `device-plugin` or `dra` (the kubelet's `nvidia.com/gpu` count "
    "and the claims the controller makes name whole devices); when `dra` or "
    "`device-plugin` is the controller's default, such a workload stays `Scheduled=False` "
    "saying so. MIG layouts are read from the GPUNode (the agent reports them); "
    "reconfiguring them is not done here. `minGPUMemoryMiB` holds for both: a share "
    "goes only on a device, a MIG replica only on an instance, with at least that "
    "much memory.",
    "",
    "**Share floors.** The manager places no share below `--min-share-memory` (1Gi by "
    "default) or `--min-share-fraction` (0.05): such a workload waits Pending, "
    "`Scheduled=False` with reason `ShareBelowMinimum`, and spends no retry (a share "
    "cannot change: delete the workload and create it with a larger one). The API "
    "refuses a memory share below 1Mi whatever the flags. Against its GPUQueue a share "
    "counts as its part of the device, and the shares of one workload on one device "
    "count at least `--min-share-fraction` together: a time-sliced share has the whole "
    "device while it runs, and a device with a share is closed to whole-GPU workloads, "
    "so shares spread over many devices cost the floor on each "
    "([queues.md](queues.md#what-counts)).",
    "",
]
