"""The device picker's rules as properties: the set it returns is always free, of the
size asked for, NVLink-connected whenever topology asks for it and one exists, and
the best by the documented order (fewest fragments left, then fewest runs, then
lowest indices); on large nodes (the greedy regime) the same guarantees of validity,
and NVLink islands found whole."""

from __future__ import annotations

from itertools import combinations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from api.v1alpha1.types import Topology
from internal.scheduling.devicepicker import (
    EXHAUSTIVE_LIMIT,
    Pick,
    fragments,
    fragments_left,
    pick_devices,
    pick_plain,
    runs,
)

# ---------------------------------------------------------------- reference rules


def linked(a: int, b: int, peers: dict[int, frozenset[int]]) -> bool:
    """An NVLink between a and b, as either side reports it."""
    return b in peers.get(a, frozenset()) or a in peers.get(b, frozenset())


def is_clique(devs: tuple[int, ...], peers: dict[int, frozenset[int]]) -> bool:
    return all(linked(a, b, peers) for a, b in combinations(devs, 2))


def pieces(devs: set[int] | tuple[int, ...]) -> int:
    """The fragments of ``devs`` by their definition: how many runs (the picker
    counts them without building the runs)."""
    return len(runs(devs))


def best_plain(free: set[int], n: int) -> tuple[int, ...]:
    return min(combinations(sorted(free), n),
               key=lambda c: (pieces(free - set(c)), pieces(c), c))


def best_clique(free: set[int], n: int, peers: dict[int, frozenset[int]]) -> tuple | None:
    cliques = [c for c in combinations(sorted(free), n) if is_clique(c, peers)]
    if not cliques:
        return None
    return min(cliques, key=lambda c: (pieces(free - set(c)), c))


# a node of up to 8 GPUs, some free, with NVLinks reported by one side or both
small_nodes = st.integers(2, 8).flatmap(
    lambda size: st.tuples(
        st.just(size),
        st.sets(st.integers(0, size - 1), min_size=1),
        st.sets(st.tuples(st.integers(0, size - 1), st.integers(0, size - 1))),
        st.integers(1, size),
    )
)


def peers_of(size: int, links: set[tuple[int, int]]) -> dict[int, frozenset[int]]:
    out: dict[int, set[int]] = {i: set() for i in range(size)}
    for a, b in links:
        if a != b:
            out[a].add(b)  # one-sided: b may not list a
    # a device without links may be left out of the mapping altogether
    return {i: frozenset(s) for i, s in out.items() if s}


# ------------------------------------------------------------------ small nodes


@given(free=st.sets(st.integers(0, 11), max_size=12), n=st.integers(0, 12))
def test_plain_rule_is_the_documented_order(free: set[int], n: int) -> None:
    got = pick_plain(free, n)
    if n <= 0:
        assert got == ()
    elif len(free) < n:
        assert got is None
    else:
        assert got == best_plain(free, n)


@given(node=small_nodes, topology=st.sampled_from(list(Topology)))
def test_pick_on_a_small_node(node: tuple, topology: Topology) -> None:
    size, free, links, n = node
    peers = peers_of(size, links)
    p = pick_devices(free, n, topology=topology, nvlink_peers=peers, topology_known=True)
    if len(free) < n:
        assert p == Pick(None, f"{len(free)} free GPU(s), needs {n}") and not p.ok
        return
    clique = best_clique(free, n, peers)
    if topology is Topology.NONE or n == 1:
        assert p.devices == best_plain(free, n)
    elif clique is not None:
        assert p.devices == clique
    elif topology is Topology.PREFERRED:
        assert p.devices == best_plain(free, n)
    else:
        assert p == Pick(None, f"no NVLink-connected set of {n} free GPUs")


@given(node=small_nodes)
def test_required_fails_only_when_no_linked_set_is_free(node: tuple) -> None:
    size, free, links, n = node
    peers = peers_of(size, links)
    p = pick_devices(free, n, topology=Topology.REQUIRED, nvlink_peers=peers, topology_known=True)
    if len(free) >= n and n > 1 and best_clique(free, n, peers) is None:
        assert p == Pick(None, f"no NVLink-connected set of {n} free GPUs")
    elif len(free) >= n:
        assert p.ok and p.devices is not None and is_clique(p.devices, peers)


@pytest.mark.parametrize("topology", [Topology.PREFERRED, Topology.REQUIRED])
def test_unknown_topology(topology: Topology) -> None:
    full = {i: frozenset(range(4)) - {i} for i in range(4)}
    unknown = pick_devices({0, 1, 3}, 2, topology=topology, nvlink_peers=full,
                           topology_known=False)
    no_peers = pick_devices({0, 1, 3}, 2, topology=topology, topology_known=True)
    not_said = pick_devices({0, 1, 3}, 2, topology=topology, nvlink_peers=full)
    for p in (unknown, no_peers, not_said):
        if topology is Topology.REQUIRED:
            assert p == Pick(None, "NVLink topology unknown (no GPUNode report)")
        else:
            assert p == Pick((0, 1))


def test_a_single_gpu_needs_no_link() -> None:
    p = pick_devices({2, 3}, 1, topology=Topology.REQUIRED, nvlink_peers={},
                     topology_known=True)
    assert p == Pick((2,))


def test_zero_gpus() -> None:
    assert pick_devices({0, 1}, 0) == Pick(())
    assert pick_devices(set(), 0) == Pick(())


def test_runs_and_fragments() -> None:
    assert runs([5, 0, 1, 3, 4, 9]) == [[0, 1], [3, 4, 5], [9]]
    assert runs([]) == []
    assert fragments({0, 2, 4}) == 3 and fragments({1, 2, 3}) == 1 and fragments(()) == 0


@given(free=st.sets(st.integers(0, 15), max_size=16), data=st.data())
def test_fragments_counts_the_runs_and_what_a_choice_leaves(free: set[int],
                                                            data: st.DataObject) -> None:
    assert fragments(free) == pieces(free) == fragments(tuple(sorted(free)))
    chosen = tuple(sorted(data.draw(st.sets(st.sampled_from(sorted(free)))) if free else ()))
    assert fragments_left(free, fragments(free), chosen) == pieces(free - set(chosen))


# ------------------------------------------------------- large nodes (greedy regime)


def islands(*groups: range) -> dict[int, frozenset[int]]:
    peers: dict[int, frozenset[int]] = {}
    for g in groups:
        for i in g:
            peers[i] = frozenset(g) - {i}
    return peers


def test_the_greedy_regime_is_where_the_picker_says() -> None:
    from math import comb

    assert comb(16, 8) > EXHAUSTIVE_LIMIT >= comb(8, 4)
    assert comb(24, 4) > EXHAUSTIVE_LIMIT


def test_large_node_required_takes_a_whole_nvlink_island() -> None:
    peers = islands(range(0, 8), range(8, 16))  # two 8-GPU NVSwitch islands
    p = pick_devices(range(16), 8, topology=Topology.REQUIRED, nvlink_peers=peers,
                     topology_known=True)
    assert p == Pick(tuple(range(8)))
    # one GPU of the first island held: only the second island is whole
    p = pick_devices(set(range(16)) - {3}, 8, topology=Topology.REQUIRED,
                     nvlink_peers=peers, topology_known=True)
    assert p == Pick(tuple(range(8, 16)))
    # one held in each: no connected eight
    p = pick_devices(set(range(16)) - {3, 12}, 8, topology=Topology.REQUIRED,
                     nvlink_peers=peers, topology_known=True)
    assert p == Pick(None, "no NVLink-connected set of 8 free GPUs")
    pref = pick_devices(set(range(16)) - {3, 12}, 8, topology=Topology.PREFERRED,
                        nvlink_peers=peers, topology_known=True)
    assert pref.devices == pick_plain(set(range(16)) - {3, 12}, 8)


@pytest.mark.parametrize("side", ["higher", "lower"])
def test_large_node_links_reported_by_one_side_only(side: str) -> None:
    # each GPU lists only its higher-numbered (or only its lower-numbered) island peers
    def listed(i: int, j: int) -> bool:
        return j > i if side == "higher" else j < i

    peers = {i: frozenset(j for j in range(8 * (i // 8), 8 * (i // 8) + 8) if listed(i, j))
             for i in range(16)}
    p = pick_devices(set(range(16)) - {0}, 8, topology=Topology.REQUIRED,
                     nvlink_peers=peers, topology_known=True)
    assert p == Pick(tuple(range(8, 16)))


def test_large_node_picks_the_island_leaving_least_fragmentation() -> None:
    peers = islands(range(0, 6), range(6, 12), range(12, 18), range(18, 24))
    del peers[0], peers[7]  # held, and their links not reported
    free = set(range(24)) - {0, 7}  # islands 1 and 2 broken; 3 and 4 whole
    p = pick_devices(free, 6, topology=Topology.REQUIRED, nvlink_peers=peers,
                     topology_known=True)
    assert p.devices == tuple(range(18, 24))  # taking the last island keeps the rest in runs
    assert p.devices is not None and is_clique(p.devices, peers)


@given(
    held=st.sets(st.integers(0, 15), max_size=8),
    n=st.integers(7, 9),
    one_sided=st.booleans(),
)
def test_large_node_greedy_picks_are_valid(held: set[int], n: int, one_sided: bool) -> None:
    peers = islands(range(0, 8), range(8, 16))
    if one_sided:
        peers = {i: frozenset(j for j in ps if j > i) for i, ps in peers.items()}
    free = set(range(16)) - held
    p = pick_devices(free, n, topology=Topology.REQUIRED, nvlink_peers=peers,
                     topology_known=True)
    whole = [g for g in (range(0, 8), range(8, 16)) if not held & set(g)]
    if p.ok:
        assert p.devices is not None and len(p.devices) == n
        assert set(p.devices) <= free and is_clique(p.devices, peers)
    else:
        assert len(free) < n or p.reason == f"no NVLink-connected set of {n} free GPUs"
    if n <= 8 and any(len(set(g) & free) >= n for g in (range(0, 8), range(8, 16))):
        assert p.ok  # an island with n free GPUs is always found
    if n == 8 and whole:
        assert p.devices == tuple(whole[0])  # the lowest whole island


@pytest.mark.parametrize(
    ("free", "n", "expected"),
    [
        # runs 0..9, 12..15, 20..23: the smallest run that fits, the lowest of equals
        (set(range(10)) | set(range(12, 16)) | set(range(20, 24)), 4, (12, 13, 14, 15)),
        (set(range(10)) | set(range(12, 16)) | set(range(20, 24)), 5, (0, 1, 2, 3, 4)),
        (set(range(10)) | set(range(12, 17)) | set(range(20, 24)), 5, (12, 13, 14, 15, 16)),
        # no run fits: the lowest free indices
        ({0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26}, 5, (0, 2, 4, 6, 8)),
    ],
)
def test_large_node_plain_rule(free: set[int], n: int, expected: tuple[int, ...]) -> None:
    assert pick_plain(free, n) == expected
    assert pick_devices(free, n) == Pick(expected)


def test_large_node_with_a_gpu_that_reports_no_links() -> None:
    peers = islands(range(0, 8), range(8, 16))  # GPU 16 has no NVLink: not in the map
    for topology in (Topology.REQUIRED, Topology.PREFERRED):
        p = pick_devices(set(range(17)) - {0}, 8, topology=topology, nvlink_peers=peers,
                         topology_known=True)
        assert p == Pick(tuple(range(8, 16)))
