"""The placement state has one door: nothing outside its modules touches its lock,
its ledger or its snapshot (docs/architecture.md, "The controllers"); readers
get ``view()``, the seed path ``seeds`` (``book_seed`` and its kin), the claims
``release_claim_unless``.
A grep of the tree says so, so a new shortcut fails here rather than in a race."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
#: the placement state's own modules
OWN = {"controllers/placement/cache.py", "controllers/placement/state.py",
       "controllers/placement/events.py", "controllers/placement/seeds.py"}
#: the code that runs (tests may set scenes through the private fields)
TREES = ("controllers", "internal", "runtime", "api", "main.py")

#: ``state.lock``, ``self.state().ledger``, ``ensure_state()._snapshot``, ...
STATE_FIELD = re.compile(r"\w*state\w*(\(\))?\.(_?lock|_?ledger|_?snapshot)\b")
#: any other object's private lock, ledger or snapshot (``x._ledger``, not ``self._ledger``)
PRIVATE_FIELD = re.compile(r"(?<!\bself)\._(lock|ledger|snapshot)\b")


def _sources() -> list[Path]:
    out: list[Path] = []
    for tree in TREES:
        path = ROOT / tree
        out += [path] if path.is_file() else sorted(path.rglob("*.py"))
    return out


def test_nothing_outside_the_placement_state_touches_its_lock_ledger_or_snapshot() -> None:
    found = []
    for path in _sources():
        rel = path.relative_to(ROOT).as_posix()
        if rel in OWN:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if STATE_FIELD.search(line) or PRIVATE_FIELD.search(line):
                found.append(f"{rel}:{n}: {line.strip()}")
    assert not found, "reaches into the placement state:\n" + "\n".join(found)


def test_the_grep_finds_what_it_looks_for() -> None:
    """The patterns match the shortcuts this test forbids (else it passes on nothing)."""
    for line in ("with state.lock:", "self.state().ledger.assume(k, p)",
                 "self.reconciler.ensure_state().lock", "info = state.snapshot.get(n)",
                 "led = other._ledger"):
        assert STATE_FIELD.search(line) or PRIVATE_FIELD.search(line), line
    for line in ("with self._lock:", "h.ledger.free_count(n)", "self._snapshot.get(n)"):
        assert not (STATE_FIELD.search(line) or PRIVATE_FIELD.search(line)), line


def test_the_view_reads_the_current_ledger_and_changes_nothing() -> None:
    """``state.view()`` answers from the ledger the state holds now (a rebuild
    replaces it) and offers none of the ledger's changes."""
    from api.v1alpha1.types import DeviceExposure
    from controllers.placement.state import PlacementState
    from tests.unit.scheduling.helpers import node

    state = PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES)
    view = state.view()
    assert view.node("node1") is None
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u-p",
                        "annotations": {"gpu.orchestrator.dev/devices": "1"}},
           "spec": {"nodeName": "node1", "containers": [{"name": "c", "image": "x"}]},
           "status": {"phase": "Running"}}
    state.rebuild(lambda: ([node("node1", 4)], [], [], [pod]))
    assert view.node("node1") is not None  # taken before the rebuild, reads after it
    assert view.holder("node1", 1) == "ns/p" and view.free_count("node1") == 3
    for change in ("assume", "commit", "forget", "set_pod", "remove_pod", "refuse_mig"):
        try:
            getattr(view, change)
        except AttributeError:
            continue
        raise AssertionError(f"the view offers the ledger's {change}")


def test_a_booking_handed_out_is_a_copy_the_ledger_does_not_share() -> None:
    """``booking()`` is read after the lock is released: a caller that changes what it
    got changes nothing in the ledger (it got the live allocation before)."""
    from api.v1alpha1.types import DeviceExposure
    from controllers.placement.state import PlacementState
    from tests.unit.controllers.placement.test_placement_state import gw
    from tests.unit.scheduling.helpers import node

    state = PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES)
    state.rebuild(lambda: ([node("node1", 4)], [], [], []))
    assert state.decide(gw("w", gpusPerReplica=2)).ok
    got = state.booking("ns/w")
    assert got is not None
    got.overlap = frozenset({"someone"})
    got.committed = True
    got.counted["node1"] = 4
    again = state.booking("ns/w")
    assert again is not None and not again.overlap and not again.committed
    assert again.counted == {} and not state.is_committed("ns/w")


def _state_names() -> set[str]:
    from api.v1alpha1.types import DeviceExposure
    from controllers.placement.state import PlacementState
    state = PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES)
    return {n for n in {*dir(PlacementState), *vars(state)} if not n.startswith("_")}


def test_code_outside_the_placement_package_uses_only_the_door() -> None:
    """Every public name of the placement state used outside
    ``controllers/placement/`` is listed in ``door.DOOR`` (by its client); a new
    shortcut fails here. A name shared with another object (``forget`` of the own
    writes) counts as used: the list errs wide, never narrow."""
    from controllers.placement.door import DOOR
    door = frozenset().union(*DOOR.values())
    names = _state_names()
    outside = []
    for path in _sources():
        rel = path.relative_to(ROOT).as_posix()
        # internal/ never imports controllers/ (its ledger and snapshot have names
        # of their own, remove_holder, nodes): the state's callers are controllers
        if rel.startswith(("controllers/placement/", "internal/", "api/", "runtime/")):
            continue
        text = path.read_text()
        outside += [f"{rel}: .{n}" for n in sorted(names - door)
                    if re.search(rf"\.{n}\b", text)]
    assert not outside, "uses the placement state past its door:\n" + "\n".join(outside)


def test_the_door_names_only_what_the_state_has() -> None:
    from controllers.placement.door import DOOR
    door = frozenset().union(*DOOR.values())
    assert door <= _state_names(), sorted(door - _state_names())


def test_a_pass_view_reads_its_passs_ledger_and_changes_nothing() -> None:
    """The seed path's view of a pass outside the lock (``seeds.PassView``) answers the
    same reads from the ledger its pass began on, and refuses the ledger's changes
    with the view's message."""
    import pytest

    from api.v1alpha1.types import DeviceExposure
    from controllers.placement.seeds import PassView
    from controllers.placement.state import PlacementState
    from tests.unit.scheduling.helpers import node

    state = PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES)
    state.rebuild(lambda: ([node("node1", 4)], [], [], []))
    sched, _ = state.mark_pass()
    view = PassView(state, sched)
    assert view.free_count("node1") == 4 and view.node("node1") is not None
    with pytest.raises(AttributeError, match="reads the ledger only; 'assume'"):
        view.assume  # noqa: B018
