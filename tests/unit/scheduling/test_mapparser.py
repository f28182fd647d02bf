import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from internal.scheduling.mapparser import (
    MapParseError,
    check_map_against,
    format_scheduling_map,
    parse_scheduling_map,
)
from tests.unit.scheduling.helpers import SEED_MAP


def test_seed_example_exactly() -> None:
    entries = parse_scheduling_map(SEED_MAP)
    got = {i: (e.node, e.devices) for i, e in entries.items()}
    assert got == {
        0: ("node1", (0, 1)),
        1: ("node2", (2,)),
        2: ("node3", (0, 1, 2)),
        3: ("node4", (3,)),
        4: ("node4", (3,)),
    }
    assert check_map_against(entries, 5, {f"node{i}": 4 for i in range(1, 5)}) == []


def test_blank_lines_and_spaces_tolerated() -> None:
    text = "\n  0 = node1 : 0 , 1  \n\n\t1=node2:2\r\n\n"
    entries = parse_scheduling_map(text)
    assert entries[0].devices == (0, 1) and entries[1].node == "node2"
    assert entries[1].line == 4


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("0=node1:0\nfoo", 2, "expected"),
        ("0=node1:0\n1=node2", 2, "after '='"),
        ("x=node1:0", 1, "replica index 'x'"),
        ("0=node1:0,a", 1, "device index 'a'"),
        ("0=node1:", 1, "no device"),
        ("0=:1", 1, "missing node"),
        ("0=node1:0\n\n0=node2:1", 3, "already mapped on line 1"),
        ("0=node1:1,1", 1, "listed twice"),
        ("0=no de:1", 1, "node name 'no de' is not a valid DNS-1123 subdomain"),
        ("0==node1:1", 1, "expected"),
        ("-1=node1:1", 1, "replica index '-1'"),
        ("0=Node_1:0", 1, "node name 'Node_1' is not a valid DNS-1123 subdomain"),
        ("0=node1:99999999999", 1, "device index 99999999999 is above 999"),
        ("0=node1:1000", 1, "device index 1000 is above 999"),
        ("0=node1:" + "9" * 5000, 1, "is above 999"),
    ],
)
def test_bad_input_names_the_line(text: str, line: int, words: str) -> None:
    with pytest.raises(MapParseError) as ei:
        parse_scheduling_map(text)
    assert ei.value.line == line
    assert f"line {line}" in str(ei.value)
    assert words in str(ei.value)


def test_empty_map_rejected() -> None:
    with pytest.raises(MapParseError, match="empty"):
        parse_scheduling_map("\n \n")


def test_check_against_replicas_and_nodes() -> None:
    entries = parse_scheduling_map("0=node1:0\n2=node9:1\n3=node2:7")
    problems = check_map_against(entries, 3, {"node1": 4, "node2": 4})
    text = " | ".join(problems)
    assert "line 3: replica index 3 >= replicas (3)" in text
    assert "no map entry for replica(s) 1" in text
    assert "line 2: node 'node9' does not exist" in text
    assert "line 3: device 7 beyond node node2's 4 GPU(s)" in text


entry = st.tuples(
    st.from_regex(r"[a-z][a-z0-9-]{0,8}[a-z0-9]", fullmatch=True),
    st.lists(st.integers(0, 15), min_size=1, max_size=4, unique=True),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(entry, min_size=1, max_size=8), st.data())
def test_round_trip(entries: list, data: st.DataObject) -> None:
    pad = data.draw(st.sampled_from(["", " ", "  "]))
    lines = [
        f"{pad}{i}{pad}={pad}{n}{pad}:{pad}{(pad + ',' + pad).join(map(str, devs))}{pad}"
        for i, (n, devs) in enumerate(entries)
    ]
    text = "\n\n".join(lines)
    parsed = parse_scheduling_map(text)
    assert [(e.node, list(e.devices)) for e in parsed.values()] == [(n, d) for n, d in entries]
    assert parse_scheduling_map(format_scheduling_map(parsed)) == {
        i: e.__class__(e.index, e.node, e.devices, i + 1) for i, e in parsed.items()
    }
