"""The composition root (controllers/setup.py): every controller is handed the
same single placement state, own writes, status writer and informers; the two real
cycles are closed before the manager starts; main.py reaches through no reconciler,
and the wiring dispatches by no method name and binds no lambda over later names.

The manager is a real one that is never started (no server is dialled): the API's
discovery is answered by a stand-in that serves every kind."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from controllers.dra.claims import DraOptions
from controllers.later import Later
from controllers.podbinding.controller import PodBindingOptions
from controllers.setup import ControllerOptions, Controllers, setup_controllers
from runtime import Client, Manager, Options, Request, RestConfig

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def mgr(monkeypatch: pytest.MonkeyPatch) -> Manager:
    # every API is served (GPUQueues, resource.k8s.io): discovery never dials
    monkeypatch.setattr(Client, "resource_for", lambda self, api_version, kind: object())
    return Manager(RestConfig(host="https://127.0.0.1:1"),
                   Options(metrics_bind_address="0", health_probe_bind_address="0"))


def build(mgr: Manager) -> Controllers:
    return setup_controllers(mgr, ControllerOptions(evict_conflicting_pods=True,
                                                    dra=DraOptions()),
                             pod_binding=PodBindingOptions())


def test_every_controller_gets_the_one_placement_state_own_writes_and_status_writer(
        mgr: Manager) -> None:
    built = build(mgr)
    shared = built.shared
    assert built.binder is not None and built.claims is not None
    assert built.evictor is not None and shared.status_writer is not None
    # one placement state source, in every placing controller
    assert built.reconciler.states is shared.states
    assert built.binder.states is shared.states
    assert built.claims.states is shared.states
    assert shared.claims is not None and shared.claims.states is shared.states
    assert built.reconciler.claims is shared.claims
    # one OwnWrites: the reconciler's children and commits, the status writer's
    # writes, the pod binding's Bindings, the state's adoption
    assert built.reconciler.own_writes is shared.own_writes
    assert built.binder.own_writes is shared.own_writes
    assert shared.status_writer.own_writes is shared.own_writes
    # one status writer, one recorder
    assert built.reconciler.status_writer is shared.status_writer
    assert built.reconciler.recorder is shared.recorder
    assert built.evictor.recorder is shared.recorder
    # the state they all get is built once, with the seed book and the queue book
    assert not built.evictor.active()  # nothing read before the first state
    state = shared.states.get()
    assert state is shared.states.get() and built.reconciler.ensure_state() is state
    assert state.own_writes is shared.own_writes
    assert state.queues is shared.queues and shared.queues is not None
    assert list(state.pod_books) == [built.binder.book]
    assert built.evictor.active()  # the evictor reads that same state


def test_one_informer_per_kind_with_every_index(mgr: Manager) -> None:
    built = build(mgr)
    inf = built.shared.informers
    assert mgr.informer_for("v1", "Pod") is inf.pods
    assert built.reconciler.pods is inf.pods.indexer
    assert built.binder is not None and built.binder.pods is inf.pods.indexer
    assert built.claims is not None and built.claims.pods is inf.pods.indexer
    assert built.reconciler.workloads is inf.workloads.indexer


def test_the_cycles_are_closed_before_the_manager_starts(mgr: Manager) -> None:
    """The state's wake-ups reach the GPUWorkload controller's queue, and the state is
    made with the queue book (each side of a cycle set by the root)."""
    built = build(mgr)
    shared = built.shared
    assert shared.workload_queue.controller.get() is built.gpuworkload
    shared.workload_queue.add_keys(["team/a"])
    assert built.gpuworkload.queue.get(timeout=1) == (Request("team", "a"), False)
    # done and shut down: a queue left with an item in flight reports its unfinished
    # work on the process's /metrics for the rest of the session
    built.gpuworkload.queue.done(Request("team", "a"))
    built.gpuworkload.queue.shut_down()
    assert shared.states.get().queues is shared.queues


def test_a_later_is_set_once_and_never_read_unset() -> None:
    later: Later[int | None] = Later("the answer")
    assert later.peek() is None and not later.is_set
    with pytest.raises(RuntimeError, match="the answer is used before it was made"):
        later.get()
    assert later.set(None) is None and later.is_set and later.get() is None
    with pytest.raises(RuntimeError, match="already set"):
        later.set(1)


# ------------------------------------------------------------------ the source


#: what a reconciler lends: its placement state, its own writes, its parts
REACHES = {"state", "states", "ensure_state", "own_writes", "pod_books", "reconciler",
           "binder", "shared"}


def reaches_through(source: str) -> list[str]:
    """Every place ``source`` names a reconciler or reads a part out of what a
    setup returned (``reconciler.states``, ``built.shared.own_writes``)."""
    found = []
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.Name) and "reconciler" in n.id.lower():
            found.append(f"line {n.lineno}: the name {n.id}")
        elif isinstance(n, ast.Attribute) and n.attr in REACHES:
            found.append(f"line {n.lineno}: .{n.attr}")
    return found


def test_main_reaches_through_no_reconciler() -> None:
    found = reaches_through((ROOT / "main.py").read_text())
    assert not found, "main.py reaches through a reconciler:\n" + "\n".join(found)


def test_the_check_finds_a_reach_through() -> None:
    assert reaches_through("_, reconciler = setup(mgr)\nuse(reconciler.states)")
    assert reaches_through("use(built.shared.own_writes)")
    assert not reaches_through("setup_controllers(mgr, opts)")


#: the wiring: made in order, handed over, no name looked up at run time
WIRING = ("controllers/setup.py", "controllers/informers.py",
          "controllers/gpuworkload/setup.py")


def late_binding(source: str) -> list[str]:
    """Lambdas (closures over names the wiring assigns later) and ``getattr`` with
    a computed name (dispatch by method name) in ``source``."""
    found = []
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.Lambda):
            found.append(f"line {n.lineno}: a lambda")
        elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
              and n.func.id == "getattr" and len(n.args) > 1
              and not isinstance(n.args[1], ast.Constant)):
            found.append(f"line {n.lineno}: getattr by a computed name")
    return found


@pytest.mark.parametrize("path", WIRING)
def test_the_wiring_binds_nothing_late(path: str) -> None:
    found = late_binding((ROOT / path).read_text())
    assert not found, f"{path} binds late:\n" + "\n".join(found)


def test_the_late_binding_check_finds_both() -> None:
    assert len(late_binding("f = lambda: ctrl\ng = getattr(events, name)")) == 2
    assert not late_binding("g = getattr(mgr, 'events_client', None)")
