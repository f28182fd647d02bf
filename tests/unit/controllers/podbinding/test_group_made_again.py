"""A JobSet deleted and made again under its name (``kubectl delete`` with
``propagationPolicy: Background``, then ``kubectl apply`` at once): the new JobSet's
group has the old one's key (``<ns>/jobset:<name>:0``), and while the old members
still terminate its members are placed beside them. Once the old members are gone
their devices are free again: they are never left booked, unused, as vacant slots
of the new group until its last member goes (controllers/podbinding/seedbook.py
``SeedBook.release``: a slot is kept for a member of its own group's generation,
a JobSet's uid)."""

from __future__ import annotations

from typing import Any

from tests.unit.controllers.podbinding.fixtures import (
    OwnedEnv,
    jobset_member,
    jobset_of,
    member,
)
from tests.unit.controllers.podbinding.test_podbinding import NS

KEY = f"PodGroup:{NS}/jobset:js:0"
NODES = {f"node{n}" for n in range(1, 5)}


def jobset(uid: str) -> dict[str, Any]:
    """One replicated job of two Jobs of one 4-GPU pod: a group of two."""
    return jobset_of("js", uid, replicas=2, pods=1)


def jobset_pod(uid: str, job: int, suffix: str) -> dict[str, Any]:
    """Job ``job``'s pod, as the Job controller names it (another name each time)."""
    return jobset_member("js", "workers", job, 0, uid=uid, suffix=suffix,
                         job_uid=f"{uid}-job-{job}")


class MadeAgainEnv(OwnedEnv):
    """OwnedEnv serving the JobSet ``js`` there now."""

    def __init__(self) -> None:
        super().__init__("JobSet", "js", jobset("uid-old"))

    def run(self, names: list[str]) -> None:
        """Reconcile ``names`` until bound, then leave them as the API server and
        the kubelet do: on their node, with the Binding's annotations, Running."""
        for name in names:
            self.reconcile(name)
        for name in names:
            self.reconcile(name)
        self.show_bindings(names)
        for name in names:
            self.reconcile(name)

    def nodes_of(self, names: list[str]) -> set[str]:
        return {self.pods.get_by_name(n, NS)["spec"]["nodeName"] for n in names}


def test_the_old_members_devices_are_free_once_they_are_gone() -> None:
    env = MadeAgainEnv()
    old = []
    for j in range(2):
        p = jobset_pod("uid-old", j, "a")
        env.add(p)
        old.append(p["metadata"]["name"])
    env.run(old)
    old_nodes = env.nodes_of(old)
    assert len(old_nodes) == 2
    # deleted in the background and made again at once: its old members terminate
    # while the new JobSet's are made, placed beside them
    env.owner = jobset("uid-new")
    for name in old:
        env.terminating(name)
        env.reconcile(name)
    new = []
    for j in range(2):
        p = jobset_pod("uid-new", j, "b")
        env.add(p)
        new.append(p["metadata"]["name"])
    env.run(new)
    new_nodes = env.nodes_of(new)
    assert new_nodes == NODES - old_nodes
    # the old members are gone: only the new ones' devices are held
    for name in old:
        env.pods.delete(f"{NS}/{name}")
        env.reconcile(name)
    held = env.held()
    assert {n for n, devs in held.items() if devs} == new_nodes, held
    assert env.state.seeds.seed_pod_keys(env.book, KEY) == sorted(f"{NS}/{n}" for n in new)
    # and another group of two 4-GPU pods runs there
    others = []
    for i in range(2):
        p = member("other", i, size=2)
        env.add(p)
        others.append(p["metadata"]["name"])
    env.run(others)
    assert env.nodes_of(others) == old_nodes


def test_a_slot_an_old_member_left_before_the_new_members_came_is_freed_too() -> None:
    """The old member of index 1 is gone before the new JobSet's members exist (its
    slot vacant while the old member of index 0 terminates), and the new member of
    index 1 is reconciled first: once the old member of index 0 is gone too, only
    the new members' devices are held."""
    env = MadeAgainEnv()
    old = []
    for j in range(2):
        p = jobset_pod("uid-old", j, "a")
        env.add(p)
        old.append(p["metadata"]["name"])
    env.run(old)
    env.owner = jobset("uid-new")
    for name in old:
        env.terminating(name)
        env.reconcile(name)
    env.pods.delete(f"{NS}/{old[1]}")
    env.reconcile(old[1])
    new = []
    for j in (1, 0):
        p = jobset_pod("uid-new", j, "b")
        env.add(p)
        new.append(p["metadata"]["name"])
    env.run(new)
    assert sorted(env.bound()) == sorted([*old, *new])
    env.pods.delete(f"{NS}/{old[0]}")
    env.reconcile(old[0])
    held = env.held()
    assert {n for n, devs in held.items() if devs} == env.nodes_of(new), held
    assert sum(len(devs) for devs in held.values()) == 8, held
