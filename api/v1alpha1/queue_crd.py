"""The GPUQueue CRD and its section of docs/api.md (written by ``python -m api.v1alpha1.crd``)."""

from __future__ import annotations

from typing import Any

from api.v1alpha1 import crd
from api.v1alpha1.queues import QUEUE_RULES, GPUQueue, GPUQueueSpec, GPUQueueStatus

QUEUE_CRD_FILE = f"{crd.GROUP}_gpuqueues.yaml"

COLUMNS: list[dict[str, Any]] = [
    {"name": "Cohort", "type": "string", "jsonPath": ".spec.cohort",
     "description": "Queues of one cohort lend each other unused quota."},
    {"name": "Nominal", "type": "integer", "jsonPath": ".spec.nominalGPUs",
     "description": "GPUs guaranteed to the queue."},
    {"name": "Used", "type": "number", "jsonPath": ".status.usedGPUs",
     "description": "GPUs its workloads and its namespaces' GPU pods hold."},
    {"name": "Borrowed", "type": "number", "jsonPath": ".status.borrowedGPUs",
     "description": "GPUs used above nominal, borrowed from the cohort."},
    {"name": "Pending", "type": "integer", "jsonPath": ".status.pendingWorkloads",
     "description": "Workloads waiting for quota or capacity."},
    {"name": "Admitted", "type": "integer", "jsonPath": ".status.admittedWorkloads",
     "description": "Workloads holding devices.", "priority": 1},
    {"name": "Lent", "type": "number", "jsonPath": ".status.lentGPUs",
     "description": "Of its unused nominal GPUs, those other queues use now.", "priority": 1},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def queue_crd() -> dict[str, Any]:
    schema = crd._root_schema(crd._doc(GPUQueue), GPUQueueSpec, GPUQueueStatus, QUEUE_RULES)
    del schema["properties"]["spec"]["default"]  # nominalGPUs has none: spec is required
    schema["required"] = ["spec"]
    return crd._crd(
        plural="gpuqueues",
        kind="GPUQueue",
        singular="gpuqueue",
        scope="Cluster",
        short_names=["gq"],
        schema=schema,
        columns=COLUMNS,
    )


def columns_section() -> list[str]:
    """What ``kubectl get gpuqueues`` prints."""
    rows = [f"| {c['name'].upper()}{' (`-o wide`)' if c.get('priority') else ''} | "
            f"`{c['jsonPath']}` | {c.get('description', '')} |" for c in COLUMNS]
    return ["## `kubectl get gpuqueues`", "", "| column | from | what |",
            "| --- | --- | --- |", *rows, ""]


def waiting_section() -> list[str]:
    """docs/api.md: what retryPolicy counts, in a queue and outside any, side by side."""
    return [
        "## Waiting in a queue is not failing",
        "",
        "A workload is *in a queue* when its `spec.queueName` names a GPUQueue, or when "
        "a GPUQueue's `namespaceSelector` selects its namespace ([queues.md](queues.md)). "
        "`retryPolicy` means something different in a queue and outside any:",
        "",
        "| what happens | in a queue | in no queue (as the seed operator) |",
        "| --- | --- | --- |",
        "| its quota is used up (`WaitingForQuota`), another of its queue goes first "
        "(`Queued`), its queue does not exist (`QueueNotFound`) or does not admit its "
        "namespace (`QueueNotAllowed`) | Pending with the reason; no retry spent, no "
        "`nextRetryTime`; tried again when devices are released or a GPUQueue changes "
        "| (not in a queue) |",
        "| its quota allows it but no node has the devices now | Pending, "
        "`WaitingForCapacity`; no retry spent | Pending, `Unschedulable`; each try on "
        "the retry timer spends a retry, `Failed` after `maxRetries` |",
        "| a replica failed, a child could not be created, a placement conflict "
        "(an attempt that failed once admitted) | spends a retry | spends a retry |",
        "| preempted, or its quota reclaimed by another queue (`Preempted`) | Pending, "
        "no retry spent | Pending, no retry spent |",
        "",
        "With `--require-queue`, a workload in no queue is not placed: it waits Pending "
        "with reason `NoQueue`.",
        "",
    ]
