"""Parser of the seed's scheduling map.

One replica per line, ``<index>=<node>:<dev>,<dev>``::

    0=node1:0,1
    1=node2:2
    2=node3:0,1,2
    3=node4:3
    4=node4:3

Blank lines and spaces around tokens are tolerated. Errors name the line number
(1-based) and its text. Several replicas of one workload may name the same device
(the seed puts replicas 3 and 4 both on node4:3); the ledger allows that sharing
within one workload only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from api.v1alpha1.types import MAP_NODE_PATTERN, MAX_DEVICE_INDEX

#: the CRD's own patterns (api/v1alpha1/types.py): a Node's name, a device index
_NODE_RE = re.compile(MAP_NODE_PATTERN)
_INT_RE = re.compile(r"[0-9]+")


@dataclass(frozen=True, slots=True)
class MapEntry:
    """One line of the map: replica ``index`` goes to ``node`` with host ``devices``."""

    index: int
    node: str
    devices: tuple[int, ...]
    line: int


class MapParseError(ValueError):
    """Bad map text. ``line`` is 1-based (0 when the problem is not one line)."""

    def __init__(self, message: str, line: int = 0, text: str = "") -> None:
        super().__init__(message)
        self.line = line
        self.text = text


def _err(lineno: int, raw: str, why: str) -> MapParseError:
    return MapParseError(f"line {lineno} {raw.strip()!r}: {why}", lineno, raw)


def parse_scheduling_map(text: str) -> dict[int, MapEntry]:
    """Parse map text into entries keyed by replica index (ascending).

    Raises MapParseError naming the offending line.
    """
    entries: dict[int, MapEntry] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.count("=") != 1:
            raise _err(lineno, raw, "expected '<index>=<node>:<dev>,<dev>'")
        idx_s, rest = (p.strip() for p in line.split("="))
        if not _INT_RE.fullmatch(idx_s):
            raise _err(lineno, raw, f"replica index {idx_s!r} is not a non-negative integer")
        if rest.count(":") != 1:
            raise _err(lineno, raw, "expected '<node>:<dev>,<dev>' after '='")
        node, devs_s = (p.strip() for p in rest.split(":"))
        if not node:
            raise _err(lineno, raw, "missing node name")
        if not _NODE_RE.fullmatch(node):
            raise _err(lineno, raw, f"node name {node!r} is not a valid DNS-1123 subdomain "
                                    "(a Node's name: lower case letters, digits, '-' and '.')")
        if not devs_s:
            raise _err(lineno, raw, "no device indices after ':'")
        devices: list[int] = []
        for tok in (t.strip() for t in devs_s.split(",")):
            if not _INT_RE.fullmatch(tok):
                raise _err(lineno, raw, f"device index {tok!r} is not a non-negative integer")
            if len(tok) > len(str(MAX_DEVICE_INDEX)) or int(tok) > MAX_DEVICE_INDEX:
                raise _err(lineno, raw, f"device index {tok} is above {MAX_DEVICE_INDEX}")
            d = int(tok)
            if d in devices:
                raise _err(lineno, raw, f"device {d} listed twice")
            devices.append(d)
        index = int(idx_s)
        if index in entries:
            raise _err(lineno, raw, f"replica {index} already mapped on line {entries[index].line}")
        entries[index] = MapEntry(index, node, tuple(devices), lineno)
    if not entries:
        raise MapParseError("scheduling map is empty")
    return dict(sorted(entries.items()))


def check_map_against(
    entries: Mapping[int, MapEntry],
    replicas: int,
    node_devices: Mapping[str, int] | None = None,
) -> list[str]:
    """Problems of a parsed map for a workload with ``replicas`` replicas.

    ``node_devices`` maps known node names to their GPU count; when given, missing
    nodes and device indices beyond a node's GPUs are reported too. Returns
    human-readable messages (empty when the map is usable).
    """
    problems: list[str] = []
    for e in entries.values():
        if e.index >= replicas:
            problems.append(f"line {e.line}: replica index {e.index} >= replicas ({replicas})")
    missing = [i for i in range(replicas) if i not in entries]
    if missing:
        problems.append("no map entry for replica(s) " + ", ".join(map(str, missing)))
    if node_devices is not None:
        for e in entries.values():
            if e.node not in node_devices:
                problems.append(f"line {e.line}: node {e.node!r} does not exist")
                continue
            count = node_devices[e.node]
            bad = [d for d in e.devices if d >= count]
            if bad:
                problems.append(
                    f"line {e.line}: device {', '.join(map(str, bad))} beyond node "
                    f"{e.node}'s {count} GPU(s)"
                )
    return problems


def format_scheduling_map(entries: Mapping[int, MapEntry]) -> str:
    """Inverse of parse_scheduling_map (canonical spacing)."""
    return "\n".join(
        f"{e.index}={e.node}:{','.join(map(str, e.devices))}" for e in entries.values()
    )
