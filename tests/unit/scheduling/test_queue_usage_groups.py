"""Another controller's pods booked by the pod binding count against their
namespace's queue (internal/scheduling/queue_usage.py): a pod group's booking is
named ``PodGroup:<ns>/<group>`` and a StatefulSet's ``StatefulSet:<ns>/<name>``;
read as a namespace of ``PodGroup:<ns>``, a 4x4 JobSet ran past a quota of 8 and
its GPUs were missing from the queue's used."""

from __future__ import annotations

from fractions import Fraction as F
from typing import Any

from api.v1alpha1.types import Placement
from internal.scheduling.ledger import Allocation
from internal.scheduling.queue_usage import namespace_of, used_by_queue
from internal.scheduling.shares import NodeSharing

QUEUES = {"ns-a": "a", "ns-b": "b"}


def _booking(name: str, owner: str, node: str, gpus: int) -> Allocation:
    devices = list(range(gpus))
    return Allocation(name, (Placement(index=0, node=node, devices=devices),),
                      owner=owner, name=name)


def test_a_pod_groups_booking_counts_against_its_namespaces_queue() -> None:
    class Ledger:
        @staticmethod
        def sharing(node: str) -> NodeSharing:
            return NodeSharing()

        def allocations(self) -> dict[str, Allocation]:
            return {a.key: a for a in (
                _booking("PodGroup:ns-a/jobset:js2:0", "g", "n1", 4),
                _booking("StatefulSet:ns-b/web", "s", "n2", 2),
                _booking("ns-b/w", "w", "n3", 1))}

    led: Any = Ledger()
    used = used_by_queue(led, lambda a: QUEUES.get(namespace_of(a)))
    assert used == {"a": F(4), "b": F(3)}


def test_a_departing_group_booking_keeps_its_namespace() -> None:
    a = Allocation("departing:PodGroup:ns-a/lws:x:0", (),
                   name="departing:PodGroup:ns-a/leaderworkerset:x:0")
    assert namespace_of(a) == "ns-a"
