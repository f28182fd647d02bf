"""Choose device indices within one node.

- Topology known (the GPUNode reports NVLink peers) and topology Preferred or
  Required with more than one device: an NVLink-connected set (every pair linked),
  chosen by the rule below among such sets. Required fails when there is none;
  Preferred falls back to the plain rule.
- Plain rule: the set that leaves the remaining free indices in the fewest runs
  (least fragmented), then the set that is itself fewest runs (contiguous), then
  the lowest indices. Exhaustive while the number of sets is small (nodes of up
  to ~12 GPUs); beyond, the smallest contiguous run that fits (best fit), else the
  lowest free indices.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from itertools import combinations, pairwise
from math import comb

from api.v1alpha1.types import Topology

#: Above this many candidate sets the searches are greedy, not exhaustive.
EXHAUSTIVE_LIMIT = 2000


@dataclass(frozen=True, slots=True)
class Pick:
    devices: tuple[int, ...] | None
    reason: str = ""  # why not, when devices is None

    @property
    def ok(self) -> bool:
        return self.devices is not None


def runs(indices: Iterable[int]) -> list[list[int]]:
    """Maximal runs of consecutive indices, ascending."""
    out: list[list[int]] = []
    for i in sorted(indices):
        if out and out[-1][-1] == i - 1:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def fragments(indices: Iterable[int]) -> int:
    """How many maximal runs of consecutive indices (``len(runs(...))`` of distinct
    indices): each index whose predecessor is not among them starts one. No sort: a
    decision asks it of every combination of every node it visits."""
    s = indices if isinstance(indices, (set, frozenset)) else set(indices)
    return sum(1 for i in s if i - 1 not in s)


def fragments_left(free: AbstractSet[int], whole: int, chosen: tuple[int, ...]) -> int:
    """``fragments(free - chosen)`` for ``chosen`` out of ``free`` (``whole``:
    ``fragments(free)``), from ``chosen`` alone: a chosen index that started a run no
    longer does, and a free index right after a chosen one starts one now."""
    mine = set(chosen)
    return (whole - sum(1 for i in chosen if i - 1 not in free)
            + sum(1 for i in chosen if i + 1 in free and i + 1 not in mine))


def _runs_of_sorted(chosen: tuple[int, ...]) -> int:
    """``fragments(chosen)`` of ascending distinct indices."""
    return (1 + sum(1 for a, b in pairwise(chosen) if b != a + 1)) if chosen else 0


def _key(rest: set[int], whole: int, chosen: tuple[int, ...]) -> tuple[int, int, tuple[int, ...]]:
    return (fragments_left(rest, whole, chosen), _runs_of_sorted(chosen), chosen)


def pick_plain(free: Iterable[int], n: int) -> tuple[int, ...] | None:
    free_sorted = sorted(set(free))
    if n <= 0:
        return ()
    if len(free_sorted) < n:
        return None
    if comb(len(free_sorted), n) <= EXHAUSTIVE_LIMIT:
        rest = set(free_sorted)
        whole = fragments(rest)
        if n == 1:  # _key inlined for the usual replica: (fragments left, index)
            return (min((whole - (i - 1 not in rest) + (i + 1 in rest), i)
                        for i in free_sorted)[1],)
        return min(combinations(free_sorted, n), key=lambda c: _key(rest, whole, c))
    fitting = [r for r in runs(free_sorted) if len(r) >= n]
    if fitting:
        best = min(fitting, key=lambda r: (len(r), r[0]))
        return tuple(best[:n])
    return tuple(free_sorted[:n])


def _connected(devs: tuple[int, ...], peers: Mapping[int, frozenset[int]]) -> bool:
    return all(b in peers.get(a, ()) or a in peers.get(b, ()) for a, b in combinations(devs, 2))


def _cliques(free: list[int], n: int, peers: Mapping[int, frozenset[int]]) -> list[tuple[int, ...]]:
    if comb(len(free), n) <= EXHAUSTIVE_LIMIT:
        return [c for c in combinations(free, n) if _connected(c, peers)]
    # greedy: grow from each seed, lowest linked index first
    found = []
    for seed in free:
        group = [seed]
        for d in free:
            if d != seed and all(d in peers.get(g, ()) or g in peers.get(d, ()) for g in group):
                group.append(d)
                if len(group) == n:
                    found.append(tuple(sorted(group)))
                    break
    return found


def pick_devices(
    free: Iterable[int],
    n: int,
    *,
    topology: Topology = Topology.NONE,
    nvlink_peers: Mapping[int, frozenset[int]] | None = None,
    topology_known: bool = False,
) -> Pick:
    """Pick ``n`` devices out of ``free`` (host indices)."""
    free_sorted = sorted(set(free))
    if len(free_sorted) < n:
        return Pick(None, f"{len(free_sorted)} free GPU(s), needs {n}")
    wants_links = topology is not Topology.NONE and n > 1
    if wants_links:
        if not topology_known or nvlink_peers is None:
            if topology is Topology.REQUIRED:
                return Pick(None, "NVLink topology unknown (no GPUNode report)")
        else:
            cliques = _cliques(free_sorted, n, nvlink_peers)
            if cliques:
                rest = set(free_sorted)
                whole = fragments(rest)
                best = min(cliques, key=lambda c: (fragments_left(rest, whole, c), c))
                return Pick(tuple(best))
            if topology is Topology.REQUIRED:
                return Pick(None, f"no NVLink-connected set of {n} free GPUs")
    devs = pick_plain(free_sorted, n)
    if devs is None:  # pragma: no cover - guarded above
        return Pick(None, f"{len(free_sorted)} free GPU(s), needs {n}")
    return Pick(devs)
