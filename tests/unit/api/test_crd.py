import re

import pytest
from pydantic import BaseModel

from api.v1alpha1 import crd
from api.v1alpha1.types import SCHEDULING_MAP_PATTERN, SchedulingStrategy


def test_committed_files_match_generator() -> None:
    stale = [str(p.relative_to(crd.ROOT)) for p in crd.diff()]
    assert not stale, f"regenerate with `python -m api.v1alpha1.crd`: {stale}"


def _walk(schema: dict, path: str):
    yield path, schema
    for name, sub in schema.get("properties", {}).items():
        yield from _walk(sub, f"{path}.{name}")
    if "items" in schema:
        yield from _walk(schema["items"], f"{path}[]")


@pytest.mark.parametrize("make", [crd.workload_crd, crd.node_crd])
def test_every_field_has_a_description(make) -> None:
    schema = make()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    missing = [
        p
        for p, s in _walk(schema, "")
        if p.count(".") >= 2 and not s.get("description") and not p.endswith("[]")
    ]
    assert not missing


def test_workload_crd_shape() -> None:
    doc = crd.workload_crd()
    assert doc["metadata"]["name"] == "gpuworkloads.gpu.orchestrator.dev"
    assert doc["spec"]["names"]["shortNames"] == ["gw"]
    v = doc["spec"]["versions"][0]
    assert v["name"] == "v1alpha1" and v["subresources"]["status"] == {}
    assert v["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    cols = [c["name"] for c in v["additionalPrinterColumns"] if c.get("priority", 0) == 0]
    assert cols == ["Phase", "Reason", "Strategy", "GPUs", "Nodes", "Age"]
    wide = [c["name"] for c in v["additionalPrinterColumns"] if c.get("priority")]
    assert wide == ["Priority", "Replicas", "Model", "Message"]
    spec = v["schema"]["openAPIV3Schema"]["properties"]["spec"]
    props = spec["properties"]
    assert props["schedulingStrategy"]["enum"] == [s.value for s in SchedulingStrategy]
    # no CRD default: the manager's --default-strategy applies (status.strategy shows it)
    assert "default" not in props["schedulingStrategy"]
    assert props["replicas"]["minimum"] == 1 and props["replicas"]["default"] == 1
    assert props["priority"]["x-kubernetes-int-or-string"] is True
    assert "type" not in props["priority"]
    assert props["template"]["x-kubernetes-preserve-unknown-fields"] is True
    assert "gpuCount" in props and "gpusPerReplica" in props
    rules = [r["rule"] for r in spec["x-kubernetes-validations"]]
    assert any("gpuCount" in r for r in rules)
    assert any("self.replicas" in r for r in rules)


def test_node_crd_is_cluster_scoped() -> None:
    doc = crd.node_crd()
    assert doc["spec"]["scope"] == "Cluster"
    dev = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"][
        "properties"
    ]["devices"]["items"]["properties"]
    for f in (
        "index",
        "uuid",
        "model",
        "memoryTotalMiB",
        "memoryUsedMiB",
        "utilization",
        "temperature",
        "powerWatts",
        "eccErrors",
        "healthy",
        "migMode",
        "nvlinkPeers",
    ):
        assert f in dev


def test_admission_policy_reads_annotation() -> None:
    policy = crd.admission_policy()[0]
    expr = next(v["expression"] for v in policy["spec"]["validations"]
                if "needs spec.schedulingMap" in v.get("message", ""))
    assert "object.metadata.annotations" in expr and "annotationMap" in expr


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("0=node1:0,1\n1=node2:2\n2=node3:0,1,2\n3=node4:3\n4=node4:3", True),
        (" 0 = node1 : 0 , 1 \n\n1=node2:2\n", True),
        ("0=node1", False),
        ("x=node1:0", False),
        ("0=node1:0 1=node2:1", False),
        ("0=node1:a", False),
        ("0=gpu-1.zone-a:0,999", True),
        ("0=Node_1:0", False),
        ("0=node1:99999999999", False),
        ("0=node1:1000", False),
    ],
)
def test_map_pattern(text: str, ok: bool) -> None:
    assert bool(re.fullmatch(SCHEDULING_MAP_PATTERN, text)) is ok


def test_missing_description_is_an_error() -> None:
    class Bad(BaseModel):
        x: int = 1

    with pytest.raises(crd.SchemaError):
        crd.model_schema(Bad)


def test_docs_mention_every_spec_field() -> None:
    from api.v1alpha1.docs import render_markdown

    md = render_markdown()
    for f in crd.workload_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][
        "spec"
    ]["properties"]:
        assert f"`{f}`" in md
