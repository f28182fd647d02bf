"""The agent loop: poll NVML, keep the node's GPUNode status, node labels and metrics
current.

Every ``poll_interval`` the backend is sampled and the metrics updated. The GPUNode
status (with a fresh ``lastHeartbeatTime``) is written when the sample's fingerprint
changed (a device appeared or went, turned unhealthy, got ECC errors, ...) and
otherwise every ``interval`` seconds, which is the heartbeat. Failed writes are
retried with capped exponential backoff; nothing here crashes the process.

The GPUNode is cluster-scoped, named after the node, owned by the Node; it is
created when missing (also when deleted while the agent runs). Status is written by
a JSON merge patch on the status subresource, labels by a merge patch on the Node,
and only when they change.

The agent writes only its own node's objects: at start it asks the API server who it
is (a SelfSubjectReview); when its token is bound to a node (a projected
service-account token of a DaemonSet pod) and that node is not ``--node-name``, it
refuses to run (:class:`WrongNode`). The admission policies of config/crd enforce the
same on the server side, for a compromised agent too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from datetime import UTC, datetime
from typing import Any

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from api.v1alpha1.types import API_VERSION
from internal.agent.metrics import AgentMetrics
from internal.agent.nvml.backend import NvmlBackend, sample
from internal.agent.nvml.selection import select_backend
from internal.agent.nvml.types import NodeSample
from internal.agent.status import build_status, fingerprint, new_gpunode, node_labels
from runtime import errors
from runtime.client import Client, RestConfig
from runtime.httpserver import HTTPServer, parse_bind_address

log = structlog.get_logger("agent")

DEFAULT_INTERVAL = 10.0  # seconds between heartbeats
DEFAULT_POLL_INTERVAL = 2.0  # seconds between NVML polls (bounded by the interval)
MAX_BACKOFF = 60.0


def _utcnow() -> datetime:
    return datetime.now(UTC)


NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"


class WrongNode(RuntimeError):
    """The agent was told to report for a node other than the one it runs on."""


def token_node(client: Client) -> str | None:
    """The node the client's credentials are bound to, from a SelfSubjectReview;
    None when they are not bound to a node (a kubeconfig user, a legacy token) or the
    review cannot be made (the server-side policy still applies)."""
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    try:
        got = client.create(review)
    except errors.ApiError as e:
        log.warning("agent.self_review_failed", code=e.status, error=str(e))
        return None
    extra = ((got.get("status") or {}).get("userInfo") or {}).get("extra") or {}
    nodes = extra.get(NODE_NAME_EXTRA) or []
    return str(nodes[0]) if len(nodes) == 1 else None


def check_node(client: Client, node_name: str) -> None:
    """Raises :class:`WrongNode` when the token is bound to a node other than
    ``node_name``; logs a warning when it is bound to none."""
    bound = token_node(client)
    if bound is None:
        log.warning("agent.token_not_bound_to_node", node=node_name,
                    hint="in a cluster, the agent's writes need its pod's projected token")
    elif bound != node_name:
        raise WrongNode(f"--node-name is {node_name!r} but this agent runs on node {bound!r} "
                        "(its token is bound there); it reports only for its own node")


class Agent:
    """One node's agent. ``run(stop)`` blocks until ``stop`` is set; ``tick()`` does one
    poll (and a write when one is due) and is what tests drive directly."""

    def __init__(
        self,
        node_name: str,
        client: Client,
        backend: NvmlBackend,
        *,
        interval: float = DEFAULT_INTERVAL,
        poll_interval: float | None = None,
        metrics: AgentMetrics | None = None,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        if not node_name:
            raise ValueError("the agent needs its node's name (NODE_NAME)")
        self.node_name = node_name
        self.client = client
        self.backend = backend
        self.interval = max(0.05, float(interval))
        self.poll_interval = min(self.interval, poll_interval or DEFAULT_POLL_INTERVAL)
        self.metrics = metrics if metrics is not None else AgentMetrics(node_name)
        self.clock = clock
        self.last_sample: NodeSample | None = None
        self._written: Hashable | None = None  # fingerprint of the last status written
        self._labels: dict[str, str | None] | None = None  # last labels applied
        self._last_write = float("-inf")  # monotonic time of the last successful write
        self._failures = 0
        self._retry_at = float("-inf")
        self.last_success_wall: datetime | None = None

    # ------------------------------------------------------------------ loop
    def run(self, stop: threading.Event) -> None:
        log.info("agent.started", node=self.node_name, backend=self.backend.name,
                 interval=self.interval, poll_interval=self.poll_interval)
        while not stop.is_set():
            self.tick()
            stop.wait(self.poll_interval)
        log.info("agent.stopped", node=self.node_name)

    def tick(self) -> bool:
        """Poll once; write when changed, due, or a failed write is to be retried.
        Returns True when a status write happened and succeeded."""
        try:
            s = sample(self.backend)
        except Exception as e:  # a backend failure must not kill the agent
            self.metrics.polls.labels("error").inc()
            log.warning("agent.poll_failed", node=self.node_name, error=str(e))
            return False
        self.metrics.polls.labels("success").inc()
        self.metrics.observe(s)
        self.last_sample = s
        for err in s.errors:
            log.warning("agent.device_error", node=self.node_name, error=err)
        now = time.monotonic()
        fp = fingerprint(s)
        changed = fp != self._written
        due = now - self._last_write >= self.interval
        if not (changed or due):
            return False
        if self._failures and now < self._retry_at:
            return False
        if changed and self._written is not None:
            log.info("agent.change", node=self.node_name,
                     unhealthy=[f"{d.index}:{d.unhealthy_reason}" for d in s.devices
                                if not d.healthy],
                     devices=len(s.devices))
        ok = self.report(s)
        if ok:
            self._written, self._last_write, self._failures = fp, now, 0
        else:
            self._failures += 1
            delay = min(MAX_BACKOFF, self.interval, self.poll_interval * 2 ** self._failures)
            self._retry_at = now + delay
        return ok

    # ------------------------------------------------------------------ writes
    def report(self, s: NodeSample) -> bool:
        """Write the node labels (when changed) and the GPUNode status."""
        try:
            self._apply_labels(s)
            self._write_status(s)
        except errors.ApiError as e:
            self.metrics.reports.labels("error").inc()
            log.warning("agent.report_failed", node=self.node_name, code=e.status,
                        reason=e.reason, error=str(e))
            return False
        self.metrics.reports.labels("success").inc()
        self.metrics.last_report.set(time.time())
        return True

    def _write_status(self, s: NodeSample) -> None:
        hb = self.clock()
        patch = {"status": build_status(s, hb)}
        try:
            self.client.patch(API_VERSION, "GPUNode", self.node_name, patch,
                              subresource="status")
        except errors.NotFound:
            self._create_gpunode()
            self.client.patch(API_VERSION, "GPUNode", self.node_name, patch,
                              subresource="status")
        self.last_success_wall = hb
        log.debug("agent.reported", node=self.node_name, devices=len(s.devices))

    def _create_gpunode(self) -> None:
        uid = None
        try:
            uid = self.client.get("v1", "Node", self.node_name)["metadata"].get("uid")
        except errors.ApiError as e:
            log.info("agent.node_unreadable", node=self.node_name, error=str(e))
        try:
            self.client.create(new_gpunode(self.node_name, uid))
            log.info("agent.gpunode_created", node=self.node_name)
        except errors.AlreadyExists:
            pass

    def _apply_labels(self, s: NodeSample) -> None:
        labels = node_labels(s)
        if labels == self._labels:
            return
        self.client.patch("v1", "Node", self.node_name, {"metadata": {"labels": labels}})
        self._labels = labels
        log.info("agent.labels", node=self.node_name,
                 labels=",".join(f"{k}={v}" for k, v in labels.items() if v is not None))

    # ------------------------------------------------------------------ probes
    def ready(self) -> bool:
        """A status write succeeded within three intervals."""
        return time.monotonic() - self._last_write <= 3 * self.interval

    def routes(self) -> dict[str, Any]:
        def metrics(_q: str) -> tuple[int, str, bytes]:
            return 200, CONTENT_TYPE_LATEST, generate_latest(self.metrics.registry)

        def healthz(_q: str) -> tuple[int, str, bytes]:
            return 200, "text/plain", b"ok\n"

        def readyz(_q: str) -> tuple[int, str, bytes]:
            if self.ready():
                return 200, "text/plain", b"ok\n"
            return 503, "text/plain", b"no recent GPUNode report\n"

        return {"/metrics": metrics, "/healthz": healthz, "/readyz": readyz}


def run_agent(
    node_name: str,
    kubeconfig: str | None,
    backend: NvmlBackend | str | None,
    interval: float = DEFAULT_INTERVAL,
    metrics_bind_address: str | None = ":9400",
    stop_event: threading.Event | None = None,
    *,
    poll_interval: float | None = None,
    client: Client | None = None,
    on_started: Callable[[Agent, HTTPServer | None], None] | None = None,
) -> None:
    """Run the agent for ``node_name`` until ``stop_event`` is set.

    ``kubeconfig``: a path, or None for in-cluster config (``$KUBECONFIG`` honoured).
    ``backend``: an :class:`NvmlBackend`, or a spec for :func:`select_backend`
    (``"auto"``, ``"nvml"``, ``"fixture:h100-sxm-8"``); a spec-built backend is closed
    on exit. ``metrics_bind_address``: ``":9400"``, ``"127.0.0.1:0"``, or ``"0"``/""
    to serve no /metrics, /healthz, /readyz. ``on_started`` is called with the agent
    and its HTTP server (None when disabled) once both exist (tests use it).
    """
    stop = stop_event if stop_event is not None else threading.Event()
    owned = not isinstance(backend, NvmlBackend)
    be: NvmlBackend = select_backend(backend) if owned else backend  # type: ignore[arg-type]
    if client is None:
        client = Client(RestConfig.load(kubeconfig, user_agent="gpu-orchestrator-agent"))
    server: HTTPServer | None = None
    try:
        check_node(client, node_name)
        agent = Agent(node_name, client, be, interval=interval, poll_interval=poll_interval)
        if parse_bind_address(metrics_bind_address) is not None:
            server = HTTPServer(str(metrics_bind_address), agent.routes(), name="agent-metrics")
            server.start()
        if on_started is not None:
            on_started(agent, server)
        agent.run(stop)
    finally:
        if server is not None:
            server.stop()
        if owned:
            be.close()
