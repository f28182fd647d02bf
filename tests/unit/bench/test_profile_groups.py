"""The controller profile's grouped summary (bench/profile.py): each busy sample in
one thread role, found by a marker anywhere on its stack, and in every cross-cutting
cost it holds; waits left out."""

from __future__ import annotations

from pathlib import Path

from bench.profile import grouped

BASE = "Thread._bootstrap (threading.py:1002);Thread.run (threading.py:982)"
FOLDED = "\n".join([
    # the placement state's handler, reached through a watch: the state, not the watch
    f"{BASE};Reflector.run (runtime/reflector.py:120);PlacementState.apply_event "
    "(controllers/placement/state.py:273);DeviceHoldings._apply (internal/x.py:1) 3",
    # a worker's request: the reconcile's, and the HTTP client's
    f"{BASE};Controller._worker (runtime/controller.py:133);Client.request "
    "(runtime/client.py:240);SSLSocket.send (ssl.py:1243) 4",
    # the status writer waking a worker
    f"{BASE};StatusWriter._run (controllers/status/writer.py:308);Condition.notify "
    "(threading.py:382) 1",
    # a decision
    f"{BASE};Controller._worker (runtime/controller.py:133);Scheduler.schedule "
    "(internal/scheduling/scheduler.py:41) 2",
    # waiting: not counted
    f"{BASE};Controller._worker (runtime/controller.py:133);Condition.wait "
    "(threading.py:320) 50",
    "garbage line",
])


def test_roles_and_costs(tmp_path: Path) -> None:
    f = tmp_path / "controller-burst.folded"
    f.write_text(FOLDED)
    g = grouped(f)
    roles, costs = g["roles"], g["costs"]
    assert roles["placement state: watch events applied (ledger, holdings, usage)"] == 30.0
    assert roles["reconcile: the rest (child create, status built, requests)"] == 40.0
    assert roles["status writer"] == 10.0
    assert roles["reconcile: the placement decision"] == 20.0
    assert roles["other"] == 0.0
    assert sum(roles.values()) == 100.0
    assert costs["HTTP client (`Client.request`: urllib3, http.client, TLS)"] == 40.0
    assert costs["waking a thread (`Condition.notify`)"] == 10.0
