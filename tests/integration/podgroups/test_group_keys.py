"""Under which key a JobSet group's devices are held, as a user runs it (the real
JobSet and Job controllers, the manager's pod binding): right after a manager
restart, every member is held under its group's key (so a preemption takes the
group whole); and a JobSet deleted and made again under its name at once, while its
old members still run, leaves none of the old members' devices held once they are
gone.

The old members are kept running while the new JobSet is made by deleting the
JobSet and its Jobs orphaning them, then deleting them: a kubelet stopping their
containers keeps them so for their grace period (30 s by default, which the test
environment's kwok caps at 10 s, too short to be sure of)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from controllers.placement.state import PlacementState
from controllers.setup import StateFactory
from internal.cli.main import main
from runtime import Client, errors
from tests.integration.controller.conftest import (  # noqa: F401 (fixtures)
    NodeGroup,
    Running,
    admin,
    group,
    installed,
)
from tests.integration.podgroups.controllers import JOBSET, jobset
from tests.integration.podgroups.fixtures import (
    bound,
    members,
    named_nodes,
    nodes_shown,
    on_nodes,
    peer_fixtures,
)
from tests.waiting import eventually

UID_LABEL = "jobset.sigs.k8s.io/jobset-uid"
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
DEVICES = "gpu.orchestrator.dev/devices"

peers, binder = peer_fixtures(JOBSET)


def two_by_four(name: str, group: NodeGroup) -> dict[str, Any]:  # noqa: F811
    """A JobSet of 2 Jobs of one 4-GPU pod on ``group``'s nodes."""
    return on_nodes(jobset(name, [("workers", 2, 1)]), group)


def two_bound(admin: Client, ns: str, name: str, what: str,  # noqa: F811
              uid_not: str | None = None) -> list[dict[str, Any]]:
    def found() -> list[dict[str, Any]] | None:
        ps = [p for p in bound(members(admin, ns, name))
              if p["metadata"]["labels"][UID_LABEL] != uid_not]
        return ps if len(ps) == 2 else None
    return eventually(found, timeout=120, what=what)


def orphaned(admin: Client, ns: str, job: str) -> bool:  # noqa: F811
    """Job ``job`` no longer names the deleted JobSet its owner."""
    return not admin.get("batch/v1", "Job", job, ns)["metadata"].get("ownerReferences")


def held_devices(capsys: pytest.CaptureFixture[str], binder: Running,
                 group: NodeGroup) -> dict[tuple[str, int], str]:  # noqa: F811
    """(node, device) -> holder, as ``kubectl gpu nodes`` shows the group's nodes."""
    shown = nodes_shown(binder.cluster.kubeconfig, capsys, group.names)
    return {(n["name"], d["index"]): str(d["holder"]) for n in shown for d in n["devices"]
            if d.get("holder")}


def test_a_jobset_made_again_under_its_name_leaves_none_of_the_old_devices_held(
        binder: Running, admin: Client, namespace: str, group: NodeGroup,  # noqa: F811
        capsys: pytest.CaptureFixture[str]) -> None:
    """4 nodes x 4 GPUs; a 2 x 4-GPU JobSet runs, is deleted and made again at once:
    its new members are placed beside the old ones, which still run. Once those are
    gone, their 8 GPUs are free: a second 2 x 4-GPU JobSet runs there (before, they
    stayed held, unused, until the new JobSet's last member went, and the second
    waited)."""
    named_nodes(group, 4)
    admin.create(two_by_four("js", group), namespace=namespace)
    old = two_bound(admin, namespace, "js", "the JobSet's 2 pods bound")
    old_uid = old[0]["metadata"]["labels"][UID_LABEL]
    admin.delete(JOBSET_API, "JobSet", "js", namespace, propagation_policy="Orphan")
    for i in range(2):
        job = f"js-workers-{i}"
        eventually(lambda job=job: orphaned(admin, namespace, job), timeout=120,
                   what=f"Job {job} orphaned")
        admin.delete("batch/v1", "Job", job, namespace, propagation_policy="Orphan")

    def made_again() -> bool:
        try:
            admin.create(two_by_four("js", group), namespace=namespace)
        except errors.Conflict:  # AlreadyExists: the old one is not gone yet
            return False
        return True
    eventually(made_again, timeout=30, what="the JobSet made again under its name")
    new = two_bound(admin, namespace, "js", "the new JobSet's 2 pods bound", uid_not=old_uid)
    names = {p["metadata"]["name"] for p in old}
    still = [p for p in bound(members(admin, namespace, "js")) if p["metadata"]["name"] in names]
    assert len(still) == 2, still  # the new group was placed beside the old members
    new_nodes = {p["spec"]["nodeName"] for p in new}
    assert new_nodes.isdisjoint({p["spec"]["nodeName"] for p in old})
    for name in names:
        admin.delete("v1", "Pod", name, namespace)
    eventually(lambda: not [p for p in members(admin, namespace, "js", terminating=True)
                            if p["metadata"]["name"] in names],
               timeout=60, what="the old members gone")
    admin.create(two_by_four("other", group), namespace=namespace)
    other = eventually(lambda: (lambda ps: ps if len(ps) == 2 else None)(
        bound(members(admin, namespace, "other"))), timeout=60,
        what="a second JobSet bound on the old members' devices")
    assert {p["spec"]["nodeName"] for p in other}.isdisjoint(new_nodes)
    held = held_devices(capsys, binder, group)
    assert len(held) == 16, held


def test_after_a_restart_every_member_is_held_under_its_groups_key(
        binder: Running, admin: Client, namespace: str, group: NodeGroup,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A 2 x 4-GPU JobSet runs; the manager restarts: its first placement state,
    filled from the caches before any placement, holds both members' devices under
    the group's key (``PodGroup:<ns>/jobset:js:0``), not under their Jobs', and
    ``kubectl gpu groups`` shows the group placed."""
    named_nodes(group, 2)
    admin.create(two_by_four("js", group), namespace=namespace)
    pods = eventually(lambda: (lambda ps: ps if len(ps) == 2 else None)(
        bound(members(admin, namespace, "js"))), timeout=120, what="the JobSet's 2 pods bound")
    devices = [(p["spec"]["nodeName"], int(d)) for p in pods
               for d in p["metadata"]["annotations"][DEVICES].split(",")]
    first: list[dict[tuple[str, int], str | None]] = []
    fill = StateFactory.fill

    def recorded(self: StateFactory, state: PlacementState) -> None:
        fill(self, state)
        if not first:  # the first fill of the restarted manager
            view = state.view()
            first.append({(n, d): view.holder(n, d) for n, d in devices})
    binder.stop()
    monkeypatch.setattr(StateFactory, "fill", recorded)
    binder.start()
    eventually(lambda: bool(first), timeout=60, what="the restarted manager's first fill")
    key = f"PodGroup:{namespace}/jobset:js:0"
    assert set(first[0].values()) == {key}, first[0]
    capsys.readouterr()
    assert main(["groups", "-n", namespace, "-o", "json", "--kubeconfig",
                 str(binder.cluster.kubeconfig)]) == 0
    items = json.loads(capsys.readouterr().out)["items"]
    assert [(i["group"], i["state"]) for i in items] == [(f"{namespace}/jobset:js:0", "Placed")]
