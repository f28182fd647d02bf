"""A pod-group test module's two fixtures: the real peer controllers it needs,
running for the module (``peers``), and the manager with the pod binding, started
once their kinds are served (``binder``). ``peers, binder = peer_fixtures(LWS)``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hack.testenv import ControlPlane
from tests.integration.controller.conftest import Running
from tests.integration.podgroups.controllers import Kind, PeerController


def peer_fixtures(*kinds: Kind) -> tuple[Callable[..., Any], Callable[..., Any]]:
    @pytest.fixture(scope="module")
    def peers(installed: ControlPlane) -> Iterator[None]:
        runs = [PeerController(installed, kind).start() for kind in kinds]
        yield
        for run in runs:
            run.stop()

    @pytest.fixture(scope="module")
    def binder(installed: ControlPlane, peers: None) -> Iterator[Running]:
        run = Running(installed, pod_binding=True).start()
        yield run
        run.stop()

    return peers, binder
