"""Bad input gets a clear error, and the controller keeps serving the others."""

from __future__ import annotations

import json

import pytest

from hack.testenv import ControlPlane
from runtime import Client, Invalid
from tests.integration.controller.conftest import (
    NodeGroup,
    Running,
    events_for,
    get_workload,
    wait_condition,
    wait_phase,
    workload,
)
from tests.waiting import eventually


@pytest.mark.parametrize("spec, message", [
    ({"replicas": 0}, "spec.replicas"),
    ({"schedulingStrategy": "fastest"}, "spec.schedulingStrategy"),
    ({"gpusPerReplica": 2, "gpuCount": 3}, "gpuCount and gpusPerReplica must be equal"),
    ({"schedulingStrategy": "annotationMap"}, "annotationMap"),
    ({"replicas": 2, "schedulingStrategy": "annotationMap",
      "schedulingMap": "0=node1:0\n1=node1:1\n2=node1:2"}, "schedulingMap"),
])
def test_invalid_spec_is_rejected_by_the_api_server(
        installed: ControlPlane, admin: Client, namespace: str, spec: dict, message: str
) -> None:
    with pytest.raises(Invalid) as err:
        admin.create(workload("bad", namespace, **spec))
    assert message in str(err.value)
    # kubectl shows the user the same message.
    out = installed.kubectl("apply", "-n", namespace, "-f", "-", check=False,
                            input=json.dumps(workload("bad", namespace, **spec)))
    assert out.returncode != 0 and message in out.stderr


@pytest.mark.parametrize("name, scheduling_map, replicas, expect", [
    ("missing-node", "0=no-such-node:0", 1, "no-such-node"),
    ("beyond", "0=node1:7", 1, "7"),
    ("too-many", "0=node1:0\n1=node1:1\n2=node1:2", 2, "2"),
])
def test_bad_annotation_map_gives_a_condition_and_an_event(
        controller: Running, admin: Client, namespace: str, group: NodeGroup,
        name: str, scheduling_map: str, replicas: int, expect: str) -> None:
    # The annotation is not validated by the CRD schema: the controller reports it.
    try:
        admin.create(workload(name, namespace, replicas=replicas,
                              annotations={"gpu-scheduling-map": scheduling_map},
                              schedulingStrategy="annotationMap"))
    except Invalid as exc:  # rejected at admission: also a clear answer
        assert expect in str(exc)
        return
    cond = wait_condition(admin, namespace, name, "Scheduled", "InvalidSchedulingMap")
    assert expect in cond["message"]
    # Events and status are written apart (neither waits for the other)
    events = eventually(lambda: [e for e in events_for(admin, namespace, name)
                                 if e["reason"] == "InvalidSchedulingMap"],
                        timeout=30, what="the InvalidSchedulingMap event")
    assert expect in events[0]["message"]
    assert not get_workload(admin, namespace, name)["status"].get("placements")

    # Meanwhile the controller keeps serving the others.
    controller.wait_nodes(group.add(1, gpus=1))
    admin.create(workload(f"{name}-fine", namespace, nodeSelector=group.selector))
    wait_phase(admin, namespace, f"{name}-fine", "Running")
