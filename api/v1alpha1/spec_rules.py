"""The GPUWorkload spec's cross-field rules as the CRD holds them: one CEL rule.

kube-apiserver (apiextensions-apiserver 1.34) runs each ``x-kubernetes-validations``
rule of a schema node as a program of its own, and every field a rule reads
(``has(self.f)``, ``self.f``) builds the spec's table of property schemas afresh
(``model.Structural.Properties``, twice per read). The seven rules below, apart, read
nine fields in seven programs on a create that asks for no share, no MIG instance
and no map; joined, four fields in one program (the share rules behind one guard).

Each rule keeps its message: a spec that breaks some of them is refused with the
message of each broken one, in the order below, joined by ``; ``, where before each
was an error of its own (``[spec: Invalid value: "object": A, spec: ...: B]`` is now
``spec: Invalid value: "object": A; B``). A spec that breaks one hears exactly what
it heard. The rules with a field path, a reason or ``oldSelf`` stay apart.

The API reference (docs/api.md) lists them one by one (``docs.py``).
"""

from __future__ import annotations

from typing import Any

#: a spec without either field breaks none of the guarded rules
SHARE_GUARD = "has(self.gpuShare) || has(self.migProfile)"


def _literal(message: str) -> str:
    return "'" + message.replace("\\", "\\\\").replace("'", "\\'") + "'"


def joined(plain: list[dict[str, Any]], guarded: list[dict[str, Any]],
           guard: str = SHARE_GUARD) -> dict[str, Any]:
    """``plain`` and ``guarded`` (each true whenever ``guard`` is false) as one rule whose
    messageExpression names every broken one."""
    for r in (*plain, *guarded):
        assert set(r) == {"rule", "message"}, f"only a plain rule can join: {r}"
    shares = " && ".join("(" + r["rule"] + ")" for r in guarded)
    rule = " && ".join([*("(" + r["rule"] + ")" for r in plain),
                        f"(!({guard}) || ({shares}))"])
    broken = " + ".join("((" + r["rule"] + ") ? '' : " + _literal("; " + r["message"]) + ")"
                        for r in (*plain, *guarded))
    return {
        "rule": rule,
        "message": "; ".join(r["message"] for r in (*plain, *guarded)),
        "messageExpression": f"({broken}).substring(2)",
    }
