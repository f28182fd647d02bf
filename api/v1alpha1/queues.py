"""``GPUQueue``: a team's share of the cluster's GPUs (docs/queues.md).

A queue guarantees ``nominalGPUs``; queues of one ``cohort`` lend each other what
they do not use (up to ``lendingLimit``) and borrow it (up to ``borrowingLimit``);
a queue under its nominal quota takes back what others borrowed (``preemption``).
A workload names its queue in ``spec.queueName``, or gets the queue whose
``namespaceSelector`` selects its namespace.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field

from api.v1alpha1.types import (
    API_VERSION,
    Condition,
    NullAsEmptyList,
    ObjectMeta,
    Time,
    _Base,
)

#: the condition a queue's status carries (its reason says how it admits)
QUEUE_ACTIVE = "Active"
#: present (True) while a namespace the queue selects is also selected by a queue that
#: comes first by name: that namespace's workloads without spec.queueName go there
QUEUE_OVERLAPPING = "Overlapping"
#: its reason
ANOTHER_QUEUE_FIRST = "AnotherQueueFirst"

#: spec-level rules of a GPUQueue (CEL)
QUEUE_RULES = [
    {
        "rule": "!has(self.lendingLimit) || self.lendingLimit <= self.nominalGPUs",
        "message": "lendingLimit cannot exceed nominalGPUs",
    },
]


class ReclaimWithinCohort(StrEnum):
    """Which workloads of other queues of the cohort a queue under its nominal quota
    may preempt to take back what they borrowed."""

    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    ANY = "Any"


class WithinQueue(StrEnum):
    """Which workloads of its own queue a workload over the quota may preempt."""

    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"


class SelectorOperator(StrEnum):
    """Operator of a label selector requirement."""

    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


class SelectorRequirement(_Base):
    """One requirement on a namespace's labels."""

    key: str = Field(..., description="Label key.")
    operator: SelectorOperator = Field(..., description="How the key's value is compared.")
    values: list[str] = Field(
        default_factory=list, description="Values for In and NotIn; empty otherwise."
    )


class NamespaceSelector(_Base):
    """A label selector over namespaces (``{}`` selects every namespace)."""

    match_labels: dict[str, str] = Field(
        default_factory=dict, alias="matchLabels", description="Labels a namespace must carry."
    )
    match_expressions: list[SelectorRequirement] = Field(
        default_factory=list, alias="matchExpressions",
        description="Requirements a namespace's labels must all meet.",
    )

    def selects(self, labels: dict[str, str]) -> bool:
        """Does a namespace with ``labels`` match?"""
        if any(labels.get(k) != v for k, v in self.match_labels.items()):
            return False
        for r in self.match_expressions:
            has = r.key in labels
            ok = {
                SelectorOperator.IN: has and labels.get(r.key) in r.values,
                SelectorOperator.NOT_IN: not has or labels.get(r.key) not in r.values,
                SelectorOperator.EXISTS: has,
                SelectorOperator.DOES_NOT_EXIST: not has,
            }[r.operator]
            if not ok:
                return False
        return True


class QueuePreemption(_Base):
    """What a queue's workloads may preempt to get their quota."""

    reclaim_within_cohort: ReclaimWithinCohort = Field(
        ReclaimWithinCohort.ANY, alias="reclaimWithinCohort",
        description=(
            "While this queue is under its nominal quota, which workloads of queues "
            "of its cohort that borrow it may preempt to take back what they "
            "borrowed: Never, LowerPriority (of lower priority than the reclaiming "
            "workload) or Any. Victims go lowest priority first, then newest first, "
            "never more than the reclaimer needs."
        ),
    )
    within_queue: WithinQueue = Field(
        WithinQueue.NEVER, alias="withinQueue",
        description=(
            "Whether a workload that does not fit this queue's quota may preempt "
            "lower-priority workloads of the same queue (LowerPriority) or not (Never)."
        ),
    )


class GPUQueueSpec(_Base):
    """Quota of one queue."""

    nominal_gpus: int = Field(
        ..., alias="nominalGPUs", ge=0,
        description=(
            "GPUs guaranteed to this queue's workloads. A share or a MIG instance counts "
            "as its fraction of a GPU."
        ),
    )
    borrowing_limit: int | None = Field(
        None, alias="borrowingLimit", ge=0,
        description=(
            "How many GPUs above nominalGPUs the queue may use, borrowed from its "
            "cohort's unused quota. Unset: as many as the cohort can lend; 0 (or no "
            "cohort): never above nominalGPUs."
        ),
    )
    lending_limit: int | None = Field(
        None, alias="lendingLimit", ge=0,
        description=(
            "How many of its unused nominal GPUs the cohort may borrow. Unset: all of "
            "them. What is not lendable stays reserved for this queue."
        ),
    )
    cohort: str | None = Field(
        None,
        description="Queues of one cohort lend each other unused quota. Unset: no cohort.",
    )
    weight: int = Field(
        1, ge=1,
        description=(
            "Fair share among queues that borrow: the queue whose borrowed GPUs divided "
            "by its weight is lowest admits first."
        ),
    )
    preemption: QueuePreemption = Field(
        default_factory=QueuePreemption,
        description="What the queue's workloads may preempt to get their quota.",
    )
    namespace_selector: NamespaceSelector | None = Field(
        None, alias="namespaceSelector",
        description=(
            "Namespaces whose workloads this queue admits, and whose workloads with no "
            "spec.queueName it takes by default. Unset: none; {}: every namespace."
        ),
    )


class GPUQueueStatus(_Base):
    """What the queue holds and who waits in it, written by the controller."""

    used_gpus: float = Field(
        0.0, alias="usedGPUs", ge=0,
        description=(
            "GPUs held by the queue's workloads and by GPU pods of its namespaces "
            "(the ledger's holders; shares as fractions)."
        ),
    )
    borrowed_gpus: float = Field(
        0.0, alias="borrowedGPUs", ge=0,
        description="GPUs used above nominalGPUs, borrowed from the cohort.",
    )
    lent_gpus: float = Field(
        0.0, alias="lentGPUs", ge=0,
        description="Of its unused nominal GPUs, those other queues of the cohort use now.",
    )
    admitted_workloads: int = Field(
        0, alias="admittedWorkloads", ge=0,
        description="The queue's workloads holding devices (placed, not finished).",
    )
    pending_workloads: int = Field(
        0, alias="pendingWorkloads", ge=0,
        description="The queue's workloads waiting for quota or capacity.",
    )
    conditions: Annotated[list[Condition], NullAsEmptyList] = Field(
        default_factory=list,
        description=(
            "Active: True while the queue admits workloads (reason Ready, or NoCohort: "
            "a borrowingLimit with no cohort to borrow from). Overlapping: True while "
            "a namespace it selects is also selected by a queue that comes first by "
            "name, the default queue of that namespace's workloads (reason "
            "AnotherQueueFirst); absent otherwise."
        ),
    )
    last_update_time: Time = Field(
        None, alias="lastUpdateTime", description="When the controller last wrote this status."
    )


class GPUQueue(_Base):
    """A team's share of the cluster's GPUs: guaranteed quota (nominalGPUs), lent and
    borrowed within a cohort, taken back by reclaim. Cluster-scoped."""

    api_version: str = Field(API_VERSION, alias="apiVersion", description="API version.")
    kind: str = Field("GPUQueue", description="Kind.")
    metadata: ObjectMeta = Field(default_factory=ObjectMeta, description="Object metadata.")
    spec: GPUQueueSpec = Field(..., description="Quota.")
    status: GPUQueueStatus = Field(default_factory=GPUQueueStatus, description="Observed state.")
