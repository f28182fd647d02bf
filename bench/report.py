"""The results as a Markdown table and a PNG: bound units over time per phase, and
the CPU per unit of each system (its own process, and kube-apiserver) per size."""

from __future__ import annotations

from pathlib import Path
from typing import Any

APISERVER = "kube-apiserver"


def _v(x: Any, fmt: str = "{}") -> str:
    return "-" if x is None else fmt.format(x)


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:.0f}"


def cpu_ms_per_unit(row: dict[str, Any] | None, process: str | None = None) -> float | None:
    """CPU milliseconds per bound unit over a phase's window: of the system's own
    process (``process=None``: kube-scheduler, our controller, or Kueue's), or of one
    control-plane process (``"kube-apiserver"``). For the Job baseline the system's
    process is kube-scheduler alone (kube-controller-manager is a control-plane row);
    for Kueue, Kueue's process alone (kube-scheduler's is a control-plane row)."""
    if not row or not row.get("bound"):
        return None
    cpu = row.get("cpu_s") if process is None else \
        (row.get("cpu_s_control_plane") or {}).get(process)
    return None if cpu is None else round(1000 * cpu / row["bound"], 2)


def markdown(doc: dict[str, Any]) -> str:
    m = doc.get("machine") or {}
    lines = [f"Machine: {m.get('cores')} cores ({m.get('cpu', '')}), "
             f"{m.get('memory_mib', 0) // 1024} GiB, Python {m.get('python')}. "
             f"Control plane, every system, kwok and the load generator share these cores.", ""]
    if "finalizer_policy" in doc:
        lines += ["Ours' finalizer: " + ("in the create, from config/admission-finalizer "
                                         "(MutatingAdmissionPolicy)." if doc["finalizer_policy"]
                                         else "the controller's patch (no admission policy)."),
                  ""]
    if doc.get("benchmark_only_static_nodes"):
        lines += ["**Benchmark-only nodes** (`--static-nodes`): created Ready, no "
                  "TaintNodesByCondition admission, no node-lifecycle controller, no kwok "
                  "heartbeats or leases.", ""]
    if doc.get("e2e"):
        lines += [
            "| nodes x GPUs | system | burst units | burst units/s | burst p50 / p99 (s) "
            "| steady units (rate) | steady p50 / p99 (ms) | peak RSS (MiB) | CPU s burst / steady "
            "| controller CPU ms/unit burst / steady "
            "| kube-apiserver CPU ms/unit burst / steady "
            "| API req/unit burst / steady | devices given twice | load avg after burst |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
            "| ---: | ---: |",
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
                    f"{_v(cpu_ms_per_unit(b))} / {_v(cpu_ms_per_unit(s))} | "
                    f"{_v(cpu_ms_per_unit(b, APISERVER))} / "
                    f"{_v(cpu_ms_per_unit(s, APISERVER))} | "
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
           "| ours' status lag in the burst: mean, p99 (s) "
           "| controller CPU/unit ours / kube-scheduler: burst, steady "
           "| kube-apiserver CPU/unit ours / bare pods: burst, steady |",
           "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
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

        def cpu(a: dict[str, Any], b: dict[str, Any], process: str | None) -> str:
            return ", ".join(_ratio(cpu_ms_per_unit(a.get(ph), process),
                                    cpu_ms_per_unit(b.get(ph), process))
                             for ph in ("burst", "steady"))

        tput = "throughput_per_s"
        kill = ours.get("burst_kill9") or {}
        killed = (f"{kill.get('bound')}/{kill.get('units')}, "
                  f"{(kill.get('double_booking') or {}).get('violations')}" if kill else "-")
        out.append(
            f"| {size['nodes']} | "
            f"{_ratio(get(ours, 'burst', tput), get(pods, 'burst', tput))} | "
            f"{_ratio(get(ours, 'burst', tput), get(jobs, 'burst', tput))} | "
            f"{_ratio(get(ours, 'steady', 'latency_p99_s'), get(pods, 'steady', 'latency_p99_s'))}"
            f" | {_ratio(rss(ours), rss(pods))} | {killed} | {lag(ours)} | "
            f"{cpu(ours, pods, None)} | {cpu(ours, pods, APISERVER)} |")
    return [*out, "", *queue_ratios(sizes)]


def queue_ratios(sizes: list[dict[str, Any]]) -> list[str]:
    """Ours, and ours with one GPUQueue over the cluster, against Kueue (Jobs admitted
    by Kueue, bound by kube-scheduler) and against each other, same run; only when
    the run had Kueue or the queue."""
    if not any({"kueue", "gpu-orchestrator-queue"} & set(s["systems"]) for s in sizes):
        return []
    out = ["| nodes | ours / Kueue: burst units/s | burst p99 ours / Kueue "
           "| steady p99 ours / Kueue | kube-apiserver CPU/unit ours / Kueue: burst, steady "
           "| ours with one queue / ours: burst units/s | steady p99 ours with one queue / "
           "ours | ours with one queue / Kueue: burst units/s | steady p99 ours with one "
           "queue / Kueue |",
           "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for size in sizes:
        sy = size["systems"]
        ours, queue, kueue = (sy.get(k) or {} for k in ("gpu-orchestrator",
                                                        "gpu-orchestrator-queue", "kueue"))

        def r(a: dict[str, Any], b: dict[str, Any], phase: str, key: str) -> str:
            return _ratio((a.get(phase) or {}).get(key), (b.get(phase) or {}).get(key))

        api = ", ".join(_ratio(cpu_ms_per_unit(ours.get(ph), APISERVER),
                               cpu_ms_per_unit(kueue.get(ph), APISERVER))
                        for ph in ("burst", "steady"))
        tput, p99 = "throughput_per_s", "latency_p99_s"
        out.append(f"| {size['nodes']} | {r(ours, kueue, 'burst', tput)} | "
                   f"{r(ours, kueue, 'burst', p99)} | {r(ours, kueue, 'steady', p99)} | {api} | "
                   f"{r(queue, ours, 'burst', tput)} | {r(queue, ours, 'steady', p99)} | "
                   f"{r(queue, kueue, 'burst', tput)} | {r(queue, kueue, 'steady', p99)} |")
    return [*out, ""]


PHASES = ("burst", "steady", "burst_kill9")
CPU_BARS = (("controller", None), ("kube-apiserver", APISERVER))


def panels(doc: dict[str, Any]) -> list[tuple[int, str]]:
    """The plot's panels, ``(size index, phase or "cpu")``: a bound-over-time panel
    per phase a size has data for (the kill -9 burst runs at the first size only),
    then one CPU-per-unit panel per size that has any. No panel without data."""
    out: list[tuple[int, str]] = []
    for i, size in enumerate(doc["e2e"]):
        runs = size["systems"].values()
        out += [(i, p) for p in PHASES if any((r.get(p) or {}).get("bound_curve_s")
                                              for r in runs)]
        if any(cpu_ms_per_unit(r.get(p), proc) is not None
               for r in runs for p in PHASES[:2] for _, proc in CPU_BARS):
            out.append((i, "cpu"))
    return out


def plot(doc: dict[str, Any], path: Path) -> bool:
    """Writes the PNG; False when matplotlib is not installed (``pip install -e '.[bench]'``)."""
    try:
        import matplotlib
    except ImportError:
        return False

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = doc["e2e"]
    cells = panels(doc)
    names = list(dict.fromkeys(n for size in sizes for n in size["systems"]))
    color = {n: f"C{k}" for k, n in enumerate(names)}  # one colour per system everywhere
    # one row per size, its panels left to right; a slot a size has no data for is
    # removed, never drawn empty
    by_size = [[c for c in cells if c[0] == i] for i in dict.fromkeys(i for i, _ in cells)]
    cols = max(1, *(len(r) for r in by_size)) if by_size else 1
    rows = max(1, len(by_size))
    fig, axes = plt.subplots(rows, cols, squeeze=False, figsize=(5.5 * cols, 4 * rows))
    placed = []
    for r, size_cells in enumerate(by_size):
        placed += [(axes[r][c], cell) for c, cell in enumerate(size_cells)]
        for ax in axes[r][len(size_cells):]:
            fig.delaxes(ax)
    for ax, (i, phase) in placed:
        size = sizes[i]
        where = f"{size['nodes']} nodes x {size['gpus_per_node']} GPUs"
        if phase == "cpu":
            _cpu_panel(ax, size, where, color)
            continue
        for name, res in size["systems"].items():
            r = res.get(phase)
            if not r or not r.get("bound_curve_s"):
                continue
            curve = r["bound_curve_s"]
            ax.step(curve, range(1, len(curve) + 1), where="post", color=color[name],
                    label=f"{name} ({_v(r.get('throughput_per_s'))}/s)")
        title = "burst, controller killed (SIGKILL) at 1/3" if phase == "burst_kill9" \
            else phase
        ax.set_title(f"{where}, {title}")
        ax.set_xlabel("seconds since the first create")
        ax.set_ylabel("units bound")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _cpu_panel(ax: Any, size: dict[str, Any], where: str, color: dict[str, str]) -> None:
    """CPU ms per unit, per system: its own process and kube-apiserver, burst and steady."""
    groups = [(f"{who}\n{phase}", proc, phase) for who, proc in CPU_BARS
              for phase in PHASES[:2]]
    systems = list(size["systems"].items())
    width = 0.8 / max(1, len(systems))
    for k, (name, res) in enumerate(systems):
        xs, ys = [], []
        for g, (_, proc, phase) in enumerate(groups):
            v = cpu_ms_per_unit(res.get(phase), proc)
            if v is not None:
                xs.append(g + (k - (len(systems) - 1) / 2) * width)
                ys.append(v)
        bars = ax.bar(xs, ys, width, label=name, color=color[name])
        ax.bar_label(bars, fmt="%.1f", fontsize=7)
    ax.set_xticks(range(len(groups)), [g[0] for g in groups], fontsize=8)
    ax.set_title(f"{where}, CPU per unit")
    ax.set_ylabel("CPU ms per bound unit")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(loc="upper left")
