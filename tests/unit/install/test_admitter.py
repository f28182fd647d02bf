"""The admitter's bookkeeping (hack/testenv/admitter.py), without a server: which
pods count on a node, one decision per pod, a pod waiting for its node."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hack.testenv.admitter import ADMITTED_ANNOTATION, Admitter


class FakeApi:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, Any]] = []

    def request(self, method: str, path: str, body: Any = None,
                content_type: str = "") -> tuple[int, dict]:
        self.sent.append((method, path, body))
        return 200, {}


def node(name: str = "n1", cpu: str = "4") -> dict:
    return {"metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"}},
            "status": {"allocatable": {"cpu": cpu, "pods": "10"}}}


def pod(name: str, cpu: str, node_name: str = "n1", **status: Any) -> dict:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "annotations": status.pop("annotations", {})},
            "spec": {"nodeName": node_name, "containers": [
                {"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": "Pending", **status}}


def admitter(tmp_path: Path) -> tuple[Admitter, FakeApi]:
    api = FakeApi()
    return Admitter(api, tmp_path / "rejections.jsonl"), api  # type: ignore[arg-type]


def verdicts(api: FakeApi) -> list[tuple[str, str]]:
    out = []
    for method, path, body in api.sent:
        if method != "PATCH":
            continue
        name = path.split("/pods/")[1].split("/")[0]
        out.append((name, "admitted" if path.endswith(name) else body["status"]["reason"]))
    return out


def test_pods_are_judged_in_order_against_those_admitted_before(tmp_path: Path) -> None:
    a, api = admitter(tmp_path)
    a.on_node(node(cpu="4"))
    a.on_pod(pod("first", "3"))
    a.on_pod(pod("second", "2"))
    a.on_pod(pod("first", "3"))  # seen again (its own mark's event): no second decision
    assert verdicts(api) == [("first", "admitted"), ("second", "OutOfcpu")]
    rejected = [json.loads(line) for line in (tmp_path / "rejections.jsonl").read_text()
                .splitlines()]
    assert [(r["name"], r["node"], r["reason"]) for r in rejected] == [("second", "n1", "OutOfcpu")]
    # the first one finishes: its CPU is free for the next
    a.on_pod(pod("first", "3", phase="Succeeded"))
    a.on_pod(pod("third", "4"))
    assert verdicts(api)[-1] == ("third", "admitted")


def test_a_pod_admitted_before_counts_and_is_not_judged_again(tmp_path: Path) -> None:
    a, api = admitter(tmp_path)
    a.on_node(node(cpu="4"))
    a.on_pod(pod("running", "3", phase="Running", podIP="198.18.0.2"))
    a.on_pod(pod("marked", "1", annotations={ADMITTED_ANNOTATION: "true"}))
    a.on_pod(pod("late", "1"))
    assert verdicts(api) == [("late", "OutOfcpu")]


def test_a_pod_waits_for_its_node_and_other_nodes_are_not_judged(tmp_path: Path) -> None:
    a, api = admitter(tmp_path)
    a.on_pod(pod("early", "1", node_name="n2"))
    assert api.sent == []
    a.on_node(node("n2"))
    assert verdicts(api) == [("early", "admitted")]
    real = {"metadata": {"name": "real"}, "status": {"allocatable": {"cpu": "1"}}}
    a.on_node(real)
    a.on_pod(pod("elsewhere", "8", node_name="real"))  # not a kwok node: its kubelet's
    assert verdicts(api) == [("early", "admitted")]
