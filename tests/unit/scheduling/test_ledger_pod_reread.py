"""The pod our create returned is recorded (``hold_created``), then its ADDED event
and its status updates bring the same pod again: a pod whose holding's inputs
(node, phase, devices and portion annotations, child labels, controller) are those
of its last clean read is not parsed again, and the ledger answers and holds exactly
what reading it again would give. Any change of those inputs is read as before."""

from __future__ import annotations

import random
from typing import Any

import pytest

import internal.scheduling.ledger as ledger_module
from api.v1alpha1.keys import ATTEMPT_LABEL, DEVICES_ANNOTATION
from api.v1alpha1.types import Placement
from internal.scheduling import Ledger
from runtime.store import freeze


def pod(name: str = "a", devices: str | None = "0,1", *, gpus: int = 2,
        phase: str = "Pending", node: str | None = "node1", rv: str = "1",
        owner: str | None = "w1", attempt: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "team", "uid": f"u-{name}",
                            "resourceVersion": rv}
    if devices is not None:
        meta["annotations"] = {DEVICES_ANNOTATION: devices}
    if owner is not None:
        meta["ownerReferences"] = [{"kind": "GPUWorkload", "name": "w", "uid": owner,
                                    "controller": True}]
    if attempt is not None:
        meta["labels"] = {ATTEMPT_LABEL: attempt}
    spec: dict[str, Any] = {"containers": [{"resources": {"limits": {"nvidia.com/gpu": gpus}}}]}
    if node is not None:
        spec["nodeName"] = node
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def reread(led: Ledger, p: Any, priority: int = 0) -> list[str]:
    """``led.sync_pod(p)`` as before this change: every pod parsed again (its inputs
    never equal the last read's)."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(ledger_module, "holding_inputs", lambda pod: object())
        return led.sync_pod(p, priority)


def ledger() -> Ledger:
    led = Ledger()
    for n in ("node1", "node2"):
        led.set_node_devices(n, range(4))
    return led


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The pods ``Ledger.sync_pod`` parsed (``pod_holding``), by name."""
    seen: list[str] = []
    parse = ledger_module.pod_holding

    def counted(p: Any) -> Any:
        seen.append(p["metadata"]["name"])
        return parse(p)
    monkeypatch.setattr(ledger_module, "pod_holding", counted)
    return seen


def test_the_created_pods_event_is_not_read_again(reads: list[str]) -> None:
    led = ledger()
    assert led.sync_pod(pod()) == []  # the create's answer
    stamps = led.stamps.holds
    held = led.pod("u-a")
    # its ADDED event (the informer's frozen copy, a later resourceVersion), then Running
    assert led.sync_pod(freeze(pod(rv="2"))) == []
    assert led.sync_pod(freeze(pod(rv="3", phase="Running"))) == []
    assert reads == ["a"]
    assert led.pod("u-a") is held and led.stamps.holds == stamps
    assert led.free_count("node1") == 2


@pytest.mark.parametrize("change, free", [
    ({"devices": "2,3"}, 2),  # an edited annotation: still reported, it keeps 0,1
    ({"phase": "Succeeded"}, 4),  # finished: its devices are free
    ({"phase": "Failed"}, 4),
    ({"owner": None}, 2),  # orphaned: still its attempt's pod
    ({"attempt": "1"}, 2),
])
def test_an_event_that_changes_an_input_is_read(reads: list[str], change: dict[str, Any],
                                                  free: int) -> None:
    led, fresh = ledger(), ledger()
    led.sync_pod(pod())
    got = led.sync_pod(freeze(pod(rv="2", **change)))
    reread(fresh, pod())
    assert got == reread(fresh, freeze(pod(rv="2", **change)))
    assert reads.count("a") == 4
    assert led.free_count("node1") == free
    assert _state(led) == _state(fresh)


def test_a_pod_deleted_and_created_again_is_read_again(reads: list[str]) -> None:
    led = ledger()
    led.sync_pod(pod())
    assert led.remove_pod("u-a")
    assert led.free_count("node1") == 4
    led.sync_pod(pod(rv="5"))
    assert reads == ["a", "a"]
    assert led.free_count("node1") == 2


def test_an_unchanged_pod_still_names_who_else_holds_its_device() -> None:
    """The answer is the ledger's now: a holder that came since is named."""
    led = ledger()
    assert led.sync_pod(pod("a", "1", gpus=1)) == []
    led.sync_pod(pod("b", "1", gpus=1, owner="w2"))
    again = led.sync_pod(freeze(pod("a", "1", gpus=1, rv="2", phase="Running")))
    assert again and "device 1 also held by" in again[0]
    led.remove_pod("u-b")
    assert led.sync_pod(freeze(pod("a", "1", gpus=1, rv="3", phase="Running"))) == []


def test_a_booking_over_the_pods_devices_is_named_each_time() -> None:
    led = ledger()
    led.sync_pod(pod("plain", None, gpus=4, owner=None))
    led.assume("team/w", [Placement(index=0, node="node1", devices=[0])], owner="w9#0",
               check_capacity=False)
    first = led.sync_pod(freeze(pod("plain", None, gpus=4, owner=None, rv="2")))
    assert first == led.sync_pod(freeze(pod("plain", None, gpus=4, owner=None, rv="3")))


def _state(led: Ledger) -> list[tuple[Any, ...]]:
    return sorted((k, tuple((p.node, tuple(p.devices), p.share, p.mig) for p in a.placements),
                   tuple(sorted(a.counted.items())), a.owner, a.child_of, a.priority,
                   a.overcommit) for k, a in led.allocations().items()) + [
        (n, led.free_count(n)) for n in ("node1", "node2")]


#: what a random event may change of a pod, and to what
CHANGES: dict[str, list[Any]] = {
    "devices": ["0", "1", "0,1", "2,3", None, "x"], "gpus": [1, 2, 3],
    "phase": ["Pending", "Running", "Succeeded"], "node": ["node1", "node2", None],
    "owner": ["w1", "w2", None], "attempt": [None, "1"]}


def test_random_events_answer_and_hold_as_reading_every_pod_again() -> None:
    """3,000 random pod events on three pods sharing two nodes, each its pod's last
    event again (a new resourceVersion) or with one input changed (devices, GPUs,
    node, phase, controller, attempt), a priority, or a deletion: each answer and the
    ledger after it are those of a ledger that parses every pod again."""
    rnd = random.Random(38)
    for _ in range(100):
        led, fresh = ledger(), ledger()
        last: dict[str, dict[str, Any]] = {n: {} for n in "abc"}
        for step in range(30):
            name = rnd.choice("abc")
            if rnd.random() < 0.1:
                assert led.remove_pod(f"u-{name}") == fresh.remove_pod(f"u-{name}")
                continue
            if rnd.random() < 0.5:
                field = rnd.choice(sorted(CHANGES))
                last[name] = dict(last[name], **{field: rnd.choice(CHANGES[field])})
            p = pod(name, **dict({"devices": "0"}, **last[name]), rv=str(step))
            priority = rnd.choice([0, 0, 0, 5])
            assert led.sync_pod(freeze(p), priority) == reread(fresh, p, priority)
            assert _state(led) == _state(fresh)
