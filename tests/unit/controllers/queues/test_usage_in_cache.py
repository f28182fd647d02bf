"""Each queue's usage follows the queues as they are: a namespace labelled into
(or out of) a queue counts its holders there from the next read."""

from __future__ import annotations

from typing import Any

from tests.unit.controllers.queues.test_queue_gate import Cluster, queue

NAMESPACES = ("ns-a", "ns-b", "ns-c")


def namespace(name: str, team: str | None) -> dict[str, Any]:
    labels = {"team": team} if team else {}
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": labels}}


def team_queue(team: str, nominal: int = 8) -> dict[str, Any]:
    """Queue ``c``, selecting the namespaces labelled ``team``."""
    return queue("c", nominal, "", namespaceSelector={"matchLabels": {"team": team}})


def anybodys_pod(ns: str, name: str, node: str, device: int) -> dict[str, Any]:
    """A pod of nobody's (no owner) running on one device."""
    return {"metadata": {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}",
                         "annotations": {"gpu.orchestrator.dev/devices": str(device)}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
            "status": {"phase": "Running"}}


def cluster() -> Cluster:
    c = Cluster(queue("a", 8, "ns-a"), queue("b", 8, "ns-b"), team_queue("c"))
    for ns in NAMESPACES:
        c.namespaces.add(namespace(ns, None))
    return c


def test_a_namespace_labelled_into_a_queue_counts_its_pods_there() -> None:
    """Pods run in a namespace no queue selects; the namespace is then labelled so
    that queue c selects it: c's usage (its status, its quota) counts them at once
    (before, only after some GPUQueue's spec changed)."""
    c = cluster()
    for i in range(3):
        c.state.events.on_pod(anybodys_pod("ns-c", f"p{i}", "node1", i))
    assert c.used() == {}
    c.namespaces.add(namespace("ns-c", "c"))
    assert c.used() == {"c": 3.0}
    c.namespaces.add(namespace("ns-c", "d"))  # and out of it again
    assert c.used() == {}
