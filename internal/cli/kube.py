"""Cluster access for the plugin: loads the kubeconfig, reads the objects the views
need, and turns every failure into a :class:`CliError` with a plain message and an
exit code (no tracebacks for a user's mistake or an unreachable cluster)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from api.v1alpha1.keys import GROUP, WORKLOAD_UID_LABEL
from api.v1alpha1.types import API_VERSION
from internal.objects import JSON
from runtime import Client, RestConfig, errors
from runtime.kubeconfig import KubeconfigError
from runtime.kubeconfig import context_namespace as kubeconfig_namespace
from runtime.retry import RetryPolicy

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_NO_CRD = 4
EXIT_NOT_FOUND = 5

CRD_HINT = "install it with: kubectl apply -k config/crd"


class CliError(Exception):
    """An error the plugin reports on stderr, exiting with ``code``."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class Forbidden(CliError):
    """The API server refused the caller ``verb`` on ``kind`` in ``namespace`` (None:
    at the cluster scope); ``reason`` is its own sentence. ``roles.needs`` turns it
    into the line that names the role to ask for."""

    def __init__(self, message: str, kind: str | None, namespace: str | None,
                 verb: str, reason: str) -> None:
        super().__init__(message, EXIT_ERROR)
        self.kind, self.namespace, self.verb, self.reason = kind, namespace, verb, reason


@dataclass
class Kube:
    """A client plus the namespace the user asked for."""

    client: Client
    namespace: str
    all_namespaces: bool = False

    @classmethod
    def connect(cls, kubeconfig: str | None, namespace: str | None,
                all_namespaces: bool = False, timeout: float | None = 15.0, *,
                context: str | None = None, as_user: str | None = None,
                as_groups: list[str] | None = None) -> Kube:
        """A client from the kubeconfig (``context``; None: its current-context),
        acting as ``as_user``/``as_groups`` when given, with ``timeout`` seconds per
        request (None: none). The client retries once: a user waits for one answer."""
        where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        try:
            cfg = RestConfig.load(kubeconfig, context=context, timeout=timeout,
                                  user_agent="kubectl-gpu/0.1")
            ns = namespace or kubeconfig_namespace(kubeconfig, context) or "default"
        except KubeconfigError as e:  # names the file
            raise CliError(f"cannot load kubeconfig: {e}", EXIT_UNREACHABLE) from e
        except Exception as e:  # the kubernetes package's ConfigException, OSError
            raise CliError(f"cannot load kubeconfig {where}: {e}", EXIT_UNREACHABLE) from e
        if as_user:
            cfg = cfg.impersonating(as_user, as_groups or [])
        return cls(Client(cfg, retry=RetryPolicy(attempts=2)), ns, all_namespaces)

    @property
    def host(self) -> str:
        return self.client.config.host

    @property
    def list_namespace(self) -> str | None:
        return None if self.all_namespaces else self.namespace

    # ------------------------------------------------------------------ errors
    def translate(self, e: errors.ApiError, what: str = "", *, kind: str | None = None,
                  namespace: str | None = None, verb: str = "list") -> CliError:
        """An API error as the message a user reads (``kind``, ``namespace``, ``verb``:
        what was asked, for a refusal to name the role it needs)."""
        if e.status == 0:
            return CliError(
                f"cannot reach the Kubernetes API server at {self.host}: {e.message}; "
                "is the cluster running, and does your kubeconfig point at it?",
                EXIT_UNREACHABLE)
        if isinstance(e, errors.Unauthorized):
            return CliError(f"the API server at {self.host} rejected your credentials: "
                            f"{e.message}", EXIT_ERROR)
        if isinstance(e, errors.Forbidden):
            return Forbidden(f"forbidden{' (' + what + ')' if what else ''}: {e.message}",
                             kind, namespace, verb, e.message)
        if isinstance(e, errors.NotFound):
            return CliError(f"{what or 'object'} not found" + (f": {e.message}" if not what
                                                               else ""), EXIT_NOT_FOUND)
        if isinstance(e, errors.Invalid):
            causes = "".join(f"\n  {c.get('field', '')}: {c.get('message', '')}"
                             for c in e.causes)
            return CliError(f"invalid{' ' + what if what else ''}: {e.message}{causes}",
                            EXIT_ERROR)
        if isinstance(e, errors.AlreadyExists):
            return CliError(f"{what or 'object'} already exists", EXIT_ERROR)
        return CliError(f"API error{' (' + what + ')' if what else ''}: {e}", EXIT_ERROR)

    def require_kind(self, api_version: str, kind: str, crd: str | None = None) -> None:
        """Fails with EXIT_NO_CRD when the API server does not serve ``kind``."""
        try:
            self.client.resource_for(api_version, kind)
        except errors.NotFound as e:
            name = crd or f"{kind.lower()}s.{api_version.split('/')[0]}"
            raise CliError(
                f"the API server at {self.host} does not serve {kind} ({api_version}): "
                f"the CustomResourceDefinition {name} is not installed; {CRD_HINT}",
                EXIT_NO_CRD) from e
        except errors.ApiError as e:
            raise self.translate(e, f"discovering {api_version}") from e

    def require_crds(self) -> None:
        self.require_kind(API_VERSION, "GPUWorkload", f"gpuworkloads.{GROUP}")

    def has_kind(self, api_version: str, kind: str) -> bool:
        try:
            self.client.resource_for(api_version, kind)
            return True
        except errors.NotFound:
            return False
        except errors.ApiError as e:
            raise self.translate(e, f"discovering {api_version}") from e

    # ------------------------------------------------------------------ reads
    def _list(self, api_version: str, kind: str, namespace: str | None = None,
              **kw: Any) -> list[JSON]:
        try:
            return list(self.client.list_all(api_version, kind, namespace, **kw)["items"])
        except errors.ApiError as e:
            raise self.translate(e, f"listing {kind}", kind=kind, namespace=namespace) from e

    def workloads(self, namespace: str | None = None, all_namespaces: bool | None = None
                  ) -> list[JSON]:
        self.require_crds()
        allns = self.all_namespaces if all_namespaces is None else all_namespaces
        ns = None if allns else (namespace or self.namespace)
        items = self._list(API_VERSION, "GPUWorkload", ns)
        for it in items:
            it.setdefault("apiVersion", API_VERSION)
            it.setdefault("kind", "GPUWorkload")
        return sorted(items, key=lambda o: (o["metadata"].get("namespace") or "",
                                            o["metadata"]["name"]))

    def workloads_and_version(self) -> tuple[list[JSON], str | None]:
        """The workloads in scope and the list's resourceVersion (to watch from)."""
        self.require_crds()
        try:
            page = self.client.list_all(API_VERSION, "GPUWorkload", self.list_namespace)
        except errors.ApiError as e:
            raise self.translate(e, "listing GPUWorkload", kind="GPUWorkload",
                                 namespace=self.list_namespace) from e
        return list(page["items"]), (page.get("metadata") or {}).get("resourceVersion")

    def workload(self, name: str) -> JSON:
        self.require_crds()
        try:
            return self.client.get(API_VERSION, "GPUWorkload", name, self.namespace)
        except errors.ApiError as e:
            raise self.translate(e, f'GPUWorkload "{name}" in namespace '
                                    f'"{self.namespace}"', kind="GPUWorkload",
                                 namespace=self.namespace, verb="get") from e

    def gpunodes(self) -> list[JSON]:
        """GPUNode objects, or [] when that CRD is absent (the views fall back to
        the nodes' nvidia.com/gpu allocatable)."""
        if not self.has_kind(API_VERSION, "GPUNode"):
            return []
        return self._list(API_VERSION, "GPUNode")

    def nodes(self) -> list[JSON]:
        return self._list("v1", "Node")

    def queues(self) -> list[JSON]:
        """GPUQueue objects (cluster-scoped)."""
        return self._list(API_VERSION, "GPUQueue")

    def pods(self, namespace: str | None = None, label_selector: str | None = None,
             field_selector: str | None = None) -> list[JSON]:
        return self._list("v1", "Pod", namespace, label_selector=label_selector,
                          field_selector=field_selector)

    def workload_jobs(self, namespace: str | None = None) -> list[JSON]:
        """Every namespace's (or ``namespace``'s) Jobs of GPUWorkloads (Job mode: an
        unfinished one holds what its pod template names), or [] where the user may
        not list Jobs."""
        try:
            return self._list("batch/v1", "Job", namespace, label_selector=WORKLOAD_UID_LABEL)
        except CliError:
            return []

    def claims(self, namespace: str | None = None, label_selector: str | None = None
               ) -> list[JSON]:
        """ResourceClaims (``deviceExposure: dra``), or [] where the API has none."""
        if not self.has_kind("resource.k8s.io/v1", "ResourceClaim"):
            return []
        return self._list("resource.k8s.io/v1", "ResourceClaim", namespace,
                          label_selector=label_selector)

    def resource_slices(self) -> list[JSON]:
        """ResourceSlices (the DRA drivers' device inventory), or [] where the API has
        none."""
        if not self.has_kind("resource.k8s.io/v1", "ResourceSlice"):
            return []
        return self._list("resource.k8s.io/v1", "ResourceSlice")

    def events_for(self, obj: JSON, limit: int = 20) -> list[JSON]:
        """Recent core/v1 Events whose involvedObject is ``obj`` (oldest first; none
        when ``limit`` is 0)."""
        if limit <= 0:
            return []
        md = obj.get("metadata") or {}
        sel = f"involvedObject.name={md.get('name')},involvedObject.kind={obj.get('kind')}"
        if md.get("uid"):
            sel += f",involvedObject.uid={md['uid']}"
        items = self._list("v1", "Event", md.get("namespace"), field_selector=sel)
        items.sort(key=event_time)
        return items[-limit:]

    def create(self, obj: JSON, namespace: str, dry_run: bool = False,
               field_validation: str | None = None) -> JSON:
        kind = obj.get("kind", "object")
        name = (obj.get("metadata") or {}).get("name") or (obj.get("metadata") or {}).get(
            "generateName", "")
        try:
            return self.client.create(obj, namespace, dry_run=dry_run,
                                      field_validation=field_validation)
        except errors.NotFound as e:
            # a create's 404 is about its namespace (the object itself is new)
            if e.details.get("kind") == "namespaces" or not e.details:
                raise CliError(
                    f"namespace {namespace} not found; create it with: "
                    f"kubectl create namespace {namespace}", EXIT_NOT_FOUND) from e
            raise self.translate(e, f'{kind} "{name}" in namespace "{namespace}"') from e
        except errors.ApiError as e:
            raise self.translate(e, f'{kind} "{name}" in namespace "{namespace}"', kind=kind,
                                 namespace=namespace, verb="create") from e

    def watch_workloads(self, resource_version: str | None, timeout_seconds: int | None
                        ) -> Iterator[JSON]:
        self.require_crds()
        try:
            yield from self.client.watch(API_VERSION, "GPUWorkload", self.list_namespace,
                                         resource_version=resource_version,
                                         timeout_seconds=timeout_seconds,
                                         allow_bookmarks=False)
        except errors.ApiError as e:
            raise self.translate(e, "watching GPUWorkloads", kind="GPUWorkload",
                                 namespace=self.list_namespace, verb="watch") from e


def event_time(ev: JSON) -> str:
    return (ev.get("lastTimestamp") or ev.get("eventTime") or ev.get("firstTimestamp")
            or (ev.get("metadata") or {}).get("creationTimestamp") or "")
