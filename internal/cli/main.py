"""``kubectl gpu``: the plugin's entry point (installed as the ``kubectl-gpu`` script,
so ``kubectl gpu ...`` finds it on PATH).

Commands: status, nodes, workloads, queues, describe, submit, template, watch. Global flags
(``--kubeconfig``, ``--context``, ``--as``, ``--as-group``, ``-n/--namespace``, ``-A``,
``-o``, ``--request-timeout``) go before or after the command, and every argument is
checked (``internal/cli/validate.py``) before any request. An error is one line on
stderr starting with ``error:``; library logging is silenced.
Exit codes: 0 ok, 1 error, 2 usage, 3 cluster unreachable, 4 CRD missing, 5 not found.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType

from internal.cli import (
    cmd_describe,
    cmd_groups,
    cmd_nodes,
    cmd_queues,
    cmd_status,
    cmd_submit,
    cmd_template,
    cmd_watch,
    cmd_workloads,
    roles,
    validate,
)
from internal.cli.kube import EXIT_ERROR, EXIT_USAGE, CliError, Forbidden, Kube
from internal.cli.output import FORMATS, Printer

COMMANDS: dict[str, ModuleType] = {
    "status": cmd_status,
    "nodes": cmd_nodes,
    "workloads": cmd_workloads,
    "queues": cmd_queues,
    "groups": cmd_groups,
    "describe": cmd_describe,
    "submit": cmd_submit,
    "template": cmd_template,
    "watch": cmd_watch,
}


def _common(p: argparse.ArgumentParser, suppress: bool) -> None:
    d: Callable[[object], object] = (lambda _v: argparse.SUPPRESS) if suppress else (lambda v: v)
    p.add_argument("--kubeconfig", default=d(None), type=validate.nonempty("--kubeconfig"),
                   help="path to the kubeconfig file (default: $KUBECONFIG, several files "
                        "joined by ':' merged as kubectl does, else ~/.kube/config)")
    p.add_argument("--context", default=d(None), type=validate.nonempty("--context"),
                   help="the kubeconfig context to use (default: its current-context)")
    p.add_argument("--as", dest="as_user", default=d(None), metavar="USER",
                   type=validate.nonempty("--as"),
                   help="act as this user or service account (the Impersonate-User header)")
    p.add_argument("--as-group", dest="as_groups", action="append", default=d(None),
                   metavar="GROUP", type=validate.nonempty("--as-group"),
                   help="act as this group too; repeat for several (needs --as)")
    p.add_argument("-n", "--namespace", default=d(None),
                   type=validate.dns_label("namespace"),
                   help="namespace (default: the kubeconfig context's, else 'default')")
    p.add_argument("-A", "--all-namespaces", action="store_true", default=d(False),
                   help="all namespaces")
    p.add_argument("-o", "--output", choices=FORMATS, default=d("table"),
                   help="output format: table (default), json or yaml")
    p.add_argument("--request-timeout", type=validate.duration, default=d(15.0),
                   metavar="DURATION",
                   help="how long to wait for one API request: 30s, 1m, or a number of "
                        "seconds; 0 waits for ever, as kubectl's does (default 15s)")


def build_parser() -> argparse.ArgumentParser:
    parser = validate.CliParser(
        prog="kubectl gpu",
        description="GPU placement at a glance: cluster totals, devices per node, "
                    "GPUWorkloads and why they wait.")
    _common(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND",
                                parser_class=validate.CliParser)
    for name, mod in COMMANDS.items():
        sp = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        _common(sp, suppress=True)
        mod.add_arguments(sp)
        sp.set_defaults(run=mod.run, needs_cluster=getattr(mod, "NEEDS_CLUSTER", True),
                        all_namespaces_ok=getattr(mod, "ALL_NAMESPACES", True),
                        check=getattr(mod, "check", None))
    return parser


@contextlib.contextmanager
def quiet_libraries() -> Iterator[None]:
    """No library log line reaches the user's terminal while a command runs: the
    client's retries and warnings become the one ``error:`` line it ends with. The
    logging set-up is restored afterwards (``main`` may run inside another program)."""
    import structlog

    saved = structlog.get_config()
    root = logging.getLogger()
    level = root.level
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL),
                        cache_logger_on_first_use=False)
    root.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        structlog.configure(**saved)
        root.setLevel(level)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The checked arguments (raises CliError with EXIT_USAGE)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        raise CliError("a command is required: " + ", ".join(COMMANDS)
                       + " (see 'kubectl gpu --help')", EXIT_USAGE)
    validate.check(args, args.all_namespaces_ok)
    if args.as_groups and not args.as_user:
        raise CliError("--as-group needs --as USER", EXIT_USAGE)
    if args.check is not None:
        args.check(args)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    with quiet_libraries():
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    args = None
    try:
        args = parse(argv)
        out = Printer(args.output)
        kube = None
        if args.needs_cluster:
            kube = Kube.connect(args.kubeconfig, args.namespace, args.all_namespaces,
                                timeout=args.request_timeout or None, context=args.context,
                                as_user=args.as_user, as_groups=args.as_groups or [])
        return int(args.run(args, kube, out) or 0)
    except Forbidden as e:
        return _error(roles.needs(e, args.command) if args is not None else e.message,
                      e.code)
    except CliError as e:
        return _error(e.message, e.code)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except OSError as e:
        return _error(str(e), EXIT_ERROR)


def _error(message: str, code: int) -> int:
    """One line on stderr: ``error: ...`` (a message of several lines joined by '; ')."""
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    sys.stderr.write(f"error: {'; '.join(lines)}\n")
    sys.stderr.flush()
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
