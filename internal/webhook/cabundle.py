"""Keeps the CA bundle of our MutatingWebhookConfiguration equal to the CAs we trust.

A strategic merge patch keyed by webhook name sets ``clientConfig.caBundle`` of
every webhook in the configuration. :meth:`CABundlePatcher.ensure` is called
periodically, not only on rotation, so a ``kubectl apply`` that wiped the bundle (the
manifest carries none) is repaired within one interval.
"""

from __future__ import annotations

import base64
from typing import Any

import structlog

from runtime import errors
from runtime.client import Client

log = structlog.get_logger("webhook.cabundle")

API_VERSION = "admissionregistration.k8s.io/v1"
KIND = "MutatingWebhookConfiguration"


class CABundlePatcher:
    def __init__(self, client: Client, config_name: str) -> None:
        self.client = client
        self.name = config_name

    def ensure(self, bundle: bytes) -> bool:
        """Patches ``bundle`` in where it differs; True when it is in place afterwards."""
        want = base64.b64encode(bundle).decode()
        try:
            cfg = self.client.get(API_VERSION, KIND, self.name)
        except errors.NotFound:
            log.warning("webhook_config_missing", name=self.name)
            return False
        except errors.ApiError as exc:
            log.warning("webhook_config_get_failed", name=self.name, error=str(exc))
            return False
        hooks: list[dict[str, Any]] = cfg.get("webhooks") or []
        stale = [h["name"] for h in hooks if (h.get("clientConfig") or {}).get("caBundle") != want]
        if not stale:
            return True
        patch = {"webhooks": [{"name": n, "clientConfig": {"caBundle": want}} for n in stale]}
        try:
            self.client.patch(API_VERSION, KIND, self.name, patch, patch_type="strategic")
        except errors.ApiError as exc:
            log.warning("webhook_ca_bundle_patch_failed", name=self.name, error=str(exc))
            return False
        log.info("webhook_ca_bundle_patched", name=self.name, webhooks=",".join(stale))
        return True
