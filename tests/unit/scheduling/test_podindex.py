"""The seed path's replica index of a pod: the ``apps.kubernetes.io/pod-index`` label,
else the StatefulSet ordinal at the end of the name (or of the admission request's
name); when neither tells, no index and a reason the user reads in a warning."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from internal.scheduling.podindex import POD_INDEX_LABEL, pod_index

set_names = st.from_regex(r"[a-z]([a-z0-9-]{0,20}[a-z0-9])?", fullmatch=True)


@given(name=set_names, ordinal=st.integers(0, 10**6))
def test_the_ordinal_of_a_statefulset_pod_name(name: str, ordinal: int) -> None:
    pod = {"metadata": {"name": f"{name}-{ordinal}"}}
    assert pod_index(pod) == (ordinal, f"ordinal of pod name '{name}-{ordinal}'")


@given(name=set_names, ordinal=st.integers(0, 10**6), label=st.integers(0, 10**6))
def test_the_label_wins_over_the_name(name: str, ordinal: int, label: int) -> None:
    pod = {"metadata": {"name": f"{name}-{ordinal}", "labels": {POD_INDEX_LABEL: str(label)}}}
    assert pod_index(pod) == (label, "label apps.kubernetes.io/pod-index")


def test_the_request_name_stands_in_for_a_missing_pod_name() -> None:
    assert pod_index({"metadata": {"generateName": "web-"}}, "web-7") == (
        7, "ordinal of pod name 'web-7'")
    assert pod_index({"metadata": {"name": "web-2"}}, "web-7")[0] == 2  # the pod's own first
    assert pod_index({}, "db-0") == (0, "ordinal of pod name 'db-0'")


@pytest.mark.parametrize(
    ("labels", "why"),
    [
        ({POD_INDEX_LABEL: "-1"}, "label apps.kubernetes.io/pod-index='-1' is not a "
                                  "non-negative integer below 1000000000"),
        ({POD_INDEX_LABEL: "two"}, "label apps.kubernetes.io/pod-index='two' is not a "
                                   "non-negative integer below 1000000000"),
        ({POD_INDEX_LABEL: ""}, "label apps.kubernetes.io/pod-index='' is not a "
                                "non-negative integer below 1000000000"),
    ],
)
def test_a_bad_label_is_not_overridden_by_the_name(labels: dict, why: str) -> None:
    assert pod_index({"metadata": {"name": "web-3", "labels": labels}}) == (None, why)


def test_an_integer_label_value_is_read() -> None:
    assert pod_index({"metadata": {"labels": {POD_INDEX_LABEL: 5}}})[0] == 5


@pytest.mark.parametrize(
    ("meta", "why"),
    [
        ({"name": "web"}, "pod name 'web' has no ordinal suffix and no "
                          "apps.kubernetes.io/pod-index label"),
        ({"name": "web-03"}, "pod name 'web-03' has no ordinal suffix and no "
                             "apps.kubernetes.io/pod-index label"),
        ({"name": "web-3x"}, "pod name 'web-3x' has no ordinal suffix and no "
                             "apps.kubernetes.io/pod-index label"),
        ({"name": "web3"}, "pod name 'web3' has no ordinal suffix and no "
                           "apps.kubernetes.io/pod-index label"),
        ({"generateName": "web-"}, "pod has no name yet (generateName 'web-') and no "
                                   "apps.kubernetes.io/pod-index label"),
        ({}, "pod has no name yet (generateName '') and no apps.kubernetes.io/pod-index label"),
        ({"name": None, "labels": None}, "pod has no name yet (generateName '') and no "
                                         "apps.kubernetes.io/pod-index label"),
    ],
)
def test_no_index_says_why(meta: dict, why: str) -> None:
    assert pod_index({"metadata": meta}) == (None, why)


def test_a_pod_without_metadata() -> None:
    assert pod_index({"metadata": None})[0] is None
    assert pod_index({})[0] is None


def test_only_the_last_dash_counts() -> None:
    assert pod_index({"metadata": {"name": "web-12-34"}})[0] == 34
    assert pod_index({"metadata": {"name": "web-0"}})[0] == 0
    assert pod_index({"metadata": {"name": "web-10"}})[0] == 10


def test_a_non_ascii_digit_label_is_no_index_not_a_crash() -> None:
    """``"²".isdigit()`` is True and ``int("²")`` raises: the label is refused."""
    index, why = pod_index({"metadata": {"labels": {"apps.kubernetes.io/pod-index": "\u00b2"}}})
    assert index is None and "is not a non-negative integer" in why


def test_an_ordinal_beyond_nine_digits_is_no_index() -> None:
    """Issue 23: ``int()`` of 5000 digits raised (the webhook answered 500)."""
    assert pod_index({"metadata": {"name": "web-" + "1" * 5000}})[0] is None
    assert pod_index({"metadata": {"name": "web-\u00b2"}})[0] is None
    assert pod_index({"metadata": {"name": "web-999999999"}})[0] == 999999999
