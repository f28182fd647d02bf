"""``--cascade=orphan`` while our caches lag: the garbage collector takes the pods'
ownerReference away and then removes its ``orphan`` finalizer; our GPUWorkload
informer can show that last write before the pod informer shows the pods orphaned.
The reconcile then sees a deleting workload with only our finalizer, and pods in its
cache that still name it as their controller: it must not delete them (seen once in
a five-minute soak: an orphan-deleted share workload's pod gone). A child is deleted
only as the cache shows it (the resourceVersion is a precondition), so a pod the API
has moved on from is left alone until the cache catches up."""

from __future__ import annotations

from runtime.store import thaw
from tests.unit.controllers.fakes import Env
from tests.unit.controllers.gpuworkload.test_gpuworkload_reconciler import running


def test_a_pod_orphaned_before_our_cache_shows_it_is_not_deleted() -> None:
    env = Env()
    env.workload("g1", gpusPerReplica=2)
    env.settle("g1")
    running(env, "g1")
    cached = env.pod("g1-0")
    # the API: the garbage collector orphaned g1-0 (a new resourceVersion) and let
    # its orphan finalizer go; our cache shows the workload's write, not the pod's yet
    env.client.api_rv[("Pod", "g1-0")] = str(int(cached["metadata"]["resourceVersion"]) + 1)
    env.delete_workload("g1")
    env.reconcile("g1")
    deletes = env.client.of("delete", "Pod")
    assert deletes, "the deleting workload asks its children (as cached) to go"
    assert all((c.opts.get("preconditions") or {}).get("resourceVersion")
               == cached["metadata"]["resourceVersion"] for c in deletes), deletes
    assert not env.pod("g1-0")["metadata"].get("deletionTimestamp"), "the orphan was deleted"
    # the pod informer catches up: g1-0 is nobody's child, and the workload may go
    pod = thaw(env.pod("g1-0"))
    pod["metadata"]["ownerReferences"] = []
    env.put_pod(pod)
    env.reconcile("g1")
    assert env.get("g1") is None
    assert env.pod("g1-0")["status"]["phase"] == "Running"
    assert env.free() == 2  # the orphan keeps its two GPUs


def test_a_child_as_cached_is_deleted() -> None:
    """The precondition costs nothing when the cache is current."""
    env = Env()
    env.workload("g1", gpusPerReplica=2)
    env.settle("g1")
    running(env, "g1")
    env.delete_workload("g1")
    env.reconcile("g1")
    assert env.pod("g1-0")["metadata"].get("deletionTimestamp")
