"""``python -m hack.testenv up|down|status|build``: the local control plane as
background processes, for ``make cluster-up``, ``make cluster-down`` and the demo.

``up`` starts everything, records each PID in ``<dir>/state.json`` and returns,
leaving the processes running; ``down`` stops exactly those PIDs (after checking
each still runs the binary it started) and removes the directory's runtime state.
Sizes come from ``--nodes``/``--gpus`` or the ``NODES``/``GPUS`` environment.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .controlplane import ControlPlane, StartError, binaries, remove_tree
from .process import alive, terminate_pid

DEFAULT_DIR = Path(".testenv")


def _state_path(d: Path) -> Path:
    return d / "state.json"


def _runs(pid: int, exe: str) -> bool:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0].decode()
    except OSError:
        return False
    return cmd == exe


def down(d: Path) -> int:
    state_file = _state_path(d)
    if not state_file.exists():
        print(f"testenv: nothing recorded in {state_file}; nothing to stop")
        return 0
    state = json.loads(state_file.read_text())
    for name, entry in reversed(list(state["processes"].items())):
        pid, exe = entry["pid"], entry["exe"]
        if alive(pid) and _runs(pid, exe):
            terminate_pid(pid)
            print(f"testenv: stopped {name} (pid {pid})")
        else:
            print(f"testenv: {name} (pid {pid}) was not running")
    for sub in ("etcd-data", "logs", "pki", "apiserver-certs", "kcm-certs", "scheduler-certs",
                "pod-logs"):
        remove_tree(d / sub)
    for f in ("kubeconfig", "state.json", "check-pods.ready"):
        (d / f).unlink(missing_ok=True)
    for f in d.glob("*.kubeconfig"):  # the components' own (identities.py)
        f.unlink()
    return 0


def up(d: Path, nodes: int, gpus: int, scheduler: bool) -> int:
    if _state_path(d).exists():
        print(f"testenv: {d} already has a control plane; stopping it first")
        down(d)
    cp = ControlPlane(d, nodes=nodes, gpus=gpus, scheduler=scheduler)
    try:
        cp.start()
    except StartError as exc:
        print(f"testenv: {exc}", file=sys.stderr)
        return 1
    state = {
        "server": cp.server,
        "kubeconfig": str(cp.kubeconfig),
        "ports": cp.ports,
        "processes": {n: {"pid": p.pid, "exe": p.argv[0]} for n, p in cp.processes.items()},
    }
    _state_path(d).write_text(json.dumps(state, indent=2))
    print(f"testenv: up: {cp.server}, {nodes} nodes x {gpus} GPUs, kubeconfig {cp.kubeconfig}")
    for n, p in cp.processes.items():
        print(f"testenv:   {n:<24} pid {p.pid:<8} log {p.log}")
    return 0


def status(d: Path) -> int:
    state_file = _state_path(d)
    if not state_file.exists():
        print("testenv: down")
        return 1
    state = json.loads(state_file.read_text())
    ok = True
    for name, entry in state["processes"].items():
        running = alive(entry["pid"]) and _runs(entry["pid"], entry["exe"])
        ok &= running
        print(f"testenv: {name:<24} pid {entry['pid']:<8} {'running' if running else 'DEAD'}")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hack.testenv", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["up", "down", "status", "build"])
    p.add_argument("--dir", type=Path, default=Path(os.environ.get("TESTENV_DIR", DEFAULT_DIR)))
    p.add_argument("--nodes", type=int, default=int(os.environ.get("NODES") or 4))
    p.add_argument("--gpus", type=int, default=int(os.environ.get("GPUS") or 4))
    p.add_argument("--scheduler", action="store_true", help="also run kube-scheduler")
    a = p.parse_args(argv)
    if a.command == "build":
        print(binaries())
        return 0
    if a.command == "up":
        return up(a.dir, a.nodes, a.gpus, a.scheduler)
    if a.command == "down":
        return down(a.dir)
    return status(a.dir)


if __name__ == "__main__":
    sys.exit(main())
