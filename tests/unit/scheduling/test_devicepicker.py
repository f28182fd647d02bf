import pytest

from api.v1alpha1.types import Topology
from internal.scheduling.devicepicker import fragments, pick_devices, pick_plain


@pytest.mark.parametrize(
    ("free", "n", "expected"),
    [
        ({0, 1, 2, 3}, 2, (0, 1)),
        ({0, 2, 3}, 2, (2, 3)),  # contiguous run, not 0+2
        ({0, 1, 3, 4, 5}, 2, (0, 1)),  # smallest fitting run keeps 3,4,5 whole
        ({0, 2, 3}, 1, (0,)),  # a lone device goes first
        ({1, 3, 5}, 2, (1, 3)),  # nothing contiguous: lowest indices
        ({0, 1, 2, 3}, 4, (0, 1, 2, 3)),
        ({0, 1}, 3, None),
    ],
)
def test_plain_rule(free: set[int], n: int, expected: tuple[int, ...] | None) -> None:
    assert pick_plain(free, n) == expected


# two NVLink islands: {0,1} and {2,3}; 1-2 not linked
ISLANDS = {0: frozenset({1}), 1: frozenset({0}), 2: frozenset({3}), 3: frozenset({2})}


def test_nvlink_set_first_when_known() -> None:
    # free 1,2,3: plain rule would take 1,2 (contiguous) which are not linked
    p = pick_devices(
        {1, 2, 3}, 2, topology=Topology.PREFERRED, nvlink_peers=ISLANDS, topology_known=True
    )
    assert p.devices == (2, 3)


def test_required_fails_without_linked_set() -> None:
    p = pick_devices(
        {1, 2}, 2, topology=Topology.REQUIRED, nvlink_peers=ISLANDS, topology_known=True
    )
    assert p.devices is None and "NVLink" in p.reason


def test_preferred_falls_back() -> None:
    p = pick_devices(
        {1, 2}, 2, topology=Topology.PREFERRED, nvlink_peers=ISLANDS, topology_known=True
    )
    assert p.devices == (1, 2)


def test_required_needs_known_topology() -> None:
    p = pick_devices({0, 1}, 2, topology=Topology.REQUIRED, topology_known=False)
    assert p.devices is None and "unknown" in p.reason
    assert pick_devices({0, 1}, 1, topology=Topology.REQUIRED).devices == (0,)


def test_nvlink_choice_leaves_least_fragmentation() -> None:
    full = {i: frozenset(j for j in range(8) if j != i) for i in range(8)}
    p = pick_devices(
        {0, 2, 3, 4, 5}, 2, topology=Topology.REQUIRED, nvlink_peers=full, topology_known=True
    )
    assert p.devices is not None
    assert fragments({0, 2, 3, 4, 5} - set(p.devices)) == 1
    assert p.devices == (0, 2)  # keeps 3,4,5 whole
    assert pick_plain({0, 2, 3, 4, 5}, 2) == (0, 2)


def test_large_node_falls_back_to_runs() -> None:
    free = set(range(32)) - {5}
    assert pick_plain(free, 4) == (0, 1, 2, 3)


def test_not_enough() -> None:
    p = pick_devices({0}, 2)
    assert not p.ok and p.reason == "1 free GPU(s), needs 2"
