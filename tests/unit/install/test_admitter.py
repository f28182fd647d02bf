"""The admitter's bookkeeping (hack/testenv/admitter.py), without a server: which
pods count on a node, one decision per pod, a pod waiting for its node, and the
writes of different nodes going out at once, a node's in order."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

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


@pytest.fixture
def admitter(tmp_path: Path) -> Iterator[Callable[..., tuple[Admitter, FakeApi]]]:
    made: list[Admitter] = []

    def make(api: FakeApi | None = None) -> tuple[Admitter, FakeApi]:
        api = api or FakeApi()
        made.append(Admitter(api, tmp_path / "rejections.jsonl"))  # type: ignore[arg-type]
        return made[-1], api
    yield make
    for a in made:
        a.close()


def verdicts(api: FakeApi, a: Admitter | None = None) -> list[tuple[str, str]]:
    if a is not None:
        assert a.flush(10)  # the writes go out on the writers' threads
    out = []
    for method, path, body in api.sent:
        if method != "PATCH":
            continue
        name = path.split("/pods/")[1].split("/")[0]
        out.append((name, "admitted" if path.endswith(name) else body["status"]["reason"]))
    return out


def test_pods_are_judged_in_order_against_those_admitted_before(
        tmp_path: Path, admitter: Callable[..., tuple[Admitter, FakeApi]]) -> None:
    a, api = admitter()
    a.on_node(node(cpu="4"))
    a.on_pod(pod("first", "3"))
    a.on_pod(pod("second", "2"))
    a.on_pod(pod("first", "3"))  # seen again (its own mark's event): no second decision
    assert verdicts(api, a) == [("first", "admitted"), ("second", "OutOfcpu")]
    rejected = [json.loads(line) for line in (tmp_path / "rejections.jsonl").read_text()
                .splitlines()]
    assert [(r["name"], r["node"], r["reason"]) for r in rejected] == [("second", "n1", "OutOfcpu")]
    # the first one finishes: its CPU is free for the next
    a.on_pod(pod("first", "3", phase="Succeeded"))
    a.on_pod(pod("third", "4"))
    assert verdicts(api, a)[-1] == ("third", "admitted")


def test_a_pod_admitted_before_counts_and_is_not_judged_again(
        tmp_path: Path, admitter: Callable[..., tuple[Admitter, FakeApi]]) -> None:
    a, api = admitter()
    a.on_node(node(cpu="4"))
    a.on_pod(pod("running", "3", phase="Running", podIP="198.18.0.2"))
    a.on_pod(pod("marked", "1", annotations={ADMITTED_ANNOTATION: "true"}))
    a.on_pod(pod("late", "1"))
    assert verdicts(api, a) == [("late", "OutOfcpu")]


def test_a_pod_waits_for_its_node_and_other_nodes_are_not_judged(
        tmp_path: Path, admitter: Callable[..., tuple[Admitter, FakeApi]]) -> None:
    a, api = admitter()
    a.on_pod(pod("early", "1", node_name="n2"))
    assert a.flush(10) and api.sent == []
    a.on_node(node("n2"))
    assert verdicts(api, a) == [("early", "admitted")]
    real = {"metadata": {"name": "real"}, "status": {"allocatable": {"cpu": "1"}}}
    a.on_node(real)
    a.on_pod(pod("elsewhere", "8", node_name="real"))  # not a kwok node: its kubelet's
    assert verdicts(api, a) == [("early", "admitted")]


class SlowApi(FakeApi):
    """A kube-apiserver whose writes take 50 ms each; counts the writes in flight,
    in all and per node."""

    def __init__(self, nodes: dict[str, str]) -> None:
        super().__init__()
        self.node_of = nodes  # pod name -> node
        self.lock = threading.Lock()
        self.in_flight: dict[str, int] = {}
        self.most = 0
        self.most_per_node = 0

    def request(self, method: str, path: str, body: Any = None,
                content_type: str = "") -> tuple[int, dict]:
        node = self.node_of.get(path.split("/pods/")[-1].split("/")[0], "")
        with self.lock:
            self.in_flight[node] = self.in_flight.get(node, 0) + 1
            self.most = max(self.most, sum(self.in_flight.values()))
            self.most_per_node = max(self.most_per_node, self.in_flight[node])
        time.sleep(0.05)
        with self.lock:
            self.in_flight[node] -= 1
        return super().request(method, path, body, content_type)


def test_forty_pods_on_twenty_nodes_are_admitted_at_once_not_one_after_another(
        admitter: Callable[..., tuple[Admitter, FakeApi]]) -> None:
    pods = [pod(f"p{i}", "1", node_name=f"n{i % 20}") for i in range(40)]
    api = SlowApi({p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods})
    a, _ = admitter(api)
    for i in range(20):
        a.on_node(node(f"n{i}"))
    start = time.monotonic()
    for p in pods:
        a.on_pod(p)
    assert a.flush(10)
    took = time.monotonic() - start
    assert sorted(verdicts(api, a)) == sorted((f"p{i}", "admitted") for i in range(40))
    assert took < 0.5, f"40 admissions of 50 ms took {took:.2f} s"  # one after another: 2 s
    assert api.most <= 8  # bounded: at most 8 writes at once
    assert api.most_per_node == 1  # a node's kubelet writes one pod at a time
    for i in range(20):  # and in the order it judged them
        assert [n for n, _ in verdicts(api, a) if n in (f"p{i}", f"p{i + 20}")] == \
            [f"p{i}", f"p{i + 20}"]


def test_a_nodes_second_pod_is_judged_against_its_first_while_the_first_is_written(
        admitter: Callable[..., tuple[Admitter, FakeApi]]) -> None:
    pods = [pod("first", "3", node_name="n1"), pod("second", "2", node_name="n1"),
            pod("other", "4", node_name="n2")]
    api = SlowApi({p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods})
    a, _ = admitter(api)
    a.on_node(node("n1", cpu="4"))
    a.on_node(node("n2", cpu="4"))
    for p in pods:
        a.on_pod(p)
    assert a.flush(10)
    assert sorted(verdicts(api, a)) == [("first", "admitted"), ("other", "admitted"),
                                     ("second", "OutOfcpu")]
    events = [body for method, _, body in api.sent if method == "POST"]
    assert [(e["involvedObject"]["name"], e["reason"], e["source"]["host"]) for e in events] \
        == [("second", "OutOfcpu", "n1")]
    assert a.rejections == 1


class FailingApi(FakeApi):
    """A kube-apiserver that answers 500 to the first write of the pods named."""

    def __init__(self, *names: str) -> None:
        super().__init__()
        self.fail = set(names)

    def request(self, method: str, path: str, body: Any = None,
                content_type: str = "") -> tuple[int, dict]:
        name = path.split("/pods/")[-1].split("/")[0]
        if method == "PATCH" and name in self.fail:
            self.fail.discard(name)
            return 500, {"message": "etcdserver: request timed out"}
        return super().request(method, path, body, content_type)


def test_a_pod_whose_mark_failed_does_not_count_and_is_judged_again(
        admitter: Callable[..., tuple[Admitter, FakeApi]]) -> None:
    a, api = admitter(FailingApi("first"))
    a.on_node(node(cpu="4"))
    a.on_pod(pod("first", "3"))
    assert a.flush(10)
    a.on_pod(pod("second", "2"))  # kwok does not run "first": its CPU is free
    assert verdicts(api, a) == [("second", "admitted")]
    a.on_pod(pod("first", "3"))  # the next list: judged again, beside "second"
    assert verdicts(api, a) == [("second", "admitted"), ("first", "OutOfcpu")]
