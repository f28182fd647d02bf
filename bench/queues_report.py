"""The queues benchmark's results (``bench/queues.py``) as Markdown: one row per mode,
the ratio of the two, and each queue's use against its quota."""

from __future__ import annotations

import statistics
from typing import Any


def _v(x: Any, fmt: str = "{}") -> str:
    return "-" if x is None else fmt.format(x)


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def _medians(rows: list[dict[str, Any]], mode: str) -> dict[str, float]:
    keys = ("admissions_per_s", "time_to_admission_p50_s", "time_to_admission_p99_s",
            "controller_cpu_s")
    mine = [r for r in rows if r["mode"] == mode]
    return {k: statistics.median(r[k] for r in mine if r.get(k) is not None)
            for k in keys if any(r.get(k) is not None for r in mine)}


def markdown(doc: dict[str, Any]) -> str:
    m, a = doc.get("machine") or {}, doc.get("args") or {}
    lines = [f"Machine: {m.get('cores')} cores ({m.get('cpu', '')}), "
             f"{m.get('memory_mib', 0) // 1024} GiB, Python {m.get('python')}; the control "
             "plane, the controller and the load generator share these cores (and, when "
             "this was run, other people's tests did too: see the load average).", "",
             f"{a.get('nodes')} nodes x {a.get('gpus')} GPUs, {a.get('workloads')} one-GPU "
             f"Pod-mode GPUWorkloads in one burst ({a.get('clients')} connections); "
             f"{a.get('queues')} queues in {a.get('cohorts')} cohorts, "
             f"{doc.get('nominal_per_queue')} nominal GPUs each."
             + (" Benchmark-only nodes (`--static-nodes`)." if a.get("static_nodes") == "True"
                or a.get("static_nodes") is True else ""), "",
             "| mode (round) | admitted | admissions/s | time to admission p50 / p99 / max (s) "
             "| controller CPU s | peak RSS (MiB) | devices given twice | load avg after |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    rows = doc.get("modes") or []
    for r in rows:
        lines.append(
            f"| {r['mode']} ({r.get('round', 0) + 1}) | {r['admitted']}/{r['units']} | "
            f"{_v(r['admissions_per_s'])} | "
            f"{_v(r['time_to_admission_p50_s'], '{:.2f}')} / "
            f"{_v(r['time_to_admission_p99_s'], '{:.2f}')} / "
            f"{_v(r['time_to_admission_max_s'], '{:.2f}')} | {r['controller_cpu_s']} | "
            f"{r['peak_rss_mib']} | {r['devices_given_twice']} | {r['loadavg_after']} |")
    q, n = _medians(rows, "queues"), _medians(rows, "no-queues")
    lines += ["", "Queues / no queues, medians over the rounds: admissions/s "
              f"{_ratio(q.get('admissions_per_s'), n.get('admissions_per_s'))}, p50 "
              f"{_ratio(q.get('time_to_admission_p50_s'), n.get('time_to_admission_p50_s'))}, "
              f"p99 {_ratio(q.get('time_to_admission_p99_s'), n.get('time_to_admission_p99_s'))}"
              f", controller CPU {_ratio(q.get('controller_cpu_s'), n.get('controller_cpu_s'))}."]
    k = _medians(rows, "kueue")
    if k:
        kr = [r for r in rows if r["mode"] == "kueue"]
        def rk(key: str) -> str:
            return _ratio(q.get(key), k.get(key))
        lines += ["", "Queues (ours) / Kueue, medians over the rounds: admissions/s "
                  f"{rk('admissions_per_s')}, p50 {rk('time_to_admission_p50_s')}, p99 "
                  f"{rk('time_to_admission_p99_s')}, controller CPU {rk('controller_cpu_s')}"
                  " (Kueue's own process; kube-scheduler binds its pods besides). Kueue admitted "
                  "(its Job unsuspended) p50 / p99: " + "; ".join(
                      f"{_v(r.get('kueue_admission_p50_s'), '{:.2f}')} / "
                      f"{_v(r.get('kueue_admission_p99_s'), '{:.2f}')} s, all "
                      f"{r.get('kueue_admitted')} in "
                      f"{_v(r.get('seconds_first_create_to_last_kueue_admission'))} s"
                      for r in kr) + "."]
    for mode in ("queues", "kueue"):
        lines += _statuses(rows, mode)
    return "\n".join(lines) + "\n"


def _statuses(rows: list[dict[str, Any]], mode: str) -> list[str]:
    """Each queue's use against its quota at the end of the last round of ``mode``."""
    lines: list[str] = []
    last = [r for r in rows if r["mode"] == mode]
    statuses = last[-1].get("queues") if last else {}
    if statuses:
        cohorts: dict[str, list[float]] = {}
        for s in statuses.values():
            c = cohorts.setdefault(s["cohort"], [0.0, 0.0])
            c[0] += s.get("used") or 0
            c[1] += s["nominal"]
        over = sorted(c for c, (used, nominal) in cohorts.items() if used > nominal)
        lines += ["", f"Each queue at the end of the last {mode} round"
                  + (" (ClusterQueues; lent is not reported by Kueue)" if mode == "kueue"
                     else "") + ":", "",
                  "| queue | cohort | arrivals | used | borrowed | lent | pending |",
                  "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
        for name, s in statuses.items():
            lines.append(f"| {name} | {s['cohort']} | {s['arrivals']} | {_v(s['used'])} | "
                         f"{_v(s['borrowed'])} | {_v(s['lent'])} | {_v(s['pending'])} |")
        lines += ["", f"Cohorts using more than their queues' nominal GPUs: "
                  f"{', '.join(over) or 'none'}."]
    return lines
