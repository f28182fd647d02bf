from __future__ import annotations

import pytest

from runtime.client import Client, RestConfig


@pytest.fixture(scope="session")
def client(cluster) -> Client:  # type: ignore[no-untyped-def]
    return Client(RestConfig.from_kubeconfig(str(cluster.kubeconfig)))


def configmap(ns: str, name: str, value: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns},
        "data": {"v": value},
    }
