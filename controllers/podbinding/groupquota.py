"""A pod group is admitted by the GPUQueue of its namespace, as a GPUWorkload gang
is (docs/podgroups.md, docs/queues.md): the whole group's GPUs at once, against
what the queue's holders use now, with the same pure rules
(``internal/scheduling/quota.py``, ``admission.py``). Asked under the placement
state's lock, from the group's plan (``PlacementState.seeds.book_group``), so nothing is
booked between the check and the booking.

| the group's namespace                             | ``group_quota_refusal``            |
| ------------------------------------------------- | ---------------------------------- |
| no queue (no GPUQueues served, or none selects    | None: placed as without queues     |
| it), ``--require-queue`` off                      |                                    |
| no queue, ``--require-queue`` on                  | why: no GPUQueue selects it        |
| a workload of its queue, last refused for quota,  | why: waiting behind that one       |
| ahead of it (priority, then creation) fits now    |                                    |
| the group's GPUs fit the queue's quota (its       | None: planned on the devices       |
| nominal, and what its cohort lends)               |                                    |
| they do not                                       | why, with the queue's numbers      |

A group takes its namespace's first queue (by name): its pods name none. It
holds no place in its queue's line (the line is of GPUWorkloads): a group over
quota stalls no workload behind it. It neither preempts nor reclaims for quota.
Its booking (``PodGroup:<ns>/...``) counts against the same queue once placed
(``queue_usage.namespace_of``).

``outside_queue``: a pod of no group that requests ``nvidia.com/gpu`` in a queue's
namespace is not placed one by one (the queue-gpu-pods policy admits such a pod
there only as a group member; one whose group labels were taken off after would
otherwise hold GPUs its queue never admitted).
"""

from __future__ import annotations

from fractions import Fraction

from controllers.placement.state import PlacementState
from controllers.podbinding.seedbook import pod_meta, pod_priority
from internal.objects import JSON
from internal.scheduling.admission import Waiting
from internal.scheduling.podgroups import PodGroup
from internal.scheduling.pods import pod_gpu_request


def outside_queue(state: PlacementState, pod: JSON) -> str | None:
    """Why ``pod``, no group member, is not placed one by one: it requests
    ``nvidia.com/gpu`` in a namespace a GPUQueue selects, which the queue-gpu-pods
    policy refuses at creation unless the pod is a group member (one created before
    the queue selected its namespace, or whose group labels were taken off after);
    None for any other pod."""
    queues = state.queues
    if queues is None or pod_gpu_request(pod) <= 0:
        return None
    ns = pod_meta(pod).get("namespace") or "default"
    name = next(iter(queues.selecting(ns)), None)
    if name is None:
        return None
    return (f"namespace {ns} is in GPUQueue {name}: a pod requesting nvidia.com/gpu is "
            "placed here only with its queue's quota, as a GPUWorkload or a pod group's "
            "member (docs/podgroups.md)")


def group_need(members: list[JSON], slots: int = 0, worker_gpus: int = 0) -> Fraction:
    """GPUs the unbound ``members`` and ``slots`` reserved for members not made yet
    (of ``worker_gpus`` each) will hold once placed: each as many as the largest
    request among them, at least one named device (``plan_group``)."""
    per = max(1, max((pod_gpu_request(p) for p in members), default=0),
              worker_gpus if slots else 0)
    return Fraction(per * (len(members) + slots))


def group_quota_refusal(state: PlacementState, group: PodGroup, members: list[JSON],
                        slots: int = 0) -> str | None:
    """Why ``group``'s unbound ``members`` (and ``slots`` reserved for its members
    not made yet, ``leaderfirst.py``) may not be placed by its namespace's queue
    (the table above), or None. Call under the state's lock."""
    queues = state.queues
    if queues is None:
        return None
    ns = group.key.split("/", 1)[0]
    name = next(iter(queues.selecting(ns)), None)
    if name is None:
        if queues.require_queue:
            return (f"no GPUQueue selects namespace {ns}; this manager admits only "
                    "workloads in a queue (--require-queue)")
        return None
    quotas = queues.quotas()
    q = quotas.get(name)
    if q is None:
        return None  # dropped between the two reads: the next try sees it gone
    used, _ = state.queue_usage()
    need = group_need(members, slots, group.worker_gpus)
    created = min((str(pod_meta(p).get("creationTimestamp") or "") for p in members),
                  default="")
    me = Waiting(name, max((pod_priority(p) for p in members), default=0), created, need)
    ahead = queues.manager.ahead(f"PodGroup:{group.key}", me, q, quotas, used)
    if ahead is not None:
        return ahead
    return quotas.check(q, need, used)
