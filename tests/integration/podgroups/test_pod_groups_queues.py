"""A JobSet in a namespace a GPUQueue selects is admitted by that queue's quota as
a GPUWorkload gang is (controllers/podbinding/groupquota.py, docs/podgroups.md), as
a user runs it: the real JobSet and Job controllers make the pods, the manager's pod
binding places them. A queue of 8 GPUs: a 4 x 4-GPU JobSet holds nothing and its
members say which queue and by how much (``kubectl gpu groups`` shows it); a 2 x 4
JobSet runs and counts in the queue's used; once the quota is 16 and the small one
is gone, the big one runs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from api.v1alpha1.queue_policies import JOB_CONTROLLER_USERS
from api.v1alpha1.types import API_VERSION
from internal.cli.main import main
from runtime import Client, errors
from tests.integration.controller.conftest import (  # noqa: F401 (fixtures)
    NodeGroup,
    Running,
    admin,
    group,
    installed,
    namespace_queue,
)
from tests.integration.controller.test_tenant_isolation import _sa_groups
from tests.integration.podgroups.controllers import JOBSET, gpu_pod, jobset
from tests.integration.podgroups.fixtures import (
    JOBSET_NAME,
    members,
    named_nodes,
    on_nodes,
    peer_fixtures,
    told,
)
from tests.waiting import eventually

JOBSET_API = "jobset.x-k8s.io/v1alpha2"


peers, binder = peer_fixtures(JOBSET)


def bound(admin: Client, ns: str, name: str) -> int:  # noqa: F811
    return sum(1 for p in members(admin, ns, name) if p["spec"].get("nodeName"))


def latest_refusal(admin: Client, ns: str, name: str, text: str) -> str | None:  # noqa: F811
    return told(admin, ns, members(admin, ns, name), "FailedScheduling", text)


def test_a_jobset_over_its_queues_quota_holds_nothing_and_runs_once_there_is_quota(
        binder: Running, admin: Client, namespace: str, group: NodeGroup,  # noqa: F811
        capsys: pytest.CaptureFixture[str]) -> None:
    named_nodes(group, 4)  # 16 GPUs: room for it
    with namespace_queue(admin, namespace, 8) as queue:
        # the job controller makes the members: the queue-gpu-pods policy lets them in
        admin.create(on_nodes(jobset("big", [("launcher", 1, 1), ("workers", 3, 1)]), group),
                     namespace=namespace)
        why = eventually(lambda: latest_refusal(admin, namespace, "big", f"queue {queue}"),
                         timeout=120, what="the big JobSet's members say its queue refuses it")
        assert f"pod group {namespace}/jobset:big:0 (4 of 4 members to place): " \
               f"queue {queue}: 0 of 8 GPUs used; needs 16" in why, why
        assert len(members(admin, namespace, "big")) == 4 and bound(admin, namespace, "big") == 0
        # what the user sees: the group, not placed, and why
        assert main(["groups", "-n", namespace, "-o", "json", "--kubeconfig",
                     str(binder.cluster.kubeconfig)]) == 0
        rows = {r["group"]: r for r in json.loads(capsys.readouterr().out)["items"]}
        big = rows[f"{namespace}/jobset:big:0"]
        assert big["state"] == "Unschedulable" and f"queue {queue}" in big["why"], big
        assert "needs 16" in big["why"], big

        admin.create(on_nodes(jobset("small", [("workers", 2, 1)]), group), namespace=namespace)
        eventually(lambda: bound(admin, namespace, "small") == 2, timeout=120,
                   what="the small JobSet (8 GPUs, the queue's quota) bound")
        eventually(lambda: (admin.get(API_VERSION, "GPUQueue", queue).get("status") or {})
                   .get("usedGPUs") == 8, timeout=60, what="the queue's status: 8 GPUs used")
        assert bound(admin, namespace, "big") == 0

        admin.patch(API_VERSION, "GPUQueue", queue, {"spec": {"nominalGPUs": 16}})
        eventually(lambda: latest_refusal(admin, namespace, "big", "8 of 16 GPUs used"),
                   timeout=60, what="the big JobSet told the raised quota's numbers")
        assert bound(admin, namespace, "big") == 0  # 8 + 16 is over 16: still nothing held
        admin.delete(JOBSET_API, "JobSet", "small", namespace, propagation_policy="Foreground")
        eventually(lambda: bound(admin, namespace, "big") == 4, timeout=120,
                   what="the big JobSet placed whole once the quota has room for it")
        eventually(lambda: (admin.get(API_VERSION, "GPUQueue", queue).get("status") or {})
                   .get("usedGPUs") == 16, timeout=60, what="the queue's status: 16 GPUs used")


def test_only_an_unbound_member_for_gpu_scheduler_passes_the_queues_pod_policy(
        binder: Running, admin: Client, namespace: str) -> None:  # noqa: F811
    """What the job controller may create in a queue's namespace: a member of a
    JobSet for gpu-scheduler; not one for another scheduler, nor one bound at
    creation (either would hold GPUs its queue never admitted)."""
    jobs = admin.impersonate(JOB_CONTROLLER_USERS[0], _sa_groups(JOB_CONTROLLER_USERS[0]))

    def pod(name: str, **spec: Any) -> dict[str, Any]:
        body = gpu_pod(4)
        body["spec"].update(spec)
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": name, "namespace": namespace, "labels": {JOBSET_NAME: "train"}}, **body}

    with namespace_queue(admin, namespace, 8) as queue:
        refused = f"namespace {namespace} is in GPUQueue {queue}: a pod may not request"

        def other_scheduler_refused() -> bool:
            try:
                jobs.create(pod("other", schedulerName="default-scheduler"))
            except errors.Forbidden as e:
                assert refused in str(e), str(e)
                return True
            admin.delete("v1", "Pod", "other", namespace=namespace)
            return False
        eventually(other_scheduler_refused, timeout=30, what="the manager marked the namespace")
        with pytest.raises(errors.Forbidden, match="outside the queue"):
            jobs.create(pod("bound", nodeName="somewhere"))
        jobs.create(pod("member"))
