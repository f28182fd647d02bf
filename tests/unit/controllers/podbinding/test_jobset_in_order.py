"""A JobSet whose replicated jobs start in order (``startupPolicy: InOrder``, or
``dependsOn`` ``status: Ready``) is one group placed whole once its first replicated
job's members exist (controllers/podbinding/leaderfirst.py, groups.py): the
launcher is bound holding the workers' devices as reserved slots, written on its
Binding; each worker, made by the JobSet controller only once the launcher is
ready, binds to the slot of its index; on room for fewer than the whole JobSet
nothing is held and the launcher says why. (Before, the launcher was a group of
its own: bound and run while its workers then waited for room, holding GPUs no
training could use.)"""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.controllers.podbinding.fixtures import (
    ALL_FREE,
    OwnedEnv,
    job_template,
    jobset_member,
    staged_jobset,
)
from tests.unit.controllers.podbinding.test_podbinding import NS

KEY = f"PodGroup:{NS}/jobset:staged:0"
LAUNCHER = "staged-launcher-0-0"


def staged(gpus: int, how: str = "InOrder") -> dict[str, Any]:
    """A launcher Job of 1 pod, then 2 worker Jobs of 2 pods, ``gpus`` each."""
    return staged_jobset(job_template(1, gpus), job_template(2, gpus), how)


def js_pod(rj: str, job: int, completion: int, gpus: int) -> dict[str, Any]:
    return jobset_member("staged", rj, job, completion, gpus=gpus)


class JobSetEnv(OwnedEnv):
    """OwnedEnv serving the JobSet ``staged``."""

    def __init__(self, the_jobset: dict[str, Any]) -> None:
        super().__init__("JobSet", "staged", the_jobset)


def placed_launcher(env: JobSetEnv) -> dict[int, tuple[str, str]]:
    return env.placed_first(js_pod("launcher", 0, 0, gpus=2))


@pytest.fixture(params=["InOrder", "dependsOn"])
def env(request: pytest.FixtureRequest) -> JobSetEnv:
    return JobSetEnv(staged(2, request.param))


def test_the_launcher_alone_is_bound_holding_the_whole_jobsets_devices(env: JobSetEnv) -> None:
    slots = placed_launcher(env)
    assert list(env.bound()) == [LAUNCHER]
    assert sorted(slots) == [1, 2, 3, 4]  # the workers' indices: 1 + job x 2 + completion
    held = env.held()
    assert sum(len(d) for d in held.values()) == 10  # 5 members x 2 GPUs
    for node, devs in slots.values():
        assert all(env.holder(node, int(d)) == KEY for d in devs.split(","))


def test_each_worker_made_later_binds_to_the_slot_of_its_index(env: JobSetEnv) -> None:
    slots = placed_launcher(env)
    held = env.held()
    for job, completion in ((1, 1), (0, 0), (1, 0), (0, 1)):
        name = f"staged-workers-{job}-{completion}"
        env.add(js_pod("workers", job, completion, gpus=2))
        env.reconcile(name)
        assert env.bound()[name] == slots[1 + job * 2 + completion], (name, slots)
    assert env.held() == held  # nothing more, nothing elsewhere
    assert env.book.vacancies(KEY) == []


def test_on_room_for_the_launcher_alone_nothing_is_held_and_it_says_why() -> None:
    e = JobSetEnv(staged(4))  # 5 members x 4 GPUs on 4 nodes x 4: no room for all
    e.add(js_pod("launcher", 0, 0, gpus=4))
    e.reconcile(LAUNCHER)
    assert e.bound() == {} and e.held() == ALL_FREE
    why = e.warnings(LAUNCHER)[0]
    assert why.startswith(f"pod group {NS}/jobset:staged:0 (5 of 5 members to place, 4 of "
                          "them members of replicated jobs made only once those before them "
                          "are ready (startupPolicy InOrder)"), why
