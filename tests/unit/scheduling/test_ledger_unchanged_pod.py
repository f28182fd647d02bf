"""A pod sees several updates (bound, its status, Running) while what it holds
changes once: an update that changes nothing of its holding re-books nothing (the
ledger's holders' stamps do not move: the queues' usage and the nodes' free counts
are not recomputed), and says again what it said (a conflict, an over-commit)."""

from __future__ import annotations

from typing import Any

from api.v1alpha1.keys import DEVICES_ANNOTATION
from api.v1alpha1.types import Placement
from internal.scheduling import Ledger
from internal.scheduling.ledger_core import is_conflict


def pod(name: str, devices: str | None = None, *, gpus: int = 0,
        phase: str = "Pending") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "team", "uid": f"u-{name}"}
    if devices is not None:
        meta["annotations"] = {DEVICES_ANNOTATION: devices}
    return {"metadata": meta,
            "spec": {"nodeName": "node1",
                     "containers": [{"resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
            "status": {"phase": phase}}


class Heard:
    """How often the ledger's holders changed: its stamps' ``holds``, moved by every
    holder booked or released (``Stamps.held``)."""

    def __init__(self, led: Ledger) -> None:
        self.led = led

    @property
    def calls(self) -> int:
        return self.led.stamps.holds


def watched() -> tuple[Ledger, Heard]:
    led = Ledger()
    led.set_node_devices("node1", range(4))
    return led, Heard(led)


def test_an_update_that_changes_nothing_rebooks_nothing() -> None:
    led, heard = watched()
    led.sync_pod(pod("a", "0,1", gpus=2))
    after_first = heard.calls
    assert after_first > 0
    led.sync_pod(pod("a", "0,1", gpus=2, phase="Running"))
    led.sync_pod(pod("a", "0,1", gpus=2, phase="Running"))
    assert heard.calls == after_first
    assert led.free_count("node1") == 2


def test_an_update_that_changes_the_holding_is_rebooked() -> None:
    """Its priority (its PriorityClass's value, read at each event) is part of it."""
    led, heard = watched()
    led.sync_pod(pod("a", "0,1", gpus=2))
    before = heard.calls
    led.sync_pod(pod("a", "0,1", gpus=2, phase="Running"), priority=7)
    assert heard.calls > before
    assert led.pod("u-a").priority == 7


def test_a_pod_gone_and_back_under_its_uid_is_booked_again() -> None:
    led, _ = watched()
    led.sync_pod(pod("a", "0,1", gpus=2))
    led.remove_pod("u-a")
    assert led.free_count("node1") == 4
    led.sync_pod(pod("a", "0,1", gpus=2))
    assert led.free_count("node1") == 2


def test_an_unchanged_conflicting_pod_is_reported_on_each_update() -> None:
    led, _ = watched()
    led.assume("team/w", [Placement(index=0, node="node1", devices=[0, 1, 2, 3])], owner="w#0")
    first = led.sync_pod(pod("plain", gpus=4))
    again = led.sync_pod(pod("plain", gpus=4, phase="Running"))
    assert len(first) == 1 and is_conflict(first[0])
    assert again == first


def test_an_unchanged_pod_on_a_device_another_holds_names_it_each_time() -> None:
    led, _ = watched()
    led.sync_pod(pod("first", "1", gpus=1))
    first = led.sync_pod(pod("second", "1", gpus=1))
    again = led.sync_pod(pod("second", "1", gpus=1, phase="Running"))
    assert first and "device 1 also held by" in first[0]
    assert again == first
