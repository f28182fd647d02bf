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

from controllers.podbinding.controller import PodBindingOptions, PodBindingReconciler
from internal.scheduling.podgroups import (
    JOB_COMPLETION_INDEX_LABEL,
    JOBSET_JOB_INDEX_LABEL,
    JOBSET_NAME_LABEL,
    JOBSET_REPLICATED_JOB_LABEL,
    JOBSET_RESTART_LABEL,
    JOBSET_UID_LABEL,
    pod_group,
)
from tests.unit.controllers.podbinding.test_pod_groups import GroupEnv, member
from tests.unit.controllers.podbinding.test_podbinding import NS

KEY = f"PodGroup:{NS}/jobset:js:0"
NODES = {f"node{n}" for n in range(1, 5)}


def jobset(uid: str) -> dict[str, Any]:
    """One replicated job of two Jobs of one 4-GPU pod: a group of two."""
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "js", "namespace": NS, "uid": uid},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2, "template": {
                "spec": {"parallelism": 1, "completions": 1}}}]}}


def jobset_pod(uid: str, job: int, suffix: str) -> dict[str, Any]:
    """Job ``job``'s pod, as the Job controller names it (another name each time)."""
    p = member("x", 0, gpus=4)
    name = f"js-workers-{job}-0-{suffix}"
    p["metadata"].update(name=name, uid=f"uid-{name}", annotations={}, labels={
        JOBSET_NAME_LABEL: "js", JOBSET_UID_LABEL: uid, JOBSET_RESTART_LABEL: "0",
        JOBSET_REPLICATED_JOB_LABEL: "workers", JOBSET_JOB_INDEX_LABEL: str(job),
        JOB_COMPLETION_INDEX_LABEL: "0"})
    p["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job",
                                         "name": f"js-workers-{job}", "uid": f"{uid}-job-{job}",
                                         "controller": True}]
    return p


class MadeAgainEnv(GroupEnv):
    """GroupEnv whose owner lookup serves the JobSet ``js`` there now."""

    def __init__(self) -> None:
        self.the_jobset: dict[str, Any] | None = jobset("uid-old")
        super().__init__()

    def reconciler(self, options: PodBindingOptions | None = None) -> PodBindingReconciler:
        def owners(api: str, kind: str, ns: str, name: str) -> dict[str, Any] | None:
            return self.the_jobset if (kind, name) == ("JobSet", "js") else None
        rec = PodBindingReconciler(self.client, self.recorder, self.pods, self.states,
                                   self.book, options or PodBindingOptions(),
                                   recognise=lambda p: pod_group(p, owners))
        self.enqueued: list[str] = []
        rec.enqueue_after = lambda req, delay: self.enqueued.append(req.name)
        return rec

    def run(self, names: list[str]) -> None:
        """Reconcile ``names`` until bound, then leave them as the API server and
        the kubelet do: on their node, with the Binding's annotations, Running."""
        for name in names:
            self.reconcile(name)
        for name in names:
            self.reconcile(name)
        for b in self.client.bindings:
            if b["metadata"]["name"] not in names:
                continue
            p = self.pods.get_by_name(b["metadata"]["name"], NS)
            self.pods.add({**p, "spec": {**p["spec"], "nodeName": b["target"]["name"]},
                           "status": {"phase": "Running"},
                           "metadata": {**p["metadata"], "annotations": {
                               **p["metadata"]["annotations"], **b["metadata"]["annotations"]}}})
        for name in names:
            self.reconcile(name)

    def nodes_of(self, names: list[str]) -> set[str]:
        return {self.pods.get_by_name(n, NS)["spec"]["nodeName"] for n in names}

    def terminating(self, name: str) -> None:
        p = self.pods.get_by_name(name, NS)
        self.pods.add({**p, "metadata": {**p["metadata"],
                                         "deletionTimestamp": "2026-01-01T00:00:00Z"}})


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
    env.the_jobset = jobset("uid-new")
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
    env.the_jobset = jobset("uid-new")
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
