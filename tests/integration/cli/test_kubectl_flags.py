"""kubectl's flags on `kubectl gpu`, where the request matters: ``--as`` and
``--as-group`` reach the API server as impersonation, ``--context`` picks the
context (and its namespace), ``--request-timeout`` takes kubectl's durations."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hack.testenv import ControlPlane
from internal.cli.kube import EXIT_NOT_FOUND
from tests.integration.cli.test_plugin import Plugin, crds  # noqa: F401  (fixture)


@pytest.fixture
def gpu(cluster: ControlPlane, capsys: pytest.CaptureFixture[str], crds: None) -> Plugin:  # noqa: F811
    return Plugin(cluster, capsys)


def test_as_a_user_without_rights_is_forbidden_in_one_line(gpu: Plugin) -> None:
    code, out, err = gpu("workloads", "-n", "default", "--as", "jane", ok=False)
    assert (code, out) == (1, "")
    assert err.startswith("error: kubectl gpu workloads needs the ClusterRole view (or "
                          "gpuworkload-viewer) bound in namespace default with a "
                          "RoleBinding: ") and err.count("\n") == 1
    assert '"jane"' in err, "the API server judged the impersonated user"


def test_as_group_is_sent_too(gpu: Plugin) -> None:
    code, out, _ = gpu("workloads", "-n", "default", "--as", "jane",
                       "--as-group", "system:masters", "-o", "json")
    assert code == 0 and '"items"' in out


def test_context_picks_the_context_and_its_namespace(gpu: Plugin, cluster: ControlPlane,
                                                     tmp_path: Path) -> None:
    doc = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    ctx = dict(doc["contexts"][0])
    ctx = {"name": "team", "context": {**ctx["context"], "namespace": "ctx-ns"}}
    doc["contexts"].append(ctx)
    kc = tmp_path / "kubeconfig"
    kc.write_text(yaml.safe_dump(doc))
    gpu.kubeconfig = str(kc)
    code, _, err = gpu("describe", "missing", "--context", "team", ok=False)
    assert code == EXIT_NOT_FOUND
    assert 'GPUWorkload "missing" in namespace "ctx-ns" not found' in err


@pytest.mark.parametrize("timeout", ["0", "1m", "30s", "20"])
def test_request_timeout_takes_kubectls_durations(gpu: Plugin, timeout: str) -> None:
    code, out, _ = gpu("workloads", "-A", "--request-timeout", timeout, "-o", "json")
    assert code == 0 and '"items"' in out
