"""Reads a machine's GPUs through the agent's own NVML backend, once idle and once
under load, and checks what it read against ``nvidia-smi``; never changes a setting
(MIG mode included: it is read, not switched).

    python -m hack.nvml_probe --out DIR [--backend nvml] [--load-seconds 8]

Writes to DIR:

- ``gpunode-status.json``: the GPUNode status the agent would publish (``build_status``);
- ``fixture.json``: the raw readings in the fixture backend's format, so a machine's
  reading can be replayed by ``--nvml-backend fixture:<path>``;
- ``report.json``: timings (NVML init, one poll), the MIG profiles the device offers
  under the names the agent gives them, what moved under load, and every mismatch
  with ``nvidia-smi``.

Exits 1 when a reading disagrees with ``nvidia-smi`` or did not move under load.
docs/agent.md records what it reported on real hardware.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from internal.agent.nvml.backend import sample
from internal.agent.nvml.real import RealNvmlBackend
from internal.agent.nvml.selection import select_backend
from internal.agent.nvml.topology import normalize_bus_id
from internal.agent.nvml.types import RawDevice
from internal.agent.status import build_status

SMI_FIELDS = "index,uuid,name,pci.bus_id,memory.total,mig.mode.current"
MIB = 1024 * 1024

LOAD = """
import sys, time, torch
x = torch.empty(int(sys.argv[1]) * 2**30, dtype=torch.uint8, device="cuda")
a = torch.randn(8192, 8192, device="cuda"); end = time.time() + float(sys.argv[2])
a = (a @ a).clamp_(-1, 1); torch.cuda.synchronize(); print("ready", flush=True)
while time.time() < end:
    a = (a @ a).clamp_(-1, 1)
torch.cuda.synchronize()
"""


def fixture_device(r: RawDevice) -> dict[str, Any]:
    """One raw reading in the fixture format (``internal/agent/nvml/fixture.py``)."""
    return {
        "index": r.index, "uuid": r.uuid, "name": r.name, "pciBusId": r.pci_bus_id,
        "memory": {"total": r.memory_total_bytes, "used": r.memory_used_bytes},
        "utilization": {"gpu": r.utilization_gpu},
        "temperature": r.temperature_c, "powerUsage": r.power_mw,
        "eccErrors": {"volatileUncorrected": r.ecc_uncorrected_volatile},
        "migMode": {"current": None if r.mig_enabled is None else int(r.mig_enabled)},
        "migDevices": [{"uuid": m.uuid, "profile": m.profile,
                        "memory": {"total": m.memory_total_bytes},
                        "placement": {"start": m.start, "size": m.size}}
                       for m in r.mig_devices],
        "nvlinks": ([{"link": link.link, "remotePciBusId": link.remote_pci_bus_id,
                      "remoteDeviceType": str(link.remote_type)} for link in r.nvlinks]
                    if r.nvlinks_read else None),
        "xidErrors": list(r.xid_errors), "error": r.error,
    }


def smi_rows() -> list[dict[str, str]]:
    out = subprocess.run(["nvidia-smi", f"--query-gpu={SMI_FIELDS}",
                          "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    keys = SMI_FIELDS.split(",")
    return [dict(zip(keys, (v.strip() for v in line.split(",")), strict=True))
            for line in out.splitlines() if line.strip()]


def mismatches(raws: list[RawDevice], smi: list[dict[str, str]]) -> list[str]:
    """Where the backend's reading and nvidia-smi's disagree (identity, memory, MIG)."""
    out = []
    if len(raws) != len(smi):
        out.append(f"device count: ours {len(raws)}, nvidia-smi {len(smi)}")
    for r, s in zip(raws, smi, strict=False):
        if r.uuid != s["uuid"]:
            out.append(f"device {r.index} uuid: ours {r.uuid}, nvidia-smi {s['uuid']}")
        if r.name != s["name"]:
            out.append(f"device {r.index} name: ours {r.name!r}, nvidia-smi {s['name']!r}")
        if normalize_bus_id(r.pci_bus_id) != normalize_bus_id(s["pci.bus_id"]):
            out.append(f"device {r.index} bus: ours {r.pci_bus_id}, nvidia-smi {s['pci.bus_id']}")
        if (r.memory_total_bytes or 0) // MIB != int(s["memory.total"]):
            out.append(f"device {r.index} memory MiB: ours {(r.memory_total_bytes or 0) // MIB}, "
                       f"nvidia-smi {s['memory.total']}")
        smi_mig = {"Enabled": True, "Disabled": False}.get(s["mig.mode.current"])
        if smi_mig is not None and bool(r.mig_enabled) != smi_mig:
            out.append(f"device {r.index} MIG: ours {r.mig_enabled}, nvidia-smi {smi_mig}")
    return out


def mig_profiles(backend: RealNvmlBackend) -> dict[str, Any]:
    """The GPU instance profiles device 0 offers, named as the agent names them, beside
    NVML's own figures (read only; works whether or not MIG is enabled where the
    driver allows it)."""
    n = backend.nvml
    h = n.nvmlDeviceGetHandleByIndex(0)
    rows = []
    for p in range(int(n.NVML_GPU_INSTANCE_PROFILE_COUNT)):
        try:
            info = n.nvmlDeviceGetGpuInstanceProfileInfo(h, p)
        except n.NVMLError as e:
            rows.append({"profile": p, "error": str(e)})
            continue
        rows.append({"profile": p, "id": int(info.id), "name": str(getattr(info, "name", "")),
                     "slices": int(info.sliceCount),
                     "memoryMB": int(info.memorySizeMB), "instances": int(info.instanceCount)})
    try:
        names = backend._profile_names(h)
    except n.NVMLError as e:
        names = {"error": str(e)}
    try:
        current, pending = n.nvmlDeviceGetMigMode(h)
        mode = {"current": int(current), "pending": int(pending)}
    except n.NVMLError as e:
        mode = {"error": str(e)}
    return {"mode": mode, "profiles": rows, "agentNames": names}


def timed_sample(backend: Any) -> tuple[Any, list[RawDevice], float]:
    t0 = time.perf_counter()
    raws = [backend.read_device(i) for i in range(backend.device_count())]
    s = sample(backend)
    return s, raws, (time.perf_counter() - t0) * 1000 / 2


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--backend", default="nvml")
    p.add_argument("--load-seconds", type=float, default=8.0)
    p.add_argument("--load-gib", type=int, default=8)
    a = p.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    backend = select_backend(a.backend)
    init_ms = (time.perf_counter() - t0) * 1000
    report: dict[str, Any] = {"backend": backend.name, "initMs": round(init_ms, 1)}
    try:
        idle, raws, poll_ms = timed_sample(backend)
        report["pollMs"] = round(poll_ms, 2)
        report["eventsSupported"] = getattr(backend, "_events", None) is not None
        now = datetime.now(UTC)
        (a.out / "gpunode-status.json").write_text(json.dumps(build_status(idle, now), indent=2))
        (a.out / "fixture.json").write_text(json.dumps({
            "description": f"recorded by hack.nvml_probe on {now:%Y-%m-%d}",
            "driverVersion": backend.driver_version(),
            "devices": [fixture_device(r) for r in raws]}, indent=2))
        report["idle"] = [asdict(d) for d in idle.devices]
        problems: list[str] = []
        if isinstance(backend, RealNvmlBackend):
            report["mig"] = mig_profiles(backend)
            problems += mismatches(raws, smi_rows())
            load = subprocess.Popen([sys.executable, "-c", LOAD, str(a.load_gib),
                                     str(a.load_seconds)], stdout=subprocess.PIPE, text=True)
            assert load.stdout is not None
            report["loadReady"] = load.stdout.readline().strip()  # allocated, computing
            time.sleep(1)
            busy = sample(backend)
            load.wait(timeout=a.load_seconds + 120)
            d0, d1 = idle.devices[0], busy.devices[0]
            moved = {"memoryUsedMiB": [d0.memory_used_bytes // MIB, d1.memory_used_bytes // MIB],
                     "utilization": [d0.utilization, d1.utilization],
                     "powerWatts": [d0.power_watts, d1.power_watts],
                     "temperatureC": [d0.temperature_c, d1.temperature_c]}
            report["underLoad"] = moved
            if (d1.memory_used_bytes - d0.memory_used_bytes) < (a.load_gib - 1) * 1024 * MIB:
                problems.append(f"memory used did not grow by ~{a.load_gib} GiB: {moved}")
            if d1.utilization <= 0:
                problems.append(f"utilization stayed 0 under load: {moved}")
        report["problems"] = problems
    finally:
        backend.close()
    (a.out / "report.json").write_text(json.dumps(report, indent=2, default=str))
    print(json.dumps({k: v for k, v in report.items() if k != "idle"}, indent=2, default=str))
    return 1 if report.get("problems") else 0


if __name__ == "__main__":
    raise SystemExit(main())
