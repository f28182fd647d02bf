"""The ``agent`` subcommand's flags and entry, for ``main.py`` to wire up::

    sub = subparsers.add_parser("agent", help="NVML agent (DaemonSet)")
    add_agent_flags(sub)
    ...
    return agent_main(args)   # blocks until SIGTERM/SIGINT; returns the exit code

Flags (each also read from an environment variable, flag wins):

  --node-name            this node's name (NODE_NAME; the DaemonSet sets it through
                         the downward API)
  --kubeconfig           kubeconfig path (KUBECONFIG); in-cluster config when unset
  --nvml-backend         auto | nvml | fixture:<name-or-path> (AGENT_NVML_BACKEND;
                         default auto: pynvml, exit 1 when NVML does not load)
  --interval             seconds between heartbeats/status writes (default 10)
  --poll-interval        seconds between NVML polls; changes are written at once
                         (default 2, at most --interval)
  --metrics-bind-address /metrics, /healthz, /readyz address (default :9400; "0" off)
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
from typing import Any

import structlog

from internal.agent.agent import DEFAULT_INTERVAL, DEFAULT_POLL_INTERVAL, WrongNode, run_agent
from internal.agent.nvml import NvmlUnavailable, select_backend

log = structlog.get_logger("agent")


def add_agent_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--node-name", default=os.environ.get("NODE_NAME", ""),
                   help="this node's name (env NODE_NAME)")
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG") or None,
                   help="kubeconfig path; in-cluster config when unset")
    p.add_argument("--nvml-backend", default=os.environ.get("AGENT_NVML_BACKEND", "auto"),
                   help="auto | nvml | fixture:<name-or-path>")
    p.add_argument("--interval", type=float, default=DEFAULT_INTERVAL,
                   help="seconds between heartbeats (GPUNode status writes)")
    p.add_argument("--poll-interval", type=float, default=DEFAULT_POLL_INTERVAL,
                   help="seconds between NVML polls (changes are written at once)")
    p.add_argument("--metrics-bind-address", default=":9400",
                   help='address of /metrics, /healthz, /readyz; "0" disables')


def agent_main(args: Any, stop_event: threading.Event | None = None) -> int:
    """Run the agent from parsed flags until SIGTERM/SIGINT (or ``stop_event``)."""
    if not args.node_name:
        log.error("agent.no_node_name", hint="pass --node-name or set NODE_NAME")
        return 2
    try:
        backend = select_backend(args.nvml_backend)
    except (NvmlUnavailable, ValueError, OSError) as e:
        log.error("agent.no_backend", backend=args.nvml_backend, error=str(e))
        return 1
    stop = stop_event if stop_event is not None else threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    try:
        run_agent(args.node_name, args.kubeconfig, backend, args.interval,
                  args.metrics_bind_address, stop, poll_interval=args.poll_interval)
    except WrongNode as e:
        log.error("agent.wrong_node", error=str(e))
        return 2
    finally:
        backend.close()
    return 0
