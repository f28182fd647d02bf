"""Taints and tolerations as Kubernetes matches them (``v1.Toleration.ToleratesTaint``):
an effect, when given, must equal the taint's; a key, when given, must equal the
taint's; ``Exists`` then matches any value, ``Equal`` (the default operator) the
taint's value exactly (a missing value is the empty one). Only NoSchedule and
NoExecute taints keep a workload off a node."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from internal.scheduling import UNSCHEDULABLE, schedule
from internal.scheduling.snapshot import NodeInfo
from internal.scheduling.taints import tolerates, untolerated_taint
from tests.unit.scheduling.helpers import cluster, node, workload

EFFECTS = ["NoSchedule", "NoExecute", "PreferNoSchedule"]


def k8s_tolerates(tol: dict[str, Any], taint: dict[str, Any]) -> bool:
    """Kubernetes' own rule, transcribed (for valid tolerations: an empty key only
    with Exists)."""
    if tol.get("effect") and tol["effect"] != taint.get("effect"):
        return False
    if tol.get("key") and tol["key"] != taint.get("key"):
        return False
    if (tol.get("operator") or "Equal") == "Exists":
        return True
    return (tol.get("value") or "") == (taint.get("value") or "")


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


taints_st = st.builds(
    lambda key, value, effect: _drop_none({"key": key, "value": value, "effect": effect}),
    st.sampled_from(["gpu", "dedicated"]),
    st.sampled_from([None, "", "a100", "h100"]),
    st.sampled_from(EFFECTS),
)
# operator None: the field left out (Equal); a keyless toleration must say Exists
tolerations_st = st.builds(
    lambda key, op, value, effect: _drop_none(
        {"key": key, "operator": "Exists" if key is None else op, "value": value,
         "effect": effect}
    ),
    st.sampled_from([None, "gpu", "dedicated"]),
    st.sampled_from([None, "Equal", "Exists"]),
    st.sampled_from([None, "", "a100", "h100"]),
    st.sampled_from([None, "", *EFFECTS]),
)


@given(tol=tolerations_st, taint=taints_st)
def test_one_toleration_matches_like_kubernetes(tol: dict, taint: dict) -> None:
    assert tolerates([tol], taint) is k8s_tolerates(tol, taint)


@given(tols=st.lists(tolerations_st, max_size=4), taint=taints_st)
def test_any_toleration_of_the_list_is_enough(tols: list[dict], taint: dict) -> None:
    assert tolerates(tols, taint) is any(k8s_tolerates(t, taint) for t in tols)


@given(tols=st.lists(tolerations_st, max_size=3), taints=st.lists(taints_st, max_size=4))
def test_the_first_untolerated_blocking_taint_is_named(tols: list[dict], taints: list) -> None:
    info = NodeInfo("n", taints=tuple(taints))
    blocking = [
        t for t in taints
        if t["effect"] in ("NoSchedule", "NoExecute")
        and not any(k8s_tolerates(tol, t) for tol in tols)
    ]
    # any iterable of tolerations, read once for every taint
    got = untolerated_taint(info, iter(tols))
    assert got == (blocking[0] if blocking else None)


TAINT = {"key": "gpu", "value": "h100", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("tol", "ok"),
    [
        ({"operator": "Exists"}, True),  # tolerates everything
        ({"key": "gpu", "operator": "Exists"}, True),
        ({"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}, True),
        ({"key": "gpu", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "other", "operator": "Exists"}, False),
        ({"key": "gpu", "value": "h100"}, True),  # operator defaults to Equal
        ({"key": "gpu", "operator": "Equal", "value": "h100", "effect": "NoSchedule"}, True),
        ({"key": "gpu", "operator": "Equal", "value": "a100"}, False),
        ({"key": "gpu", "operator": "Equal"}, False),  # no value: the empty one
        ({"key": "gpu", "value": "h100", "effect": "PreferNoSchedule"}, False),
    ],
)
def test_a_tainted_node_takes_only_workloads_that_tolerate_it(tol: dict, ok: bool) -> None:
    snap, led = cluster(node("tainted", taints=[TAINT]))
    w = workload(template={"spec": {"tolerations": [tol]}})
    d = schedule(w, snap, led)
    if ok:
        assert d.nodes == ["tainted"]
    else:
        assert d.outcome == UNSCHEDULABLE
        assert d.reasons == {"tainted": "taint gpu=h100:NoSchedule not tolerated"}


def test_a_taint_without_value_is_matched_by_an_equal_toleration_without_value() -> None:
    taint = {"key": "dedicated", "effect": "NoExecute"}
    snap, led = cluster(node("n", taints=[taint]))
    blocked = schedule(workload(), snap, led)
    assert blocked.reasons == {"n": "taint dedicated:NoExecute not tolerated"}
    tol = {"key": "dedicated", "operator": "Equal", "effect": "NoExecute"}
    assert schedule(workload(template={"spec": {"tolerations": [tol]}}), snap, led).ok


def test_every_blocking_taint_must_be_tolerated() -> None:
    taints = [
        {"key": "soft", "effect": "PreferNoSchedule"},  # never blocks
        {"key": "a", "value": "1", "effect": "NoSchedule"},
        {"key": "b", "value": "2", "effect": "NoExecute"},
    ]
    snap, led = cluster(node("n", taints=taints))
    only_a = workload(template={"spec": {"tolerations": [{"key": "a", "operator": "Exists"}]}})
    assert schedule(only_a, snap, led).reasons == {"n": "taint b=2:NoExecute not tolerated"}
    both = workload(template={"spec": {"tolerations": [
        {"key": "a", "operator": "Exists"}, {"key": "b", "value": "2"}]}})
    assert schedule(both, snap, led).ok
