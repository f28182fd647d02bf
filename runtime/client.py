"""A dynamic Kubernetes client returning raw dicts (parsed with orjson).

Any resource, built-in or custom, is addressed by ``apiVersion`` + ``kind``; discovery
maps the kind to its REST resource and scope, cached per group/version (refreshed once
when a kind is missing, so CRDs installed later are found). API errors are raised as
the typed exceptions of :mod:`runtime.errors`.

Guarantees of :meth:`Client.request`:

* every attempt first waits for this client's own token bucket (QPS/burst); clients made
  for different purposes (the controllers, Events, the leader Lease) never share one;
* failures are retried as :mod:`runtime.retry` says (429 and ``Retry-After`` always,
  except a PodDisruptionBudget's refusal of an eviction; 5xx and broken connections
  only for idempotent requests), a bounded number of times, never past the caller's
  ``deadline``;
* with a ``write_guard`` (the manager's leader fence), no create, update, patch or
  delete leaves this process unless the guard allows it at that moment;
* a body that is not JSON, or a watch line cut short, is an ``ApiError`` carrying the
  first bytes received, never a crash;
* every attempt is counted in ``rest_client_requests_total{code,method,host}`` and
  timed in ``rest_client_request_duration_seconds``.

Transport: a unary request (everything but a watch) goes over this client's own
kept-alive ``http.client`` connections, :mod:`runtime.connpool` (about half of
urllib3's CPU per request); a watch's stream, and every request when the kubeconfig
names a ``proxy-url``, over urllib3 (its CONNECT tunnels and streamed reads). Both read
response headers with :mod:`runtime.httpheaders`' parser (the same message, without
the ``email`` package's cost); ``http.client`` itself is left as it is.
"""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import orjson
import structlog
import urllib3

from runtime import errors, httpheaders, metrics
from runtime.connpool import ConnectionPool, TransportFailure
from runtime.ratelimit import TokenBucket
from runtime.restconfig import RestConfig
from runtime.retry import Backoff, RetryPolicy, idempotent, parse_retry_after, retryable
from runtime.watch import Watch

log = structlog.get_logger("runtime.client")

JSON = dict[str, Any]

PATCH_CONTENT_TYPES = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "apply": "application/apply-patch+yaml",
}


@dataclass(frozen=True)
class ResourceInfo:
    group: str
    version: str
    resource: str  # plural
    kind: str
    namespaced: bool
    verbs: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.resource}"
        if name:
            base += f"/{quote(name, safe='')}"
            if subresource:
                base += f"/{subresource}"
        return base


def split_api_version(api_version: str) -> tuple[str, str]:
    if "/" in api_version:
        g, v = api_version.split("/", 1)
        return g, v
    return "", api_version


#: called before every write; raises errors.NotLeader, or returns the seconds the
#: permission still holds (None: no limit)
WriteGuard = Callable[[], "float | None"]
MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def _transport_reason(e: Exception) -> str:
    if isinstance(e, urllib3.exceptions.NewConnectionError):
        return "ConnectionRefused"
    if isinstance(e, urllib3.exceptions.ConnectTimeoutError):
        return "ConnectTimeout"
    if isinstance(e, urllib3.exceptions.ReadTimeoutError):
        return "ReadTimeout"
    return "TransportError"


class Client:
    """Get/list/create/update/patch/delete any resource; raw dicts in and out.

    ``qps``/``burst`` (default: the config's) size this client's own token bucket;
    ``retry`` bounds its retries; ``write_guard`` fences its writes (see the module)."""

    def __init__(
        self,
        config: RestConfig,
        *,
        qps: float | None = None,
        burst: int | None = None,
        retry: RetryPolicy | None = None,
        write_guard: WriteGuard | None = None,
    ) -> None:
        self.config = config
        qps = config.qps if qps is None else qps
        burst = config.burst if burst is None else burst
        self.limiter = TokenBucket(qps, burst) if qps > 0 else None
        self.retry_policy = retry or RetryPolicy()
        self._backoff = Backoff(self.retry_policy)
        self.write_guard = write_guard
        self.host = urlsplit(config.host).netloc or config.host
        kw: dict[str, Any] = {"maxsize": config.pool_maxsize, "block": False}
        ctx: ssl.SSLContext | None = None
        if config.host.startswith("https"):
            # credentials from memory (RestConfig.ssl_context), never from temp files
            ctx = kw["ssl_context"] = config.ssl_context()
            kw["cert_reqs"] = ssl.CERT_REQUIRED if config.verify else ssl.CERT_NONE
            if config.verify and config.tls_server_name:
                kw["server_hostname"] = config.tls_server_name
        if config.proxy_url:
            # the cluster's proxy-url: plain HTTP forwarded, HTTPS through CONNECT
            self._pool: urllib3.PoolManager = urllib3.ProxyManager(
                config.proxy_url, num_pools=4, **kw)
        else:
            self._pool = urllib3.PoolManager(num_pools=4, **kw)
        self._pool.pool_classes_by_scheme = httpheaders.POOL_CLASSES
        # Requests go straight to the one host's connection pool: the PoolManager's URL
        # parsing and pool-key lookup per request cost as much as a tenth of the
        # controller's CPU. Not for plain HTTP through a proxy (the proxy wants the
        # absolute URL, which the PoolManager sends).
        split = urlsplit(config.host)
        self._base_path = split.path.rstrip("/")
        self._host_pool: urllib3.HTTPConnectionPool | None = None
        #: unary requests without a proxy: our own connections (runtime/connpool.py),
        #: about half urllib3's CPU per request
        self._conns: ConnectionPool | None = None
        if split.scheme in ("http", "https") and split.hostname and not config.proxy_url:
            self._conns = ConnectionPool(
                split.hostname, split.port or (443 if ctx is not None else 80),
                maxsize=config.pool_maxsize, context=ctx,
                server_hostname=config.tls_server_name if config.verify else None)
        elif split.scheme and split.netloc and (
                not config.proxy_url or split.scheme == "https"):
            self._host_pool = self._pool.connection_from_url(config.host)
        self._disco_lock = threading.Lock()
        self._disco: dict[str, dict[str, ResourceInfo]] = {}  # groupVersion -> kind -> info
        #: (metric, label values) -> the metric's child for this host: ``labels()``
        #: validates and locks on every call, three calls a request
        self._children: dict[tuple[Any, ...], Any] = {}

    @classmethod
    def from_kubeconfig(cls, path: str | None = None, **kw: Any) -> Client:
        return cls(RestConfig.from_kubeconfig(path, **kw))

    def impersonate(self, user: str, groups: list[str] | None = None,
                    extra: Mapping[str, list[str]] | None = None) -> Client:
        """A new client acting as ``user`` (e.g. ``system:serviceaccount:ns:name``)."""
        return Client(self.config.impersonating(user, groups, extra), retry=self.retry_policy)

    def derive(
        self,
        *,
        qps: float | None = None,
        burst: int | None = None,
        retry: RetryPolicy | None = None,
        write_guard: WriteGuard | None = None,
    ) -> Client:
        """A client to the same server with its own connection pool and token bucket
        (kube-scheduler's separate clients for Events and for the leader Lease)."""
        return Client(
            self.config,
            qps=qps,
            burst=burst,
            retry=retry or self.retry_policy,
            write_guard=write_guard,
        )

    # ------------------------------------------------------------------ transport
    def _child(self, metric: Any, *values: str) -> Any:
        """``metric.labels(*values, self.host)``, looked up once per label set."""
        key = (metric, *values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values, self.host)
        return child

    def _headers(self, content_type: str | None = None) -> dict[str, Any]:
        h: dict[str, Any] = {"Accept": "application/json", "User-Agent": self.config.user_agent}
        tok = self.config.bearer()
        if tok:
            h["Authorization"] = tok
        if content_type:
            h["Content-Type"] = content_type
        if self.config.impersonate_user:
            h["Impersonate-User"] = self.config.impersonate_user
            if self.config.impersonate_groups:
                h["Impersonate-Group"] = list(self.config.impersonate_groups)
            for k, v in self.config.impersonate_extra.items():
                h[f"Impersonate-Extra-{quote(k, safe='')}"] = list(v)
        return h

    def _url(self, path: str, params: Mapping[str, Any] | None) -> str:
        url = self.config.host + path
        if params:
            clean = {
                k: ("true" if v is True else "false" if v is False else v)
                for k, v in params.items()
                if v is not None
            }
            if clean:
                url += "?" + urlencode(clean)
        return url

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        params: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
        timeout: float | None = None,
        *,
        deadline: float | None = None,
        idempotent_: bool | None = None,
    ) -> JSON:
        """One API call, retried as the module says; returns the parsed JSON body or
        raises an ``ApiError``. ``deadline`` (``time.monotonic()``) bounds the whole call:
        rate-limiter waits, attempts and backoffs. ``idempotent_=True`` lets a POST be
        retried after a 5xx or a broken connection (only where AlreadyExists is handled)."""
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else orjson.dumps(body)
        is_idem = idempotent(method, content_type) if idempotent_ is None else idempotent_
        url = self._url(path, params)
        failures = 0
        while True:
            try:
                return self._attempt(method, url, data, content_type, timeout, deadline)
            except errors.ApiError as e:
                if failures + 1 >= self.retry_policy.attempts or not retryable(e, method, is_idem):
                    raise
                failures += 1
                delay = self._backoff.delay(failures, e)
                if deadline is not None and time.monotonic() + delay >= deadline:
                    raise
                metrics.rest_client_request_retries_total.labels(
                    str(e.status or "<error>"), method, self.host
                ).inc()
                log.info(
                    "client.retry",
                    method=method,
                    path=path,
                    status=e.status,
                    reason=e.reason,
                    error=e.message[:200],
                    attempt=failures,
                    wait=round(delay, 3),
                )
                time.sleep(delay)

    def _attempt(
        self,
        method: str,
        url: str,
        data: bytes | None,
        content_type: str,
        timeout: float | None,
        deadline: float | None,
    ) -> JSON:
        timeout = timeout or self.config.timeout
        if self.limiter is not None:
            wait = self.limiter.reserve()
            if deadline is not None and time.monotonic() + wait >= deadline:
                raise errors.ApiError(0, "ClientDeadline", "rate limiter wait passes the deadline")
            self._child(metrics.rest_client_rate_limiter_duration_seconds, method).observe(wait)
            if wait > 0:
                time.sleep(wait)
        if deadline is not None:
            left = deadline - time.monotonic()
            timeout = left if timeout is None else min(timeout, left)
            if timeout <= 0:
                raise errors.ApiError(0, "ClientDeadline", "deadline passed before the request")
        if self.write_guard is not None and method in MUTATING:
            allowed_for = self.write_guard()  # raises NotLeader
            if allowed_for is not None:
                timeout = max(0.001, allowed_for if timeout is None
                              else min(timeout, allowed_for))
        headers = self._headers(content_type if data is not None else None)
        if self._conns is not None:
            return self._attempt_own(method, url, data, headers, timeout)
        headers = _multi_header(headers)
        t0 = time.monotonic()
        try:
            if self._host_pool is not None:
                resp = self._host_pool.urlopen(
                    method,
                    self._base_path + url[len(self.config.host):],
                    body=data,
                    headers=headers,
                    timeout=urllib3.Timeout(total=timeout),
                    retries=False,
                    redirect=False,
                    assert_same_host=False,
                    preload_content=True,
                )
            else:
                resp = self._pool.request(
                    method,
                    url,
                    body=data,
                    headers=headers,
                    timeout=urllib3.Timeout(total=timeout),
                    retries=False,
                    preload_content=True,
                )
        except urllib3.exceptions.HTTPError as e:
            self._child(metrics.rest_client_requests_total, "<error>", method).inc()
            raise errors.ApiError(0, _transport_reason(e), str(e)) from e
        finally:
            self._child(metrics.rest_client_request_duration_seconds, method).observe(
                time.monotonic() - t0)
        self._child(metrics.rest_client_requests_total, str(resp.status), method).inc()
        return _answer(resp.status, resp.headers, resp.data)

    def _attempt_own(self, method: str, url: str, data: bytes | None,
                     headers: dict[str, Any], timeout: float | None) -> JSON:
        """One attempt on our own connections: the same metrics, errors and answers as
        urllib3's path above."""
        assert self._conns is not None
        t0 = time.monotonic()
        try:
            ans = self._conns.request(
                method, self._base_path + url[len(self.config.host):], data, headers, timeout)
        except TransportFailure as e:
            self._child(metrics.rest_client_requests_total, "<error>", method).inc()
            raise errors.ApiError(0, e.reason, str(e)) from e
        finally:
            self._child(metrics.rest_client_request_duration_seconds, method).observe(
                time.monotonic() - t0)
        self._child(metrics.rest_client_requests_total, str(ans.status), method).inc()
        return _answer(ans.status, ans.headers, ans.data)

    # ------------------------------------------------------------------ discovery
    def resource_for(self, api_version: str, kind: str) -> ResourceInfo:
        """Map apiVersion+kind to its REST resource and scope (discovery, cached)."""
        gv = self._disco.get(api_version)
        if gv is not None and kind in gv:
            return gv[kind]
        with self._disco_lock:
            gv = self._discover(api_version)
            self._disco[api_version] = gv
        if kind not in gv:
            raise errors.NotFound(404, "NotFound", f"no kind {kind!r} in {api_version}")
        return gv[kind]

    def resource_by_name(self, api_version: str, resource: str) -> ResourceInfo:
        """Like :meth:`resource_for` but by plural resource name (``"configmaps"``)."""
        gv = self._disco.get(api_version)
        if gv is None or not any(r.resource == resource for r in gv.values()):
            with self._disco_lock:
                gv = self._discover(api_version)
                self._disco[api_version] = gv
        for r in gv.values():
            if r.resource == resource:
                return r
        raise errors.NotFound(404, "NotFound", f"no resource {resource!r} in {api_version}")

    def _discover(self, api_version: str) -> dict[str, ResourceInfo]:
        group, version = split_api_version(api_version)
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        data = self.request("GET", path)
        out: dict[str, ResourceInfo] = {}
        for r in data.get("resources", []):
            if "/" in r["name"]:
                continue
            out[r["kind"]] = ResourceInfo(
                group,
                version,
                r["name"],
                r["kind"],
                bool(r.get("namespaced")),
                tuple(r.get("verbs") or ()),
            )
        return out

    def invalidate_discovery(self) -> None:
        with self._disco_lock:
            self._disco.clear()

    def _info(self, api_version: str, kind: str) -> ResourceInfo:
        return self.resource_for(api_version, kind)

    # ------------------------------------------------------------------ verbs
    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> JSON:
        return self.request("GET", self._info(api_version, kind).path(namespace, name))

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_: str | None = None,
        resource_version: str | None = None,
        timeout: float | None = None,
    ) -> JSON:
        """One page of a list (``metadata.continue`` names the next page)."""
        params = {
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
            "limit": limit,
            "continue": continue_,
            "resourceVersion": resource_version,
        }
        return self.request(
            "GET", self._info(api_version, kind).path(namespace), params=params, timeout=timeout
        )

    def list_all(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        page_size: int = 500,
        **kw: Any,
    ) -> JSON:
        """All pages of a list merged into one ``{"items": [...], "metadata": {...}}``."""
        items: list[JSON] = []
        cont = None
        while True:
            page = self.list(api_version, kind, namespace, limit=page_size, continue_=cont, **kw)
            items.extend(page.get("items") or [])
            cont = (page.get("metadata") or {}).get("continue")
            if not cont:
                page["items"] = items
                return page

    def create(
        self,
        obj: Mapping[str, Any],
        namespace: str | None = None,
        dry_run: bool = False,
        handles_already_exists: bool = False,
        field_validation: str | None = None,
    ) -> JSON:
        """POST the object. A create is retried after a 5xx or a broken connection only
        with ``handles_already_exists=True``: the first attempt may have been applied, so
        a retry can answer AlreadyExists for our own object, which the caller adopts.
        ``field_validation``: the API server's ``fieldValidation`` (``Strict`` refuses an
        unknown field, as ``kubectl apply`` asks; unset, the server drops it with a
        warning)."""
        info = self._info(obj["apiVersion"], obj["kind"])
        ns = namespace or obj.get("metadata", {}).get("namespace")
        params = {"dryRun": "All"} if dry_run else {}
        if field_validation:
            params["fieldValidation"] = field_validation
        return self.request(
            "POST",
            info.path(ns),
            body=obj,
            params=params or None,
            idempotent_=True if handles_already_exists else None,
        )

    def update(self, obj: Mapping[str, Any], subresource: str | None = None) -> JSON:
        """PUT the object (optimistic concurrency through ``metadata.resourceVersion``)."""
        md = obj["metadata"]
        info = self._info(obj["apiVersion"], obj["kind"])
        return self.request(
            "PUT", info.path(md.get("namespace"), md["name"], subresource), body=obj
        )

    def update_status(self, obj: Mapping[str, Any]) -> JSON:
        return self.update(obj, subresource="status")

    def patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        patch: Any,
        namespace: str | None = None,
        patch_type: str = "merge",
        field_manager: str | None = None,
        force: bool | None = None,
        subresource: str | None = None,
    ) -> JSON:
        """PATCH with ``patch_type`` one of merge, json, strategic (built-ins) or apply (SSA)."""
        if patch_type not in PATCH_CONTENT_TYPES:
            raise ValueError(f"unknown patch type {patch_type!r}")
        if patch_type == "apply" and not field_manager:
            raise ValueError("server-side apply needs a field_manager")
        params = {"fieldManager": field_manager, "force": force}
        return self.request(
            "PATCH",
            self._info(api_version, kind).path(namespace, name, subresource),
            body=patch,
            params=params,
            content_type=PATCH_CONTENT_TYPES[patch_type],
        )

    def apply(
        self,
        obj: Mapping[str, Any],
        field_manager: str,
        force: bool = False,
        subresource: str | None = None,
    ) -> JSON:
        """Server-side apply of a (partial) object."""
        md = obj["metadata"]
        return self.patch(
            obj["apiVersion"],
            obj["kind"],
            md["name"],
            obj,
            namespace=md.get("namespace"),
            patch_type="apply",
            field_manager=field_manager,
            force=force,
            subresource=subresource,
        )

    def delete(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None = None,
        propagation_policy: str | None = None,
        preconditions: Mapping[str, str] | None = None,
        grace_period_seconds: int | None = None,
    ) -> JSON:
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if propagation_policy:
            body["propagationPolicy"] = propagation_policy
        if preconditions:
            body["preconditions"] = dict(preconditions)
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        return self.request(
            "DELETE", self._info(api_version, kind).path(namespace, name), body=body
        )

    def create_subresource(
        self,
        api_version: str,
        kind: str,
        name: str,
        subresource: str,
        body: Mapping[str, Any],
        namespace: str | None = None,
        *,
        deadline: float | None = None,
    ) -> JSON:
        """POST to a subresource, e.g. ``pods/binding`` or ``serviceaccounts/token``;
        ``deadline`` (``time.monotonic()``) bounds its retries, as ``request``'s."""
        return self.request(
            "POST", self._info(api_version, kind).path(namespace, name, subresource), body=body,
            deadline=deadline,
        )

    def watch(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        resource_version: str | None = None,
        timeout_seconds: int | None = None,
        allow_bookmarks: bool = True,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Watch:
        """Open a watch stream (line-delimited JSON events). One attempt: the reflector
        backs off and resumes."""
        if self.limiter is not None:
            self.limiter.wait()
        params = {
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": allow_bookmarks,
            "timeoutSeconds": timeout_seconds,
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
        }
        url = self._url(self._info(api_version, kind).path(namespace), params)
        read_timeout = (timeout_seconds or 300) + 30
        try:
            resp = self._pool.request(
                "GET",
                url,
                headers=_multi_header(self._headers()),
                timeout=urllib3.Timeout(connect=self.config.timeout, read=read_timeout),
                retries=False,
                preload_content=False,
            )
        except urllib3.exceptions.HTTPError as e:
            metrics.rest_client_requests_total.labels("<error>", "WATCH", self.host).inc()
            raise errors.ApiError(0, _transport_reason(e), str(e)) from e
        metrics.rest_client_requests_total.labels(str(resp.status), "WATCH", self.host).inc()
        if resp.status >= 400:
            try:
                data = resp.read()
            except (urllib3.exceptions.HTTPError, OSError):
                data = b""
            resp.release_conn()
            raise errors.from_status(
                resp.status, data, parse_retry_after(resp.headers.get("Retry-After"))
            )
        return Watch(resp)


def _answer(status: int, headers: Any, data: bytes) -> JSON:
    """The JSON of an answer, or its ``ApiError`` (a status of 400 or more, a body
    that is not JSON)."""
    if status >= 400:
        raise errors.from_status(status, data, parse_retry_after(headers.get("Retry-After")))
    if not data:
        return {}
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise errors.ApiError(
            0,
            "BadResponse",
            f"{status} answer is not JSON: {data[:200]!r}",
        ) from e


def _multi_header(h: dict[str, Any]) -> Any:
    """urllib3 needs an HTTPHeaderDict to send a repeated header (Impersonate-Group,
    Impersonate-Extra-*): every list value is sent as one header per item."""
    if not any(isinstance(v, list) for v in h.values()):
        return h
    hd = urllib3.HTTPHeaderDict({k: v for k, v in h.items() if not isinstance(v, list)})
    for k, v in h.items():
        if isinstance(v, list):
            for item in v:
                hd.add(k, item)
    return hd
