"""The webhook's certificates, made and published by a Job, not by the webhook.

``main.py webhook-certs`` runs once (a Job at install, a CronJob daily) with its own
service account, which may read and update one Secret and patch one
MutatingWebhookConfiguration, both named by ``resourceNames``. The webhook itself then
has no API access at all: a compromised webhook cannot widen its own rules.

One run, :func:`ensure`:

====================================  ===============================================
what it finds in the Secret           what it does
====================================  ===============================================
no CA, or one that is expired or in   a new CA; the bundle becomes new CA + the old
its last third of life                one (while valid); the **bundle is patched
                                      first**, then the Secret, so kube-apiserver
                                      trusts the new CA before the webhook serves it
no serving certificate, one in its    a serving certificate for the Service's DNS
last third, not issued by the CA, or  names, signed by the CA
missing one of the Service's names
all current                           nothing but making sure the bundle is in place
                                      (a ``kubectl apply`` of the configuration
                                      wipes it)
====================================  ===============================================

The Secret holds ``ca.crt``, ``ca.key``, ``tls.crt``, ``tls.key`` and
``ca-previous.crt`` (the CA it took over from, trusted until it expires). It must
exist (config/webhook ships it empty): ``create`` cannot be limited to one name by
RBAC, ``update`` can. The webhook mounts it and reloads ``tls.crt``/``tls.key`` when
the kubelet refreshes the volume.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
from dataclasses import dataclass
from typing import Any

import structlog

from internal.webhook import certs
from internal.webhook.cabundle import CABundlePatcher
from internal.webhook.certs import KeyPair
from runtime import errors
from runtime.client import Client, RestConfig

log = structlog.get_logger("webhook.certjob")

SECRET_NAME = "gpu-orchestrator-webhook-certs"
RENEW_FRACTION = 1 / 3


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _due(pair: KeyPair | None, now: dt.datetime) -> bool:
    if pair is None:
        return True
    life = pair.not_after - pair.not_before
    return now >= pair.not_after - life * RENEW_FRACTION


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@dataclass
class Outcome:
    """What one run changed."""

    new_ca: bool = False
    new_serving: bool = False
    bundle_in_place: bool = False


def _read(data: dict[str, str], cert: str, key: str) -> KeyPair | None:
    try:
        pair = KeyPair(base64.b64decode(data[cert]), base64.b64decode(data[key]))
        _ = pair.cert
        return pair
    except (KeyError, ValueError):
        return None


def ensure(client: Client, *, namespace: str, secret_name: str, hosts: list[str],
           webhook_config_name: str, ca_validity: dt.timedelta = dt.timedelta(days=3650),
           cert_validity: dt.timedelta = dt.timedelta(days=90),
           now: dt.datetime | None = None) -> Outcome:
    """One run (see the module docstring). Raises the API's error when the Secret or
    the configuration cannot be read or written; the Job's retries handle that."""
    now = now or _now()
    secret = client.get("v1", "Secret", secret_name, namespace)
    data: dict[str, str] = dict(secret.get("data") or {})
    ca = _read(data, "ca.crt", "ca.key")
    serving = _read(data, "tls.crt", "tls.key")
    previous = None
    if "ca-previous.crt" in data:
        try:
            prev_pem = base64.b64decode(data["ca-previous.crt"])
            previous = KeyPair(prev_pem, b"")
            if previous.not_after <= now:
                previous = None
        except ValueError:
            previous = None
    out = Outcome()
    if ca is None or ca.not_after <= now or _due(ca, now):
        if ca is not None and ca.not_after > now:
            previous = ca
        ca, serving, out.new_ca = certs.generate_ca(now, ca_validity), None, True
    if (serving is None or _due(serving, now) or serving.cert.issuer != ca.cert.subject
            or set(hosts) - certs.san_hosts(serving)):
        serving, out.new_serving = certs.issue_serving(ca, hosts, now, cert_validity), True
    bundle = ca.cert_pem + (previous.cert_pem if previous is not None else b"")
    patcher = CABundlePatcher(client, webhook_config_name)
    # the bundle first: the webhook serves the new certificate only after the Secret
    out.bundle_in_place = patcher.ensure(bundle)
    if out.new_ca or out.new_serving:
        data = {"ca.crt": _b64(ca.cert_pem), "ca.key": _b64(ca.key_pem),
                "tls.crt": _b64(serving.cert_pem), "tls.key": _b64(serving.key_pem)}
        if previous is not None:
            data["ca-previous.crt"] = _b64(previous.cert_pem)
        body: dict[str, Any] = {**secret, "data": data}
        client.update(body)
        log.info("webhook_certs_written", secret=f"{namespace}/{secret_name}",
                 new_ca=out.new_ca, not_after=serving.not_after.isoformat())
    return out


def add_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of ``main.py webhook-certs``."""
    from internal.webhook.app import SERVICE_NAME, SERVICE_NAMESPACE, WEBHOOK_CONFIG_NAME

    parser.add_argument("--namespace", default=SERVICE_NAMESPACE,
                        help="namespace of the Secret and the Service")
    parser.add_argument("--secret-name", default=SECRET_NAME)
    parser.add_argument("--service-name", default=SERVICE_NAME)
    parser.add_argument("--webhook-config-name", default=WEBHOOK_CONFIG_NAME)
    parser.add_argument("--host", action="append", default=[], dest="hosts",
                        help="extra DNS name or IP for the serving certificate (repeatable)")
    parser.add_argument("--cert-validity-days", type=float, default=90.0)
    parser.add_argument("--kubeconfig", default=None)


def run_from_args(args: argparse.Namespace) -> int:
    client = Client(RestConfig.load(args.kubeconfig, user_agent="gpu-orchestrator-certs"))
    hosts = [*certs.service_hosts(args.service_name, args.namespace), *args.hosts]
    try:
        out = ensure(client, namespace=args.namespace, secret_name=args.secret_name,
                     hosts=hosts, webhook_config_name=args.webhook_config_name,
                     cert_validity=dt.timedelta(days=args.cert_validity_days))
    except errors.ApiError as exc:
        log.error("webhook_certs_failed", error=str(exc), code=exc.status)
        return 1
    if not out.bundle_in_place:
        log.error("webhook_ca_bundle_not_in_place", config=args.webhook_config_name)
        return 1
    return 0
