"""Leader election on a coordination.k8s.io/v1 Lease (port of client-go's tools/leaderelection).

* A candidate takes the Lease when it has no holder, or when the holder's record has not
  changed for ``lease_duration`` seconds *as observed locally* (no clock-skew trust in
  ``renewTime``); writes are optimistic (resourceVersion), so two candidates never both win.
* The leader renews every ``retry_period``. Leadership holds for ``renew_deadline``
  seconds from the *start* of the last successful renew attempt (rate-limiter wait, GET
  and PUT all inside that one budget). When that passes without a renewal the lease is
  lost: leadership ends first, then ``on_stopped_leading`` runs, then
  :meth:`LeaderElector.run` returns True.
* :meth:`fence` is the write permission: it raises :class:`~runtime.errors.NotLeader`
  unless this elector leads *and* its last renewal is younger than ``renew_deadline``.
  A rival can take the lease no sooner than ``lease_duration`` after our last renewal
  reached the server, so no write of ours is sent after a rival could lead, even if this
  thread hangs (``lease_duration - renew_deadline`` is the margin for a write in flight).
* Seeing another holder in the Lease while leading ends leadership at once.
* Any exception in an attempt counts as a failed attempt; any exception that escapes the
  loop (a callback's, a bug) ends leadership the same way. The elector never leaves
  ``is_leader()`` true behind a dead thread.
* ``release()`` (on graceful stop, when ``release_on_cancel``) empties the holder so a
  follower takes over at once; :meth:`abandon` stops renewing *without* releasing (a crash).
* The client should be the elector's own (``Client.derive``): lease renewals never wait
  behind the controllers' requests in a shared token bucket.
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


def live_holder(lease: JSON, identity: str, now: float) -> str | None:
    """The holder of ``lease`` if it is someone other than ``identity`` and its
    ``renewTime`` plus ``leaseDurationSeconds`` is after ``now`` (seconds since the
    epoch; this trusts the clocks to agree within the lease duration, which is why only
    a manager *without* leader election uses it, to refuse). A holder whose renewTime
    cannot be read is taken as alive."""
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity") or ""
    if not holder or holder == identity:
        return None
    try:
        renewed = datetime.fromisoformat(str(spec.get("renewTime")).replace("Z", "+00:00"))
        duration = float(spec.get("leaseDurationSeconds") or 15)
    except (TypeError, ValueError):
        return holder
    return holder if renewed.timestamp() + duration > now else None


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
        self._valid_until = 0.0  # monotonic: end of the current write permission
        self._last_renew = 0.0  # monotonic: when the last successful attempt started
        self._stop = threading.Event()
        self._abandoned = threading.Event()
        self._taken = threading.Event()  # seen another holder while leading
        self._reported_leader: str | None = None
        self.log = log.bind(lease=f"{namespace}/{name}", identity=identity)
        self._m = metrics.leader_election_master_status.labels(name)
        self._m.set(0)

    # ---------------------------------------------------------------- state
    def is_leader(self) -> bool:
        return self._leader.is_set()

    def fence(self) -> float:
        """Seconds this process may still write as leader; raises NotLeader otherwise."""
        left = self._valid_until - time.monotonic()
        if not self._leader.is_set() or left <= 0:
            raise errors.NotLeader(
                f"not the leader of lease {self.namespace}/{self.name}: write refused"
            )
        return left

    def healthy(self) -> bool | str:
        """A health check (client-go's HealthzAdaptor): fails when this process believes
        it leads but has not renewed for longer than the lease duration."""
        if not self._leader.is_set():
            return True
        since = time.monotonic() - self._last_renew
        if since > self.lease_duration + 5.0:
            return f"leading but last renewed {since:.1f}s ago"
        return True

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
        lost = True
        try:
            self._leader.set()
            self._m.set(1)
            self.log.info("leaderelection.acquired")
            if self.on_started_leading:
                self.on_started_leading()
            lost = self._renew_loop()
        except Exception:
            self.log.exception("leaderelection.error")
            lost = True
        finally:
            if lost:
                self._end_leadership()  # before the callback: writes stop first
                self.log.error("leaderelection.lost")
            try:
                if self.on_stopped_leading:
                    self.on_stopped_leading()
            except Exception:
                self.log.exception("leaderelection.callback_error")
            finally:
                self._end_leadership()
        if not lost and self.release_on_cancel and not self._abandoned.is_set():
            self.release()
        return lost

    def _end_leadership(self) -> None:
        self._leader.clear()
        self._valid_until = 0.0
        self._m.set(0)

    def _sleep(self, base: float) -> bool:
        """Wait ``base`` (+ up to 20 % jitter); True if stopped meanwhile."""
        return self._stop.wait(base * (1.0 + 0.2 * random.random()))

    def _acquire(self) -> bool:
        while not self._stop.is_set():
            if self._attempt(time.monotonic() + self.renew_deadline):
                return True
            if self._sleep(self.retry_period):
                break
        return False

    def _renew_loop(self) -> bool:
        """Renew every retry_period until stopped (False) or the lease is lost (True)."""
        while not self._stop.wait(self.retry_period):
            while True:
                deadline = self._last_renew + self.renew_deadline
                if time.monotonic() >= deadline:
                    return True
                if self._attempt(deadline):
                    break
                if self._taken.is_set():
                    return True
                if self._stop.wait(min(self.retry_period, max(0.0, deadline - time.monotonic()))):
                    return False
        return False

    def _attempt(self, deadline: float) -> bool:
        """One try to acquire or renew, wholly inside ``deadline``; never raises."""
        started = time.monotonic()
        try:
            ok = self._try_acquire_or_renew(deadline)
        except Exception as e:  # a token file, an exec plugin, a bug: a failed attempt
            self.log.warning(
                "leaderelection.attempt_error", error=str(e), error_type=type(e).__name__
            )
            return False
        if ok:
            self._last_renew = started
            self._valid_until = started + self.renew_deadline
        return ok

    # ---------------------------------------------------------------- one attempt
    def _try_acquire_or_renew(self, deadline: float) -> bool:
        now = micro_time()
        desired = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.lease_duration)),
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": 0,
        }
        try:
            lease = self.client.request("GET", self._path, deadline=deadline)
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
                    deadline=deadline,
                )
            except errors.NotFound as e:
                self.log.error(
                    "leaderelection.create_failed",
                    error=str(e),
                    hint=f"does namespace {self.namespace} exist? the Lease lives there",
                )
                return False
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
        if holder and holder != self.identity and self._leader.is_set():
            # Someone else holds it while we think we lead: lost, no need to wait out
            # the renew deadline.
            self._taken.set()
            self._end_leadership()
            return False
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
            updated = self.client.request("PUT", self._path, body=new, deadline=deadline)
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
            self._observe(
                self.client.request("PUT", self._path, body=new, deadline=time.monotonic() + 5.0)
            )
            self.log.info("leaderelection.released")
            return True
        except errors.ApiError as e:
            self.log.warning("leaderelection.release_failed", error=str(e))
            return False
