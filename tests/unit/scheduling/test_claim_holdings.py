"""Which devices an allocated ResourceClaim holds, read from the claim and the
published slices: the node its allocation selects, the host index of each device
(its ``minor``/``index`` attribute, else the number in ``gpu-<n>``), the owner it
shares with, and a clear error where its devices cannot be placed on one node."""

from __future__ import annotations

from typing import Any

import pytest

from internal.scheduling import Ledger
from internal.scheduling.inventory import DRA_DRIVER_ANNOTATION, SOURCE_ANNOTATION
from internal.scheduling.resourceslices import (
    BadClaim,
    SliceInventory,
    claim_holding,
    device_index,
    memory_mib,
    selector_node,
    slice_devices,
)
from tests.unit.scheduling.helpers import dra_claim as claim
from tests.unit.scheduling.helpers import dra_slice as rslice

DRIVER = "gpu.nvidia.com"


def term(kind: str, key: str, values: list[str], op: str = "In") -> dict[str, Any]:
    return {"nodeSelector": {"nodeSelectorTerms": [
        {kind: [{"key": key, "operator": op, "values": values}]}]}}


@pytest.mark.parametrize(
    ("allocation", "node"),
    [
        (term("matchFields", "metadata.name", ["n1"]), "n1"),
        (term("matchExpressions", "kubernetes.io/hostname", ["n2"]), "n2"),
        (term("matchFields", "kubernetes.io/hostname", ["n1"]), None),  # wrong place
        (term("matchExpressions", "metadata.name", ["n1"]), None),
        (term("matchFields", "metadata.name", ["n1"], op="NotIn"), None),
        (term("matchFields", "metadata.name", ["n1", "n2"]), None),  # not one node
        (term("matchFields", "metadata.name", []), None),
        ({"nodeSelector": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "other", "operator": "In", "values": ["x"]}]},
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z"]},
                                  {"key": "kubernetes.io/hostname", "operator": "In",
                                   "values": ["n3"]}]}]}}, "n3"),  # any term
        ({}, None),
        ({"nodeSelector": None}, None),
    ],
)
def test_the_node_an_allocation_selects(allocation: dict, node: str | None) -> None:
    assert selector_node(allocation) == node


@pytest.mark.parametrize(
    ("name", "attrs", "index"),
    [
        ("gpu-3", {}, 3),
        ("gpu-3", {"minor": {"int": 5}}, 5),
        ("gpu-3", {"index": {"int": 6}}, 6),
        ("gpu-3", {"minor": {"int": 5}, "index": {"int": 6}}, 5),  # minor first
        ("x", {f"{DRIVER}/minor": {"int": 7}}, 7),  # a qualified attribute name
        ("gpu-3", {"minor": {"int": True}}, 3),  # a bool is not an index
        ("gpu-3", {"minor": {"int": -1}}, 3),
        ("gpu-3", {"minor": {"int": 10000}}, 3),
        ("gpu-3", {"minor": {"int": 9999}}, 9999),
        ("gpu-3", {"minor": {"string": "5"}}, 3),  # not an int
        ("gpu-3", {"minor": 5}, 3),  # not an attribute value
        ("gpu-0", {}, 0),
        ("gpu-3", {"minor": {"int": 0}}, 0),
        ("gpu-12345", {}, None),
        ("gpu-x", {}, None),
        ("mig-1g.10gb-0", {}, None),
        ("my-gpu-1", {}, None),
    ],
)
def test_the_host_index_of_a_published_device(name: str, attrs: dict,
                                              index: int | None) -> None:
    assert device_index(name, attrs) == index


@pytest.mark.parametrize(
    ("capacity", "mib"),
    [({"memory": {"value": "80Gi"}}, 81920), ({"memory": {"value": "1Mi"}}, 1),
     ({"memory": {"value": "1536Ki"}}, 1),
     ({"memory": {"value": "0"}}, None), ({"memory": {}}, None), ({"memory": "80Gi"}, None),
     ({}, None)],
)
def test_device_memory(capacity: dict, mib: int | None) -> None:
    assert memory_mib(capacity) == mib


def test_a_slice_lists_its_gpus_with_their_attributes() -> None:
    s = rslice("n1", 2)
    s["spec"]["devices"].insert(0, {"name": "not-a-gpu"})
    s["spec"]["devices"][2]["attributes"]["productName"] = {"version": "v1"}
    devs = slice_devices(s, DRIVER)
    assert [(d.name, d.index, d.pool, d.node, d.uuid, d.model, d.memory_mib) for d in devs] == [
        ("gpu-0", 0, "n1", "n1", "GPU-n1-0", "NVIDIA H100", 81920),
        ("gpu-1", 1, "n1", "n1", "GPU-n1-1", "v1", 81920),
    ]
    assert slice_devices(s, "other.driver") == []
    del s["spec"]["nodeName"]
    assert slice_devices(s, DRIVER) == []


def test_a_slice_without_pool_name_is_pooled_by_node() -> None:
    s = rslice("n1", 1)
    s["spec"]["pool"] = {}
    assert [d.pool for d in slice_devices(s, DRIVER)] == ["n1"]


def inventory(*slices: dict) -> SliceInventory:
    inv = SliceInventory(DRIVER)
    for s in slices:
        inv.upsert(s)
    return inv


def test_an_allocated_claim_holds_its_devices_by_host_index() -> None:
    s = rslice("n1", 4)
    for d in s["spec"]["devices"]:
        d["attributes"]["minor"] = {"int": 10 + int(d["name"][4:])}
    inv = inventory(s)
    h = claim_holding(claim("u1", "n1", "gpu-2", "gpu-0", "gpu-2"), inv)
    assert h is not None
    assert (h.key, h.name, h.node, h.devices, h.counted, h.owner) == (
        "claim:u1", "claim ns/c-u1", "n1", (10, 12), 0, "claim:u1")
    led = Ledger()
    led.set_node_devices("n1", range(10, 14))
    led.set_pod(h)
    assert led.free_devices("n1") == frozenset({11, 13})


def test_a_claim_of_a_device_no_longer_published_holds_gpu_n() -> None:
    h = claim_holding(claim("u1", "n1", "gpu-3"), inventory())
    assert h is not None and (h.node, h.devices) == ("n1", (3,))
    c = claim("u2", "n1", "gpu-1")
    c["status"]["allocation"].pop("nodeSelector")  # the pool is named after the node
    h = claim_holding(c, inventory())
    assert h is not None and (h.node, h.devices) == ("n1", (1,))


def test_claims_that_hold_nothing_of_this_driver() -> None:
    inv = inventory(rslice("n1", 2))
    assert claim_holding({"metadata": {"name": "c"}}, inv) is None
    c = claim("u1", "n1", "gpu-0")
    c["status"]["allocation"]["devices"]["results"][0]["driver"] = "other.driver"
    assert claim_holding(c, inv) is None


def test_a_claim_whose_devices_cannot_be_placed_is_a_clear_error() -> None:
    inv = inventory(rslice("n1", 2), rslice("n2", 2))
    with pytest.raises(BadClaim, match=r"^device n1/mig-0 is not published and not gpu-<n>$"):
        claim_holding(claim("u1", "n1", "mig-0"), inv)
    c = claim("u2", "n1", "gpu-0")
    c["status"]["allocation"]["devices"]["results"].append(
        {"request": "gpu", "driver": DRIVER, "pool": "n2", "device": "gpu-1"})
    with pytest.raises(BadClaim, match=r"^devices on several nodes \(n1, n2\)$"):
        claim_holding(c, inv)


def test_a_claim_without_uid_or_namespace_is_named_by_its_key() -> None:
    c = claim("u1", "n1", "gpu-0")
    del c["metadata"]["uid"]
    del c["metadata"]["namespace"]
    h = claim_holding(c, inventory(rslice("n1", 1)))
    assert h is not None and (h.key, h.name, h.owner) == (
        "claim:default/c-u1", "claim default/c-u1", "claim:default/c-u1")


@pytest.mark.parametrize(
    ("owner", "attempt", "expected"),
    [
        ({"kind": "GPUWorkload", "name": "w", "uid": "w-uid", "controller": True}, "2",
         "w-uid#2"),
        ({"kind": "GPUWorkload", "name": "w", "uid": "w-uid", "controller": True}, "",
         "w-uid#0"),
        ({"kind": "GPUWorkload", "name": "w", "controller": True}, "2", "claim:u1"),
        ({"kind": "GPUWorkload", "name": "w", "uid": "w-uid", "controller": False}, "2",
         "claim:u1"),
        ({"kind": "Pod", "name": "p", "uid": "p-uid", "controller": True}, "2", "claim:u1"),
    ],
)
def test_the_owner_of_a_claim(owner: dict, attempt: str, expected: str) -> None:
    h = claim_holding(claim("u1", "n1", "gpu-0", owner=owner, attempt=attempt),
                      inventory(rslice("n1", 1)))
    assert h is not None and h.owner == expected


# ------------------------------------------------------------------- the slices


def test_slices_come_and_go_and_the_node_follows() -> None:
    inv = SliceInventory(DRIVER)
    assert inv.upsert(rslice("n1", 2, name="a")) == "n1"
    assert inv.devices("n1").keys() == {0, 1} and inv.has("n1")
    # the same slice republished with more devices: the cache follows
    assert inv.upsert(rslice("n1", 3, name="a")) == "n1"
    assert inv.devices("n1").keys() == {0, 1, 2}
    # the slice moved to another driver: its old node changed
    assert inv.upsert(rslice("n1", 3, name="a", driver="other.driver")) == "n1"
    assert inv.devices("n1") == {} and not inv.has("n1") and inv.nodes() == set()
    assert inv.upsert(rslice("n1", 3, name="b", driver="other.driver")) is None
    inv.upsert(rslice("n1", 1, name="a"))
    inv.upsert(rslice("n2", 1, name="c"))
    assert inv.remove({"metadata": {"name": "a"}}) == "n1"
    assert inv.remove({"metadata": {"name": "a"}}) is None
    assert inv.nodes() == {"n2"} and inv.devices("n1") == {} and inv.view("n1", None) is None


def test_two_slices_of_one_node_both_count_until_the_last_goes() -> None:
    inv = SliceInventory(DRIVER)
    first = rslice("n1", 2, name="first")
    second = rslice("n1", 4, name="second")
    second["spec"]["pool"]["name"] = "n1-extra"
    second["spec"]["devices"] = second["spec"]["devices"][2:]
    inv.upsert(first)
    assert inv.devices("n1").keys() == {0, 1}
    inv.upsert(second)
    assert inv.devices("n1").keys() == {0, 1, 2, 3}
    assert inv.remove(first) == "n1" and inv.has("n1")
    assert inv.devices("n1").keys() == {2, 3}
    assert inv.remove(second) == "n1" and not inv.has("n1")


def test_each_pool_keeps_its_newest_generation() -> None:
    inv = SliceInventory(DRIVER)
    old = rslice("n1", 4, generation=3, name="old")
    new = rslice("n1", 2, generation=4, name="new")
    other = rslice("n1", 8, generation=1, name="other")
    other["spec"]["pool"]["name"] = "second-pool"
    other["spec"]["devices"] = other["spec"]["devices"][6:]
    for s in (new, other, old):
        inv.upsert(s)
    assert inv.devices("n1").keys() == {0, 1, 6, 7}
    assert inv.device("n1", 6).pool == "second-pool" and inv.device("n1", 2) is None
    bad = rslice("n2", 1, name="bad")
    bad["spec"]["pool"]["generation"] = "x"  # unreadable: generation 0
    inv.upsert(bad)
    assert inv.devices("n2").keys() == {0}
    unset = rslice("n2", 3, name="unset")
    del unset["spec"]["pool"]["generation"]  # none: generation 0
    inv.upsert(unset)
    assert inv.devices("n2").keys() == {0, 1, 2}
    inv.upsert(rslice("n2", 2, generation=1, name="first"))  # newer than both
    assert inv.devices("n2").keys() == {0, 1}


def test_a_device_is_located_in_its_pool_wherever_that_is() -> None:
    s = rslice("n1", 2, name="a")
    s["spec"]["pool"]["name"] = "shared-pool"
    inv = inventory(rslice("n2", 2, name="b"), rslice("n3", 1, name="c"), s)
    assert inv.locate("n2", "gpu-1") == inv.device("n2", 1)
    found = inv.locate("shared-pool", "gpu-1")
    assert found is not None and (found.node, found.index) == ("n1", 1)
    assert inv.locate("shared-pool", "gpu-7") is None
    assert inv.locate("n1", "gpu-1") is None  # n1's devices are in another pool
    h = claim_holding(claim("u1", "n1", "gpu-0"), inv)  # names pool n1: not published
    assert h is not None and (h.node, h.devices) == ("n1", (0,))


def test_the_selected_node_places_a_claims_devices() -> None:
    inv = inventory(rslice("n2", 2))
    c = claim("u1", "n1", "gpu-3")
    c["status"]["allocation"]["devices"]["results"][0]["pool"] = "gone-pool"
    h = claim_holding(c, inv)  # not published: on the node the allocation selects
    assert h is not None and (h.node, h.devices) == ("n1", (3,))
    c = claim("u2", "n1", "gpu-1")
    c["status"]["allocation"]["devices"]["results"][0]["pool"] = "n2"
    with pytest.raises(BadClaim, match=r"^devices on several nodes \(n1, n2\)$"):
        claim_holding(c, inv)  # published on n2, selected for n1


def test_the_view_merges_the_agents_devices_by_index() -> None:
    s = rslice("n1", 3)
    s["spec"]["devices"][2]["attributes"] = {"minor": {"int": 2}}  # no uuid, model, memory
    del s["spec"]["devices"][2]["capacity"]
    inv = inventory(s)
    agent = {"metadata": {"name": "n1", "labels": {"l": "v"}},
             "spec": {"x": 1},
             "status": {"topologyKnown": True, "devices": [
                 {"index": 1, "healthy": False, "uuid": "GPU-agent-1", "memoryTotalMiB": 1},
                 {"index": 2, "uuid": "GPU-agent-2", "model": "A100", "nvlinkPeers": [1]},
                 {"uuid": "no-index"}]}}
    v = inv.view("n1", agent)
    assert v is not None
    assert v["metadata"]["labels"] == {"l": "v"}
    assert v["metadata"]["annotations"] == {
        SOURCE_ANNOTATION: "resourceslice",
        DRA_DRIVER_ANNOTATION: DRIVER}
    assert v["spec"] == {"x": 1, "nodeName": "n1"}
    assert v["status"]["topologyKnown"] is True and v["status"]["deviceCount"] == 3
    assert v["status"]["devices"] == [
        {"index": 0, "uuid": "GPU-n1-0", "model": "NVIDIA H100", "memoryTotalMiB": 81920,
         "healthy": True},
        {"index": 1, "healthy": False, "uuid": "GPU-n1-1", "memoryTotalMiB": 81920,
         "model": "NVIDIA H100"},
        {"index": 2, "uuid": "GPU-agent-2", "model": "A100", "nvlinkPeers": [1],
         "healthy": True},
    ]
    bare = inv.view("n1", None)
    assert bare["metadata"] == {"name": "n1", "annotations": v["metadata"]["annotations"]}
    assert [d["uuid"] for d in bare["status"]["devices"]] == ["GPU-n1-0", "GPU-n1-1", ""]
    assert bare["status"]["devices"][2] == {"index": 2, "uuid": "", "model": "",
                                            "healthy": True}
    # an agent that already named the source keeps it
    agent["metadata"]["annotations"] = {SOURCE_ANNOTATION: "agent"}
    assert inv.view("n1", agent)["metadata"]["annotations"][
        SOURCE_ANNOTATION] == "agent"
