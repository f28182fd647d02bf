"""Many workers deciding at once while the informers' events arrive: the scheduling
passes run outside the lock and interleave with every change (the interpreter is
made to switch threads every microsecond), and still no device is booked for two
owners, no decision fails on another's change, and every workload that fits is
placed. What the stale-decision check (``state.assume_decision``) is for."""

from __future__ import annotations

import random
import sys
import threading
from collections.abc import Iterator

import pytest

from api.v1alpha1.types import DeviceExposure
from controllers.placement.state import PlacementState
from tests.unit.controllers.placement.test_placement_state import gw, pod
from tests.unit.scheduling.helpers import node

NODES = [node(f"node{i}", 8) for i in range(6)]  # 48 GPUs


@pytest.fixture
def switching() -> Iterator[None]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def owners_per_device(state: PlacementState) -> dict[tuple[str, int], frozenset[str]]:
    view = state.view()
    return {(n["metadata"]["name"], d): view.device_owners(n["metadata"]["name"], d)
            for n in NODES for d in range(8)}


def test_racing_decides_and_events_never_book_a_device_twice(switching: None) -> None:
    state = PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES, rng=random.Random(5))
    state.rebuild(lambda: (NODES, [], [], []))
    stop = threading.Event()
    errors: list[BaseException] = []

    def churn() -> None:  # foreign pods come and go on node5's devices 0-3
        rng, n = random.Random(7), 0
        while not stop.is_set():
            n += 1
            p = pod(f"theirs-{n}", "node5", devices=str(rng.randrange(4)))
            state.events.on_pod(p)
            state.events.on_pod_deleted(p)

    def decide(names: list[str]) -> None:
        try:
            for name in names:
                d = state.decide(gw(name, gpusPerReplica=2, replicas=1))
                if not d.ok:
                    raise AssertionError(f"{name}: {d.outcome}: {d.message}")
        except BaseException as exc:  # reported below
            errors.append(exc)

    churner = threading.Thread(target=churn)
    churner.start()
    workers = [threading.Thread(target=decide, args=([f"w{t}-{i}" for i in range(5)],))
               for t in range(4)]  # 20 x 2 GPUs: 40 of 48, node5's 4 churned ones aside
    for t in workers:
        t.start()
    for t in workers:
        t.join(30)
    stop.set()
    churner.join(10)
    assert not errors, errors
    held = owners_per_device(state)
    assert all(len(o) <= 1 for o in held.values()), {k: v for k, v in held.items() if len(v) > 1}
    assert sum(1 for o in held.values() if o) == 40  # every workload's 2 devices, none shared
