"""A JobSet whose replicated jobs start in order and ask different things: a
launcher of 1 GPU on pool ``a``, 2 workers of 4 GPUs each on pool ``b``
(``nodeSelector`` in each replicated job's template). The whole JobSet is one group
placed once the launcher exists (test_jobset_in_order.py); each worker's slot is
planned as its own template says (internal/scheduling/gangparts.py): 4 devices on a
pool-``b`` node, and the launcher holds 1. (Before, every slot was planned as the
launcher's pod at the largest request, 3 x 4 GPUs under the launcher's
nodeSelector: pool ``a`` has room for 2 of them, so the JobSet never ran, and where
it did fit, the workers' slots were on the launcher's pool, 3 GPUs held idle.)"""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.controllers.podbinding.fixtures import (
    ALL_FREE,
    OwnedEnv,
    job_template,
    jobset_member,
    lws_member,
    member,
    staged_jobset,
)
from tests.unit.controllers.podbinding.test_group_preempt import full, high, low
from tests.unit.controllers.podbinding.test_podbinding import NS

KEY = f"PodGroup:{NS}/jobset:staged:0"
LAUNCHER = "staged-launcher-0-0"
POOL_A, POOL_B = {"node1", "node2"}, {"node3", "node4"}


def staged(how: str, worker_gpus: int = 4) -> dict[str, Any]:
    """A launcher of 1 GPU on pool a, then 2 workers of ``worker_gpus`` on pool b."""
    return staged_jobset(job_template(1, 1, nodeSelector={"pool": "a"}),
                         job_template(1, worker_gpus, nodeSelector={"pool": "b"}), how)


def js_pod(rj: str, job: int, gpus: int, pool: str) -> dict[str, Any]:
    p = jobset_member("staged", rj, job, 0, gpus=gpus)
    p["spec"]["nodeSelector"] = {"pool": pool}
    return p


def pools(env: OwnedEnv) -> None:
    for n in env.nodes:
        name = n["metadata"]["name"]
        n["metadata"]["labels"]["pool"] = "a" if name in POOL_A else "b"


@pytest.fixture(params=["InOrder", "dependsOn"])
def env(request: pytest.FixtureRequest) -> OwnedEnv:
    e = OwnedEnv("JobSet", "staged", staged(request.param))
    pools(e)
    return e


def test_each_workers_slot_is_planned_as_its_own_template_says(env: OwnedEnv) -> None:
    slots = env.placed_first(js_pod("launcher", 0, 1, "a"))
    node, devices = env.bound()[LAUNCHER]
    assert node in POOL_A and len(devices.split(",")) == 1  # the launcher's 1 GPU
    assert sorted(slots) == [1, 2]
    assert {slots[i][0] for i in (1, 2)} == POOL_B  # the workers' pool, one node each
    assert all(len(slots[i][1].split(",")) == 4 for i in (1, 2))
    held = env.held()
    assert sum(len(d) for d in held.values()) == 1 + 4 + 4
    for n, devs in slots.values():
        assert all(env.holder(n, int(d)) == KEY for d in devs.split(","))


def test_each_worker_made_later_binds_to_its_slot_on_its_pool(env: OwnedEnv) -> None:
    slots = env.placed_first(js_pod("launcher", 0, 1, "a"))
    held = env.held()
    for job in (1, 0):
        name = f"staged-workers-{job}-0"
        env.add(js_pod("workers", job, 4, "b"))
        env.reconcile(name)
        assert env.bound()[name] == slots[1 + job], (name, slots)
    assert env.held() == held
    assert env.book.vacancies(KEY) == []


def test_workers_too_big_for_their_pool_hold_nothing_and_the_launcher_says_which_part() -> None:
    """Pool b has 4 GPUs a node; workers of 8 fit nowhere there (pool a's free
    GPUs are not theirs): nothing held, and the launcher's Event names the part."""
    e = OwnedEnv("JobSet", "staged", staged("InOrder", worker_gpus=8))
    pools(e)
    e.add(js_pod("launcher", 0, 1, "a"))
    e.reconcile(LAUNCHER)
    assert e.bound() == {} and e.held() == ALL_FREE
    why = e.warnings(LAUNCHER)[0]
    assert "gang of 1 x 1 + 2 x 8 GPU(s) does not fit, nothing booked: part 2 " \
           "(2 x 8 GPU(s), after the 1 replica(s) of the part(s) before it)" in why, why


def test_a_leader_ready_lws_holds_its_workers_devices_as_their_template_says() -> None:
    """A LeaderWorkerSet's leader of 1 GPU and 2 workers of 4 tolerating pool b's
    taint: the leader goes to pool a (it does not tolerate the taint) holding 1,
    each worker's slot 4 devices, pool a's 7 free GPUs room for one of them, so the
    other is on pool b. (Before: 3 x 4 GPUs, all under the leader's tolerations:
    pool a has room for 2, so the group never ran.)"""
    taint = {"key": "pool", "value": "b", "effect": "NoSchedule"}
    worker_spec = {"tolerations": [{"key": "pool", "operator": "Equal", "value": "b",
                                    "effect": "NoSchedule"}],
                   "containers": [{"name": "c", "resources": {
                       "limits": {"nvidia.com/gpu": "4"}}}]}
    the_lws = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
               "metadata": {"name": "serve", "namespace": NS},
               "spec": {"startupPolicy": "LeaderReady", "leaderWorkerTemplate": {
                   "size": 3, "workerTemplate": {"spec": worker_spec}}}}
    e = OwnedEnv("LeaderWorkerSet", "serve", the_lws)
    for n in e.nodes:
        if n["metadata"]["name"] in POOL_B:
            n["spec"]["taints"] = [taint]
    leader = lws_member("serve", "serve-0", 0, size=3, gpus=1)
    slots = e.placed_first(leader)
    node, devices = e.bound()["serve-0"]
    assert node in POOL_A and len(devices.split(",")) == 1
    assert {slots[i][0] for i in (1, 2)} & POOL_B
    assert all(len(slots[i][1].split(",")) == 4 for i in (1, 2))
    assert sum(len(d) for d in e.held().values()) == 9


def test_a_group_of_parts_preempts_what_its_own_shapes_need() -> None:
    """Every node held whole by a priority-0 workload; a priority-100 group of one
    4-GPU member and four 1-GPU members (8 GPUs) takes exactly two of them, each
    member nominated with its own count. (Before: 5 x 4 GPUs, more than the 16
    there are: nobody taken, the group never ran.)"""
    env = full([low(f"w{n}", f"node{n}") for n in range(1, 5)])
    for i in range(5):
        p = high("mixed", i, size=5)
        p["spec"]["containers"][0]["resources"] = {
            "limits": {"nvidia.com/gpu": "4" if i == 0 else "1"}}
        env.add(p)
    for i in range(5):
        env.reconcile(f"mixed-{i}")
    taken = sorted(n for n in ("w1", "w2", "w3", "w4") if env.state.eviction(f"{NS}/{n}"))
    assert len(taken) == 2, taken
    booking = env.state.view().allocation(f"PodGroup:{NS}/label:mixed")
    assert booking is not None and booking.overlap
    assert sorted(len(p.devices) for p in booking.placements) == [1, 1, 1, 1, 4]
    assert {p.node for p in booking.placements} == {f"node{t[1]}" for t in taken}


def test_members_whose_env_differs_are_one_part_and_said_as_one() -> None:
    """Each member with its own env (a webhook may give each its rank): still one
    gang of 5 x 4 GPUs, said so when it does not fit on 4 nodes of 4."""
    e = OwnedEnv("JobSet", "none", None)
    for i in range(5):
        p = member("ranked", i, size=5)
        p["spec"]["containers"][0]["env"] = [{"name": "RANK", "value": str(i)}]
        e.add(p)
    for i in range(5):
        e.reconcile(f"ranked-{i}")
    why = e.warnings("ranked-4")[-1]
    assert "gang of 5 x 4 GPU(s) does not fit, nothing booked" in why, why
