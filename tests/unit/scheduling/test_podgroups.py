"""Which group a pod is in (internal/scheduling/podgroups.py): one table per source,
one per refusal, with the owners a cache would return."""

from __future__ import annotations

from typing import Any

import pytest

from internal.scheduling.podgroups import (
    SIZE_UNREADABLE,
    SIZES_DISAGREE,
    GroupRefusal,
    PodGroup,
    disagreement,
    pod_group,
)
from internal.scheduling.pods import pod_gpu_request

NS = "team"


def pod(labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
        owner: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": NS, "labels": labels or {},
                            "annotations": annotations or {}}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return {"metadata": meta, "spec": {"schedulerName": "gpu-scheduler"}}


def owners_of(*objs: dict[str, Any]):
    table = {(o["apiVersion"], o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]): o
             for o in objs}
    return lambda api, kind, ns, name: table.get((api, kind, ns, name))


def template(parallelism: int | None = None, completions: int | None = None) -> dict:
    spec: dict[str, Any] = {"completionMode": "Indexed"}
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if completions is not None:
        spec["completions"] = completions
    return {"template": {"spec": {**spec, "template": {"spec": {"containers": []}}}}}


def jobset(name: str = "train", jobs: list[tuple[str, int, int | None, int | None]] = (),
           order: str | None = None, uid: str = "js-uid", depends: bool | str = False) -> dict:
    """``depends``: each replicated job after the first depends on the one before,
    ``status: Ready`` (True) or the status given."""
    rjs = []
    for i, (rj, replicas, par, comp) in enumerate(jobs):
        entry = {"name": rj, "replicas": replicas, **template(par, comp)}
        if depends and i:
            status = depends if isinstance(depends, str) else "Ready"
            entry["dependsOn"] = [{"name": jobs[i - 1][0], "status": status}]
        rjs.append(entry)
    spec: dict[str, Any] = {"replicatedJobs": rjs}
    if order:
        spec["startupPolicy"] = {"startupPolicyOrder": order}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": NS, "uid": uid}, "spec": spec}


def js_pod(rj: str, job_index: int, completion: int, attempt: str = "0",
           extra: dict[str, str] | None = None) -> dict[str, Any]:
    return pod({"jobset.sigs.k8s.io/jobset-name": "train",
                "jobset.sigs.k8s.io/replicatedjob-name": rj,
                "jobset.sigs.k8s.io/job-index": str(job_index),
                "jobset.sigs.k8s.io/restart-attempt": attempt,
                "batch.kubernetes.io/job-completion-index": str(completion), **(extra or {})})


# A JobSet as Kubeflow Trainer makes one: a launcher of 1 pod and 2 worker Jobs of
# 4 pods each (parallelism 4, completions 4): 9 members; workers after the launcher.
TRAIN = jobset(jobs=[("launcher", 1, None, None), ("workers", 2, 4, 4)])


@pytest.mark.parametrize("the_pod, owners, want", [
    # explicit label + size annotation; index from the Job's completion index
    (pod({"gpu.orchestrator.dev/pod-group": "g1", "batch.kubernetes.io/job-completion-index": "2"},
         {"gpu.orchestrator.dev/pod-group-size": "4"}), None,
     PodGroup("team/label:g1", 4, "label", "annotation gpu.orchestrator.dev/pod-group-size", 2)),
    # Kueue's plain-pod group, its own keys
    (pod({"kueue.x-k8s.io/pod-group-name": "kq"},
         {"kueue.x-k8s.io/pod-group-total-count": "3"}), None,
     PodGroup("team/kueue:kq", 3, "kueue", "annotation kueue.x-k8s.io/pod-group-total-count")),
    # first match wins: the explicit label over Kueue's and over the JobSet's labels
    (pod({"gpu.orchestrator.dev/pod-group": "g1", "kueue.x-k8s.io/pod-group-name": "kq",
          "jobset.sigs.k8s.io/jobset-name": "train"},
         {"gpu.orchestrator.dev/pod-group-size": "2", "kueue.x-k8s.io/pod-group-total-count": "9"}),
     owners_of(TRAIN),
     PodGroup("team/label:g1", 2, "label", "annotation gpu.orchestrator.dev/pod-group-size")),
    # JobSet: one group per restart attempt, size 1x1 + 2x4, index across replicated jobs
    (js_pod("launcher", 0, 0), owners_of(TRAIN),
     PodGroup("team/jobset:train:0", 9, "jobset", "JobSet train: sum of replicas x pods per Job",
              0)),
    (js_pod("workers", 1, 3, attempt="2"), owners_of(TRAIN),
     PodGroup("team/jobset:train:2", 9, "jobset", "JobSet train: sum of replicas x pods per Job",
              1 + 4 + 3)),
    # a Job runs at most its completions at once: parallelism 8, completions 2 → 2 pods
    (js_pod("w", 0, 1), owners_of(jobset(jobs=[("w", 3, 8, 2)])),
     PodGroup("team/jobset:train:0", 6, "jobset", "JobSet train: sum of replicas x pods per Job",
              1)),
    # InOrder: one group of the whole JobSet, placed once the first replicated job's
    # members exist (made_first), the workers' indices after the launcher's
    (js_pod("workers", 1, 0), owners_of(jobset(jobs=[("launcher", 1, None, None),
                                                      ("workers", 2, 4, 4)], order="InOrder")),
     PodGroup("team/jobset:train:0", 9, "jobset", "JobSet train: sum of replicas x pods per Job",
              1 + 4 + 0, made_first=((0, 1),), staged_by="startupPolicy InOrder")),
    # dependsOn Ready likewise: made first are the replicated jobs without dependsOn
    (js_pod("launcher", 0, 0), owners_of(jobset(jobs=[("launcher", 1, None, None),
                                                       ("workers", 2, 4, 4)], depends=True)),
     PodGroup("team/jobset:train:0", 9, "jobset", "JobSet train: sum of replicas x pods per Job",
              0, made_first=((0, 1),), staged_by="dependsOn status Ready")),
    # dependsOn Complete: the workers run after the launcher, never beside it: a group
    # per replicated job, its own index from 0
    (js_pod("workers", 1, 0), owners_of(jobset(jobs=[("launcher", 1, None, None),
                                                      ("workers", 2, 4, 4)], depends="Complete")),
     PodGroup("team/jobset:train:0:workers", 8, "jobset",
              "JobSet train replicated job workers: replicas x pods per Job", 4)),
    # InOrder of one replicated job: all made at once, nothing staged
    (js_pod("w", 1, 1), owners_of(jobset(jobs=[("w", 2, 2, 2)], order="InOrder")),
     PodGroup("team/jobset:train:0", 4, "jobset", "JobSet train: sum of replicas x pods per Job",
              3)),
    # the JobSet's UID on the pod matches: still the group, of that JobSet's generation
    # (one made again under its name is another)
    (js_pod("launcher", 0, 0, extra={"jobset.sigs.k8s.io/jobset-uid": "js-uid"}),
     owners_of(TRAIN),
     PodGroup("team/jobset:train:0", 9, "jobset", "JobSet train: sum of replicas x pods per Job",
              0, generation="js-uid")),
    # LeaderWorkerSet: a group per group index, size from the pod's annotation
    (pod({"leaderworkerset.sigs.k8s.io/name": "infer",
          "leaderworkerset.sigs.k8s.io/group-index": "1",
          "leaderworkerset.sigs.k8s.io/worker-index": "3"},
         {"leaderworkerset.sigs.k8s.io/size": "4"}), None,
     PodGroup("team/leaderworkerset:infer:1", 4, "leaderworkerset",
              "annotation leaderworkerset.sigs.k8s.io/size", 3)),
    # ... its LeaderReady startup read from the LeaderWorkerSet
    (pod({"leaderworkerset.sigs.k8s.io/name": "infer",
          "leaderworkerset.sigs.k8s.io/group-index": "0",
          "leaderworkerset.sigs.k8s.io/worker-index": "0"},
         {"leaderworkerset.sigs.k8s.io/size": "2"}),
     owners_of({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                "metadata": {"name": "infer", "namespace": NS},
                "spec": {"startupPolicy": "LeaderReady"}}),
     PodGroup("team/leaderworkerset:infer:0", 2, "leaderworkerset",
              "annotation leaderworkerset.sigs.k8s.io/size", 0, leader_first=True)),
])
def test_a_pod_is_recognised_by_its_source(the_pod, owners, want) -> None:
    assert pod_group(the_pod, owners) == want


JOB_REF = {"apiVersion": "batch/v1", "kind": "Job", "name": "ranks", "uid": "job-uid",
           "controller": True}


def job(parallelism: int | None, completions: int | None, mode: str = "Indexed",
        uid: str = "job-uid") -> dict[str, Any]:
    spec: dict[str, Any] = {"completionMode": mode}
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if completions is not None:
        spec["completions"] = completions
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "ranks", "namespace": NS, "uid": uid}, "spec": spec}


INDEXED = pod({"batch.kubernetes.io/job-completion-index": "2"}, owner=JOB_REF)


@pytest.mark.parametrize("the_job, want", [
    (job(4, 4), PodGroup("team/job:ranks", 4, "job", "Job ranks: parallelism (= completions)",
                         2)),
    (job(2, 4), None),                     # runs in waves: no gang
    (job(4, 4, mode="NonIndexed"), None),  # no index: not a gang
    (job(None, None), None),               # one pod
    (job(1, 1), None),                     # one pod is no group
    (job(4, 4, uid="other"), None),        # another Job of that name, made since
])
def test_an_indexed_job_is_a_group_when_all_its_pods_run_at_once(the_job, want) -> None:
    assert pod_group(INDEXED, owners_of(the_job)) == want


def test_without_owners_only_what_the_pod_carries_is_read() -> None:
    assert pod_group(INDEXED, None) is None
    assert pod_group(pod({"app": "x"}), owners_of(TRAIN)) is None
    refused = pod_group(js_pod("launcher", 0, 0), None)
    assert isinstance(refused, GroupRefusal) and refused.reason == SIZE_UNREADABLE
    assert "JobSet team/train cannot be read" in refused.message


@pytest.mark.parametrize("the_pod, owners, words", [
    (pod({"gpu.orchestrator.dev/pod-group": "g1"}), None,
     "annotation gpu.orchestrator.dev/pod-group-size is missing"),
    (pod({"gpu.orchestrator.dev/pod-group": "g1"}, {"gpu.orchestrator.dev/pod-group-size": "x"}),
     None, "is 'x', not a member count"),
    (pod({"gpu.orchestrator.dev/pod-group": "g1"}, {"gpu.orchestrator.dev/pod-group-size": "0"}),
     None, "is '0', not a member count from 1 to 10000"),
    (pod({"gpu.orchestrator.dev/pod-group": "g1"},
         {"gpu.orchestrator.dev/pod-group-size": "²"}), None, "not a member count"),
    (pod({"gpu.orchestrator.dev/pod-group": "g1"},
         {"gpu.orchestrator.dev/pod-group-size": "20000"}), None, "from 1 to 10000"),
    (pod({"kueue.x-k8s.io/pod-group-name": "kq"},
         {"kueue.x-k8s.io/pod-group-total-count": "-3"}), None,
     "annotation kueue.x-k8s.io/pod-group-total-count is '-3'"),
    (js_pod("launcher", 0, 0, attempt="one"), owners_of(TRAIN),
     "label jobset.sigs.k8s.io/restart-attempt='one' is not a restart attempt"),
    (js_pod("nosuch", 0, 0), owners_of(TRAIN), "has no replicated job 'nosuch'"),
    (js_pod("launcher", 0, 0), owners_of(jobset(name="other")), "cannot be read"),
    (js_pod("launcher", 0, 0, extra={"jobset.sigs.k8s.io/jobset-uid": "old-uid"}),
     owners_of(TRAIN), "JobSet team/train cannot be read"),
    (js_pod("w", 0, 0), owners_of(jobset(jobs=[("w", 0, 4, 4)])),
     "replicas x pods per Job (0) is '0'"),
    (pod({"leaderworkerset.sigs.k8s.io/name": "infer",
          "leaderworkerset.sigs.k8s.io/group-index": "1"}), None,
     "annotation leaderworkerset.sigs.k8s.io/size is missing"),
    (pod({"leaderworkerset.sigs.k8s.io/name": "infer",
          "leaderworkerset.sigs.k8s.io/group-index": "one"},
         {"leaderworkerset.sigs.k8s.io/size": "2"}), None, "is 'one', not a group index"),
    # a leader before LWS's own pod webhook gave it its group index
    (pod({"leaderworkerset.sigs.k8s.io/name": "infer"},
         {"leaderworkerset.sigs.k8s.io/size": "2"}), None,
     "label leaderworkerset.sigs.k8s.io/group-index is missing"),
])
def test_a_group_whose_size_cannot_be_read_is_refused(the_pod, owners, words) -> None:
    refused = pod_group(the_pod, owners)
    assert isinstance(refused, GroupRefusal), refused
    assert refused.reason == SIZE_UNREADABLE
    assert words in refused.message


def test_members_that_disagree_on_the_size_are_refused_together() -> None:
    a = pod_group(pod({"gpu.orchestrator.dev/pod-group": "g"},
                      {"gpu.orchestrator.dev/pod-group-size": "4"}))
    b = pod_group(pod({"gpu.orchestrator.dev/pod-group": "g"},
                      {"gpu.orchestrator.dev/pod-group-size": "2"}))
    assert isinstance(a, PodGroup) and isinstance(b, PodGroup) and a.key == b.key
    refused = disagreement([a, a, b])
    assert refused is not None and refused.reason == SIZES_DISAGREE
    assert refused.key == "team/label:g"
    assert "different sizes: 2 (1 member(s)), 4 (2 member(s))" in refused.message
    assert disagreement([a, a]) is None
    assert disagreement([]) is None


def test_the_index_of_a_member_outside_its_group_is_unknown() -> None:
    lws = pod({"leaderworkerset.sigs.k8s.io/name": "infer",
               "leaderworkerset.sigs.k8s.io/group-index": "0",
               "leaderworkerset.sigs.k8s.io/worker-index": "7"},
              {"leaderworkerset.sigs.k8s.io/size": "2"})
    got = pod_group(lws)
    assert isinstance(got, PodGroup) and got.index is None and got.size == 2
    no_labels = pod({"jobset.sigs.k8s.io/jobset-name": "train",
                     "jobset.sigs.k8s.io/replicatedjob-name": "workers"})
    got = pod_group(no_labels, owners_of(TRAIN))
    assert isinstance(got, PodGroup) and got.index is None and got.size == 9


def test_a_leaderworkerset_member_says_its_template_revision() -> None:
    """A member of another revision never takes the slot one of this revision left
    (the group key of an LWS group does not change with its revision)."""
    labels = {"leaderworkerset.sigs.k8s.io/name": "infer",
              "leaderworkerset.sigs.k8s.io/group-index": "0",
              "leaderworkerset.sigs.k8s.io/worker-index": "1"}
    size = {"leaderworkerset.sigs.k8s.io/size": "2"}
    old = pod({**labels, "leaderworkerset.sigs.k8s.io/template-revision-hash": "a1"}, size)
    new = pod({**labels, "leaderworkerset.sigs.k8s.io/template-revision-hash": "b2"}, size)
    g_old, g_new = pod_group(old), pod_group(new)
    assert isinstance(g_old, PodGroup) and isinstance(g_new, PodGroup)
    assert g_old.key == g_new.key and (g_old.generation, g_new.generation) == ("a1", "b2")


def test_a_staged_jobset_says_which_members_come_first_and_what_the_later_ones_ask() -> None:
    """dependsOn Ready on the second of three replicated jobs: the first and the third
    are made at once (indices 0 and 3), the second's 2 members later; those later
    members' GPUs come from their own Job template (4), the launcher asking none."""
    js = jobset(jobs=[("launcher", 1, None, None), ("workers", 2, None, None),
                      ("sidecar", 1, None, None)])
    rjs = js["spec"]["replicatedJobs"]
    rjs[1]["dependsOn"] = [{"name": "launcher", "status": "Ready"}]
    rjs[1]["template"]["spec"]["template"]["spec"]["containers"] = [
        {"name": "w", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]
    got = pod_group(js_pod("sidecar", 0, 0), owners_of(js))
    assert isinstance(got, PodGroup)
    assert (got.key, got.size, got.index) == ("team/jobset:train:0", 4, 3)
    assert (got.first, got.staged_by) == (((0, 1), (3, 4)), "dependsOn status Ready")
    assert [(p.start, p.stop, pod_gpu_request({"spec": p.spec})) for p in got.later] == [
        (1, 3, 4)]


def test_a_leader_first_group_is_made_first_at_its_leader() -> None:
    assert PodGroup("k", 3, "leaderworkerset", "", 0, leader_first=True).first == ((0, 1),)
    assert PodGroup("k", 3, "jobset", "", 0).first == ()


def test_replicated_jobs_made_once_a_completed_one_is_ready_are_one_group_with_it() -> None:
    """A launcher; ``workers`` made once it is Complete; ``eval`` made once the
    workers are Ready. The workers and eval run side by side: one group (keyed by
    the workers), placed whole once the workers exist, eval's members the later
    ones; the launcher, which ends before them, a group of its own. (Before, eval
    was a group of its own too, placed only once the workers were running, and the
    workers' room could leave none for it.)"""
    js = jobset(jobs=[("launcher", 1, None, None), ("workers", 2, 2, 2), ("eval", 1, 2, 2)])
    rjs = js["spec"]["replicatedJobs"]
    rjs[1]["dependsOn"] = [{"name": "launcher", "status": "Complete"}]
    rjs[2]["dependsOn"] = [{"name": "workers", "status": "Ready"}]
    rjs[2]["template"]["spec"]["template"]["spec"]["containers"] = [
        {"name": "e", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
    got = pod_group(js_pod("eval", 0, 1), owners_of(js))
    assert isinstance(got, PodGroup)
    assert (got.key, got.size, got.index, got.first, got.staged_by) == (
        "team/jobset:train:0:workers", 6, 4 + 1, ((0, 4),), "dependsOn status Ready")
    assert got.size_from == ("JobSet train replicated jobs workers, eval (made once workers "
                             "is): sum of replicas x pods per Job")
    assert [(p.start, p.stop, pod_gpu_request({"spec": p.spec})) for p in got.later] == [
        (4, 6, 1)]
    worker = pod_group(js_pod("workers", 1, 0), owners_of(js))
    assert isinstance(worker, PodGroup) and (worker.key, worker.index) == (got.key, 2)
    launcher = pod_group(js_pod("launcher", 0, 0), owners_of(js))
    assert isinstance(launcher, PodGroup)
    assert (launcher.key, launcher.size, launcher.first) == ("team/jobset:train:0:launcher", 1, ())
