"""A pod group placed by the seed's ``gpu-scheduling-map`` (one map per group, on
every member through its template): each member on the line of its index in the
group, a JobSet's (``job-index`` x pods per Job + completion index), the members not
made yet too (controllers/podbinding/groupplan.py). Before, a group's members were
placed by the default strategy whatever their map said, while the webhook gave
each the map line of its name's ordinal: two different sets of devices."""

from __future__ import annotations

from typing import Any

from tests.unit.controllers.podbinding.fixtures import (
    ALL_FREE,
    OwnedEnv,
    jobset_member,
    jobset_of,
)
from tests.unit.controllers.podbinding.test_jobset_parts import staged
from tests.unit.controllers.podbinding.test_podbinding import NS

MAP = "gpu-scheduling-map"
# member index = job-index x 2 + completion index
LINES = "0=node3:0,1\n1=node3:2,3\n2=node1:0,1\n3=node1:2,3"


def mapped(job: int, index: int, text: str = LINES) -> dict[str, Any]:
    p = jobset_member("js", "workers", job, index, gpus=2)
    p["metadata"]["annotations"] = {MAP: text}
    return p


def env(text: str = LINES) -> OwnedEnv:
    e = OwnedEnv("JobSet", "js", jobset_of("js", "js", 2, 2))
    for job in (0, 1):
        for index in (0, 1):
            e.add(mapped(job, index, text))
    return e


def reconcile_all(e: OwnedEnv) -> None:
    for _ in range(2):
        for job in (0, 1):
            for index in (0, 1):
                e.reconcile(f"js-workers-{job}-{index}")


def test_each_member_is_bound_to_the_line_of_its_index_in_the_group() -> None:
    e = env()
    reconcile_all(e)
    assert e.bound() == {"js-workers-0-0": ("node3", "0,1"), "js-workers-0-1": ("node3", "2,3"),
                         "js-workers-1-0": ("node1", "0,1"), "js-workers-1-1": ("node1", "2,3")}


def test_a_map_without_a_members_line_places_nothing_and_says_which() -> None:
    e = env("0=node3:0,1\n1=node3:2,3\n2=node1:0,1")
    reconcile_all(e)
    assert e.bound() == {} and e.held() == ALL_FREE
    why = e.warnings("js-workers-1-1")[-1]
    assert "gpu-scheduling-map has no line for member index(es) 3; it maps 0, 1, 2" in why, why


def test_members_with_different_maps_place_nothing() -> None:
    e = env()
    e.add(mapped(1, 1, LINES.replace("node1:2,3", "node2:2,3")))
    reconcile_all(e)
    assert e.bound() == {}
    assert "carry different gpu-scheduling-map annotations" in e.warnings("js-workers-0-0")[-1]


def test_a_map_naming_a_device_another_holds_places_nothing() -> None:
    e = OwnedEnv("JobSet", "js", jobset_of("js", "js", 2, 2))
    e.place("other", 1, gpus=4)  # a group of one member holding a whole node
    (taken,) = [n for n, d in e.held().items() if d]
    free = next(n for n in ("node1", "node2") if n != taken)
    for job in (0, 1):
        for index in (0, 1):
            e.add(mapped(job, index, LINES.replace("node3", free).replace("node1", taken)))
    reconcile_all(e)
    assert not any(n.startswith("js-") for n in e.bound())
    why = e.warnings("js-workers-0-0")[-1]
    assert "by its gpu-scheduling-map: gang of 4 not placed, nothing booked" in why, why


def test_an_in_order_jobsets_later_members_are_held_on_their_lines() -> None:
    """The launcher (index 0) is bound on its line; the workers' slots (indices 1, 2)
    are held on theirs, as the Binding's group-slots annotation says."""
    e = OwnedEnv("JobSet", "staged", staged("InOrder"))
    for n in e.nodes:
        n["metadata"]["labels"]["pool"] = "a" if n["metadata"]["name"] in ("node1",
                                                                          "node2") else "b"
    launcher = jobset_member("staged", "launcher", 0, 0, gpus=1)
    launcher["spec"]["nodeSelector"] = {"pool": "a"}
    launcher["metadata"]["annotations"] = {MAP: "0=node2:3\n1=node4:0,1,2,3\n2=node3:0,1,2,3"}
    slots = e.placed_first(launcher)
    assert e.bound()["staged-launcher-0-0"] == ("node2", "3")
    assert slots == {1: ("node4", "0,1,2,3"), 2: ("node3", "0,1,2,3")}
    assert e.holder("node4", 0) == f"PodGroup:{NS}/jobset:staged:0"
