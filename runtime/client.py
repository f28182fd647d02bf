"""A dynamic Kubernetes client on urllib3 returning raw dicts (parsed with orjson).

Any resource, built-in or custom, is addressed by ``apiVersion`` + ``kind``; discovery
maps the kind to its REST resource and scope, cached per group/version (refreshed once
when a kind is missing, so CRDs installed later are found). API errors are raised as
the typed exceptions of :mod:`runtime.errors`.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

import orjson
import structlog
import urllib3

from runtime import errors
from runtime.ratelimit import TokenBucket

log = structlog.get_logger("runtime.client")

JSON = dict[str, Any]

PATCH_CONTENT_TYPES = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "apply": "application/apply-patch+yaml",
}


@dataclass
class RestConfig:
    """How to reach and authenticate to an API server."""

    host: str
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    token: str | None = None  # the bearer token, without the "Bearer " prefix
    verify: bool = True
    tls_server_name: str | None = None
    impersonate_user: str | None = None
    impersonate_groups: list[str] = field(default_factory=list)
    qps: float = 50.0
    burst: int = 100
    timeout: float = 30.0
    pool_maxsize: int = 32
    user_agent: str = "runtime-client/0.1"
    token_file: str | None = None  # re-read when it changes (a projected SA token)
    _k8s_config: Any = None  # kubernetes.client.Configuration, for token refresh

    @classmethod
    def from_kubeconfig(
        cls, path: str | None = None, context: str | None = None, **kw: Any
    ) -> RestConfig:
        """Load a kubeconfig file (``$KUBECONFIG`` or ``~/.kube/config`` when ``path`` is None).
        Read by :mod:`runtime.kubeconfig` when it can (certificates, tokens), else by
        the ``kubernetes`` package (exec plugins, auth providers)."""
        from runtime import kubeconfig

        light = kubeconfig.load(path, context)
        if light is not None:
            return cls(**light, **kw)
        from kubernetes import client as kclient
        from kubernetes import config as kconfig

        cfg = kclient.Configuration()
        kconfig.load_kube_config(config_file=path, context=context, client_configuration=cfg)
        return cls._from_k8s(cfg, **kw)

    @classmethod
    def in_cluster(cls, **kw: Any) -> RestConfig:
        sa = "/var/run/secrets/kubernetes.io/serviceaccount"
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get(
            "KUBERNETES_SERVICE_PORT")
        if host and port and os.path.exists(f"{sa}/token"):
            if ":" in host:
                host = f"[{host}]"
            return cls(host=f"https://{host}:{port}", ca_file=f"{sa}/ca.crt",
                       token_file=f"{sa}/token", **kw)
        from kubernetes import client as kclient
        from kubernetes import config as kconfig

        cfg = kclient.Configuration()
        kconfig.load_incluster_config(client_configuration=cfg)
        return cls._from_k8s(cfg, **kw)

    @classmethod
    def load(cls, kubeconfig: str | None = None, **kw: Any) -> RestConfig:
        """In-cluster config when running in a pod and no kubeconfig is given, else kubeconfig."""
        if (
            kubeconfig is None
            and os.environ.get("KUBERNETES_SERVICE_HOST")
            and not os.environ.get("KUBECONFIG")
        ):
            return cls.in_cluster(**kw)
        return cls.from_kubeconfig(kubeconfig, **kw)

    @classmethod
    def _from_k8s(cls, cfg: Any, **kw: Any) -> RestConfig:
        rc = cls(
            host=cfg.host.rstrip("/"),
            ca_file=cfg.ssl_ca_cert,
            cert_file=cfg.cert_file,
            key_file=cfg.key_file,
            verify=bool(cfg.verify_ssl),
            tls_server_name=getattr(cfg, "tls_server_name", None),
            **kw,
        )
        rc._k8s_config = cfg
        return rc

    def bearer(self) -> str | None:
        if self.token_file:
            return f"Bearer {_read_token(self.token_file)}"
        if self._k8s_config is not None:
            for ident in ("BearerToken", "authorization"):
                v = self._k8s_config.get_api_key_with_prefix(ident)
                if v:
                    return v if v.lower().startswith("bearer ") else f"Bearer {v}"
        return f"Bearer {self.token}" if self.token else None

    def impersonating(self, user: str, groups: list[str] | None = None) -> RestConfig:
        """A copy of this config that impersonates ``user`` (and ``groups``)."""
        import copy

        c = copy.copy(self)
        c.impersonate_user = user
        c.impersonate_groups = list(groups or [])
        return c


_TOKENS: dict[str, tuple[float, str]] = {}


def _read_token(path: str) -> str:
    """The token in ``path``, read again when the file changes (kubelet rotates it)."""
    mtime = os.stat(path).st_mtime
    cached = _TOKENS.get(path)
    if cached is None or cached[0] != mtime:
        with open(path) as f:
            cached = _TOKENS[path] = (mtime, f.read().strip())
    return cached[1]


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


class Watch:
    """A streaming watch: iterate to get ``{"type": ..., "object": {...}}`` events.

    Iteration ends when the server closes the stream (normal timeout). ``close()`` may be
    called from another thread to stop it.
    """

    def __init__(self, response: urllib3.BaseHTTPResponse) -> None:
        self._resp = response
        self._closed = False

    def __iter__(self) -> Iterator[JSON]:
        buf = b""
        try:
            for chunk in self._resp.stream(65536, decode_content=True):
                if self._closed:
                    return
                buf += chunk
                while True:
                    i = buf.find(b"\n")
                    if i < 0:
                        break
                    line, buf = buf[:i], buf[i + 1 :]
                    if line.strip():
                        yield orjson.loads(line)
            if buf.strip() and not self._closed:
                yield orjson.loads(buf)
        except (urllib3.exceptions.HTTPError, OSError, orjson.JSONDecodeError) as e:
            if self._closed:
                return
            raise errors.ApiError(0, "TransportError", f"watch stream broken: {e}") from e
        finally:
            self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            self._resp.shutdown()
        with contextlib.suppress(Exception):
            self._resp.release_conn()


class Client:
    """Get/list/create/update/patch/delete any resource; raw dicts in and out."""

    def __init__(self, config: RestConfig) -> None:
        self.config = config
        self.limiter = TokenBucket(config.qps, config.burst) if config.qps > 0 else None
        kw: dict[str, Any] = {"maxsize": config.pool_maxsize, "block": False}
        if config.host.startswith("https"):
            if config.verify:
                kw["cert_reqs"] = ssl.CERT_REQUIRED
                if config.ca_file:
                    kw["ca_certs"] = config.ca_file
                if config.tls_server_name:
                    kw["server_hostname"] = config.tls_server_name
            else:
                kw["cert_reqs"] = ssl.CERT_NONE
            if config.cert_file:
                kw["cert_file"] = config.cert_file
                kw["key_file"] = config.key_file
        self._pool = urllib3.PoolManager(num_pools=4, **kw)
        self._disco_lock = threading.Lock()
        self._disco: dict[str, dict[str, ResourceInfo]] = {}  # groupVersion -> kind -> info

    @classmethod
    def from_kubeconfig(cls, path: str | None = None, **kw: Any) -> Client:
        return cls(RestConfig.from_kubeconfig(path, **kw))

    def impersonate(self, user: str, groups: list[str] | None = None) -> Client:
        """A new client acting as ``user`` (e.g. ``system:serviceaccount:ns:name``)."""
        return Client(self.config.impersonating(user, groups))

    # ------------------------------------------------------------------ transport
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
    ) -> JSON:
        """One API call; returns the parsed JSON body or raises an ``ApiError``."""
        if self.limiter is not None:
            self.limiter.wait()
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else orjson.dumps(body)
        headers = self._headers(content_type if data is not None else None)
        headers = _multi_header(headers)
        try:
            resp = self._pool.request(
                method,
                self._url(path, params),
                body=data,
                headers=headers,
                timeout=urllib3.Timeout(total=timeout or self.config.timeout),
                retries=False,
                preload_content=True,
            )
        except urllib3.exceptions.HTTPError as e:
            raise errors.ApiError(0, "TransportError", str(e)) from e
        if resp.status >= 400:
            raise errors.from_status(resp.status, resp.data)
        if not resp.data:
            return {}
        return orjson.loads(resp.data)

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
        self, obj: Mapping[str, Any], namespace: str | None = None, dry_run: bool = False
    ) -> JSON:
        info = self._info(obj["apiVersion"], obj["kind"])
        ns = namespace or obj.get("metadata", {}).get("namespace")
        params = {"dryRun": "All"} if dry_run else None
        return self.request("POST", info.path(ns), body=obj, params=params)

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
    ) -> JSON:
        """POST to a subresource, e.g. ``pods/binding`` or ``serviceaccounts/token``."""
        return self.request(
            "POST", self._info(api_version, kind).path(namespace, name, subresource), body=body
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
        """Open a watch stream (line-delimited JSON events)."""
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
            raise errors.ApiError(0, "TransportError", str(e)) from e
        if resp.status >= 400:
            data = resp.read()
            resp.release_conn()
            raise errors.from_status(resp.status, data)
        return Watch(resp)


def _multi_header(h: dict[str, Any]) -> Any:
    """urllib3 needs an HTTPHeaderDict to send a repeated header (Impersonate-Group)."""
    groups = h.pop("Impersonate-Group", None)
    if not groups:
        return h
    hd = urllib3.HTTPHeaderDict(h)
    for g in groups:
        hd.add("Impersonate-Group", g)
    return hd
