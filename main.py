"""gpu-orchestrator entry point.

    python main.py [manager] [flags]   the controller manager (default)
    python main.py agent [flags]       the NVML agent (DaemonSet on GPU nodes)
    python main.py webhook [flags]     the CUDA_VISIBLE_DEVICES mutating webhook alone
    python main.py webhook-certs       the webhook's certificates and CA bundle (a Job)

``python main.py SUBCOMMAND --help`` lists each one's flags with their defaults.
"""

from __future__ import annotations

import argparse
import copy
import logging
import os
import sys

import structlog

from api.v1alpha1.types import DeviceExposure, SchedulingStrategy
from internal.scheduling.bounds import MAX_GPUS_PER_NODE
from internal.scheduling.sharefloor import DEFAULT_MIN_FRACTION, DEFAULT_MIN_MEMORY, ShareFloors


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` shows every flag's default, flags without a help text included. An
    unset default (None, "") is left out: those flags' help says what unset means."""

    def _format_action(self, action: argparse.Action) -> str:
        if action.option_strings and not action.help and _has_default(action):
            action = copy.copy(action)
            action.help = "(default: %(default)s)"
        return super()._format_action(action)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if not _has_default(action) or "default" in (action.help or "").lower():
            return action.help
        return super()._get_help_string(action)


def _has_default(action: argparse.Action) -> bool:
    return action.default not in (None, "", [], argparse.SUPPRESS)


def configure_logging(fmt: str, level: str) -> None:
    """structlog: one event name per line with key=value context; JSON in a container."""
    lvl = getattr(logging, level.upper(), logging.INFO)
    renderer = (structlog.processors.JSONRenderer() if fmt == "json"
                else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty()))
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )


def _common(p: argparse.ArgumentParser) -> None:
    in_container = os.path.exists("/var/run/secrets/kubernetes.io/serviceaccount/token")
    p.add_argument("--log-format", choices=["console", "json"],
                   default="json" if in_container else "console",
                   help="log lines as key=value text or JSON (default: json in a pod, "
                        "else console)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                   help="lowest level logged")


def add_manager_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG") or None,
                   help="kubeconfig path; in-cluster config when unset")
    p.add_argument("--namespace", default=None,
                   help="cache this namespace only, pods too (default: all); GPU pods "
                        "elsewhere then go uncounted: prefer --namespaces")
    p.add_argument("--namespaces", default="",
                   help="comma-separated: place GPUWorkloads and bind seed pods only in "
                        "these (default: all); pods everywhere are still counted. Pair "
                        "with config/namespaced, which limits the RBAC to match")
    p.add_argument("--default-strategy", default=SchedulingStrategy.LEAST_LOADED.value,
                   choices=[s.value for s in SchedulingStrategy],
                   help="strategy for workloads whose spec names none")
    p.add_argument("--device-exposure", default=DeviceExposure.CUDA_VISIBLE_DEVICES.value,
                   choices=[e.value for e in DeviceExposure],
                   help="how replicas see their devices unless a workload overrides it")
    p.add_argument("--metrics-bind-address", default=":8080",
                   help="address of /metrics; 0 disables")
    p.add_argument("--metrics-secure", action=argparse.BooleanOptionalAction, default=True,
                   help="/metrics only for a bearer token allowed `get /metrics` (TokenReview "
                        "+ SubjectAccessReview), over HTTPS; --no-metrics-secure serves "
                        "it to anyone over HTTP")
    p.add_argument("--metrics-cert-dir", default=None,
                   help="tls.crt and tls.key for the secure /metrics (default: a "
                        "self-signed certificate made at start)")
    p.add_argument("--health-probe-bind-address", default=":8081",
                   help="address of /healthz and /readyz; 0 disables")
    p.add_argument("--leader-elect", type=_bool, nargs="?", const=True, default=True,
                   metavar="BOOL",
                   help="elect a leader on a Lease so only one manager places (default: "
                        "true; --leader-elect=false turns it off, and such a manager still "
                        "refuses to place while another one leads the same Lease)")
    p.add_argument("--leader-election-namespace", default=None,
                   help="namespace of the Lease (default: $POD_NAMESPACE, else "
                        "gpu-orchestrator-system)")
    p.add_argument("--leader-election-id", default="gpu-orchestrator-leader",
                   help="name of the Lease")
    p.add_argument("--leader-elect-lease-duration", type=float, default=15.0,
                   help="seconds a standby waits, after the leader's last renewal, before "
                        "it takes over")
    p.add_argument("--leader-elect-renew-deadline", type=float, default=10.0,
                   help="seconds the leader keeps placing without a successful renewal")
    p.add_argument("--leader-elect-retry-period", type=float, default=2.0,
                   help="seconds between two tries to acquire or renew")
    p.add_argument("--workers", type=int, default=16,
                   help="concurrent reconciles (kube-scheduler binds 16 pods at once)")
    p.add_argument("--resync-unsettled-period", type=_seconds, default=60.0, metavar="SECONDS",
                   help="reconcile again every Pending, Scheduled or deleting GPUWorkload "
                        "that no reconcile looked at for this long (0: never); "
                        "gpu_orchestrator_backstop_reconciles_total{outcome=\"acted\"} "
                        "counts those that were owed and should stay 0")
    p.add_argument("--require-queue", action="store_true",
                   help="a GPUWorkload in no GPUQueue (no spec.queueName, and no queue's "
                        "namespaceSelector selects its namespace) waits Pending (NoQueue) "
                        "instead of being placed as without queues (docs/queues.md)")
    p.add_argument("--gpunode-stale-after", type=float, default=90.0,
                   help="seconds without an agent heartbeat before a GPUNode's devices are "
                        "no longer offered")
    p.add_argument("--max-gpus-per-node", type=_gpus, default=MAX_GPUS_PER_NODE,
                   help="a node reporting more GPUs (its nvidia.com/gpu, its GPUNode's or "
                        "its ResourceSlices' devices) is refused: nothing offered there, a "
                        "TooManyGPUs Event on the Node (the largest GPU nodes have 8 to 16)")
    p.add_argument("--min-share-memory", type=_share_memory, default=DEFAULT_MIN_MEMORY,
                   metavar="QUANTITY",
                   help="the smallest gpuShare.memory placed (0: none); a smaller share "
                        "waits Pending, ShareBelowMinimum (docs/usage.md, Sharing a GPU)")
    p.add_argument("--min-share-fraction", type=_share_fraction, default=DEFAULT_MIN_FRACTION,
                   metavar="DECIMAL",
                   help="the smallest gpuShare.fraction placed (0: none), and the least the "
                        "shares of one workload on one device count against its GPUQueue "
                        "(docs/queues.md, What counts)")
    p.add_argument("--enable-pod-binding", action="store_true",
                   help="run the pod-binding controller of the seed-compatible path: bind "
                        "pods whose schedulerName is --scheduler-name as their "
                        "gpu-scheduling-map says, through the same ledger")
    p.add_argument("--evict-conflicting-pods", action=argparse.BooleanOptionalAction,
                   default=True,
                   help="evict a pod that names GPU devices neither the controller nor the "
                        "webhook gave it, a --scheduler-name pod bound by someone else "
                        "onto devices another workload holds, and a pod of nobody of ours "
                        "whose arrival over-committed its node's GPUs "
                        "(--no-evict-conflicting-pods: report them by Event and metric only)")
    p.add_argument("--scheduler-name", default="gpu-scheduler",
                   help="schedulerName of the pods the pod-binding controller binds")
    p.add_argument("--enable-dra", action="store_true",
                   help="Dynamic Resource Allocation: read ResourceSlices of --dra-driver as "
                        "inventory, count allocated ResourceClaims as busy, and serve "
                        "deviceExposure dra (on by itself with --device-exposure=dra)")
    p.add_argument("--dra-driver", default="gpu.nvidia.com",
                   help="the DRA driver whose ResourceSlices publish the GPUs")
    p.add_argument("--dra-device-class", default="gpu.nvidia.com",
                   help="the DeviceClass our ResourceClaims request")
    p.add_argument("--qps", type=float, default=50.0,
                   help="client-side API QPS limit, of each client: the workers' and the "
                        "status writer's (as kube-scheduler's main and events clients)")
    p.add_argument("--status-lag", type=_seconds, default=2.0, metavar="SECONDS",
                   help="a Scheduled status waits this long for a newer one "
                        "(Scheduled then Running within it is one Running write); Running, "
                        "Succeeded and Failed are never held. The lag users see is "
                        "gpu_orchestrator_status_write_lag_seconds")
    p.add_argument("--status-busy-hold", type=_seconds, default=5.0, metavar="SECONDS",
                   help="while placements are being made (the work queue busy), a Scheduled "
                        "status whose --status-lag ended waits on for them to pause, at most "
                        "this much longer (in a burst pods run later than the lag; 0: no "
                        "wait)")
    p.add_argument("--status-busy-qps", type=float, default=0.0,
                   help="while placements are being made (the work queue busy), write at "
                        "most this many statuses per second, draining afterwards (0: no "
                        "bound)")
    p.add_argument("--status-max-lag", type=_seconds, default=5.0, metavar="SECONDS",
                   help="with --status-busy-qps: a status ready this long is written "
                        "whether placements are being made or not")
    p.add_argument("--burst", type=int, default=100, help="client-side API burst, of each "
                                                          "client")


def _gpus(v: str) -> int:
    """A number of GPUs, one or more."""
    try:
        out = int(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of GPUs, got {v!r}") from None
    if out < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1 GPU, got {v!r}")
    return out


def _share_memory(v: str) -> str:
    try:
        ShareFloors.parse(v, "0")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return v


def _share_fraction(v: str) -> str:
    try:
        ShareFloors.parse("0", v)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return v


def _seconds(v: str) -> float:
    """A number of seconds, zero or more."""
    try:
        out = float(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {v!r}") from None
    if not out >= 0 or out == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {v!r}")
    return out


def _bool(v: str) -> bool:
    low = v.strip().lower()
    if low in ("1", "t", "true", "yes", "on"):
        return True
    if low in ("0", "f", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {v!r}")


def run_manager(args: argparse.Namespace) -> int:
    from controllers.dra.claims import DraOptions
    from controllers.podbinding.controller import PodBindingOptions
    from controllers.setup import ControllerOptions, setup_controllers
    from controllers.status.pacing import PacingOptions
    from runtime import Manager, Options, RestConfig

    config = RestConfig.load(args.kubeconfig)
    config.qps, config.burst = args.qps, args.burst
    authorize, tls = None, None
    if args.metrics_secure:
        from runtime import Client
        from runtime.metrics_auth import MetricsAuthorizer, serving_tls
        authorize = MetricsAuthorizer(Client(config)).check
        tls = serving_tls(args.metrics_cert_dir)
    mgr = Manager(config, Options(
        namespace=args.namespace,
        metrics_bind_address=args.metrics_bind_address,
        metrics_authorize=authorize,
        metrics_tls=tls,
        health_probe_bind_address=args.health_probe_bind_address,
        leader_elect=args.leader_elect,
        leader_election_id=args.leader_election_id,
        leader_election_namespace=(args.leader_election_namespace
                                   or os.environ.get("POD_NAMESPACE")
                                   or "gpu-orchestrator-system"),
        lease_duration=args.leader_elect_lease_duration,
        renew_deadline=args.leader_elect_renew_deadline,
        retry_period=args.leader_elect_retry_period,
        tune_gc=True,  # this process runs the manager alone (runtime/gctune.py)
    ))
    namespaces = frozenset(n.strip() for n in args.namespaces.split(",") if n.strip())
    # the composition root: every controller on one set of shared parts
    setup_controllers(mgr, ControllerOptions(
        workers=args.workers, default_exposure=DeviceExposure(args.device_exposure),
        stale_after=args.gpunode_stale_after, default_strategy=args.default_strategy,
        max_gpus_per_node=args.max_gpus_per_node,
        namespaces=namespaces, resync_unsettled=args.resync_unsettled_period,
        require_queue=args.require_queue,
        share_floors=ShareFloors.parse(args.min_share_memory, args.min_share_fraction),
        evict_conflicting_pods=args.evict_conflicting_pods,
        status_pacing=PacingOptions(lag=args.status_lag, busy_qps=args.status_busy_qps,
                                    max_lag=args.status_max_lag,
                                    busy_hold=args.status_busy_hold),
        dra=DraOptions(driver=args.dra_driver, device_class=args.dra_device_class)
        if args.enable_dra or args.device_exposure == DeviceExposure.DRA.value else None),
        pod_binding=PodBindingOptions(
            scheduler_name=args.scheduler_name, workers=args.workers,
            default_strategy=args.default_strategy,
            evict_conflicting_pods=args.evict_conflicting_pods, namespaces=namespaces)
        if args.enable_pod_binding else None)
    return mgr.start(install_signal_handlers=True)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv.insert(0, "manager")  # `main.py --help` shows the subcommands, not manager's
    parser = argparse.ArgumentParser(prog="gpu-orchestrator", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="{manager,agent,webhook}",
                                title="subcommands (manager when none is given)")
    mp = sub.add_parser("manager", help="the controller manager", formatter_class=HelpFormatter)
    add_manager_flags(mp)
    _common(mp)
    from internal.agent.cli import add_agent_flags
    ap = sub.add_parser("agent", help="the NVML agent", formatter_class=HelpFormatter)
    add_agent_flags(ap)
    _common(ap)
    from internal.webhook.app import add_flags as add_webhook_flags
    wp = sub.add_parser("webhook", help="the mutating webhook", formatter_class=HelpFormatter)
    add_webhook_flags(wp)
    _common(wp)
    from internal.webhook.certjob import add_flags as add_certs_flags
    cp = sub.add_parser("webhook-certs", help="make the webhook's certificates and publish "
                        "the CA bundle (a Job), then exit")
    add_certs_flags(cp)
    _common(cp)
    args = parser.parse_args(argv)
    configure_logging(args.log_format, args.log_level)
    from runtime.httpserver import AddressInUse
    try:
        return _run(args)
    except AddressInUse as exc:
        print(f"gpu-orchestrator {args.command}: {exc}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    if args.command == "agent":
        from internal.agent.cli import agent_main
        return agent_main(args)
    if args.command == "webhook":
        from internal.webhook.app import serve_from_args
        return serve_from_args(args)
    if args.command == "webhook-certs":
        from internal.webhook.certjob import run_from_args
        return run_from_args(args)
    return run_manager(args)


if __name__ == "__main__":
    sys.exit(main())
