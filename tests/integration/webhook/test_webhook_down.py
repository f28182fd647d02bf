"""With the webhook down, pods without the annotation are still admitted (its
matchConditions keep them from ever calling it), while annotated pods fail closed
(failurePolicy Fail) rather than start on the wrong GPUs."""

from __future__ import annotations

import json
from pathlib import Path

from hack.testenv import ControlPlane
from tests.integration.webhook.helpers import SEED, create, pod, running_webhook
from tests.waiting import eventually


def test_pods_without_the_annotation_are_not_blocked(cluster: ControlPlane, namespace: str,
                                                     tmp_path: Path) -> None:
    with running_webhook(cluster, tmp_path) as (webhook, _):
        probe = pod("probe-1", annotations={"gpu-scheduling-map": SEED})
        path = f"/api/v1/namespaces/{namespace}/pods?dryRun=All"
        eventually(lambda: cluster.api("POST", path, probe)[0] == 201,
                   what="the webhook answers kube-apiserver")
        webhook.stop()

        def refused() -> str:
            out = create(cluster, namespace, pod("annotated-1",
                                                 annotations={"gpu-scheduling-map": SEED}))
            return out.stderr if out.returncode != 0 else ""

        # Annotated pods now fail closed: the webhook cannot be reached.
        assert "failed calling webhook" in eventually(refused, what="webhook unreachable")
        out = create(cluster, namespace, pod("plain-1"))
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["metadata"]["name"] == "plain-1"
        out = create(cluster, namespace, pod("other-1", annotations={"unrelated": "x"}))
        assert out.returncode == 0, out.stderr
