"""Each queue's usage is counted by the placement cache's ledger itself, in the
step that books or releases a holder (controllers/placement/queue_counts.py): it
equals the usage summed again from scratch after any sequence of bookings,
pods, departures, nominations ended, rebuilds and queue or namespace changes;
the queue book reads it and keeps no index and no lock of its own for it."""

from __future__ import annotations

import contextlib
import random
import threading
from fractions import Fraction
from typing import Any

import pytest

from api.v1alpha1.types import Placement
from internal.scheduling.ledger import LedgerConflict
from internal.scheduling.queue_usage import by_owner, used_by_queue
from tests.unit.controllers.queues.test_queue_gate import NODES, Cluster, queue

NAMESPACES = ("ns-a", "ns-b", "ns-c")
#: the changes of the random sequence (pods and bookings twice as often)
CHANGES = ("pod", "pod", "pod gone", "book", "book", "forget", "depart", "departed",
           "nomination done", "rebuild", "queue", "namespace")


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


def nonzero(used: dict[str, Fraction]) -> dict[str, Fraction]:
    return {q: g for q, g in used.items() if g}


def assert_counted_as_summed_again(c: Cluster) -> None:
    used, owners = c.state.queue_usage()
    led = c.state._ledger
    assert nonzero(used) == nonzero(used_by_queue(led, c.book.queue_of))
    again = by_owner(led.allocations().values(), led.sharing)
    assert {o: u.gpus for o, u in owners.items()} == {o: u.gpus for o, u in again.items()}


def cluster() -> Cluster:
    c = Cluster(queue("a", 8, "ns-a"), queue("b", 8, "ns-b"), team_queue("c"))
    for ns in NAMESPACES:
        c.namespaces.add(namespace(ns, None))
    return c


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_usage_after_any_changes_equals_the_usage_summed_again(seed: int) -> None:
    rng = random.Random(seed)
    c = cluster()
    pods: dict[str, dict[str, Any]] = {}
    bookings: list[str] = []
    did: dict[str, int] = {}
    for step in range(300):
        op = rng.choice(CHANGES)
        ns = rng.choice(NAMESPACES)
        node, dev = f"node{rng.randrange(1, 5)}", rng.randrange(4)
        if op == "pod":
            p = anybodys_pod(ns, f"p{step}", node, dev)
            pods[p["metadata"]["uid"]] = p
            c.state.events.on_pod(p)
        elif op == "pod gone" and pods:
            c.state.events.on_pod_deleted(pods.pop(rng.choice(sorted(pods))))
        elif op == "book":  # a new booking, or one placed again; some nominated
            key = rng.choice(bookings) if bookings and rng.random() < 0.3 else f"{ns}/w{step}"
            owner = f"{key.split('/')[0]}#{rng.randrange(3)}"
            over = [f"{key.split('/')[0]}#{rng.randrange(3)}"] if rng.random() < 0.3 else []
            with contextlib.suppress(LedgerConflict):
                c.state._ledger.assume(key, [Placement(index=0, node=node, devices=[dev])],
                                       owner=owner, check_capacity=False, overlap=over)
                bookings.append(key)
        elif op == "forget" and bookings:
            c.state.forget(bookings.pop(rng.randrange(len(bookings))))
        elif op == "depart" and bookings:
            c.state.depart(bookings.pop(rng.randrange(len(bookings))))
        elif op == "departed":
            c.state.departed(f"{ns}/w{rng.randrange(step + 1)}")
        elif op == "nomination done" and bookings:
            c.state.nomination_done(rng.choice(bookings))
        elif op == "rebuild":
            c.state.rebuild(lambda: (NODES, [], [], list(pods.values())))
            bookings = [k for k in bookings if c.state.held_by(k)]
        elif op == "queue":  # queue c selects another team, or changes its quota
            c.queues.add(team_queue(rng.choice(["c", "d"]), rng.choice([4, 8])))
        elif op == "namespace":  # a namespace labelled into queue c, or out of it
            c.namespaces.add(namespace(ns, rng.choice(["c", "d", None])))
        else:
            continue
        did[op] = did.get(op, 0) + 1
        assert_counted_as_summed_again(c)
    assert set(did) == set(CHANGES), did  # every kind of change was made
    assert sum(c.state.queue_usage()[0].values(), Fraction(0)) > 0


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


def test_a_booking_after_a_rebuild_counts_in_its_queue() -> None:
    c = cluster()
    pod = anybodys_pod("ns-b", "p", "node4", 3)
    c.state.events.on_pod(pod)
    c.state.rebuild(lambda: (NODES, [], [], [pod]))  # a new ledger, from the caches
    assert c.used() == {"b": 1.0}
    c.run("ns-a", "a1")
    assert c.used() == {"a": 4.0, "b": 1.0}
    c.state.forget("ns-a/a1")  # its pods still hold its devices
    assert c.used() == {"a": 4.0, "b": 1.0}
    c.gone("ns-a", "a1")
    assert c.used() == {"b": 1.0}


def test_the_queue_book_reads_the_ledgers_counts_and_takes_no_lock_of_its_own() -> None:
    c = cluster()
    c.run("ns-a", "a0")
    locks = (type(threading.Lock()), type(threading.RLock()))
    assert not [k for k, v in vars(c.book).items() if isinstance(v, locks)]
    counts = c.state._ledger.usage
    assert counts is not None
    for i in range(1, 3):  # decisions of the gate, and the queues' status
        c.run("ns-a", f"a{i}")
        assert c.used() == {"a": 4.0 * (i + 1)}
    assert c.state._ledger.usage is counts  # kept, never made again by a decision
    assert c.book.usage(c.state._ledger)[0] == counts.used
