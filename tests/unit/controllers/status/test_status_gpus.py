"""docs/api.md's ``status.gpus``: the devices the placements hold. On its own seed
example (5 replicas x 1 GPU, replicas 3 and 4 both on node4:3) that is 7, not 5 x 1
and not the 8 devices the map's lines name one by one."""

from __future__ import annotations

from pathlib import Path

from controllers.status.builder import gpus_held
from internal.scheduling.mapparser import parse_scheduling_map

ROOT = Path(__file__).resolve().parents[4]


def seed_map_from_the_docs() -> str:
    text = (ROOT / "docs" / "api.md").read_text()
    block = text.split("schedulingMap: |\n", 1)[1].split("```", 1)[0]
    return "\n".join(ln.strip() for ln in block.splitlines() if ln.strip())


def test_the_seed_example_holds_seven_devices() -> None:
    entries = parse_scheduling_map(seed_map_from_the_docs())
    placements = [{"index": i, "node": e.node, "devices": list(e.devices)}
                  for i, e in entries.items()]
    assert len(placements) == 5
    assert gpus_held(placements, {"gpusPerReplica": 1}) == 7
    assert "the distinct devices its placements name" in (ROOT / "docs" / "api.md").read_text()


def test_without_a_shared_device_replicas_times_gpus() -> None:
    placements = [{"index": 0, "node": "n1", "devices": [0, 1]},
                  {"index": 1, "node": "n2", "devices": [0, 1]},
                  {"index": 2, "node": "n3"}]  # device-plugin: counted
    assert gpus_held(placements, {"gpusPerReplica": 2}) == 6
