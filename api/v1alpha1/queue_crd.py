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
