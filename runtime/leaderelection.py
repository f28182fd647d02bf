"""Leader election on a coordination.k8s.io/v1 Lease (port of client-go's tools/leaderelection).

* A candidate takes the Lease when it has no holder, or when the holder's record has not
  changed for ``lease_duration`` seconds *as observed locally* (no clock-skew trust in
  ``renewTime``); writes are optimistic (resourceVersion), so two candidates never both win.
* The leader renews every ``retry_period``; if it cannot renew within ``renew_deadline``,
  it has lost the lease: ``on_stopped_leading`` runs and :meth:`LeaderElector.run` returns.
* ``release()`` (on graceful stop, when ``release_on_cancel``) empties the holder so a
  follower takes over at once; :meth:`abandon` stops renewing *without* releasing (a crash).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import structlog

from runtime import errors, metrics
from runtime.client import Client

log = structlog.get_logger("runtime.leaderelection")

JSON = dict[str, Any]


def micro_time(t: datetime | None = None) -> str:
    return (t or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        client: Client,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        on_started_leading: Callable[[], None] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
        on_new_leader: Callable[[str], None] | None = None,
        release_on_cancel: bool = True,
    ) -> None:
        if lease_duration <= renew_deadline:
            raise ValueError("lease_duration must be greater than renew_deadline")
        if renew_deadline <= retry_period:
            raise ValueError("renew_deadline must be greater than retry_period")
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self.on_new_leader = on_new_leader
        self.release_on_cancel = release_on_cancel
        self._path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        self._observed: JSON | None = None  # the lease object last seen
        self._observed_key: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._leader = threading.Event()
        self._stop = threading.Event()
        self._abandoned = threading.Event()
        self._reported_leader: str | None = None
        self.log = log.bind(lease=f"{namespace}/{name}", identity=identity)
        self._m = metrics.leader_election_master_status.labels(name)
        self._m.set(0)

    # ---------------------------------------------------------------- state
    def is_leader(self) -> bool:
        return self._leader.is_set()

    @property
    def leader(self) -> str | None:
        return self._reported_leader

    def stop(self) -> None:
        """Stop campaigning / leading (releases the lease if ``release_on_cancel``)."""
        self._stop.set()

    def abandon(self) -> None:
        """Stop renewing without releasing, as a crashed process would."""
        self._abandoned.set()
        self._stop.set()

    # ---------------------------------------------------------------- loop
    def run(self) -> bool:
        """Campaign, lead, and return when stopped or when the lease is lost.

        Returns True if it was leading and lost the lease (not by request)."""
        if not self._acquire():
            return False
        self._leader.set()
        self._m.set(1)
        self.log.info("leaderelection.acquired")
        if self.on_started_leading:
            self.on_started_leading()
        lost = self._renew_loop()
        self._leader.clear()
        self._m.set(0)
        if lost:
            self.log.error("leaderelection.lost")
        if self.on_stopped_leading:
            self.on_stopped_leading()
        if not lost and self.release_on_cancel and not self._abandoned.is_set():
            self.release()
        return lost

    def _sleep(self, base: float) -> bool:
        """Wait ``base`` (+ up to 20 % jitter); True if stopped meanwhile."""
        return self._stop.wait(base * (1.0 + 0.2 * random.random()))

    def _acquire(self) -> bool:
        while not self._stop.is_set():
            if self._try_acquire_or_renew():
                return True
            if self._sleep(self.retry_period):
                break
        return False

    def _renew_loop(self) -> bool:
        while not self._stop.is_set():
            deadline = time.monotonic() + self.renew_deadline
            renewed = False
            while not self._stop.is_set() and time.monotonic() < deadline:
                if self._try_acquire_or_renew(timeout=max(0.5, deadline - time.monotonic())):
                    renewed = True
                    break
                self._stop.wait(min(self.retry_period, max(0.0, deadline - time.monotonic())))
            if self._stop.is_set():
                return False
            if not renewed:
                return True
            if self._stop.wait(self.retry_period):
                return False
        return False

    # ---------------------------------------------------------------- one attempt
    def _try_acquire_or_renew(self, timeout: float | None = None) -> bool:
        timeout = timeout or max(1.0, self.renew_deadline)
        now = micro_time()
        desired = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.lease_duration)),
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": 0,
        }
        try:
            lease = self.client.request("GET", self._path, timeout=timeout)
        except errors.NotFound:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": desired,
            }
            try:
                created = self.client.request(
                    "POST",
                    f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases",
                    body=body,
                    timeout=timeout,
                )
            except errors.ApiError as e:
                self.log.info("leaderelection.create_failed", error=str(e))
                return False
            self._observe(created)
            return True
        except errors.ApiError as e:
            self.log.warning("leaderelection.get_failed", error=str(e))
            return False

        spec = lease.get("spec") or {}
        self._observe(lease)
        holder = spec.get("holderIdentity") or ""
        if (
            holder
            and holder != self.identity
            and self._observed_at + self.lease_duration > time.monotonic()
        ):
            return False
        if holder == self.identity:
            desired["acquireTime"] = spec.get("acquireTime") or now
            desired["leaseTransitions"] = spec.get("leaseTransitions") or 0
        else:
            desired["leaseTransitions"] = (spec.get("leaseTransitions") or 0) + 1
        new = dict(lease)
        new["spec"] = desired
        try:
            updated = self.client.request("PUT", self._path, body=new, timeout=timeout)
        except errors.ApiError as e:
            self.log.info(
                "leaderelection.update_failed", error=str(e), conflict=errors.is_conflict(e)
            )
            return False
        self._observe(updated)
        return True

    def _observe(self, lease: JSON) -> None:
        spec = lease.get("spec") or {}
        key = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("acquireTime"))
        if key != self._observed_key:
            self._observed_key = key
            self._observed = lease
            self._observed_at = time.monotonic()
        holder = spec.get("holderIdentity") or ""
        if holder and holder != self._reported_leader:
            self._reported_leader = holder
            self.log.info("leaderelection.new_leader", leader=holder)
            if self.on_new_leader:
                try:
                    self.on_new_leader(holder)
                except Exception:
                    self.log.exception("leaderelection.callback_error")

    def release(self) -> bool:
        """Give the lease up (empty holder), so a follower can take it at once."""
        lease = self._observed
        if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
            return False
        now = micro_time()
        new = dict(lease)
        new["spec"] = {
            "holderIdentity": None,
            "leaseDurationSeconds": 1,
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": (lease.get("spec") or {}).get("leaseTransitions") or 0,
        }
        try:
            self._observe(self.client.request("PUT", self._path, body=new, timeout=5.0))
            self.log.info("leaderelection.released")
            return True
        except errors.ApiError as e:
            self.log.warning("leaderelection.release_failed", error=str(e))
            return False
