"""gpu-scheduler-check: logs, forever, which node a pod runs on and which GPUs it was
given, so a placement can be read from ``kubectl logs``.

``NODE_NAME`` comes from the downward API (``fieldRef: spec.nodeName``);
``CUDA_VISIBLE_DEVICES`` (and ``NVIDIA_VISIBLE_DEVICES``) from the webhook. One
``key=value`` line per interval on stdout; SIGTERM or SIGINT ends the loop at once
with exit code 0. Standard library only, so its image needs nothing installed.

Probes (``--probe``, run by the kubelet in the same container, exit 0 or 1 with one
line saying why):

- ``ready``: the pod has ``CUDA_VISIBLE_DEVICES``, i.e. the webhook gave it the
  devices of its map line. A pod whose map never reached it (the annotation on the
  StatefulSet's own metadata, not its template's) stays not Ready, saying so.
- ``live``: the loop wrote a line within ``--max-age`` seconds (it touches the file
  ``CHECK_HEARTBEAT`` names, when set, at every line).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TextIO


def _quote(value: str) -> str:
    return value if value and " " not in value and '"' not in value else f'"{value}"'


def status_line(env: Mapping[str, str], count: int) -> str:
    fields = {
        "ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "event": "gpu_check",
        "node": env.get("NODE_NAME", "<unset>"),
        "pod": env.get("POD_NAME") or env.get("HOSTNAME", "<unset>"),
        "CUDA_VISIBLE_DEVICES": env.get("CUDA_VISIBLE_DEVICES", "<unset>"),
        "count": str(count),
    }
    if "NVIDIA_VISIBLE_DEVICES" in env:
        fields["NVIDIA_VISIBLE_DEVICES"] = env["NVIDIA_VISIBLE_DEVICES"]
    return " ".join(f"{k}={_quote(v)}" for k, v in fields.items())


def probe(kind: str, env: Mapping[str, str], max_age: float = 0.0) -> tuple[bool, str]:
    """The answer of probe ``kind`` (ready, live) and why, in one line."""
    if kind == "ready":
        devices = env.get("CUDA_VISIBLE_DEVICES")
        if not devices:
            return False, ("no CUDA_VISIBLE_DEVICES: the webhook gave this pod no devices "
                           "(is the gpu-scheduling-map annotation under "
                           "spec.template.metadata.annotations?)")
        return True, f"{env.get('NODE_NAME', '<unset>')}: CUDA_VISIBLE_DEVICES={devices}"
    path = env.get("CHECK_HEARTBEAT")
    if not path:
        return False, "CHECK_HEARTBEAT is not set"
    try:
        age = max(0.0, time.time() - os.stat(path).st_mtime)
    except OSError:
        return False, "no line written yet"
    if age > max_age:
        return False, f"no line for {age:.0f}s (more than {max_age:.0f}s)"
    return True, f"last line {age:.0f}s ago"


def _beat(env: Mapping[str, str]) -> None:
    """Touches the heartbeat file; one that cannot be written is left to the live
    probe to report (the loop goes on logging)."""
    path = env.get("CHECK_HEARTBEAT")
    if path:
        with contextlib.suppress(OSError), open(path, "a"):
            os.utime(path)


def run(interval: float, stop: threading.Event, out: TextIO = sys.stdout,
        env: Mapping[str, str] | None = None, max_count: int = 0) -> int:
    """Logs every ``interval`` seconds until ``stop`` is set (or ``max_count`` lines)."""
    count = 0
    env = env if env is not None else os.environ
    while not stop.is_set():
        count += 1
        print(status_line(env, count), file=out, flush=True)
        _beat(env)
        if max_count and count >= max_count:
            break
        stop.wait(interval)
    print("event=gpu_check_stopped", file=out, flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu-scheduler-check", description=__doc__.split("\n")[0])
    parser.add_argument("--interval", type=float, default=30.0,
                        help="seconds between two log lines (default 30)")
    parser.add_argument("--count", type=int, default=0,
                        help="stop after this many lines (default 0: never)")
    parser.add_argument("--probe", choices=("ready", "live"),
                        help="answer this probe (exit 0 or 1) instead of logging")
    parser.add_argument("--max-age", type=float, default=90.0,
                        help="--probe=live: the most seconds since the last line (default 90)")
    args = parser.parse_args(argv)
    if args.probe:
        ok, why = probe(args.probe, os.environ, args.max_age)
        print(why, flush=True)
        return 0 if ok else 1
    if args.interval <= 0:
        parser.error("--interval must be positive")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return run(args.interval, stop, max_count=args.count)


if __name__ == "__main__":
    sys.exit(main())
