"""``make bench`` / ``python -m bench``: kube-scheduler against the GPUWorkload
controller on one local control plane, and the in-process placement micro-benchmark.

    python -m bench                                  # the default sizes (see --help)
    python -m bench --sizes 10 --burst 50 --duration 2 --no-micro   # a smoke run
    python -m bench --sizes 100,1000,5000 --burst 1000,5000,20000   # the issue's sizes
    python -m bench --micro-only

Writes ``<out>/bench.json`` (every number, per size and system), ``<out>/bound_over_time.png``
and ``<out>/table.md``; prints progress while it runs. Every process it started is
stopped by its PID at the end, on an error, on Ctrl-C and on SIGTERM.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from bench import apiserver_profile, e2e, micro, profile, report

HERE = Path(__file__).resolve().parent


def _ints(s: str) -> list[int]:
    return [int(x.replace("_", "")) for x in s.split(",") if x.strip()]


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=_ints, default=[100, 1000],
                   help="node counts, ascending (default 100,1000; the issue also names 5000)")
    p.add_argument("--burst", type=_ints, default=[1000, 5000],
                   help="burst units per size, one per size or one for all (capped at the "
                        "size's capacity, nodes x gpus; default 1000,5000)")
    p.add_argument("--gpus", type=int, default=8, help="GPUs per node (default 8)")
    p.add_argument("--rate", type=float, default=50.0, help="steady arrivals per second")
    p.add_argument("--duration", type=float, default=10.0,
                   help="seconds of steady arrival (0: no steady phase)")
    p.add_argument("--clients", type=int, default=8,
                   help="parallel connections creating units (default 8)")
    p.add_argument("--workers", type=int, default=None,
                   help="controller --workers (default: the controller's, 16)")
    p.add_argument("--qps", type=float, default=None,
                   help="client QPS of both systems (default: each one's default, 50)")
    p.add_argument("--api-burst", type=int, default=None,
                   help="client burst of both systems (default: each one's default, 100)")
    p.add_argument("--systems", default=f"{e2e.SCHEDULER},{e2e.JOBS},{e2e.OURS}",
                   help="which systems to run, comma-separated (kube-scheduler: bare pods; "
                        "kube-scheduler-jobs: a batch/v1 Job per unit; gpu-orchestrator-queue: "
                        "ours with one GPUQueue over the cluster; kueue: Kueue v0.17.0 "
                        "admitting suspended Jobs, built on first use by "
                        "hack/testenv/peers.sh)")
    p.add_argument("--no-kill", action="store_true",
                   help="skip ours' extra burst with a kill -9 of the controller in it")
    p.add_argument("--static-nodes", action="store_true",
                   help="BENCHMARK-ONLY: nodes created Ready, no TaintNodesByCondition, no "
                        "node-lifecycle controller, no kwok heartbeats or leases (5,000 nodes "
                        "come up in seconds); labelled so in the results")
    p.add_argument("--micro-sizes", type=_ints, default=[100, 1000, 5000])
    p.add_argument("--no-micro", action="store_true", help="skip the micro-benchmark")
    p.add_argument("--micro-only", action="store_true", help="only the micro-benchmark")
    p.add_argument("--profile", action="store_true",
                   help="py-spy record the controller during the burst and the steady phase "
                        "of the largest burst's size (needs py-spy; bench/profile.py)")
    p.add_argument("--profile-rate", type=int, default=100, metavar="HZ",
                   help="py-spy's samples per second with --profile (a burst of 400 units "
                        "is about 100 busy samples at the default)")
    p.add_argument("--apiserver-profile", type=int, default=0, metavar="SECONDS",
                   help="record the kube-apiserver's CPU profile for SECONDS from the start "
                        "of each system's burst at the largest burst's size, and write its "
                        "CPU per unit by stage (bench/apiserver_profile.py)")
    p.add_argument("--no-finalizer-policy", action="store_true",
                   help="ours without config/admission-finalizer: the controller adds its "
                        "finalizer with a patch (clusters without MutatingAdmissionPolicy)")
    p.add_argument("--out", type=Path, default=HERE / "results", help="results folder")
    p.add_argument("--keep", action="store_true", help="keep the control plane's work dir")
    p.add_argument("--bin-dir", type=Path, default=None,
                   help="control-plane binaries (default: hack/testenv/build.sh)")
    args = p.parse_args(argv)
    if len(args.burst) == 1:
        args.burst = args.burst * len(args.sizes)
    if len(args.burst) != len(args.sizes):
        p.error("--burst needs one value, or one per --sizes value")
    if args.sizes != sorted(args.sizes):
        p.error("--sizes must be ascending (nodes are added, never removed)")
    if args.apiserver_profile and shutil.which("go") is None:
        p.error("--apiserver-profile needs go on PATH (go tool pprof reads the profiles)")
    unknown = set(args.systems.split(",")) - set(e2e.SYSTEMS) - {""}
    if unknown:
        p.error(f"unknown systems {sorted(unknown)}: one of {', '.join(e2e.SYSTEMS)}")
    if args.apiserver_profile < 0:
        p.error("--apiserver-profile takes a number of seconds above 0")
    if args.profile_rate < 1:
        p.error("--profile-rate takes a number of samples per second above 0")
    return args


def progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def machine() -> dict[str, Any]:
    mem = 0
    try:
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) // 1024
    except OSError:
        pass
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")),
                         "")
    except OSError:
        pass
    return {"cores": os.cpu_count(), "cpu": model, "memory_mib": mem,
            "python": platform.python_version(), "platform": platform.platform()}


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {"started": datetime.now(UTC).isoformat(timespec="seconds"),
                           "machine": machine(), "args": {k: str(v) if isinstance(v, Path)
                                                          else v for k, v in vars(args).items()}}
    progress(f"machine: {doc['machine']['cores']} cores, {doc['machine']['cpu']}")
    if not args.no_micro:
        doc["micro"] = micro.run(args.micro_sizes, gpus=args.gpus, progress=progress)
    if not args.micro_only:
        doc["e2e"] = run_e2e(args, doc)
    doc["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
    (args.out / "bench.json").write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    (args.out / "bench.partial.json").unlink(missing_ok=True)
    table = report.markdown(doc)
    (args.out / "table.md").write_text(table)
    if doc.get("e2e") and not report.plot(doc, args.out / "bound_over_time.png"):
        progress("no plot: matplotlib is not installed (pip install -e '.[bench]')")
    print()
    print(table)
    progress(f"results in {args.out}")
    return 0


def run_e2e(args: argparse.Namespace, doc: dict[str, Any]) -> list[dict[str, Any]]:
    from hack.testenv import signals_stop
    from hack.testenv.controlplane import binaries

    workdir = Path(tempfile.mkdtemp(prefix="gpu-bench-"))
    bin_dir = args.bin_dir or binaries()
    doc["binaries"] = str(bin_dir)
    cfg = e2e.Config(sizes=args.sizes, bursts=args.burst, gpus=args.gpus, rate=args.rate,
                     duration=args.duration, clients=args.clients, workers=args.workers,
                     qps=args.qps, api_burst=args.api_burst,
                     systems=[s for s in args.systems.split(",") if s],
                     kill_burst=not args.no_kill, static_nodes=args.static_nodes,
                     finalizer_policy=not args.no_finalizer_policy)
    doc["benchmark_only_static_nodes"] = args.static_nodes
    doc["finalizer_policy"] = not args.no_finalizer_policy
    cp = e2e.BenchPlane(workdir, nodes=0, gpus=args.gpus, scheduler=False, bin_dir=bin_dir,
                        static_nodes=args.static_nodes)
    cp.kcm_qps, cp.kcm_burst = args.qps, args.api_burst
    bench: e2e.Bench | None = None
    with signals_stop():
        try:
            progress(f"control plane: starting in {workdir}")
            cp.start()
            def save(results: list[dict[str, Any]]) -> None:
                partial = {**doc, "e2e": results, "partial": True}
                (args.out / "bench.partial.json").write_bytes(
                    orjson.dumps(partial, option=orjson.OPT_INDENT_2))

            bench = e2e.Bench(cp, cfg, progress, save)
            bench.install_crds()
            spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
            if args.profile:
                if os.path.exists(spy):
                    bench.profiler = profile.PySpy(spy, args.out / "profile",
                                                   args.profile_rate)
                else:
                    progress("profile: py-spy not found, not profiling")
            if args.apiserver_profile:
                bench.apiserver_profiler = apiserver_profile.PhaseRecorder(
                    bench.api, args.out / "apiserver-profile", args.apiserver_profile)
            results = bench.run()
            if bench.apiserver_profiler is not None:
                doc["apiserver_profile"] = _apiserver_summary(results, bench, args.out)
            if args.profile and bench.profiler is not None:
                doc["profile_top"] = {}
                for phase in ("burst", "steady"):
                    folded = args.out / "profile" / f"controller-{phase}.folded"
                    if folded.exists():
                        doc["profile_top"][phase] = profile.summarize(folded)
            return results
        finally:
            progress("stopping everything this run started")
            if bench is not None:
                for name in cfg.systems:
                    bench.stop(name)
                if bench.profiler is not None:
                    bench.profiler.stop()
            cp.stop()
            if args.keep:
                progress(f"kept {workdir}")
            else:
                shutil.rmtree(workdir, ignore_errors=True)


def _apiserver_summary(results: list[dict[str, Any]], bench: e2e.Bench, out: Path) -> str:
    """The kube-apiserver's CPU per unit by stage in each system's profiled burst,
    written to ``<out>/apiserver-profile/summary.md`` and printed."""
    for e in bench.apiserver_profiler.errors:
        progress(f"apiserver profile: {e}")
    size = next((r for r in results if r["nodes"] == bench.profile_nodes), None)
    folder = out / "apiserver-profile"
    profiles = {}
    for name, phases in (size or {}).get("systems", {}).items():
        path = folder / f"{name}-burst.pb.gz"
        if path.exists() and phases.get("burst"):
            profiles[name] = (path, int(phases["burst"]["bound"]))
    if not profiles:
        return ""
    text = (f"# The kube-apiserver during each system's burst ({bench.profile_nodes} nodes, "
            f"{bench.apiserver_profiler.seconds} s from the burst's start)\n\n"
            + apiserver_profile.per_unit(profiles) + "\n")
    (folder / "summary.md").write_text(text)
    progress(text)
    return text


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
