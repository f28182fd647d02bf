"""An orphan (``kubectl delete gw w --cascade=orphan``: the garbage collector takes
its pods' ownerReference away) stays, in the ledger, the pod of the workload
attempt it was booked as (``Allocation.child_of``), holding its devices as its own
owner; a pod that only copies a child's labels is nobody's child, except at a
rebuild, where the labels are all there is to know an orphan by."""

from __future__ import annotations

from api.v1alpha1.keys import ATTEMPT_LABEL, WORKLOAD_UID_LABEL
from internal.scheduling import Ledger
from tests.unit.scheduling.test_pod_holdings import _p, gw_ref, ledger, pod

LABELS = {WORKLOAD_UID_LABEL: "w-uid", ATTEMPT_LABEL: "0"}


def child(name: str, devices: str, *, orphaned: bool = False) -> dict:
    return pod(name, uid=f"u-{name}", devices=devices, labels=LABELS,
               ref=None if orphaned else gw_ref())


def test_an_orphan_stays_the_pod_its_workload_booked_and_holds_its_devices() -> None:
    led = ledger()
    led.assume("team/w", [_p("n1", 0, 1)], owner="w-uid#0", committed=True)
    assert led.sync_pod(child("w-0", "0,1")) == []
    assert led.pod("u-w-0").child_of == "w-uid#0"
    # the garbage collector orphans it before the workload's booking goes: its own
    # owner now, and no conflict with what its workload booked
    assert led.sync_pod(child("w-0", "0,1", orphaned=True)) == []
    held = led.pod("u-w-0")
    assert (held.owner, held.child_of) == ("pod:u-w-0", "w-uid#0")
    led.forget("team/w")
    assert led.free_devices("n1") == frozenset({2, 3})  # the orphan holds 0 and 1
    led.remove_pod("u-w-0")
    assert led.free_devices("n1") == frozenset({0, 1, 2, 3})


def test_orphans_of_one_attempt_sharing_a_device_are_no_conflict() -> None:
    led = ledger()
    led.sync_pod(child("w-0", "0"))
    led.sync_pod(child("w-1", "0"))
    assert led.sync_pod(child("w-0", "0", orphaned=True)) == []
    assert led.sync_pod(child("w-1", "0", orphaned=True)) == []
    # anybody else on the device is
    assert led.sync_pod(pod("x", uid="ux", devices="0")) == [
        "pod team/x: n1: device 0 also held by team/w-0",
        "pod team/x: n1: device 0 also held by team/w-1"]


def test_a_pod_that_copies_a_childs_labels_is_nobodys_child() -> None:
    led = ledger()
    led.sync_pod(pod("forged", uid="uf", devices="2", labels=LABELS))
    assert led.pod("uf").child_of == ""
    # its later updates do not make it one
    led.sync_pod(pod("forged", uid="uf", devices="2", labels=LABELS))
    assert led.pod("uf").child_of == ""


def test_a_rebuild_knows_an_orphan_by_its_child_labels() -> None:
    led, problems = Ledger.rebuild([], [child("w-0", "0,1", orphaned=True),
                                        pod("bare", uid="ub", devices="2")],
                                   node_devices={"n1": range(4)})
    assert problems == []
    assert led.pod("u-w-0").child_of == "w-uid#0"
    assert led.pod("ub").child_of == ""
    assert led.free_devices("n1") == frozenset({3})
