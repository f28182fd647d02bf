"""The manager: owns the client, the shared informers, the controllers, leader election,
the metrics/health servers and graceful shutdown (controller-runtime's pkg/manager).

``Manager.start()`` blocks and returns an exit code: it starts the servers, starts the
informers and waits for their sync (``cache_sync_timeout``), then starts the controllers,
right away or once this process holds the leader Lease. Losing the Lease stops the
controllers and returns :data:`EXIT_LOST_LEASE`; the caller (main) passes it to
``sys.exit``. ``stop()`` (or SIGTERM/SIGINT when ``install_signal_handlers=True``) shuts
down within ``graceful_shutdown_timeout``; a second signal exits at once.
"""

from __future__ import annotations

import os
import signal
import socket
import ssl
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from runtime import metrics
from runtime.client import Client, RestConfig
from runtime.events import EventRecorder
from runtime.health import Checks, ping
from runtime.httpserver import Authorize, HTTPServer, parse_bind_address
from runtime.informer import SharedIndexInformer, SharedInformerFactory
from runtime.leaderelection import LeaderElector
from runtime.store import IndexFunc

log = structlog.get_logger("runtime.manager")

EXIT_OK = 0
EXIT_LOST_LEASE = 1
EXIT_CACHE_SYNC_TIMEOUT = 2


class Runnable(Protocol):
    def start(self) -> None: ...
    def stop(self, timeout: float = ...) -> Any: ...


@dataclass
class Options:
    namespace: str | None = None  # restrict the cache to one namespace
    metrics_bind_address: str = ":8080"  # "0" disables
    #: checks each /metrics request first (runtime.metrics_auth); None serves plainly
    metrics_authorize: Authorize | None = None
    metrics_tls: ssl.SSLContext | None = None  # HTTPS for /metrics (runtime.metrics_auth)
    health_probe_bind_address: str = ":8081"  # "0" disables
    leader_elect: bool = False
    leader_election_id: str = "controller-leader"
    leader_election_namespace: str | None = None  # default: $POD_NAMESPACE or "default"
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    leader_election_release_on_cancel: bool = True
    identity: str | None = None
    cache_sync_timeout: float = 120.0
    graceful_shutdown_timeout: float = 30.0
    resync_period: float = 0.0
    watch_timeout: tuple[float, float] = (300.0, 600.0)


class Manager:
    def __init__(self, config: RestConfig | Client, options: Options | None = None) -> None:
        self.options = options or Options()
        self.client = config if isinstance(config, Client) else Client(config)
        o = self.options
        self.cache = SharedInformerFactory(
            self.client,
            namespace=o.namespace,
            resync_period=o.resync_period,
            watch_timeout=o.watch_timeout,
        )
        self.identity = o.identity or f"{socket.gethostname()}_{uuid.uuid4()}"
        self.healthz = Checks()
        self.readyz = Checks()
        self.healthz.add("ping", ping)
        self._leader_runnables: list[Runnable] = []
        self._other_runnables: list[Runnable] = []
        self._recorders: dict[str, EventRecorder] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._leading_started = False
        self.elector: LeaderElector | None = None
        self._elector_thread: threading.Thread | None = None
        self.exit_code = EXIT_OK
        self.elected = threading.Event()  # set when controllers were started
        self.servers_started = threading.Event()
        self.metrics_server: HTTPServer | None = None
        self.health_server: HTTPServer | None = None
        self._signals = 0

    # ---------------------------------------------------------------- registry
    def informer_for(
        self, api_version: str, kind: str, indexers: dict[str, IndexFunc] | None = None
    ) -> SharedIndexInformer:
        return self.cache.informer_for(api_version, kind, indexers=indexers)

    def add(self, runnable: Runnable, need_leader_election: bool = True) -> None:
        """Add a runnable (a Controller, or anything with start()/stop(timeout))."""
        with self._lock:
            (self._leader_runnables if need_leader_election else self._other_runnables).append(
                runnable
            )
            started = (
                self._leading_started if need_leader_election else self.servers_started.is_set()
            )
        if started:
            runnable.start()

    def add_healthz_check(self, name: str, check: Any) -> None:
        self.healthz.add(name, check)

    def add_readyz_check(self, name: str, check: Any) -> None:
        self.readyz.add(name, check)

    def event_recorder(self, component: str) -> EventRecorder:
        with self._lock:
            rec = self._recorders.get(component)
            if rec is None:
                rec = self._recorders[component] = EventRecorder(self.client, component)
            return rec

    def is_leader(self) -> bool:
        return self.elector.is_leader() if self.elector else self.elected.is_set()

    @property
    def metrics_port(self) -> int | None:
        return self.metrics_server.port if self.metrics_server else None

    @property
    def health_port(self) -> int | None:
        return self.health_server.port if self.health_server else None

    # ---------------------------------------------------------------- lifecycle
    def stop(self) -> None:
        """Request a graceful shutdown (thread-safe; ``start`` returns after it)."""
        self._stop.set()

    def kill(self) -> None:
        """Simulate a crash: stop renewing the lease without releasing it, then stop."""
        if self.elector is not None:
            self.elector.abandon()
        self._stop.set()

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._signals += 1
        if self._signals > 1:
            log.error("manager.second_signal_exit", signal=signum)
            os._exit(1)
        log.info("manager.signal", signal=signum)
        self.stop()

    def _start_servers(self) -> None:
        o = self.options
        if parse_bind_address(o.metrics_bind_address) is not None:
            self.metrics_server = HTTPServer(
                o.metrics_bind_address,
                {
                    "/metrics": lambda q: (
                        200,
                        CONTENT_TYPE_LATEST,
                        generate_latest(metrics.registry),
                    )
                },
                name="metrics",
                authorize=o.metrics_authorize,
                tls=o.metrics_tls,
            )
            self.metrics_server.start()
        if parse_bind_address(o.health_probe_bind_address) is not None:
            self.health_server = HTTPServer(
                o.health_probe_bind_address,
                {"/healthz": self.healthz.handle, "/readyz": self.readyz.handle},
                name="health",
            )
            self.health_server.start()

    def _start_leader_runnables(self) -> None:
        with self._lock:
            self._leading_started = True
            runnables = list(self._leader_runnables)
        for r in runnables:
            r.start()
        self.elected.set()
        log.info("manager.controllers_started", count=len(runnables))

    def _stop_leader_runnables(self, timeout: float) -> None:
        with self._lock:
            runnables = list(self._leader_runnables) if self._leading_started else []
        deadline = time.monotonic() + timeout
        for r in runnables:
            r.stop(max(0.1, deadline - time.monotonic()))

    def _run_elector(self) -> None:
        assert self.elector is not None
        lost = self.elector.run()
        if lost:
            self.exit_code = EXIT_LOST_LEASE
            self._stop.set()

    def start(self, install_signal_handlers: bool = False) -> int:
        """Run until stopped; returns the process exit code."""
        o = self.options
        if install_signal_handlers:
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)
        self.readyz.add(
            "informers-synced", lambda: self.cache.has_synced() or "informers not synced"
        )
        self._start_servers()
        for r in self._other_runnables:
            r.start()
        self.servers_started.set()
        log.info("manager.starting", identity=self.identity, leader_elect=o.leader_elect)

        self.cache.start()
        deadline = time.monotonic() + o.cache_sync_timeout
        synced = False
        while not self._stop.is_set():
            if self.cache.wait_for_cache_sync(min(0.2, max(0.0, deadline - time.monotonic()))):
                synced = True
                break
            if time.monotonic() >= deadline:
                break
        if not synced and not self._stop.is_set():
            log.error("manager.cache_sync_timeout", timeout=o.cache_sync_timeout)
            self.exit_code = EXIT_CACHE_SYNC_TIMEOUT
            self._stop.set()

        if synced and not self._stop.is_set():
            if o.leader_elect:
                self.elector = LeaderElector(
                    self.client,
                    o.leader_election_namespace or os.environ.get("POD_NAMESPACE") or "default",
                    o.leader_election_id,
                    self.identity,
                    lease_duration=o.lease_duration,
                    renew_deadline=o.renew_deadline,
                    retry_period=o.retry_period,
                    on_started_leading=self._start_leader_runnables,
                    on_stopped_leading=lambda: self._stop_leader_runnables(
                        o.graceful_shutdown_timeout
                    ),
                    release_on_cancel=o.leader_election_release_on_cancel,
                )
                self._elector_thread = threading.Thread(
                    target=self._run_elector, name="leader-elector", daemon=True
                )
                self._elector_thread.start()
            else:
                self._start_leader_runnables()

        self._stop.wait()
        self._shutdown()
        return self.exit_code

    def _shutdown(self) -> None:
        o = self.options
        t0 = time.monotonic()
        deadline = t0 + o.graceful_shutdown_timeout
        log.info("manager.stopping", timeout=o.graceful_shutdown_timeout)
        if self.elector is not None:
            self.elector.stop()  # the elector thread stops the controllers, then releases
            if self._elector_thread is not None:
                self._elector_thread.join(max(0.1, deadline - time.monotonic()))
        self._stop_leader_runnables(max(0.1, deadline - time.monotonic()))
        for r in self._other_runnables:
            r.stop(max(0.1, deadline - time.monotonic()))
        for rec in list(self._recorders.values()):
            rec.stop(max(0.1, min(5.0, deadline - time.monotonic())))
        self.cache.stop()
        for s in (self.metrics_server, self.health_server):
            if s is not None:
                s.stop()
        log.info(
            "manager.stopped", seconds=round(time.monotonic() - t0, 3), exit_code=self.exit_code
        )
