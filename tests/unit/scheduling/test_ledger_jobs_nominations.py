"""The ledger's holders other than pods and plain bookings, through its public calls:
a Job of ours holds what its bound template names until it finishes or goes
(``sync_job``, ``job``, ``remove_job``), any holder read by ``sync`` (never refused,
its problems said), nominations booked again after a restart (``book_nominations``),
and what a booking still waits for before its children may be made (``blockers``)."""

from __future__ import annotations

from typing import Any

from api.v1alpha1.types import Placement
from internal.scheduling import Ledger
from internal.scheduling.pods import PodHolding

NS = "ns"


def P(i: int, n: str, *d: int) -> Placement:
    return Placement(index=i, node=n, devices=list(d))


def ledger() -> Ledger:
    led = Ledger()
    led.set_node_devices("n1", range(4))
    led.set_node_devices("n2", range(4))
    return led


def job(name: str = "j", *, uid: str = "job-1", workload_uid: str = "uid-w",
        node: str | None = "n1", devices: str | None = "0,1", gpus: int = 0,
        attempt: str = "0", finished: str | None = None,
        owner_kind: str = "GPUWorkload") -> dict[str, Any]:
    c: dict[str, Any] = {"name": "c", "image": "x"}
    if gpus:
        c["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    tmeta: dict[str, Any] = {"annotations": {}}
    if devices is not None:
        tmeta["annotations"]["gpu.orchestrator.dev/devices"] = devices
    spec: dict[str, Any] = {"containers": [c]}
    if node:
        spec["nodeName"] = node
    obj: dict[str, Any] = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": NS, "uid": uid,
                     "labels": {"gpu.orchestrator.dev/attempt": attempt},
                     "ownerReferences": [{"apiVersion": "gpu.orchestrator.dev/v1alpha1",
                                          "kind": owner_kind, "name": "w",
                                          "uid": workload_uid, "controller": True}]},
        "spec": {"template": {"metadata": tmeta, "spec": spec}},
        "status": {}}
    if finished:
        obj["status"]["conditions"] = [{"type": finished, "status": "True"}]
    return obj


def pod(uid: str, node: str, devices: tuple[int, ...] = (), counted: int = 0,
        owner: str | None = None) -> PodHolding:
    return PodHolding(uid, f"{NS}/{uid}", node, devices, counted, owner or f"pod:{uid}")


# ---------------------------------------------------------------------- Jobs


def test_a_job_of_ours_holds_the_devices_its_template_names_until_it_finishes() -> None:
    led = ledger()
    assert led.sync_job(job()) == []
    held = led.job("job-1")
    assert held is not None and held.job and held.holder
    assert (held.name, held.owner) == ("Job ns/j", "uid-w#0")
    assert [(p.node, p.devices) for p in held.placements] == [("n1", [0, 1])]
    assert dict(led.holders("n1")) == {0: "Job ns/j", 1: "Job ns/j"}
    assert led.free_count("n1") == 2
    assert led.device_owners("n1", 0) == {"uid-w#0"}

    assert led.sync_job(job(finished="Complete")) == []
    assert led.job("job-1") is None
    assert led.free_count("n1") == 4 and dict(led.holders("n1")) == {}


def test_a_jobs_attempt_is_its_owner() -> None:
    led = ledger()
    led.sync_job(job(attempt="2"))
    assert led.device_owners("n1", 1) == {"uid-w#2"}


def test_a_job_not_ours_unbound_or_holding_no_gpu_holds_nothing() -> None:
    led = ledger()
    for j in (job(owner_kind="ReplicaSet"), job(node=None), job(devices=None),
              job(finished="Failed")):
        assert led.sync_job(j) == []
        assert led.job("job-1") is None
    assert led.free_count("n1") == 4


def test_a_job_with_a_malformed_annotation_is_reported_and_holds_nothing() -> None:
    led = ledger()
    led.sync_job(job())
    problems = led.sync_job(job(devices="zero"))
    assert len(problems) == 1 and problems[0].startswith("job ns/j: ")
    assert led.job("job-1") is None and led.free_count("n1") == 4


def test_a_job_counts_its_request_beside_its_named_devices_once_per_owner() -> None:
    led = ledger()
    led.sync_job(job(devices=None, gpus=2))
    held = led.job("job-1")
    assert held is not None and held.counted == {"n1": 2} and held.placements == ()
    assert led.free_count("n1") == 2
    # its pod (the same owner) is the same two GPUs, not two more
    led.set_pod(pod("p", "n1", counted=2, owner="uid-w#0"))
    assert led.free_count("n1") == 2
    led.sync_job(job(devices="3", gpus=2))  # one named, one more counted
    assert led.free_count("n1") == 1


def test_remove_job_says_whether_the_job_held_something() -> None:
    led = ledger()
    led.sync_job(job())
    assert led.remove_job("job-1") is True
    assert led.remove_job("job-1") is False
    assert led.job("job-1") is None and led.free_count("n1") == 4


def test_removing_a_holder_never_releases_a_booking() -> None:
    led = ledger()
    led.assume("ns/w", [P(0, "n1", 0)])
    assert led.remove_holder("ns/w") is False
    assert led.allocation("ns/w") is not None and led.free_count("n1") == 3
    assert led.holding("ns/w") is None


def test_a_job_on_devices_another_owner_holds_is_recorded_and_reported() -> None:
    led = ledger()
    led.assume("ns/other", [P(0, "n1", 0)], owner="uid-o#0")
    problems = led.sync_job(job())
    assert problems == ["Job ns/j: n1: device 0 also held by ns/other"]
    assert led.device_owners("n1", 0) == {"uid-o#0", "uid-w#0"}  # never refused


# ---------------------------------------------------------------------- sync


def test_sync_records_replaces_and_removes_what_a_holder_holds() -> None:
    led = ledger()
    h = pod("c1", "n2", (2,))
    assert led.sync(h.key, lambda: h, "claim ns/c1") == []
    assert led.holder("n2", 2) == "ns/c1"
    moved = pod("c1", "n2", (3,))
    assert led.sync(h.key, lambda: moved, "claim ns/c1") == []
    assert led.holder("n2", 2) is None and led.holder("n2", 3) == "ns/c1"
    assert led.sync(h.key, lambda: None, "claim ns/c1") == []
    assert led.holding(h.key) is None and led.free_count("n2") == 4


def test_sync_of_an_unreadable_holder_drops_what_it_held_and_says_why() -> None:
    led = ledger()
    h = pod("c1", "n2", (2,))
    led.sync(h.key, lambda: h, "claim ns/c1")

    def unreadable() -> PodHolding:
        raise ValueError("no such device gpu-9")
    assert led.sync(h.key, unreadable, "claim ns/c1") == ["claim ns/c1: no such device gpu-9"]
    assert led.holding(h.key) is None and led.free_count("n2") == 4


def test_sync_reports_conflicts_with_the_holders_name() -> None:
    led = ledger()
    led.set_pod(pod("first", "n1", (1,)))
    h = pod("c1", "n1", (1, 2))
    assert led.sync(h.key, lambda: h, "claim") == ["ns/c1: n1: device 1 also held by ns/first"]


# ------------------------------------------------------------- nominations


def placed(name: str, devices: list[int], *, nominated: list[str] | None = None,
           created: str = "2026-01-01T00:00:00Z", phase: str = "Scheduled",
           priority: int = 100, deleting: bool = False, node: str = "n1") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"uid-{name}",
                            "creationTimestamp": created}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    status: dict[str, Any] = {"phase": phase,
                              "placements": [{"index": 0, "node": node, "devices": devices}]}
    if nominated is not None:
        status["nominatedOver"] = nominated
    return {"apiVersion": "gpu.orchestrator.dev/v1alpha1", "kind": "GPUWorkload",
            "metadata": meta, "spec": {"gpusPerReplica": len(devices), "priority": priority},
            "status": status}


def test_a_nomination_is_booked_again_over_the_owners_it_preempted() -> None:
    led = ledger()
    led.set_pod(pod("victim-0", "n1", (0, 1), owner="uid-low#0"))
    assert led.book_nominations([placed("high", [0, 1], nominated=["uid-low#0"])]) == []
    a = led.allocation("ns/high")
    assert a is not None and a.committed and a.overlap == {"uid-low#0"}
    assert (a.owner, a.uid, a.priority, a.gpus_per_replica) == ("uid-high#0", "uid-high", 100, 2)
    assert led.device_owners("n1", 0) == {"uid-low#0", "uid-high#0"}
    assert led.blockers("ns/high") == {"n1": ["ns/victim-0"]}


def test_only_unfinished_nominated_placements_not_yet_booked_are_booked() -> None:
    led = ledger()
    led.assume("ns/kept", [P(0, "n2", 3)], owner="uid-kept#0")
    problems = led.book_nominations([
        placed("plain", [0]),  # no nomination: booked with the placements, not here
        placed("done", [1], nominated=["x#0"], phase="Succeeded"),
        placed("failed", [1], nominated=["x#0"], phase="Failed"),
        placed("going", [2], nominated=["x#0"], deleting=True),
        placed("kept", [0, 1], nominated=["x#0"]),  # booked already: left as it is
        placed("later", [3], nominated=["x#0"]),  # after the skipped ones: booked
    ])
    assert problems == []
    assert sorted(a.key for a in led.bookings()) == ["ns/kept", "ns/later"]
    kept = led.allocation("ns/kept")
    assert kept is not None and [p.node for p in kept.placements] == ["n2"]
    assert led.free_count("n1") == 3 and led.holder("n1", 3) == "ns/later"


def test_a_nomination_over_another_owners_holder_is_not_booked() -> None:
    led = ledger()
    led.set_pod(pod("someone", "n1", (1,)))
    problems = led.book_nominations([placed("high", [0, 1], nominated=["uid-low#0"])])
    assert problems == ["ns/high: nominated placement not booked: n1: device(s) 1 held by "
                        "ns/someone"]
    assert led.allocation("ns/high") is None
    assert led.device_owners("n1", 0) == frozenset()


def test_of_two_colliding_nominations_the_older_is_booked() -> None:
    led = ledger()
    newer = placed("newer", [0], nominated=["v#0"], created="2026-01-02T00:00:00Z")
    older = placed("older", [0], nominated=["v#0"], created="2026-01-01T00:00:00Z")
    problems = led.book_nominations([newer, older])
    assert led.allocation("ns/older") is not None and led.allocation("ns/newer") is None
    assert problems == ["ns/newer: nominated placement not booked: n1: device(s) 0 held "
                        "by ns/older"]


def test_a_nomination_on_a_node_gone_meanwhile_is_still_booked() -> None:
    """No capacity is checked: what the status committed is booked again, even on a
    node the ledger does not know (any more)."""
    led = ledger()
    w = placed("high", [0, 1], nominated=["v#0"], node="n9")
    del w["metadata"]["uid"]
    assert led.book_nominations([w]) == []
    a = led.allocation("ns/high")
    assert a is not None and a.uid == "" and a.owner == "ns/high#0"
    assert [p.node for p in a.placements] == ["n9"]


def test_a_ledger_rebuilt_from_the_cache_books_nominations_last_by_default() -> None:
    led, problems = Ledger.rebuild(
        [placed("high", [0, 1], nominated=["uid-low#0"])],
        [{"metadata": {"name": "victim-0", "namespace": NS, "uid": "uid-v",
                       "annotations": {"gpu.orchestrator.dev/devices": "0,1"},
                       "ownerReferences": [{"apiVersion": "gpu.orchestrator.dev/v1alpha1",
                                            "kind": "GPUWorkload", "name": "low",
                                            "uid": "uid-low", "controller": True}],
                       "labels": {"gpu.orchestrator.dev/attempt": "0"}},
          "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x"}]},
          "status": {"phase": "Running"}}],
        {"n1": range(4)})
    assert problems == []
    a = led.allocation("ns/high")
    assert a is not None and a.overlap == {"uid-low#0"}
    assert led.blockers("ns/high") == {"n1": ["ns/victim-0"]}


def test_a_rebuild_reports_the_problems_of_pods_and_jobs_alike() -> None:
    bad_pod = {"metadata": {"name": "p", "namespace": NS, "uid": "uid-p",
                            "annotations": {"gpu.orchestrator.dev/devices": "x"}},
               "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x"}]},
               "status": {"phase": "Running"}}
    led, problems = Ledger.rebuild(
        [], [bad_pod], {"n1": range(4)},
        jobs=[job(), job("k", uid="job-2", devices="bad", node="n1")])
    assert len(problems) == 2
    assert problems[0].startswith("pod ns/p: ") and problems[1].startswith("job ns/k: ")
    held = led.job("job-1")
    assert held is not None and led.free_count("n1") == 2


def test_an_invalid_spec_keeps_its_nomination_through_a_rebuild() -> None:
    w = placed("high", [0, 1], nominated=["uid-low#0"])
    w["spec"]["priority"] = "urgent"  # no longer validates
    led, problems = Ledger.rebuild([w], [], {"n1": range(4)})
    assert any("ns/high: invalid spec, placements kept" in p for p in problems)
    a = led.allocation("ns/high")
    assert a is not None and a.overlap == {"uid-low#0"}


def test_a_booking_without_devices_or_a_gpu_count_counts_nothing() -> None:
    led = ledger()
    led.assume("ns/w", [Placement(index=0, node="n1")])
    assert led.free_count("n1") == 4


def test_an_unreadable_workload_is_skipped_by_book_nominations() -> None:
    led = ledger()
    bad = {"metadata": {"name": "bad", "namespace": NS},
           "spec": {"gpusPerReplica": "many"}, "status": {"placements": "nowhere"}}
    assert led.book_nominations([bad, placed("high", [2], nominated=["v#0"])]) == []
    assert [a.key for a in led.bookings()] == ["ns/high"]


# ------------------------------------------------------------------ blockers


def test_blockers_of_an_unknown_booking_are_none() -> None:
    assert ledger().blockers("ns/nobody") == {}


def test_a_booking_waits_for_other_owners_on_its_devices_not_for_its_own_pods() -> None:
    led = ledger()
    led.assume("ns/w", [P(0, "n1", 0, 1)], owner="uid-w#1")
    led.set_pod(pod("w-0", "n1", (0,), owner="uid-w#1"))
    # a pod that came to name a booked device after the booking was made (a
    # previous attempt's, its own owner) is waited for; the attempt's own pod is not
    led.set_pod(pod("stray", "n1", (1,), owner="uid-w#0"))
    assert led.blockers("ns/w") == {"n1": ["ns/stray"]}
    led.remove_pod("stray")
    assert led.blockers("ns/w") == {}


def test_a_counted_booking_waits_only_where_its_node_is_short() -> None:
    led = ledger()
    led.set_pod(pod("big", "n1", counted=2))
    led.assume("ns/w", [Placement(index=0, node="n1")], gpus_per_replica=2, owner="uid-w#0")
    assert led.blockers("ns/w") == {}  # 4 GPUs: 2 counted elsewhere, 2 for it
    led.set_pod(pod("more", "n1", counted=1))
    assert led.blockers("ns/w") == {"n1": ["ns/big", "ns/more"]}


def test_a_counted_nomination_waits_for_its_victims_counted_pods() -> None:
    led = ledger()
    led.set_pod(pod("victim", "n1", counted=1, owner="uid-low#0"))
    led.assume("ns/w", [Placement(index=0, node="n1")], gpus_per_replica=2,
               owner="uid-w#0", overlap=["uid-low#0"], check_capacity=False)
    assert led.blockers("ns/w") == {"n1": ["ns/victim"]}
