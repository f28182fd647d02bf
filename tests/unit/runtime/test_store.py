from __future__ import annotations

import copy
import threading

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime.store import (
    DEFAULT_INDEXERS,
    NAMESPACE_INDEX,
    NODE_NAME_INDEX,
    OWNER_UID_INDEX,
    Indexer,
    freeze,
    index_by_node_name,
    thaw,
)


def pod(ns: str, name: str, node: str | None = None, owner: str | None = None) -> dict:
    md: dict = {"name": name, "namespace": ns}
    if owner:
        md["ownerReferences"] = [{"uid": owner, "kind": "X", "name": "o", "apiVersion": "v1"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": md,
        "spec": {"nodeName": node} if node else {},
    }


def make() -> Indexer:
    return Indexer({**DEFAULT_INDEXERS, NODE_NAME_INDEX: index_by_node_name})


def test_indexes_follow_updates_and_deletes() -> None:
    idx = make()
    idx.add(pod("a", "p1", "n1", "u1"))
    idx.add(pod("a", "p2", "n1"))
    idx.add(pod("b", "p3", "n2", "u1"))
    assert sorted(o["metadata"]["name"] for o in idx.by_index(NODE_NAME_INDEX, "n1")) == [
        "p1",
        "p2",
    ]
    assert idx.index_keys(OWNER_UID_INDEX, "u1") == ["a/p1", "b/p3"]
    idx.update(pod("a", "p1", "n2"))
    assert idx.index_keys(NODE_NAME_INDEX, "n1") == ["a/p2"]
    assert idx.index_keys(NODE_NAME_INDEX, "n2") == ["a/p1", "b/p3"]
    assert idx.index_keys(OWNER_UID_INDEX, "u1") == ["b/p3"]
    idx.delete(pod("b", "p3"))
    assert idx.index_keys(NODE_NAME_INDEX, "n2") == ["a/p1"]
    assert [o["metadata"]["name"] for o in idx.list_namespace("b")] == []
    assert idx.get_by_name("p2", "a") is not None


def test_custom_index_added_later_indexes_existing() -> None:
    idx = make()
    idx.add(pod("a", "p1", "n1"))
    idx.add_indexers({"name-len": lambda o: [str(len(o["metadata"]["name"]))]})
    assert idx.index_keys("name-len", "2") == ["a/p1"]
    with pytest.raises(KeyError):
        idx.by_index("missing", "x")


def test_cached_objects_are_read_only_and_thaw_copies() -> None:
    idx = make()
    idx.add(pod("a", "p1", "n1"))
    obj = idx.get_by_key("a/p1")
    assert obj is not None
    with pytest.raises(TypeError):
        obj["metadata"]["name"] = "x"
    with pytest.raises(TypeError):
        obj["metadata"].setdefault("labels", {})
    with pytest.raises(TypeError):
        obj["spec"].update(nodeName="x")
    mine = thaw(obj)
    mine["metadata"]["labels"] = {"a": "b"}
    assert "labels" not in idx.get_by_key("a/p1")["metadata"]
    dc = copy.deepcopy(obj)
    dc["spec"]["nodeName"] = "n9"
    assert obj == pod("a", "p1", "n1")  # compares equal to plain dicts
    assert orjson.loads(orjson.dumps(obj)) == pod("a", "p1", "n1")
    lst = freeze({"l": [1, 2]})["l"]
    with pytest.raises(TypeError):
        lst.append(3)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner,
                                                                  max_size=4),
    max_leaves=30)


@given(value=json_values)
def test_freeze_reaches_every_container_and_keeps_the_value(value: object) -> None:
    """Every dict and list, however deep and whatever sits beside it, refuses mutation;
    the frozen value equals the original, survives a JSON round trip and thaws back."""
    frozen = freeze(value)

    def walk(x: object) -> None:
        if isinstance(x, dict):
            with pytest.raises(TypeError):
                x["new"] = 1  # type: ignore[index]
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            with pytest.raises(TypeError):
                x.append(1)
            for v in x:
                walk(v)

    walk(frozen)
    assert frozen == value
    assert orjson.loads(orjson.dumps(frozen)) == orjson.loads(orjson.dumps(value))
    assert thaw(frozen) == value and freeze(frozen) is frozen


keys = st.sampled_from([f"p{i}" for i in range(6)])
nss = st.sampled_from(["a", "b"])
nodes = st.sampled_from(["n1", "n2", None])
ops = st.lists(st.tuples(st.sampled_from(["add", "delete"]), nss, keys, nodes), max_size=80)


@given(ops=ops)
def test_indexer_matches_model(ops: list) -> None:
    idx = make()
    model: dict[str, dict] = {}
    for op, ns, name, node in ops:
        key = f"{ns}/{name}"
        if op == "add":
            idx.add(pod(ns, name, node))
            model[key] = pod(ns, name, node)
        else:
            idx.delete(key)
            model.pop(key, None)
    assert sorted(idx.list_keys()) == sorted(model)
    for node in ["n1", "n2"]:
        want = sorted(k for k, o in model.items() if o["spec"].get("nodeName") == node)
        assert idx.index_keys(NODE_NAME_INDEX, node) == want
    for ns in ["a", "b"]:
        want = sorted(k for k in model if k.startswith(ns + "/"))
        assert idx.index_keys(NAMESPACE_INDEX, ns) == want


def test_thread_safety_smoke() -> None:
    idx = make()

    def writer(n: int) -> None:
        for i in range(300):
            idx.add(pod("a", f"p{i % 20}", f"n{(i + n) % 3}"))
            if i % 7 == 0:
                idx.delete(f"a/p{i % 20}")

    ts = [threading.Thread(target=writer, args=(n,)) for n in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    total = sum(len(idx.index_keys(NODE_NAME_INDEX, f"n{i}")) for i in range(3))
    assert total == len(idx)
