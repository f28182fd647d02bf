"""``kubectl gpu groups`` and the ``gpu_orchestrator_pod_groups`` gauge read a group's
state the same way: a ``LeaderReady`` LeaderWorkerSet group whose bound leader holds
its workers' slots (the workers are made once it is Ready) is placed, shown as
``Reserved`` with the slots it holds, not as waiting for members."""

from __future__ import annotations

import argparse
import io
import json
from typing import Any

from api.v1alpha1.keys import DEVICES_ANNOTATION, GROUP_SLOTS_ANNOTATION
from controllers.podbinding.group_metrics import group_states
from internal.cli import cmd_groups
from internal.cli.output import Printer
from internal.scheduling.podgroups import pod_group

NS = "serve"
GROUP = f"{NS}/leaderworkerset:infer:0"


def lws_pod(worker: int, node: str | None = None, devices: str | None = None,
            slots: str | None = None) -> dict[str, Any]:
    """Member ``worker`` (0: the leader) of group 0 of the 3-pod LWS ``infer``."""
    name = "infer-0" if worker == 0 else f"infer-0-{worker}"
    annotations = {"leaderworkerset.sigs.k8s.io/size": "3"}
    if devices is not None:
        annotations[DEVICES_ANNOTATION] = devices
    if slots is not None:
        annotations[GROUP_SLOTS_ANNOTATION] = slots
    spec: dict[str, Any] = {"schedulerName": "gpu-scheduler", "containers": [
        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}",
                         "labels": {"leaderworkerset.sigs.k8s.io/name": "infer",
                                    "leaderworkerset.sigs.k8s.io/group-index": "0",
                                    "leaderworkerset.sigs.k8s.io/worker-index": str(worker)},
                         "annotations": annotations},
            "spec": spec, "status": {"phase": "Running" if node else "Pending"}}


class FakeClient:
    def get(self, api_version: str, kind: str, name: str, namespace: str) -> Any:
        raise LookupError(f"{kind} {namespace}/{name}: not served here")


class FakeKube:
    """What ``kubectl gpu groups`` reads: the pods, their Events (none), owners
    (none: an LWS group's size is its pods' annotation)."""

    all_namespaces = False
    namespace = NS
    client = FakeClient()

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self._pods = pods

    def pods(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return [p for p in self._pods if namespace in (None, p["metadata"]["namespace"])]

    def events_for(self, obj: dict[str, Any], limit: int = 20) -> list[dict[str, Any]]:
        return []


def shown(pods: list[dict[str, Any]], fmt: str = "table") -> str:
    out = io.StringIO()
    args = argparse.Namespace(name=[], scheduler_name="gpu-scheduler")
    assert cmd_groups.run(args, FakeKube(pods), Printer(fmt, out, rich=False)) == 0  # type: ignore[arg-type]
    return out.getvalue()


def row(pods: list[dict[str, Any]]) -> list[str]:
    lines = shown(pods).splitlines()
    assert lines[0].split()[:7] == ["GROUP", "SOURCE", "MEMBERS", "BOUND", "RUNNING", "STATE",
                                    "WHY"], lines
    (line,) = lines[1:]
    return line.split(None, 6)


def gauge(pods: list[dict[str, Any]]) -> dict[str, int]:
    return group_states(pods, "gpu-scheduler", pod_group)


LEADER = lws_pod(0, "node-a", "0,1", slots="1=node-a:2,3;2=node-b:0,1")


def test_a_leader_holding_its_workers_slots_is_shown_reserved_with_the_slots() -> None:
    pods = [LEADER]
    assert row(pods) == [GROUP, "leaderworkerset", "1/3", "1", "1", "Reserved",
                         "1 bound, 2 slot(s) reserved for the members its controller "
                         "makes later"]
    (item,) = json.loads(shown(pods, "json"))["items"]
    assert (item["state"], item["bound"], item["reserved"], item["size"]) == ("Reserved", 1, 2, 3)
    assert gauge(pods) == {"placed": 1, "waiting": 0, "refused": 0}


def test_a_worker_bound_to_its_slot_takes_one_reserved_slot_then_the_group_is_placed() -> None:
    pods = [LEADER, lws_pod(1, "node-a", "2,3")]
    assert row(pods)[2:] == ["2/3", "2", "2", "Reserved",
                             "2 bound, 1 slot(s) reserved for the members its controller "
                             "makes later"]
    pods.append(lws_pod(2, "node-b", "0,1"))
    assert row(pods)[2:6] == ["3/3", "3", "3", "Placed"]
    assert gauge(pods) == {"placed": 1, "waiting": 0, "refused": 0}


def test_a_leader_without_slots_for_every_worker_is_still_waiting() -> None:
    """Slots for one of two workers, or slots a tenant wrote without the devices
    annotation (only a Binding of ours writes both), hold no group whole."""
    for leader in (lws_pod(0, "node-a", "0,1", slots="1=node-a:2,3"),
                   lws_pod(0, "node-a", None, slots="1=node-a:2,3;2=node-b:0,1")):
        assert row([leader])[5] == "WaitingForMembers"
        assert gauge([leader]) == {"placed": 0, "waiting": 1, "refused": 0}
