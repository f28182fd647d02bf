"""A pod group preempts a lower-priority group of its own queue for the queue's
quota, whole, when the queue says ``withinQueue: LowerPriority`` (docs/queues.md;
docs/podgroups.md, "A group and its queue"), as a user runs it: the real JobSet and
Job controllers make the pods.

One queue of 4 GPUs nominal, in no cohort, on 2 nodes x 4 GPUs (room for both
JobSets, quota for one). A priority-10 JobSet of 2 pods x 2 GPUs holds the quota; a
priority-100 one of the same shape takes it: both pods of the first are evicted,
never one, and the second's are bound."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from api.v1alpha1.types import API_VERSION
from runtime import Client
from tests.integration.controller.conftest import (  # noqa: F401 (fixtures)
    NodeGroup,
    Running,
    admin,
    group,
    installed,
)
from tests.integration.podgroups.controllers import JOBSET, jobset
from tests.integration.podgroups.fixtures import (
    bound,
    members,
    named_nodes,
    on_nodes,
    peer_fixtures,
    told,
)
from tests.waiting import eventually

peers, binder = peer_fixtures(JOBSET)


@pytest.fixture
def queue(admin: Client, namespace: str) -> Iterator[str]:  # noqa: F811
    """A GPUQueue of 4 GPUs for ``namespace``, preempting within itself by priority."""
    name = f"q-{uuid.uuid4().hex[:6]}"
    admin.create({"apiVersion": API_VERSION, "kind": "GPUQueue", "metadata": {"name": name},
                  "spec": {"nominalGPUs": 4,
                           "preemption": {"withinQueue": "LowerPriority"},
                           "namespaceSelector": {"matchLabels": {
                               "kubernetes.io/metadata.name": namespace}}}})
    yield name
    admin.delete(API_VERSION, "GPUQueue", name)


def gang(name: str, nodes: NodeGroup, priority_class: str) -> dict[str, Any]:
    """A JobSet of 2 pods x 2 GPUs on ``nodes`` of ``priority_class``."""
    return on_nodes(jobset(name, [("workers", 1, 2)]), nodes, 2,
                    priority_class=priority_class)


def all_bound(admin: Client, ns: str, name: str) -> list[dict[str, Any]]:  # noqa: F811
    return eventually(lambda: (lambda ps: ps if len(bound(ps)) == 2 else None)(
        members(admin, ns, name)), timeout=120, what=f"the JobSet {name}'s 2 pods bound")


def test_a_higher_priority_jobset_takes_its_queues_quota_from_a_lower_one_whole(
        binder: Running, admin: Client, namespace: str, queue: str,  # noqa: F811
        group: NodeGroup, classes: dict[int, str]) -> None:  # noqa: F811
    named_nodes(group, 2)
    admin.create(gang("low", group, classes[10]), namespace=namespace)
    low = all_bound(admin, namespace, "low")
    admin.create(gang("high", group, classes[100]), namespace=namespace)
    all_bound(admin, namespace, "high")
    uids = {p["metadata"]["uid"] for p in low}
    left = [p["metadata"]["name"] for p in members(admin, namespace, "low", terminating=True)
            if p["metadata"]["uid"] in uids]
    assert not left, left
    for p in low:  # each member is told by whom, within its queue
        why = told(admin, namespace, [p], "Preempted", f"within queue {queue}")
        assert why is not None and f"PodGroup:{namespace}/jobset:high:" in why, why
