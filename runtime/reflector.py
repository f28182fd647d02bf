"""The reflector: list, then watch from the list's resourceVersion (port of client-go's Reflector).

* The list is paged (``limit``/``continue``); the watch starts from the list's
  resourceVersion with bookmarks on and a randomized ``timeoutSeconds``.
* When the server ends a watch normally, the next watch resumes from the last
  resourceVersion seen (events or bookmarks). A broken connection (API server restart,
  transport error, 429/5xx) also resumes from there, after a jittered backoff.
* 410 Gone (as the HTTP status or as an ERROR event in the stream) means the
  resourceVersion is compacted away: relist, and let the store diff the lists
  (tombstones for objects that vanished meanwhile). The first relist after a healthy
  watch is immediate; a second 410 in a row waits like any other error.
* Other errors back off with jitter (tenacity's exponential-jitter wait) and relist.
* A 429 or 503 with ``Retry-After`` waits at least that long (capped at 60 s).
* The backoff grows with *consecutive* failures and resets only after a watch that
  delivered events or lasted a while, never merely after a list succeeded: a server
  that answers every watch with 410 (or a proxy that cuts every stream) is polled at
  the capped backoff, not in a loop.
* Bad data on the wire (a cut line, a non-JSON body, an HTML error page) is an error
  like the others: logged once per occurrence with the first bytes received, backed
  off, resumed. Counted in ``reflector_watch_errors_total{name,reason}``; every full
  list in ``reflector_lists_total{name}``.
"""

from __future__ import annotations

import random
import threading
import time
from types import SimpleNamespace
from typing import Any, Protocol

import structlog
from tenacity import wait_exponential_jitter

from runtime import errors, metrics
from runtime.client import Client, Watch

log = structlog.get_logger("runtime.reflector")

JSON = dict[str, Any]


class ReflectorSink(Protocol):
    def replace(self, items: list[JSON], resource_version: str) -> None: ...
    def watch_event(self, event_type: str, obj: JSON) -> None: ...


def _resumable(err: Exception) -> bool:
    """Errors after which the watch may resume from the last resourceVersion."""
    if isinstance(err, errors.ApiError):
        return err.status == 0 or err.status == 429 or err.status >= 500
    return False


class Reflector:
    def __init__(
        self,
        client: Client,
        api_version: str,
        kind: str,
        sink: ReflectorSink,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
        watch_timeout: tuple[float, float] = (300.0, 600.0),
        backoff_initial: float = 0.8,
        backoff_max: float = 30.0,
        name: str | None = None,
    ) -> None:
        self.client = client
        self.api_version = api_version
        self.kind = kind
        self.sink = sink
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.name = name or f"{api_version}/{kind}"
        try:  # tenacity >= 9.1 names the scale "multiplier"; older ones "initial"
            self._wait = wait_exponential_jitter(
                multiplier=backoff_initial, max=backoff_max, jitter=backoff_initial
            )
        except TypeError:  # pragma: no cover
            self._wait = wait_exponential_jitter(
                initial=backoff_initial, max=backoff_max, jitter=backoff_initial
            )
        self._stop = threading.Event()
        self._watch: Watch | None = None
        self._watch_lock = threading.Lock()
        self.last_resource_version: str = ""
        self.lists = 0  # how many full lists were done (observable in tests)

    # ---------------------------------------------------------------- control
    def stop(self) -> None:
        self._stop.set()
        with self._watch_lock:
            if self._watch is not None:
                self._watch.close()

    def break_watch(self) -> None:
        """Close the current watch stream (as a network failure would); it resumes."""
        with self._watch_lock:
            if self._watch is not None:
                self._watch.close()

    def _backoff(self, attempt: int) -> float:
        return float(self._wait(SimpleNamespace(attempt_number=attempt)))  # type: ignore[arg-type]

    def run(self) -> None:
        """List and watch until :meth:`stop`; never raises."""
        attempt = 0  # consecutive failures
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                if self._watch_once():
                    attempt = 0  # a healthy watch: the server is fine again
                continue
            except errors.Gone as e:
                metrics.reflector_watch_errors_total.labels(self.name, "Expired").inc()
                log.info(
                    "reflector.relist", reflector=self.name, reason="expired", message=e.message
                )
                need_list = True
                attempt += 1
                if attempt == 1:
                    continue  # relist at once after a healthy watch
                wait = self._backoff(attempt - 1)
            except Exception as e:
                if self._stop.is_set():
                    return
                attempt += 1
                if not (_resumable(e) and self.last_resource_version):
                    need_list = True
                reason = e.reason if isinstance(e, errors.ApiError) else type(e).__name__
                metrics.reflector_watch_errors_total.labels(self.name, reason or "Error").inc()
                wait = self._backoff(attempt)
                retry_after = getattr(e, "retry_after", None)
                if isinstance(retry_after, int | float):  # the server said how long
                    wait = max(wait, min(float(retry_after), 60.0))
                log.warning(
                    "reflector.error",
                    reflector=self.name,
                    error=str(e)[:300],
                    error_type=type(e).__name__,
                    relist=need_list,
                    attempt=attempt,
                    wait=round(wait, 2),
                )
            self._stop.wait(wait)

    # ---------------------------------------------------------------- list / watch
    def _list(self) -> None:
        items: list[JSON] = []
        cont: str | None = None
        rv = ""
        while True:
            page = self.client.list(
                self.api_version,
                self.kind,
                namespace=self.namespace,
                label_selector=self.label_selector,
                field_selector=self.field_selector,
                limit=self.page_size,
                continue_=cont,
            )
            page_items = page.get("items") or []
            if page_items and "kind" not in page_items[0]:
                kind = self.kind
                for it in page_items:
                    it.setdefault("apiVersion", self.api_version)
                    it.setdefault("kind", kind)
            items.extend(page_items)
            md = page.get("metadata") or {}
            rv = md.get("resourceVersion") or rv
            cont = md.get("continue")
            if not cont:
                break
            if self._stop.is_set():
                return
        self.lists += 1
        metrics.reflector_lists_total.labels(self.name).inc()
        self.sink.replace(items, rv)
        self.last_resource_version = rv
        log.debug("reflector.listed", reflector=self.name, items=len(items), resource_version=rv)

    def _watch_once(self) -> bool:
        """One watch until the server ends it; True if it was healthy (it delivered
        events or ran for a while), which resets the backoff."""
        lo, hi = self.watch_timeout
        timeout = max(1, int(random.uniform(lo, hi)))
        w = self.client.watch(
            self.api_version,
            self.kind,
            namespace=self.namespace,
            resource_version=self.last_resource_version,
            timeout_seconds=timeout,
            allow_bookmarks=True,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
        )
        with self._watch_lock:
            if self._stop.is_set():
                w.close()
                return False
            self._watch = w
        start = time.monotonic()
        n = 0
        try:
            for ev in w:
                if self._stop.is_set():
                    return False
                etype = ev.get("type")
                obj = ev.get("object") or {}
                if etype == "ERROR":
                    code = int(obj.get("code") or 500)
                    raise errors.from_status(code, obj)
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if etype == "BOOKMARK":
                    if rv:
                        self.last_resource_version = rv
                    continue
                if etype not in ("ADDED", "MODIFIED", "DELETED"):
                    log.warning("reflector.unknown_event", reflector=self.name, type=etype)
                    continue
                obj.setdefault("apiVersion", self.api_version)
                obj.setdefault("kind", self.kind)
                self.sink.watch_event(etype, obj)
                n += 1
                if rv:
                    self.last_resource_version = rv
        finally:
            with self._watch_lock:
                self._watch = None
            w.close()
        lasted = time.monotonic() - start
        if n == 0 and lasted < 1.0 and not self._stop.is_set():
            raise errors.ApiError(0, "VeryShortWatch", "watch closed within 1s with no events")
        return n > 0 or lasted >= 10.0
