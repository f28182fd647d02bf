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


def _spec_schema() -> dict:
    return crd.workload_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"][
        "properties"]["spec"]


def _forbidden_rules(schema: dict) -> list[dict]:
    return [r for r in schema.get("x-kubernetes-validations", [])
            if r.get("reason") == "FieldValueForbidden" and "oldSelf" in r["rule"]]


def test_refused_fields_have_a_rule_that_names_them_and_says_what_to_do() -> None:
    spec = _spec_schema()
    on_spec = {r["fieldPath"]: r for r in _forbidden_rules(spec)}
    for c in changes.SPEC_CHANGES:
        if c.change is not changes.Change.REFUSED or c.field == "gpuCount":
            continue
        # on the field itself (the error names spec.<field>), or on the spec with the
        # field as its path when the rule reads other fields too
        own = _forbidden_rules(spec["properties"][c.field])
        rules = own or [on_spec[f".{c.field}"]]
        for r in rules:
            assert r["message"].startswith(f"{c.field} cannot change")
            assert "delete and re-create" in r["message"]
    assert on_spec[".gpusPerReplica"]["message"] == (
        "gpusPerReplica cannot change while the workload exists; delete and re-create it")


def test_a_refused_field_without_a_default_can_be_neither_added_nor_removed() -> None:
    """Its own rule runs only when both versions hold it: the spec holds the rest.
    A field with a default is always there, so it needs no such rule."""
    spec = _spec_schema()
    on_spec = {r["fieldPath"]: r["rule"] for r in _forbidden_rules(spec)}
    for field, prop in spec["properties"].items():
        if not _forbidden_rules(prop):
            continue
        if "default" in prop:
            assert f".{field}" not in on_spec, field
        else:
            assert on_spec[f".{field}"] == f"has(self.{field}) == has(oldSelf.{field})"


def test_no_spec_rule_reads_a_refused_field_it_could_compare_on_the_field() -> None:
    """The spec-level transition rules are the ones that read several fields: every
    read of a spec field costs the API server on every write, status writes included."""
    spec = _spec_schema()
    own = {f for f, p in spec["properties"].items() if _forbidden_rules(p)}
    for r in _forbidden_rules(spec):
        field = r["fieldPath"][1:]
        assert field not in own or r["rule"] == f"has(self.{field}) == has(oldSelf.{field})"


def test_docs_state_the_decision_for_every_field() -> None:
    md = render_markdown()
    section = md.split("## Changing a workload", 1)[1].split("\n## ", 1)[0]
    for f in _wire_fields():
        assert f"| `{f}` |" in section
    assert changes.SPEC_CHANGED_REASON in section
    assert "maxRetries: 0" in md
