"""JobSet installed after gpu-orchestrator (controllers/podbinding/owners.py): the
manager starts while the API server does not serve JobSets, then the real JobSet
controller and its CRDs are installed and a JobSet of gpu-scheduler pods is made.
The manager starts watching JobSets once they are served and places the JobSet's
group whole, without a restart. (Before, its pods stayed Pending, refused as
``PodGroupSizeUnreadable`` until the manager was restarted.)"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hack.testenv import ControlPlane
from internal.scheduling.podgroups import JOBSET_API
from runtime import Client, errors
from tests.integration.controller.conftest import (  # noqa: F401 (fixtures)
    NodeGroup,
    Running,
    events_for,
    group,
    installed,
)
from tests.integration.podgroups.controllers import JOBSET, PeerController, jobset
from tests.integration.podgroups.fixtures import members, named_nodes, on_nodes
from tests.waiting import eventually

DEVICES = "gpu.orchestrator.dev/devices"


def jobsets_served(admin: Client) -> bool:
    admin.invalidate_discovery()
    try:
        admin.resource_for(JOBSET_API, "JobSet")
    except errors.NotFound:
        return False
    return True


@pytest.fixture
def binder_first(installed: ControlPlane, admin: Client) -> Iterator[Running]:  # noqa: F811
    """The manager with the pod binding, started while JobSets are not served (a
    module before this one may have left its JobSet CRDs being deleted)."""
    eventually(lambda: not jobsets_served(admin), timeout=90,
               what="the API server no longer serves JobSets")
    run = Running(installed, pod_binding=True).start()
    yield run
    run.stop()


@pytest.fixture
def late_jobset(binder_first: Running, installed: ControlPlane  # noqa: F811
                ) -> Iterator[PeerController]:
    """The real JobSet controller and its CRDs, installed once the manager runs."""
    assert binder_first.mgr is not None and binder_first.mgr.elected.is_set()
    peer = PeerController(installed, JOBSET).start()
    yield peer
    peer.stop()


def test_a_jobset_installed_after_the_manager_is_placed_whole_without_a_restart(
        binder_first: Running, late_jobset: PeerController, admin: Client,
        namespace: str, group: NodeGroup) -> None:  # noqa: F811
    """2 nodes x 4 GPUs, a JobSet of 2 Jobs x 1 pod x 4 GPUs made right after its
    controller is installed: both members bound, each with its own devices, by the
    manager that was running before JobSet was, which never stopped."""
    mgr = binder_first.mgr
    binder_first.wait_nodes(named_nodes(group, 2))
    admin.create(on_nodes(jobset("late", [("workers", 2, 1)]), group), namespace=namespace)

    def bound() -> list[dict[str, Any]] | None:
        pods = members(admin, namespace, "late", terminating=True)
        return pods if len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods) \
            else None

    def unplaced() -> str:
        pods = admin.list("v1", "Pod", namespace=namespace)["items"]
        return "; ".join(f"{p['metadata']['name']}: {e['reason']} {e['message']}"
                         for p in pods for e in events_for(admin, namespace,
                                                           p["metadata"]["name"]))

    try:
        pods = eventually(bound, timeout=90, what="the JobSet's 2 members bound")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the members' Events: {unplaced()}") from exc
    held = [(p["spec"]["nodeName"], d) for p in pods
            for d in p["metadata"]["annotations"][DEVICES].split(",")]
    assert len(held) == 8 and len(set(held)) == 8, held
    assert binder_first.mgr is mgr and not binder_first.codes, "the manager was restarted"
