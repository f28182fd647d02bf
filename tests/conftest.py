"""Shared fixtures. Integration tests get ``cluster``: one real local control plane
(etcd, kube-apiserver, kube-controller-manager, kwok with node1..node4 x 4 GPUs) for
the whole session, stopped by PID at the end, also on failure or SIGTERM."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from hack.testenv import ControlPlane, signals_stop

ROOT = Path(__file__).resolve().parent.parent

# Background threads (informers, workers) log outside any test's capture: keep the
# run's output to warnings and errors. GPU_ORCH_TEST_LOG=debug shows everything.
structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(
    getattr(logging, os.environ.get("GPU_ORCH_TEST_LOG", "warning").upper())))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.fspath)).relative_to(ROOT / "tests").parts
        if parts and parts[0] in ("integration", "e2e"):
            item.add_marker(parts[0])


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    workdir = tmp_path_factory.mktemp("testenv")
    # A deleted pod runs for its grace period, at most 5 s here (kwok stage): tests
    # see terminating pods hold their GPUs without waiting the default 30 s.
    cp = ControlPlane(workdir, nodes=int(os.environ.get("NODES") or 4),
                      gpus=int(os.environ.get("GPUS") or 4),
                      grace_cap=int(os.environ.get("TESTENV_GRACE_CAP") or 5))
    with signals_stop():
        cp.start()
        try:
            yield cp
        finally:
            cp.stop()


@pytest.fixture(autouse=True)
def _control_plane_caught_up(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test that restarted kube-apiserver, waits until kube-controller-manager
    and kwok act on new objects again, so the next test does not meet their backoff."""
    cp = request.getfixturevalue("cluster") if "cluster" in request.fixturenames else None
    yield
    if cp is not None and cp.restarted:
        cp.caught_up()


@pytest.fixture
def namespace(cluster: ControlPlane) -> Iterator[str]:
    """A fresh namespace for one test, deleted afterwards (without waiting)."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    code, body = cluster.api("POST", "/api/v1/namespaces",
                             {"apiVersion": "v1", "kind": "Namespace",
                              "metadata": {"name": name}})
    assert code == 201, body
    yield name
    cluster.api("DELETE", f"/api/v1/namespaces/{name}")
