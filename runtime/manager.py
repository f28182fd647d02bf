"""The manager: owns the client, the shared informers, the controllers, leader election,
the metrics/health servers and graceful shutdown (controller-runtime's pkg/manager).

``Manager.start()`` blocks and returns an exit code: it starts the servers, starts the
informers and waits for their sync (``cache_sync_timeout``), then starts the controllers,
right away or once this process holds the leader Lease. ``stop()`` (or SIGTERM/SIGINT
when ``install_signal_handlers=True``) shuts down within ``graceful_shutdown_timeout``,
then releases the Lease so a standby takes over at once; a second signal exits at once.

Three clients, each with its own token bucket, as kube-scheduler has: ``client`` for the
controllers (writes fenced, see below), ``events_client`` for Events (never fenced,
never waited on by a worker), and the leader elector's (no retries: its loop retries).

One placer at a time:

==========================================  =============================================
situation                                   what the manager does
==========================================  =============================================
leader election on, Lease held              controllers run; every write passes the
                                            elector's fence (renewed < renew_deadline ago)
Lease lost (not renewed in time, taken)     writes refused at once (``NotLeader``),
                                            controllers stopped with zero grace, ``start``
                                            returns :data:`EXIT_LOST_LEASE`
leader election off, no live leader         controllers run
leader election off, another live leader    controllers not started (or stopped with zero
holds the same Lease                        grace), writes refused, ``manager.refusing``
                                            logged with the holder, ``/readyz`` fails
                                            saying why; ``start`` returns
                                            :data:`EXIT_ANOTHER_LEADER` if it had started
==========================================  =============================================
"""

from __future__ import annotations

import os
import signal
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from runtime import errors, gctune, metrics
from runtime.client import Client, RestConfig
from runtime.events import EventRecorder
from runtime.health import Checks, ping
from runtime.httpserver import Authorize, HTTPServer, parse_bind_address
from runtime.informer import SharedIndexInformer, SharedInformerFactory, strip_managed_fields
from runtime.leaderelection import LeaderElector, live_holder
from runtime.retry import NO_RETRY
from runtime.store import IndexFunc

log = structlog.get_logger("runtime.manager")

EXIT_OK = 0
EXIT_LOST_LEASE = 1
EXIT_CACHE_SYNC_TIMEOUT = 2
EXIT_ANOTHER_LEADER = 3

JSON = dict[str, Any]


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
    events_qps: float | None = None  # the Events client's own bucket (default: the config's)
    events_burst: int | None = None
    # applied to every cached object; None keeps them as received
    cache_transform: Callable[[JSON], JSON] | None = strip_managed_fields
    #: the collector's thresholds raised at start and startup's objects frozen once
    #: the caches sync (runtime.gctune); process-wide, so only for a process that
    #: runs this manager alone (``main.py manager``)
    tune_gc: bool = False


class Manager:
    def __init__(self, config: RestConfig | Client, options: Options | None = None) -> None:
        self.options = options or Options()
        base = config if isinstance(config, Client) else Client(config)
        o = self.options
        self.client = base.derive(write_guard=self._fence)
        self.events_client = base.derive(qps=o.events_qps, burst=o.events_burst)
        self._lease_client = base.derive(qps=10.0, burst=20, retry=NO_RETRY)
        self.cache = SharedInformerFactory(
            self.client,
            namespace=o.namespace,
            resync_period=o.resync_period,
            watch_timeout=o.watch_timeout,
            transform=o.cache_transform,
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
        self.refusal: str | None = None  # why this manager will not place, if it will not
        self._leader_check_error: str | None = None

    # ---------------------------------------------------------------- registry
    def informer_for(
        self, api_version: str, kind: str, indexers: dict[str, IndexFunc] | None = None,
        transform: Callable[[JSON], JSON] | None = None,
    ) -> SharedIndexInformer:
        return self.cache.informer_for(api_version, kind, indexers=indexers,
                                       transform=transform)

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
                rec = self._recorders[component] = EventRecorder(self.events_client, component)
            return rec

    def is_leader(self) -> bool:
        return self.elector.is_leader() if self.elector else self.elected.is_set()

    def _fence(self) -> float | None:
        """The controllers' write permission (see the module's table)."""
        if self.options.leader_elect:
            if self.elector is None:
                raise errors.NotLeader("leader election has not started: write refused")
            return self.elector.fence()
        if self.refusal is not None:
            raise errors.NotLeader(self.refusal)
        return None

    @property
    def lease_namespace(self) -> str:
        o = self.options
        return o.leader_election_namespace or os.environ.get("POD_NAMESPACE") or "default"

    def foreign_leader(self) -> str | None:
        """Who else leads our Lease right now, if anyone (its renewTime plus its
        leaseDurationSeconds is still ahead of our wall clock)."""
        path = (
            f"/apis/coordination.k8s.io/v1/namespaces/{self.lease_namespace}"
            f"/leases/{self.options.leader_election_id}"
        )
        try:
            lease = self._lease_client.request("GET", path, deadline=time.monotonic() + 10)
        except errors.NotFound:
            return None
        return live_holder(lease, self.identity, time.time())

    def _check_alone(self) -> bool:
        """Without leader election: True if no other manager leads our Lease now. Sets
        or clears :attr:`refusal` and logs a change."""
        try:
            holder = self.foreign_leader()
        except errors.ApiError as e:
            # Warn once until a check succeeds again, not at every poll.
            report = log.warning if self._leader_check_error is None else log.debug
            report("manager.leader_check_failed", lease=self._lease_name(), error=str(e))
            self._leader_check_error = str(e)
            return self.refusal is None
        self._leader_check_error = None
        if holder is None:
            if self.refusal is not None:
                log.info("manager.no_other_leader", lease=self._lease_name())
            self.refusal = None
            return True
        reason = (
            f"another manager ({holder}) leads lease {self._lease_name()}; this one runs "
            "without leader election and will not place while it does (run it with "
            "--leader-elect, or stop the other)"
        )
        if self.refusal != reason:
            log.error("manager.refusing", reason=reason, leader=holder)
        self.refusal = reason
        return False

    def _lease_name(self) -> str:
        return f"{self.lease_namespace}/{self.options.leader_election_id}"

    def _watch_for_leader(self) -> None:
        """Without leader election: start the controllers once no other leader is live;
        if one shows up later, stop them with zero grace and end the process."""
        period = max(1.0, self.options.retry_period)
        while not self._check_alone():
            if self._stop.wait(period):
                return
        self._start_leader_runnables()
        while not self._stop.wait(period):
            if not self._check_alone():
                self._stop_leader_runnables(0.0)
                self.exit_code = EXIT_ANOTHER_LEADER
                self._stop.set()
                return

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
        try:
            lost = self.elector.run()
        except Exception:  # run() ends leadership itself; this only reports
            log.exception("manager.elector_error")
            lost = True
        if lost:
            self.exit_code = EXIT_LOST_LEASE
            self._stop.set()

    def _on_stopped_leading(self) -> None:
        # Still leader: a requested stop, in-flight reconciles get the grace period (their
        # writes stay fenced by the renew deadline). Not leader: the lease was lost, so
        # zero grace; their writes are refused already.
        assert self.elector is not None
        grace = self.options.graceful_shutdown_timeout if self.elector.is_leader() else 0.0
        self._stop_leader_runnables(grace)

    def start(self, install_signal_handlers: bool = False) -> int:
        """Run until stopped; returns the process exit code."""
        o = self.options
        if install_signal_handlers:
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)
        self.readyz.add(
            "informers-synced", lambda: self.cache.has_synced() or "informers not synced"
        )
        self.readyz.add("leader-election", lambda: self.refusal or True)
        self._start_servers()
        for r in self._other_runnables:
            r.start()
        self.servers_started.set()
        log.info("manager.starting", identity=self.identity, leader_elect=o.leader_elect)

        if o.tune_gc:
            gctune.tune()
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
            if o.tune_gc:
                gctune.settle()
            if o.leader_elect:
                self.elector = LeaderElector(
                    self._lease_client,
                    self.lease_namespace,
                    o.leader_election_id,
                    self.identity,
                    lease_duration=o.lease_duration,
                    renew_deadline=o.renew_deadline,
                    retry_period=o.retry_period,
                    on_started_leading=self._start_leader_runnables,
                    on_stopped_leading=self._on_stopped_leading,
                    release_on_cancel=o.leader_election_release_on_cancel,
                )
                self.healthz.add("leader-election", self.elector.healthy)
                self._elector_thread = threading.Thread(
                    target=self._run_elector, name="leader-elector", daemon=True
                )
                self._elector_thread.start()
            else:
                threading.Thread(
                    target=self._watch_for_leader, name="leader-check", daemon=True
                ).start()

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
        lost = self.exit_code in (EXIT_LOST_LEASE, EXIT_ANOTHER_LEADER)
        self._stop_leader_runnables(0.0 if lost else max(0.1, deadline - time.monotonic()))
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
