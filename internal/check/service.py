"""gpu-scheduler-check: logs, forever, which node a pod runs on and which GPUs it was
given, so a placement can be read from ``kubectl logs``.

``NODE_NAME`` comes from the downward API (``fieldRef: spec.nodeName``);
``CUDA_VISIBLE_DEVICES`` (and ``NVIDIA_VISIBLE_DEVICES``) from the webhook. One
``key=value`` line per interval on stdout; SIGTERM or SIGINT ends the loop at once
with exit code 0. Standard library only, so its image needs nothing installed.
"""

from __future__ import annotations

import argparse
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


def run(interval: float, stop: threading.Event, out: TextIO = sys.stdout,
        env: Mapping[str, str] | None = None, max_count: int = 0) -> int:
    """Logs every ``interval`` seconds until ``stop`` is set (or ``max_count`` lines)."""
    count = 0
    while not stop.is_set():
        count += 1
        print(status_line(env if env is not None else os.environ, count), file=out, flush=True)
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
    args = parser.parse_args(argv)
    if args.interval <= 0:
        parser.error("--interval must be positive")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return run(args.interval, stop, max_count=args.count)


if __name__ == "__main__":
    sys.exit(main())
