"""A pod group nominated over preempted holders is bound as soon as their pods are
gone (docs/podgroups.md, "How a group preempts"): the pods' going wakes its
members, as it wakes a GPUWorkload preemptor; the slow look again
(``groups.PREEMPTION_POLL``) is only a fallback. The real JobSet and Job
controllers make the pods.

2 nodes x 4 GPUs held by two priority-0 GPUWorkloads; a priority-100 JobSet of 2
pods x 4 GPUs preempts both. With the fallback pushed to 30 s, both members are
bound within half a second of the last victim pod leaving the manager's own Pod
cache (before, the members looked again every second, here every 30 s)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from api.v1alpha1.keys import WORKLOAD_LABEL
from controllers.podbinding import groups
from runtime import Client, FuncHandler
from tests.integration.controller.conftest import (  # noqa: F401 (fixtures)
    NodeGroup,
    Running,
    delete_workload,
    group,
    installed,
    wait_phase,
    workload,
)
from tests.integration.podgroups.controllers import JOBSET, jobset
from tests.integration.podgroups.fixtures import (
    JOBSET_NAME,
    bound,
    members,
    named_nodes,
    on_nodes,
    peer_fixtures,
)
from tests.waiting import eventually

peers, binder = peer_fixtures(JOBSET)
#: how long after its victims' pods are gone a nominated group may take to bind
PROMPT = 0.5


class Seen:
    """When the manager's Pod cache saw each pod of ``namespace`` go, and each
    bound (monotonic seconds, first time)."""

    def __init__(self, namespace: str) -> None:
        self.ns = namespace
        self.gone: dict[str, tuple[float, dict[str, Any]]] = {}
        self.bound: dict[str, tuple[float, dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def handler(self) -> FuncHandler:
        return FuncHandler(self._saw, lambda _old, new: self._saw(new), self._went,
                           name="test-group-wake", inline=True)

    def _saw(self, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        if meta.get("namespace") == self.ns and (pod.get("spec") or {}).get("nodeName"):
            with self._lock:
                self.bound.setdefault(meta["name"], (time.monotonic(), pod))

    def _went(self, pod: Any) -> None:
        pod = getattr(pod, "obj", pod) or {}
        meta = pod.get("metadata") or {}
        if meta.get("namespace") == self.ns:
            with self._lock:
                self.gone.setdefault(meta["name"], (time.monotonic(), pod))


def test_a_nominated_group_binds_as_soon_as_its_victims_pods_are_gone(
        binder: Running, admin: Client, namespace: str, group: NodeGroup,  # noqa: F811
        classes: dict[int, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(groups, "PREEMPTION_POLL", 30.0)  # the fallback: out of the way
    seen = Seen(namespace)
    assert binder.mgr is not None
    binder.mgr.informer_for("v1", "Pod").add_event_handler(seen.handler())
    named_nodes(group, 2)
    for i in range(2):
        admin.create(workload(f"held-{i}", namespace, gpusPerReplica=4, priority=0,
                              nodeSelector=dict(group.selector)))
    for i in range(2):
        wait_phase(admin, namespace, f"held-{i}", "Running", timeout=90)
    admin.create(on_nodes(jobset("urgent", [("workers", 1, 2)]), group, 4,
                          annotations={"gpu.orchestrator.dev/strategy": "priority"},
                          priority_class=classes[100]), namespace=namespace)
    placed = eventually(lambda: (lambda ps: ps if len(bound(ps)) == 2 else None)(
        members(admin, namespace, "urgent")), timeout=60, what="the JobSet's 2 pods bound")
    names = {p["metadata"]["name"] for p in placed}
    eventually(lambda: names <= set(seen.bound), timeout=10, what="the cache saw them bound")
    victims = {n: t for n, (t, p) in seen.gone.items()
               if (p["metadata"].get("labels") or {}).get(WORKLOAD_LABEL, "").startswith("held-")}
    assert len(victims) == 2, sorted(seen.gone)
    last_gone = max(victims.values())
    late = {n: round(seen.bound[n][0] - last_gone, 3) for n in names}
    assert all((seen.bound[n][1]["metadata"].get("labels") or {}).get(JOBSET_NAME) == "urgent"
               for n in names)
    assert max(late.values()) < PROMPT, late
    for i in range(2):
        delete_workload(admin, namespace, f"held-{i}")
