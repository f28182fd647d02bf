"""The mutating admission webhook of the seed-compatible path: pods carrying the
``gpu-scheduling-map`` annotation get their devices (per the exposure mode) at
creation. Modules: ``exposure`` (what a mode sets),
``patch`` (the JSONPatch), ``admission`` (AdmissionReview in/out), ``routing``
(``/route``: GPU pods of labelled namespaces to gpu-scheduler, and the toleration of
named nodes' taint), ``certs`` and
``rotation`` (certificates and their renewal), ``cabundle`` (the CA bundle in the
MutatingWebhookConfiguration), ``server`` (HTTPS), ``app`` (``serve``). Which replica a
pod is comes from :mod:`internal.scheduling.podindex` (shared with the pod-binding
controller)."""

from internal.webhook.app import Webhook, add_flags, build, serve, serve_from_args

__all__ = ["Webhook", "add_flags", "build", "serve", "serve_from_args"]
