"""``python -m bench.apiserver_profile``: where the kube-apiserver's CPU goes for the
requests a unit of ours costs, recorded with the kube-apiserver's own profiler.

On a fresh local control plane (the benchmark's: config/crd and
config/admission-finalizer installed, no controller, no scheduler, no node), each
kind of request is sent over ``--workers`` connections (8) for ``--seconds``, once
without the profiler (the requests sent, the kube-apiserver's CPU per request and the
p50 and p99 of the answer's time) and once more while ``/debug/pprof/profile`` records
the kube-apiserver: the GPUWorkload status as the status writer sends it, the
GPUWorkload create (finalizer by policy) and, for comparison, the benchmark's pod
create. Written to ``--out``: each raw profile (``<kind>.pb.gz``, for ``go tool
pprof``) and ``summary.md``: the unprofiled pass's table, then per kind the share of
the process's CPU samples under each
stage of a request (:data:`STAGES`; a sample may fall under two, e.g. a CEL rule run
inside the validation), then ``go tool pprof -top -cum`` of the largest entries.

``python -m bench --apiserver-profile`` records the kube-apiserver the same way during
each system's burst at the largest burst's size (:class:`PhaseRecorder`) and writes,
per system, the kube-apiserver CPU per unit under each stage and under each kind of
work (:data:`WORK`): what a unit of ours costs it beside a unit of kube-scheduler's.

The profiler costs the process a little CPU of its own: read shares, and take CPU
per request from ``python -m bench.apicost``.
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import e2e
from bench.apicost import writer_patch
from bench.kube import proc_stats

#: (stage, a regular expression over ``go tool pprof -top -cum`` function names);
#: the stage's share is that of its largest match (cumulative, so nested calls are
#: not counted twice)
STAGES: tuple[tuple[str, str], ...] = (
    ("CRD rules (CEL, x-kubernetes-validations)",
     r"apiserver/schema/cel\.\(\*Validator\)\.Validate$"),
    ("  of which: the spec's property table rebuilt per field read",
     r"schema/cel/model\.\(\*Structural\)\.Properties$"),
    ("CRD schema validation (OpenAPI)",
     r"customResourceValidator\.Validate(StatusUpdate|Update)?$"),
    ("admission policies (ValidatingAdmissionPolicy, CEL)",
     r"policy/validating\.\(\*Plugin\)\.Validate$"),
    ("admission policies (MutatingAdmissionPolicy, CEL)",
     r"policy/mutating\.\(\*Plugin\)\.Admit$"),
    ("patch applied to the stored object (JSON encode, patch, decode)",
     r"handlers\.\(\*patcher\)\.applyPatch$"),
    ("managed fields", r"managedfields/internal\.\(\*FieldManager\)\.Update$"),
    ("body decoded into the schema (pruning, defaulting)",
     r"apiserver\.schemaCoercingDecoder\.Decode$"),
    ("the watch cache decoding etcd's events",
     r"storage/etcd3\.\(\*watchChan\)\.transform$"),
    ("the response encoded", r"responsewriters\.WriteObjectNegotiated$"),
    ("the storage's create (encoding, the etcd transaction's client side)",
     r"etcd3\.\(\*store\)\.Create$"),
    ("garbage collection (background marking)", r"^runtime\.gcBgMarkWorker$"),
)


#: what the kube-apiserver is doing, by the handler that does it (cumulative; they do
#: not nest in one another)
WORK: tuple[tuple[str, str], ...] = (
    ("creates", r"registry\.\(\*Store\)\.Create$"),
    ("updates and patches", r"registry\.\(\*Store\)\.Update$"),
    ("deletes", r"registry\.\(\*Store\)\.Delete$"),
    ("gets", r"registry\.\(\*Store\)\.Get$"),
    ("lists", r"registry\.\(\*Store\)\.List$"),
    ("watches served (encoding events for each watcher)",
     r"handlers\.\(\*WatchServer\)\.HandleHTTP$"),
    ("the watch cache dispatching events", r"cacher\.\(\*Cacher\)\.dispatchEvents$"),
    ("the watch cache decoding etcd's events",
     r"storage/etcd3\.\(\*watchChan\)\.transform$"),
    ("garbage collection (background marking)", r"^runtime\.gcBgMarkWorker$"),
)


class PhaseRecorder:
    """The kube-apiserver's CPU profile for ``seconds`` from a phase's start, written
    to ``<out_dir>/<system>-<phase>.pb.gz`` (``start`` returns at once, ``stop``
    waits for the profile)."""

    def __init__(self, api: Any, out_dir: Path, seconds: int) -> None:
        self.api, self.out_dir, self.seconds = api, out_dir, seconds
        self._thread: threading.Thread | None = None
        self.errors: list[str] = []

    def start(self, system: str, phase: str) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        out = self.out_dir / f"{system}-{phase}.pb.gz"

        def run() -> None:
            try:
                _record(self.api, self.seconds, out)
            except (OSError, RuntimeError, http.client.HTTPException) as e:
                self.errors.append(f"{out.name}: {e}")

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._thread.join(self.seconds + 90)
            self._thread = None


def total_samples_s(profile: Path) -> float:
    """The profile's CPU seconds sampled ("Total samples = ...")."""
    text = subprocess.run(["go", "tool", "pprof", "-top", "-nodecount=1", str(profile)],
                          capture_output=True, text=True, check=True).stdout
    m = re.search(r"Total samples = ([0-9.]+)(ms|s|mins)", text)
    if not m:
        return 0.0
    return float(m.group(1)) * {"ms": 0.001, "s": 1.0, "mins": 60.0}[m.group(2)]


def per_unit(profiles: dict[str, tuple[Path, int]]) -> str:
    """Markdown: kube-apiserver CPU ms per unit, by stage and by kind of work, one
    column per system; ``profiles`` maps a system to (its profile, units)."""
    cols, shares = [], []
    for system, (path, units) in profiles.items():
        rows = top_cum(path)
        total = total_samples_s(path)
        both = dict(stages(rows))
        both.update(_shares(rows, WORK))
        cols.append(system)
        shares.append({k: 1000 * total * pct / 100 / max(units, 1) for k, pct in both.items()}
                      | {"(all samples)": 1000 * total / max(units, 1)})
    labels = list(dict.fromkeys(["(all samples)", *(label for label, _ in WORK),
                                 *(label for label, _ in STAGES)]))
    lines = ["| kube-apiserver CPU ms per unit | " + " | ".join(cols) + " |",
             "| --- |" + " ---: |" * len(cols)]
    for label in labels:
        if any(s.get(label, 0.0) for s in shares):
            lines.append(f"| {label} | "
                         + " | ".join(f"{s.get(label, 0.0):.2f}" for s in shares) + " |")
    return "\n".join(lines)


def _shares(rows: list[tuple[float, str]], table: tuple[tuple[str, str], ...]
            ) -> list[tuple[str, float]]:
    return [(label, max((pct for pct, fn in rows if re.search(pattern, fn)), default=0.0))
            for label, pattern in table]


def _kinds(ns: str, uids: dict[str, str], n: int
           ) -> list[tuple[str, Callable[[int, int], tuple[str, str, Any, str]]]]:
    """(name, make(worker, i) -> (method, path, body, content type)) per kind."""
    wl = f"/apis/{e2e.GROUP}/{e2e.VERSION}/namespaces/{ns}/gpuworkloads"

    def status(k: int, i: int) -> tuple[str, str, Any, str]:
        name = f"u-{(k * 131 + i) % n}"
        return ("PATCH", f"{wl}/{name}/status", writer_patch(uids[name], f"w {k} {i}"),
                "application/json-patch+json")

    def create(k: int, i: int) -> tuple[str, str, Any, str]:
        return ("POST", wl, e2e._workload(ns, f"c-{k}-{i}"), "application/json")

    def pod(k: int, i: int) -> tuple[str, str, Any, str]:
        return ("POST", f"/api/v1/namespaces/{ns}/pods", e2e._pod(ns, f"p-{k}-{i}"),
                "application/json")

    return [("gpuworkload-status", status), ("gpuworkload-create", create),
            ("pod-create", pod)]


def _record(api: Any, seconds: int, out: Path) -> None:
    conn = http.client.HTTPSConnection("127.0.0.1", api.port, context=api.ctx,
                                       timeout=seconds + 60)
    try:
        conn.request("GET", f"/debug/pprof/profile?seconds={seconds}")
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"/debug/pprof/profile: HTTP {resp.status}: {data[:200]!r}")
        out.write_bytes(data)
    finally:
        conn.close()


def _send_while(api: Any, make: Callable[[int, int], tuple[str, str, Any, str]],
                until: float, workers: int = 8) -> tuple[list[float], list[str]]:
    """Sends ``make``'s requests over ``workers`` connections until ``until``: each
    answered request's time in seconds, and the first refusals."""
    times: list[list[float]] = [[] for _ in range(workers)]
    errors: list[str] = []

    def run(k: int) -> None:
        for i in itertools.count():
            if time.time() >= until or errors:
                return
            method, path, body, ct = make(k, i)
            t0 = time.perf_counter()
            code, out = api.request(method, path, body, content_type=ct)
            if code >= 300:
                errors.append(f"{method} {path}: {code} {str(out)[:200]}")
                return
            times[k].append(time.perf_counter() - t0)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [x for ts in times for x in ts], errors


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest rank (0 when empty)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def _pass(api: Any, pid: int, make: Callable[[int, int], tuple[str, str, Any, str]],
          seconds: int, workers: int, profile: Path | None = None) -> dict[str, Any]:
    """One kind's requests for ``seconds`` (recording ``profile`` meanwhile when
    given): requests sent, kube-apiserver CPU ms per request, p50 and p99 ms."""
    before = proc_stats(pid)["cpu_s"]
    recorder = None
    if profile is not None:
        recorder = threading.Thread(target=_record, args=(api, seconds, profile))
        recorder.start()
    times, errors = _send_while(api, make, time.time() + seconds, workers)
    if recorder is not None:
        recorder.join()
    cpu = proc_stats(pid)["cpu_s"] - before
    if errors:
        raise RuntimeError(errors[0])
    return {"sent": len(times), "cpu_ms": 1000 * cpu / max(len(times), 1),
            "p50_ms": 1000 * percentile(times, 0.5), "p99_ms": 1000 * percentile(times, 0.99)}


def top_cum(profile: Path, nodes: int = 400) -> list[tuple[float, str]]:
    """(cumulative % of samples, function) from ``go tool pprof -top -cum``."""
    text = subprocess.run(["go", "tool", "pprof", "-top", "-cum", f"-nodecount={nodes}",
                           str(profile)], capture_output=True, text=True, check=True).stdout
    rows = []
    for line in text.splitlines():
        m = re.match(r"\s*\S+\s+\S+%\s+\S+%\s+\S+\s+(\S+)%\s+(.+)$", line)
        if m:
            rows.append((float(m.group(1)), m.group(2).strip()))
    return rows


def stages(rows: list[tuple[float, str]]) -> list[tuple[str, float]]:
    """Each stage of :data:`STAGES` with its share (%) of the profile's samples."""
    return _shares(rows, STAGES)


def summary(results: list[dict[str, Any]], out: Path) -> str:
    lines = ["# Where the kube-apiserver's CPU goes, per kind of request", "",
             "`python -m bench.apiserver_profile` (module docstring: how it is measured).",
             ""]
    lines += ["| kind | requests | kube-apiserver CPU ms per request | p50 ms | p99 ms |",
              "| --- | ---: | ---: | ---: | ---: |"]
    lines += [f"| {r['kind']} | {r['sent']} | {r['cpu_ms']:.2f} | {r['p50_ms']:.1f} | "
              f"{r['p99_ms']:.1f} |" for r in results]
    lines += ["", "Without the profiler; then a second pass of each kind as long with it,"
              " whose samples are below.", ""]
    for r in results:
        rows = top_cum(out / f"{r['kind']}.pb.gz")
        lines += [f"## {r['kind']}", "",
                  f"{r['seconds']} s over {r['workers']} connections, "
                  f"{r['profiled_cpu_ms']:.2f} ms of kube-apiserver CPU per request "
                  "(profiler running).", "",
                  "| stage | share of CPU samples |", "| --- | ---: |"]
        lines += [f"| {label} | {pct:.1f}% |" for label, pct in stages(rows) if pct]
        lines += ["", "```", *(f"{pct:5.1f}%  {fn}" for pct, fn in rows[:25]), "```", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.apiserver_profile",
                                description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("bench/results/apiserver-profile"))
    p.add_argument("--seconds", type=int, default=12, help="per kind (default 12)")
    p.add_argument("--workers", type=int, default=8,
                   help="connections sending at once (default 8)")
    p.add_argument("--bin-dir", type=Path, default=None)
    args = p.parse_args(argv)
    if shutil.which("go") is None:
        p.error("go is needed on PATH (go tool pprof reads the profiles)")
    from hack.testenv.controlplane import binaries

    args.out.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="gpu-apiprof-"))
    cp = e2e.BenchPlane(workdir, nodes=0, gpus=8, bin_dir=args.bin_dir or binaries(),
                        static_nodes=True)
    results = []
    try:
        cp.start()
        bench = e2e.Bench(cp, e2e.Config(sizes=[0], bursts=[0]), print)
        bench.install_crds()  # and the finalizer policy (Config's default)
        ns = "apiprof"
        bench._namespace(ns)
        api = bench.api
        n = 200
        wl = f"/apis/{e2e.GROUP}/{e2e.VERSION}/namespaces/{ns}/gpuworkloads"
        uids = {f"u-{i}": api.must("POST", wl, e2e._workload(ns, f"u-{i}"))["metadata"]["uid"]
                for i in range(n)}
        pid = cp.pids()["kube-apiserver"]
        for kind, make in _kinds(ns, uids, n):
            # a timed pass without the profiler, then the profiled one; the second's
            # workers are numbered after the first's, so its creates have new names
            timed = _pass(api, pid, make, args.seconds, args.workers)
            profiled = _pass(api, pid, lambda k, i, m=make: m(args.workers + k, i),
                             args.seconds, args.workers, args.out / f"{kind}.pb.gz")
            results.append({"kind": kind, "seconds": args.seconds, "workers": args.workers,
                            **timed, "profiled_cpu_ms": profiled["cpu_ms"]})
            print(f"{kind}: {timed['sent']} requests, {timed['cpu_ms']:.2f} ms of CPU per "
                  f"request, p50 {timed['p50_ms']:.1f} ms, p99 {timed['p99_ms']:.1f} ms")
    finally:
        cp.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    text = summary(results, args.out) + f"\nLoad average at the end: {load}.\n"
    (args.out / "summary.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
