"""One pod create per child: a reconcile that runs before the new pod reaches the
cache (status writes and the pod's own events wake the workload again at once)
neither creates it again nor reads it back after AlreadyExists.

The reconciler runs by hand here, against the real API server, with caches the test
fills: the pod cache stays empty, as an informer's is for the moment after a create."""

from __future__ import annotations

from api.v1alpha1.types import DeviceExposure
from controllers.gpuworkload.reconciler import GPUWorkloadReconciler
from controllers.placement.source import PlacementStateSource
from controllers.placement.state import PlacementState
from controllers.shared.own_writes import OwnWrites
from controllers.status.writer import StatusWriter
from internal import metrics as m
from runtime import Client, Request
from runtime.events import EventRecorder
from runtime.store import OWNER_UID_INDEX, Indexer, index_by_owner_uid
from tests.integration.controller.conftest import NodeGroup, pods_of, workload


def test_a_child_not_yet_in_the_cache_is_not_created_again(
        admin: Client, namespace: str, group: NodeGroup) -> None:
    names = group.add(1, gpus=4)
    nodes = Indexer()
    for n in names:
        nodes.add(admin.get("v1", "Node", n))
    workloads = Indexer()
    pods = Indexer(indexers={OWNER_UID_INDEX: index_by_owner_uid})
    jobs = Indexer(indexers={OWNER_UID_INDEX: index_by_owner_uid})
    workloads.add(admin.create(workload("w", namespace, gpusPerReplica=1,
                                        nodeSelector=group.selector)))

    own_writes = OwnWrites()

    def make_state() -> PlacementState:
        state = PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES, own_writes=own_writes)
        state.rebuild(lambda: (nodes.list(), [], workloads.list(), pods.list()))
        return state

    # not started: the status stays queued
    writer = StatusWriter(admin, workloads, own_writes=own_writes)
    reconciler = GPUWorkloadReconciler(admin, EventRecorder(admin, "test"), workloads, pods,
                                       jobs, PlacementStateSource(lambda books: make_state()),
                                       status_writer=writer,
                                       own_writes=own_writes)
    created = m.CHILD_CREATES.labels("created")._value.get()
    again = m.CHILD_CREATES.labels("already_exists")._value.get()
    for _ in range(3):
        reconciler.reconcile(Request(namespace, "w"))
    pod, = pods_of(admin, namespace, "w")
    assert pod["spec"]["nodeName"] == names[0]
    assert m.CHILD_CREATES.labels("created")._value.get() - created == 1
    assert m.CHILD_CREATES.labels("already_exists")._value.get() - again == 0
    # once the informer shows it, the pod is simply there
    pods.add(pod)
    own_writes.observed(pod)
    reconciler.reconcile(Request(namespace, "w"))
    assert m.CHILD_CREATES.labels("created")._value.get() - created == 1
    wanted = own_writes.view(workloads.get_by_name("w", namespace))["status"]
    assert wanted["placements"][0]["node"] == names[0]
    assert wanted["phase"] in ("Scheduled", "Running")  # as the pod it showed
