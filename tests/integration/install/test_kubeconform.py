"""kubeconform, as ``make lint`` runs it (hack/kubeconform.py): every manifest we ship
passes, and the schemas made from the pinned kube-apiserver and config/crd catch what
a user's typo would be (a misspelt field, a wrong type, a kind nobody serves), while
accepting what the API server accepts (int-or-string, quantities as numbers)."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path

import pytest
import yaml

from hack import kubeconform, schemas
from hack.testenv.controlplane import binaries
from tests.integration.install.conftest import ROOT


@pytest.fixture(scope="module")
def tool() -> str:
    out = subprocess.run(["bash", str(ROOT / "hack/testenv/kubeconform.sh")], check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    return out.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def locations(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    crds = tmp_path_factory.mktemp("crd-schemas")
    # one schema per CRD we ship: GPUNode, GPUQueue, GPUWorkload
    assert schemas.from_crds(sorted((ROOT / "config/crd").glob("*.yaml")), crds) == 3
    return [f"{schemas.builtin(binaries())}/{schemas.LOCATION}", f"{crds}/{schemas.LOCATION}"]


def validate(tool: str, locations: list[str], objs: list[dict], tmp: Path) -> tuple[int, str]:
    f = tmp / "objs.yaml"
    f.write_text(yaml.safe_dump_all(objs))
    args = [tool, "-strict", "-summary"]
    for loc in locations:
        args += ["-schema-location", loc]
    proc = subprocess.run([*args, str(f)], capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr


def manager() -> dict:
    return yaml.safe_load((ROOT / "config/manager/manager.yaml").read_text())


def test_every_shipped_manifest_passes(helm: Path, tool: str) -> None:
    assert kubeconform.main(["--kubeconform", tool, "--testenv", str(binaries()),
                             "--helm", str(helm)]) == 0


def test_the_shipped_kinds_have_schemas(tool: str, locations: list[str], tmp_path: Path) -> None:
    pdb = yaml.safe_load((ROOT / "config/manager/pdb.yaml").read_text())
    sample = yaml.safe_load((ROOT / "config/samples/gpuworkload_bestfit.yaml").read_text())
    rc, out = validate(tool, locations, [manager(), pdb, sample], tmp_path)
    assert rc == 0, out
    assert "Valid: 3" in out


def test_a_misspelt_field_fails(tool: str, locations: list[str], tmp_path: Path) -> None:
    d = manager()
    spec = d["spec"]["template"]["spec"]
    spec["topologySpredConstraints"] = spec.pop("topologySpreadConstraints")
    rc, out = validate(tool, locations, [d], tmp_path)
    assert rc == 1 and "topologySpredConstraints" in out, out


def test_a_misspelt_field_of_our_crd_fails(tool: str, locations: list[str],
                                           tmp_path: Path) -> None:
    w = yaml.safe_load((ROOT / "config/samples/gpuworkload_bestfit.yaml").read_text())
    w["spec"]["gpusPerReplicas"] = 1
    rc, out = validate(tool, locations, [w], tmp_path)
    assert rc == 1 and "gpusPerReplicas" in out, out


def test_a_wrong_type_fails(tool: str, locations: list[str], tmp_path: Path) -> None:
    d = manager()
    d["spec"]["replicas"] = "two"
    rc, out = validate(tool, locations, [d], tmp_path)
    assert rc == 1 and "replicas" in out, out


def test_int_or_string_and_quantities_pass(tool: str, locations: list[str],
                                           tmp_path: Path) -> None:
    pdb = yaml.safe_load((ROOT / "config/webhook/pdb.yaml").read_text())
    percent = copy.deepcopy(pdb)
    percent["spec"]["maxUnavailable"] = "50%"
    d = manager()
    d["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = 1
    rc, out = validate(tool, locations, [pdb, percent, d], tmp_path)
    assert rc == 0, out


def test_a_kind_without_schema_fails(tool: str, locations: list[str], tmp_path: Path) -> None:
    rc, out = validate(tool, locations, [{"apiVersion": "example.com/v1", "kind": "Widget",
                                          "metadata": {"name": "w"}}], tmp_path)
    assert rc == 1 and "could not find schema" in out, json.dumps(out)
