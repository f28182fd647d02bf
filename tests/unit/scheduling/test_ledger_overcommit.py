"""Two authorities on one node: the ledger names devices, the device plugin counts
them. Only their sum shows that one GPU was handed out twice; the holder whose
arrival takes a node above its devices is the one reported (the later pod)."""

from __future__ import annotations

from typing import Any

from api.v1alpha1.keys import DEVICES_ANNOTATION
from api.v1alpha1.types import Placement
from internal.scheduling import Ledger
from internal.scheduling.ledger_core import is_conflict


def ledger(gpus: int = 4) -> Ledger:
    led = Ledger()
    led.set_node_devices("node2", range(gpus))
    return led


def pod(name: str, *, gpus: int = 0, devices: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "team", "uid": f"u-{name}"}
    if devices is not None:
        meta["annotations"] = {DEVICES_ANNOTATION: devices}
    return {"metadata": meta,
            "spec": {"nodeName": "node2",
                     "containers": [{"resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
            "status": {"phase": "Running"}}


def test_named_then_counted_above_the_node_reports_the_later_pod() -> None:
    led = ledger()
    led.assume("team/w", [Placement(index=0, node="node2", devices=[0, 1, 2, 3])], owner="w#0")
    problems = led.sync_pod(pod("plain", gpus=4))
    assert len(problems) == 1 and is_conflict(problems[0]), problems
    assert "node2: over-committed: 8 GPUs held on its 4 devices" in problems[0]
    assert "named 0,1,2,3 by team/w" in problems[0] and "team/plain 4" in problems[0]
    assert led.pod("u-plain").overcommit
    assert led.free_count("node2") == 0


def test_counted_then_named_then_counted_flags_only_the_third() -> None:
    led = ledger()
    assert led.sync_pod(pod("first", gpus=2)) == []
    assert led.sync_pod(pod("w-0", devices="0,1")) == []  # named beside 2 counted: room
    problems = led.sync_pod(pod("second", gpus=2))
    assert problems and "6 GPUs held on its 4 devices" in problems[0]
    # an update of the earlier pod does not make it the culprit; the later stays one
    assert led.sync_pod(pod("first", gpus=2)) == []
    assert led.sync_pod(pod("second", gpus=2)) == problems
    assert not led.pod("u-first").overcommit
    led.remove_pod("u-second")
    assert led.held_total("node2") == 4


def test_a_node_with_room_reports_nothing_even_when_it_offers_nothing() -> None:
    led = ledger()
    assert led.sync_pod(pod("a", gpus=2)) == [] and led.sync_pod(pod("b", devices="0")) == []
    led.set_node_devices("node2", (), size=4)  # its agent went stale: nothing offered
    assert led.sync_pod(pod("c", gpus=1)) == []
    problems = led.sync_pod(pod("d", devices="3"))
    assert problems and "5 GPUs held on its 4 devices" in problems[0]
