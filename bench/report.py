"""The results as a Markdown table and a PNG of bound units over time."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _v(x: Any, fmt: str = "{}") -> str:
    return "-" if x is None else fmt.format(x)


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:.0f}"


def markdown(doc: dict[str, Any]) -> str:
    m = doc.get("machine") or {}
    lines = [f"Machine: {m.get('cores')} cores ({m.get('cpu', '')}), "
             f"{m.get('memory_mib', 0) // 1024} GiB, Python {m.get('python')}. "
             f"Control plane, every system, kwok and the load generator share these cores.", ""]
    if doc.get("benchmark_only_static_nodes"):
        lines += ["**Benchmark-only nodes** (`--static-nodes`): created Ready, no "
                  "TaintNodesByCondition admission, no node-lifecycle controller, no kwok "
                  "heartbeats or leases.", ""]
    if doc.get("e2e"):
        lines += [
            "| nodes x GPUs | system | burst units | burst units/s | burst p50 / p99 (s) "
            "| steady units (rate) | steady p50 / p99 (ms) | peak RSS (MiB) | CPU s burst / steady "
            "| API req/unit burst / steady | devices given twice | load avg after burst |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for size in doc["e2e"]:
            for name, res in size["systems"].items():
                b, s = res.get("burst") or {}, res.get("steady") or {}
                load = b.get("loadavg_after") or s.get("loadavg_after")
                twice = sum((x.get("double_booking") or {}).get("violations", 0) for x in (b, s)
                            if x)
                burst_units = f"{b.get('bound')}/{b.get('units')}" if b else "-"
                steady_units = (f"{s.get('bound')}/{s.get('units')} ({s.get('rate_per_s'):g}/s)"
                                if s else "-")
                lines.append(
                    f"| {size['nodes']} x {size['gpus_per_node']} | {name} | {burst_units} | "
                    f"{_v(b.get('throughput_per_s'))} | "
                    f"{_v(b.get('latency_p50_s'), '{:.2f}')} / "
                    f"{_v(b.get('latency_p99_s'), '{:.2f}')} | {steady_units} | "
                    f"{_ms(s.get('latency_p50_s'))} / {_ms(s.get('latency_p99_s'))} | "
                    f"{_v((res.get('process') or {}).get('peak_rss_mib'))} | "
                    f"{_v(b.get('cpu_s'))} / {_v(s.get('cpu_s'))} | "
                    f"{_v(b.get('api_requests_per_unit_own'))} / "
                    f"{_v(s.get('api_requests_per_unit_own'))} | {twice} | {load or '-'} |")
        lines.append("")
        lines += ratios(doc["e2e"])
    if doc.get("micro"):
        sizes = sorted({r["nodes"] for r in doc["micro"]})
        lines += ["One placement decision (in-process, half the GPUs booked), p50 / p99 in "
                  "microseconds:", "",
                  "| strategy | " + " | ".join(f"{n} nodes" for n in sizes) + " |",
                  "| --- | " + " | ".join("---:" for _ in sizes) + " |"]
        by = {(r["strategy"], r["nodes"]): r for r in doc["micro"]}
        for strat in sorted({r["strategy"] for r in doc["micro"]}):
            cells = []
            for n in sizes:
                r = by.get((strat, n))
                cells.append(f"{r['p50_us']:.0f} / {r['p99_us']:.0f}" if r else "-")
            lines.append(f"| {strat} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def _ratio(a: Any, b: Any) -> str:
    return "-" if not a or not b else f"{a / b:.2f}x"


def ratios(sizes: list[dict[str, Any]]) -> list[str]:
    """gpu-orchestrator against each baseline of the same run: burst throughput (higher
    is better), steady p99 (lower is better), peak RSS (lower is better); then the
    kill -9 burst."""
    out = ["| nodes | ours / bare pods: burst units/s | ours / Jobs: burst units/s "
           "| steady p99 ours / bare pods | peak RSS ours / kube-scheduler "
           "| kill -9 burst: bound, devices given twice "
           "| ours' status lag in the burst: mean, p99 (s) |",
           "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for size in sizes:
        sy = size["systems"]
        ours, pods, jobs = (sy.get(k) or {} for k in ("gpu-orchestrator", "kube-scheduler",
                                                      "kube-scheduler-jobs"))
        def get(res: dict[str, Any], phase: str, key: str) -> Any:
            return (res.get(phase) or {}).get(key)

        def rss(res: dict[str, Any]) -> Any:
            return (res.get("process") or {}).get("peak_rss_mib")

        def lag(res: dict[str, Any]) -> str:
            w = (res.get("burst") or {}).get("status_writer") or {}
            if not w.get("writes"):
                return "-"
            return f"{w.get('lag_mean_s')}, <= {w.get('lag_p99_le_s')}"

        tput = "throughput_per_s"
        kill = ours.get("burst_kill9") or {}
        killed = (f"{kill.get('bound')}/{kill.get('units')}, "
                  f"{(kill.get('double_booking') or {}).get('violations')}" if kill else "-")
        out.append(
            f"| {size['nodes']} | "
            f"{_ratio(get(ours, 'burst', tput), get(pods, 'burst', tput))} | "
            f"{_ratio(get(ours, 'burst', tput), get(jobs, 'burst', tput))} | "
            f"{_ratio(get(ours, 'steady', 'latency_p99_s'), get(pods, 'steady', 'latency_p99_s'))}"
            f" | {_ratio(rss(ours), rss(pods))} | {killed} | {lag(ours)} |")
    return [*out, ""]


def plot(doc: dict[str, Any], path: Path) -> bool:
    """Writes the PNG; False when matplotlib is not installed (``pip install -e '.[bench]'``)."""
    try:
        import matplotlib
    except ImportError:
        return False

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = doc["e2e"]
    phases = [p for p in ("burst", "steady", "burst_kill9")
              if any(p in r for s in sizes for r in s["systems"].values())]
    fig, axes = plt.subplots(len(phases), len(sizes), squeeze=False,
                             figsize=(5.5 * len(sizes), 4 * len(phases)))
    for col, size in enumerate(sizes):
        for row, phase in enumerate(phases):
            ax = axes[row][col]
            for name, res in size["systems"].items():
                r = res.get(phase)
                if not r:
                    continue
                curve = r["bound_curve_s"]
                ax.step(curve, range(1, len(curve) + 1), where="post",
                        label=f"{name} ({_v(r.get('throughput_per_s'))}/s)")
            title = "burst, controller killed (SIGKILL) at 1/3" if phase == "burst_kill9" \
                else phase
            ax.set_title(f"{size['nodes']} nodes x {size['gpus_per_node']} GPUs, {title}")
            ax.set_xlabel("seconds since the first create")
            ax.set_ylabel("units bound")
            ax.grid(alpha=0.3)
            ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
