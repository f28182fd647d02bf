"""``kubectl gpu``: the plugin's entry point (installed as the ``kubectl-gpu`` script,
so ``kubectl gpu ...`` finds it on PATH).

Commands: status, nodes, workloads, describe, submit, template, watch. Global flags
(``--kubeconfig``, ``-n/--namespace``, ``-A``, ``-o``) go before or after the command.
Exit codes: 0 ok, 1 error, 2 usage, 3 cluster unreachable, 4 CRD missing, 5 not found.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

from internal.cli import (
    cmd_describe,
    cmd_nodes,
    cmd_status,
    cmd_submit,
    cmd_template,
    cmd_watch,
    cmd_workloads,
)
from internal.cli.kube import EXIT_ERROR, EXIT_USAGE, CliError, Kube
from internal.cli.output import FORMATS, Printer

COMMANDS: dict[str, ModuleType] = {
    "status": cmd_status,
    "nodes": cmd_nodes,
    "workloads": cmd_workloads,
    "describe": cmd_describe,
    "submit": cmd_submit,
    "template": cmd_template,
    "watch": cmd_watch,
}


def _common(p: argparse.ArgumentParser, suppress: bool) -> None:
    d: Callable[[object], object] = (lambda _v: argparse.SUPPRESS) if suppress else (lambda v: v)
    p.add_argument("--kubeconfig", default=d(None),
                   help="path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    p.add_argument("-n", "--namespace", default=d(None),
                   help="namespace (default: the kubeconfig context's, else 'default')")
    p.add_argument("-A", "--all-namespaces", action="store_true", default=d(False),
                   help="all namespaces")
    p.add_argument("-o", "--output", choices=FORMATS, default=d("table"),
                   help="output format: table (default), json or yaml")
    p.add_argument("--request-timeout", type=float, default=d(15.0),
                   help="seconds to wait for one API request (default 15)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kubectl gpu",
        description="GPU placement at a glance: cluster totals, devices per node, "
                    "GPUWorkloads and why they wait.")
    _common(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, mod in COMMANDS.items():
        sp = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        _common(sp, suppress=True)
        mod.add_arguments(sp)
        sp.set_defaults(run=mod.run, needs_cluster=getattr(mod, "NEEDS_CLUSTER", True))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    out = Printer(args.output)
    try:
        kube = None
        if args.needs_cluster:
            kube = Kube.connect(args.kubeconfig, args.namespace, args.all_namespaces,
                                timeout=args.request_timeout)
        return int(args.run(args, kube, out) or 0)
    except CliError as e:
        sys.stderr.write(f"error: {e.message}\n")
        return e.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except OSError as e:
        sys.stderr.write(f"error: {e}\n")
        return EXIT_ERROR


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
