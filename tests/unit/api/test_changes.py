"""The per-field change policy: complete, and what the CRD and the docs say."""

from __future__ import annotations

from api.v1alpha1 import changes, crd
from api.v1alpha1.docs import render_markdown
from api.v1alpha1.types import GPUWorkloadSpec


def _wire_fields() -> list[str]:
    return [info.alias or name for name, info in GPUWorkloadSpec.model_fields.items()]


def test_every_spec_field_has_exactly_one_decision() -> None:
    decided = [c.field for c in changes.SPEC_CHANGES]
    assert sorted(decided) == sorted(_wire_fields())


def test_replicas_and_template_restart_the_rest_is_refused_or_in_place() -> None:
    by_field = {c.field: c.change for c in changes.SPEC_CHANGES}
    assert by_field["replicas"] is changes.Change.RESTART
    assert by_field["template"] is changes.Change.RESTART
    assert by_field["gpusPerReplica"] is changes.Change.REFUSED
    assert by_field["modelName"] is changes.Change.IN_PLACE


def test_refused_fields_have_a_rule_that_names_them_and_says_what_to_do() -> None:
    spec = crd.workload_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"][
        "properties"]["spec"]
    rules = {r["fieldPath"]: r for r in spec["x-kubernetes-validations"] if "fieldPath" in r}
    for c in changes.SPEC_CHANGES:
        if c.change is changes.Change.REFUSED and c.field != "gpuCount":
            r = rules[f".{c.field}"]
            assert "oldSelf" in r["rule"]
            assert r["message"].startswith(f"{c.field} cannot change")
            assert "delete and re-create" in r["message"]
            assert r["reason"] == "FieldValueForbidden"
    assert rules[".gpusPerReplica"]["message"] == (
        "gpusPerReplica cannot change while the workload exists; delete and re-create it")


def test_docs_state_the_decision_for_every_field() -> None:
    md = render_markdown()
    section = md.split("## Changing a workload", 1)[1].split("\n## ", 1)[0]
    for f in _wire_fields():
        assert f"| `{f}` |" in section
    assert changes.SPEC_CHANGED_REASON in section
    assert "maxRetries: 0" in md
