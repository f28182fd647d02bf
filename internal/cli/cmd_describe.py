"""``kubectl gpu describe WORKLOAD``: spec summary, placement per replica (with its
pod and pod phase, and in ``dra`` mode its ResourceClaim and the claim's state),
conditions, why it is pending (the Unschedulable condition's
per-node reasons) and the workload's recent Events."""

from __future__ import annotations

import argparse

from api.v1alpha1.keys import ATTEMPT_LABEL, INDEX_LABEL, WORKLOAD_LABEL
from internal.cli import inventory, validate
from internal.cli.kube import Kube, event_time
from internal.cli.output import Printer, age

HELP = "placement, conditions, why it is pending, and recent events of one workload"
#: one workload of one namespace: -A is refused
ALL_NAMESPACES = False


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("workload", help="GPUWorkload name", type=validate.dns_subdomain("workload"))
    p.add_argument("--events", type=validate.int_range(0), default=20,
                   help="how many recent events; 0 shows none (default 20)")


def gather(kube: Kube, name: str, n_events: int = 20) -> dict:
    w = kube.workload(name)
    w.setdefault("kind", "GPUWorkload")
    pods = kube.pods(kube.namespace, label_selector=f"{WORKLOAD_LABEL}={name}")
    events = kube.events_for(w, n_events) if n_events > 0 else []
    claims = kube.claims(kube.namespace, label_selector=f"{WORKLOAD_LABEL}={name}")
    return {"workload": w, "pods": pods, "events": events, "claims": claims}


def claim_state(claim: dict) -> str:
    """One line a user can act on: 'allocated node1/gpu-0,gpu-2, reserved for
    train-0', 'not allocated yet', 'releasing (...)'."""
    st = claim.get("status") or {}
    alloc = st.get("allocation") or {}
    results = (alloc.get("devices") or {}).get("results") or ()
    if results:
        pools = sorted({r.get("pool") for r in results})
        state = f"allocated {'/'.join(pools)}/" + ",".join(
            sorted(str(r.get("device")) for r in results))
        users = [r.get("name") for r in st.get("reservedFor") or ()]
        state += f", reserved for {', '.join(users)}" if users else ", not reserved"
    else:
        state = "not allocated"
    if (claim.get("metadata") or {}).get("deletionTimestamp"):
        state = f"releasing ({state})"
    return state


def _claims_by_index(claims: list[dict], attempt: str) -> dict[int, dict]:
    out: dict[int, dict] = {}
    for c in claims:
        labels = (c.get("metadata") or {}).get("labels") or {}
        if labels.get(ATTEMPT_LABEL, "0") != attempt:
            continue
        try:
            out[int(labels.get(INDEX_LABEL, ""))] = c
        except ValueError:
            continue
    return out


def run(args: argparse.Namespace, kube: Kube, out: Printer) -> int:
    info = gather(kube, args.workload, args.events)
    w, pods, events = info["workload"], info["pods"], info["events"]
    claims = info["claims"]
    if out.structured:
        out.data({
            "workload": w,
            "pendingReason": (inventory.pending_reason(w)
                              if inventory.workload_phase(w) == "Pending" else None),
            "pods": [{"name": p["metadata"]["name"],
                      "node": (p.get("spec") or {}).get("nodeName"),
                      "phase": (p.get("status") or {}).get("phase"),
                      "devices": (p["metadata"].get("annotations") or {}).get(
                          inventory.DEVICES_ANNOTATION)} for p in pods],
            "claims": [{"name": c["metadata"]["name"],
                        "replica": (c["metadata"].get("labels") or {}).get(INDEX_LABEL),
                        "attempt": (c["metadata"].get("labels") or {}).get(ATTEMPT_LABEL),
                        "state": claim_state(c)} for c in claims],
            "events": events,
        })
        return 0
    md, spec, st = w["metadata"], w.get("spec") or {}, w.get("status") or {}
    reps = int(spec.get("replicas") or 1)
    per = inventory.gpus_per_replica(w)
    out.fields([
        ("Name", md["name"]),
        ("Namespace", md.get("namespace")),
        ("Created", f"{md.get('creationTimestamp')} ({age(md.get('creationTimestamp'))} ago)"),
        ("Strategy", spec.get("schedulingStrategy") or st.get("strategy")
         or "the manager's --default-strategy"),
        ("Replicas", reps),
        ("GPUs", f"{per} per replica, {reps * per} in all"),
        ("Priority", spec.get("priority", 0)),
        ("Model", spec.get("modelName")),
        ("Phase", inventory.workload_phase(w)),
        ("Message", st.get("message")),
        ("Retries", st.get("retries")),
        ("Next retry", st.get("nextRetryTime")),
    ])
    out.line()
    pod_by_name = {p["metadata"]["name"]: p for p in pods}
    placements = sorted(st.get("placements") or (), key=lambda p: int(p.get("index", 0)))
    by_index = _claims_by_index(claims, str(st.get("retries") or 0))
    if placements:
        rows = []
        for p in placements:
            pod = pod_by_name.get(f"{md['name']}-{p.get('index', 0)}")
            devs = ",".join(str(d) for d in p.get("devices") or ()) or "(kubelet picks)"
            row = [p.get("index", 0), p["node"], devs, pod["metadata"]["name"] if pod else "-",
                   (pod.get("status") or {}).get("phase") if pod else "-"]
            if claims:
                c = by_index.get(int(p.get("index", 0)))
                row += [c["metadata"]["name"], claim_state(c)] if c else ["-", "-"]
            rows.append(row)
        heads = ["replica", "node", "devices", "pod", "pod phase"]
        out.table(heads + (["claim", "claim state"] if claims else []), rows,
                  title="Placement:")
    else:
        out.line("Placement:  none yet")
    others = [c for c in claims if c not in by_index.values()]
    if others:
        out.table(["claim", "replica", "attempt", "state"],
                  [[c["metadata"]["name"], (c["metadata"].get("labels") or {}).get(INDEX_LABEL),
                    (c["metadata"].get("labels") or {}).get(ATTEMPT_LABEL), claim_state(c)]
                   for c in others], title="Other claims (earlier attempts, being released):")
    out.line()
    conds = st.get("conditions") or []
    if conds:
        out.table(["type", "status", "reason", "age", "message"],
                  [[c.get("type"), c.get("status"), c.get("reason"),
                    age(c.get("lastTransitionTime")),
                    (c.get("message") or "").splitlines()[0] if c.get("message") else ""]
                   for c in conds], title="Conditions:")
    else:
        out.line("Conditions:  none")
    if inventory.workload_phase(w) == "Pending":
        out.line()
        out.heading("Why pending:")
        reason = inventory.pending_reason(w) or "no reason recorded yet"
        for ln in reason.splitlines():
            out.line(f"  {ln}")
    out.line()
    if events:
        out.table(["last seen", "type", "reason", "count", "message"],
                  [[age(event_time(e)), e.get("type"), e.get("reason"),
                    e.get("count") or 1, e.get("message") or e.get("note")]
                   for e in events], title="Events:",
                  styles=["yellow" if e.get("type") == "Warning" else None for e in events])
    elif args.events == 0:
        out.line("Events:  not shown (--events 0)")
    else:
        out.line("Events:  none")
    return 0
