"""Running the webhook: certificates, the HTTPS server, renewal and the CA bundle
loop. :func:`serve` is what ``main.py webhook`` calls; :func:`add_flags` and
:func:`serve_from_args` wire it to argparse. :class:`Webhook` runs the same inside
another process (the manager, or a test): ``start()`` / ``stop()``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import signal
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog

from api.v1alpha1.types import DeviceExposure
from internal.webhook.admission import DEFAULT_SCHEDULER_NAME
from internal.webhook.cabundle import CABundlePatcher
from internal.webhook.certs import service_hosts
from internal.webhook.exposure import parse_exposure
from internal.webhook.rotation import FileCerts, SelfSignedCerts, ServingCerts
from internal.webhook.server import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_IN_FLIGHT,
    WebhookServer,
)

log = structlog.get_logger("webhook")

WEBHOOK_CONFIG_NAME = "gpu-orchestrator-mutating-webhook"
SERVICE_NAME = "gpu-orchestrator-webhook"
SERVICE_NAMESPACE = "gpu-orchestrator-system"


class Webhook:
    """Certificates + server + a loop that renews them and keeps the bundle patched."""

    def __init__(self, certs: ServingCerts, server: WebhookServer,
                 patcher: CABundlePatcher | None, check_interval: float = 60.0) -> None:
        self.certs = certs
        self.server = server
        self.patcher = patcher
        self.check_interval = check_interval
        self._stop = threading.Event()
        self._loop: threading.Thread | None = None

    def sync(self) -> None:
        """One renewal check and bundle reconciliation."""
        try:
            self.certs.refresh()
        except Exception:
            log.exception("webhook_cert_refresh_failed")
        bundle = self.certs.ca_bundle()
        if bundle is None:
            return  # someone else (cert-manager's cainjector) publishes it
        if self.patcher is None or self.patcher.ensure(bundle):
            self.certs.mark_published(bundle)
            # A CA handover completes on the refresh after its bundle is published.
            if self.certs.refresh() and self.patcher is not None:
                self.patcher.ensure(self.certs.ca_bundle() or b"")

    def _run(self) -> None:
        while True:
            self.sync()
            if self._stop.wait(self.check_interval):
                return

    def start(self) -> None:
        self._stop.clear()
        self.server.start()
        self._loop = threading.Thread(target=self._run, name="webhook-certs", daemon=True)
        self._loop.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._loop is not None:
            self._loop.join(timeout)
            self._loop = None
        self.server.stop(timeout)


def build(
    *,
    bind_address: str = "0.0.0.0",
    port: int = 9443,
    cert_dir: str | None = None,
    self_signed: bool = True,
    hosts: Sequence[str] = (),
    service_name: str = SERVICE_NAME,
    service_namespace: str = SERVICE_NAMESPACE,
    webhook_config_name: str = WEBHOOK_CONFIG_NAME,
    patch_ca_bundle: bool = True,
    kubeconfig: str | None = None,
    device_exposure: DeviceExposure | str = DeviceExposure.CUDA_VISIBLE_DEVICES,
    cert_validity: dt.timedelta = dt.timedelta(days=90),
    ca_validity: dt.timedelta = dt.timedelta(days=3650),
    check_interval: float = 60.0,
    scheduler_name: str = DEFAULT_SCHEDULER_NAME,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
) -> Webhook:
    """A :class:`Webhook`, not started. See :func:`serve` for the arguments."""
    mode = (device_exposure if isinstance(device_exposure, DeviceExposure)
            else parse_exposure(device_exposure))
    certs: ServingCerts
    if self_signed:
        names = [*service_hosts(service_name, service_namespace), "127.0.0.1", *hosts]
        certs = SelfSignedCerts(cert_dir or tempfile.mkdtemp(prefix="webhook-certs-"), names,
                                cert_validity=cert_validity, ca_validity=ca_validity)
    else:
        if not cert_dir:
            raise ValueError("--cert-dir is required without --self-signed-certs")
        certs = FileCerts(Path(cert_dir))
    patcher = None
    if self_signed and patch_ca_bundle:
        from runtime.client import Client, RestConfig

        patcher = CABundlePatcher(Client(RestConfig.load(kubeconfig)), webhook_config_name)
    server = WebhookServer(certs, bind_address, port, mode, scheduler_name=scheduler_name,
                           max_in_flight=max_in_flight, max_connections=max_connections)
    return Webhook(certs, server, patcher, check_interval)


def serve(*, stop: threading.Event | None = None, **options: Any) -> int:
    """Runs the mutating webhook until ``stop`` is set (or SIGTERM/SIGINT when called
    from the main thread without ``stop``); returns the exit code (0). ``options``
    are :func:`build`'s:

    - ``self_signed``: generate and renew a CA and serving certificate for the
      Service DNS names, 127.0.0.1 and ``hosts``, kept in ``cert_dir`` (a temporary
      directory when None), and patch the CA bundle into ``webhook_config_name``
      (when ``patch_ca_bundle``; the client comes from ``kubeconfig`` or in-cluster).
      Otherwise serve ``cert_dir``/tls.crt and tls.key (cert-manager), reloaded when
      they change.
    - ``device_exposure``: the default mode; a pod may override it with the
      annotation ``gpu.orchestrator.dev/device-exposure``.
    - ``scheduler_name``: only pods that name it (and leave ``spec.nodeName`` unset)
      get devices; ``max_in_flight`` and ``max_connections`` bound the server (see
      :mod:`internal.webhook.server`).

    In a cluster the CA bundle is published by the certificate Job
    (``main.py webhook-certs``, config/webhook/certs-job.yaml) or by cert-manager, and
    the webhook runs with ``--no-self-signed-certs``: it then needs no API access at
    all, so a compromised webhook cannot widen its own configuration.
    """
    webhook = build(**options)
    if stop is None:
        stop = threading.Event()
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: stop.set())
    webhook.start()
    try:
        stop.wait()
    finally:
        log.info("webhook_shutting_down")
        webhook.stop()
    return 0


def add_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of ``main.py webhook``."""
    parser.add_argument("--bind-address", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=9443)
    parser.add_argument("--cert-dir", default=None,
                        help="where certificates live (mount an emptyDir or a Secret)")
    parser.add_argument("--self-signed-certs", action=argparse.BooleanOptionalAction,
                        default=True, help="generate and renew certificates (default); "
                        "--no-self-signed-certs serves cert-dir/tls.crt (cert-manager)")
    parser.add_argument("--host", action="append", default=[], dest="hosts",
                        help="extra DNS name or IP for the serving certificate (repeatable)")
    parser.add_argument("--service-name", default=SERVICE_NAME)
    parser.add_argument("--service-namespace", default=SERVICE_NAMESPACE)
    parser.add_argument("--webhook-config-name", default=WEBHOOK_CONFIG_NAME)
    parser.add_argument("--patch-ca-bundle", action=argparse.BooleanOptionalAction,
                        default=True)
    parser.add_argument("--device-exposure", default=DeviceExposure.CUDA_VISIBLE_DEVICES.value,
                        choices=[m.value for m in DeviceExposure])
    parser.add_argument("--cert-validity-days", type=float, default=90.0)
    parser.add_argument("--scheduler-name", default=DEFAULT_SCHEDULER_NAME,
                        help="only pods of this scheduler, not yet bound, get devices")
    parser.add_argument("--max-in-flight", type=int, default=DEFAULT_MAX_IN_FLIGHT,
                        help="reviews answered at once; beyond: 429")
    parser.add_argument("--max-connections", type=int, default=DEFAULT_MAX_CONNECTIONS,
                        help="open connections; beyond: closed at once")
    parser.add_argument("--kubeconfig", default=None)


def serve_from_args(args: argparse.Namespace) -> int:
    return serve(
        bind_address=args.bind_address, port=args.port, cert_dir=args.cert_dir,
        self_signed=args.self_signed_certs, hosts=args.hosts,
        service_name=args.service_name, service_namespace=args.service_namespace,
        webhook_config_name=args.webhook_config_name, patch_ca_bundle=args.patch_ca_bundle,
        kubeconfig=args.kubeconfig, device_exposure=args.device_exposure,
        cert_validity=dt.timedelta(days=args.cert_validity_days),
        scheduler_name=args.scheduler_name, max_in_flight=args.max_in_flight,
        max_connections=args.max_connections,
    )
