"""Two managers as real processes (``python main.py manager``) on one Lease: kill -9 of
the leader, SIGTERM of the leader, and a manager started with --leader-elect=false
beside a live leader. No timed assertions: the measured failover times are printed
(see docs/testing.md, "One controller at a time, and failover"). Its own module: one
controller at a time."""

from __future__ import annotations

import re
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hack.testenv import ControlPlane
from runtime import Client
from tests.integration.controller.conftest import NodeGroup, wait_phase, workload
from tests.integration.faults.conftest import device_holders, lease_holder
from tests.integration.manager_process import ManagerProcess
from tests.waiting import eventually

LEASE = "gpu-orchestrator-leader"


@pytest.fixture
def managers() -> Iterator[list[ManagerProcess]]:
    started: list[ManagerProcess] = []
    yield started
    for m in started:
        m.stop()


def spawn(cluster: ControlPlane, namespace: str, tmp_path: Path, started: list,
          name: str, *flags: str) -> ManagerProcess:
    m = ManagerProcess(cluster, namespace, LEASE, tmp_path, name, *flags)
    started.append(m)
    return m.start()


def place(admin: Client, namespace: str, group: NodeGroup, name: str) -> None:
    admin.create(workload(name, namespace, nodeSelector=group.selector))
    wait_phase(admin, namespace, name, "Running", timeout=120)


def leader_and_standby(installed: ControlPlane, admin: Client, namespace: str,
                       tmp_path: Path, managers: list) -> tuple[ManagerProcess, ManagerProcess]:
    a = spawn(installed, namespace, tmp_path, managers, "a")
    eventually(lambda: lease_holder(admin, namespace, LEASE) == a.identity, timeout=60,
               what="a leads")
    b = spawn(installed, namespace, tmp_path, managers, "b")
    eventually(lambda: b.probe("/readyz")[0] == 200, timeout=60, what="b synced, standing by")
    assert lease_holder(admin, namespace, LEASE) == a.identity
    return a, b


def test_kill_9_of_the_leader_hands_over_and_nothing_is_given_twice(
        installed: ControlPlane, admin: Client, namespace: str, group: NodeGroup,
        tmp_path: Path, managers: list) -> None:
    group.add(2, gpus=4)
    a, b = leader_and_standby(installed, admin, namespace, tmp_path, managers)
    place(admin, namespace, group, "one")

    t0 = time.monotonic()
    a.signal(signal.SIGKILL)
    a.wait()
    eventually(lambda: lease_holder(admin, namespace, LEASE) == b.identity, timeout=120,
               interval=0.05, what="b takes over")
    print(f"failover after kill -9: {time.monotonic() - t0:.2f}s "
          "(lease 6s, renew 4s, retry 1s)", file=sys.stderr)
    place(admin, namespace, group, "two")
    held = device_holders(admin, namespace, ["one", "two"])
    assert len(held) == len(set(held)) == 2


def test_sigterm_of_the_leader_releases_the_lease(
        installed: ControlPlane, admin: Client, namespace: str, group: NodeGroup,
        tmp_path: Path, managers: list) -> None:
    group.add(2, gpus=4)
    a, b = leader_and_standby(installed, admin, namespace, tmp_path, managers)

    t0 = time.monotonic()
    a.signal(signal.SIGTERM)
    assert a.wait() == 0
    # By the time it has exited, the Lease no longer names it: released, not left to expire.
    assert lease_holder(admin, namespace, LEASE) in ("", b.identity)
    assert a.logged("leaderelection.released")
    eventually(lambda: lease_holder(admin, namespace, LEASE) == b.identity, timeout=120,
               interval=0.05, what="b takes over")
    print(f"failover after SIGTERM: {time.monotonic() - t0:.2f}s "
          "(lease 6s, renew 4s, retry 1s)", file=sys.stderr)
    place(admin, namespace, group, "after-sigterm")


def test_a_manager_without_leader_election_places_nothing_while_a_leader_is_live(
        installed: ControlPlane, admin: Client, namespace: str, group: NodeGroup,
        tmp_path: Path, managers: list) -> None:
    """Issue 17's session: a second controller beside the first, then 6 one-GPU
    workloads. Only the leader places; the other says why, on /readyz and in its log."""
    group.add(2, gpus=4)
    a = spawn(installed, namespace, tmp_path, managers, "a")
    eventually(lambda: lease_holder(admin, namespace, LEASE) == a.identity, timeout=60,
               what="a leads")
    b = spawn(installed, namespace, tmp_path, managers, "b", "--leader-elect=false")

    def refusing() -> str | None:
        code, body = b.probe("/readyz")
        return body if code == 500 and "leader-election failed" in body else None

    body = eventually(refusing, timeout=60, what="b refuses")
    assert f"another manager ({a.identity}) leads lease {namespace}/{LEASE}" in body
    refusing = b.logged("manager.refusing")
    assert refusing is not None and refusing["leader"] == a.identity

    names = [f"w{i}" for i in range(6)]
    for n in names:
        admin.create(workload(n, namespace, nodeSelector=group.selector))
    for n in names:
        wait_phase(admin, namespace, n, "Running", timeout=120)
    held = device_holders(admin, namespace, names)
    assert len(held) == len(set(held)) == 6
    # b sent no write at all, and never started a controller.
    writes = re.findall(r'rest_client_requests_total\{[^}]*method="(POST|PUT|PATCH|DELETE)"'
                        r'[^}]*\} ([0-9.]+)', b.metrics())
    assert [w for w in writes if float(w[1]) > 0] == []
    assert b.logged("manager.controllers_started") is None

    # The leader leaves: b is alone now, and places.
    a.signal(signal.SIGTERM)
    assert a.wait() == 0
    eventually(lambda: b.probe("/readyz")[0] == 200, timeout=60, what="b ready once alone")
    place(admin, namespace, group, "w-after")
