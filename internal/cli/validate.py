"""Every argument of ``kubectl gpu`` checked before any request.

Each checker is an argparse ``type=`` (it raises ``argparse.ArgumentTypeError`` with
a sentence that says what is allowed) or a check of one parsed namespace
(``check``: the rules that involve two flags). ``CliParser`` turns argparse's
usage errors into one line on stderr, ``error: ...``, and exit code 2, like kubectl.

Durations follow kubectl's ``--request-timeout``: Go's syntax (``30s``, ``1m``,
``1h30m``, ``500ms``), or a bare number of seconds; ``0`` means no timeout.
"""

from __future__ import annotations

import argparse
import re
from typing import Any, NoReturn

from api.v1alpha1 import door
from api.v1alpha1.types import MAX_CHILD_NAME, MAX_GPUS_PER_REPLICA
from api.v1alpha1.types import MAX_REPLICAS as MAX_REPLICAS
from internal.cli.kube import EXIT_USAGE, CliError

#: gpusPerReplica's and replicas' bounds are the CRD's (api/v1alpha1/types.py)
MAX_GPUS = MAX_GPUS_PER_REPLICA
#: a pod is named <workload>-<index>: the name leaves room for the index
MAX_NAME = MAX_CHILD_NAME - 1 - len(str(MAX_REPLICAS - 1))
#: Go's longest time.Duration, which is kubectl's too (and the most Python's clocks hold)
MAX_DURATION_HOURS = 2562047

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


class CliParser(argparse.ArgumentParser):
    """argparse whose usage errors are one ``error:`` line and exit code 2."""

    def error(self, message: str) -> NoReturn:
        raise CliError(f"{message} (see '{self.prog} --help')", EXIT_USAGE)


def duration(text: str) -> float:
    """Seconds from ``30s``, ``1m30s``, ``500ms`` or a bare ``30``; never negative."""
    s = str(text).strip()
    try:
        value = float(s)
    except ValueError:
        value = None
    if value is None:
        pos, value = 0, 0.0
        for m in _DURATION_PART.finditer(s):
            if m.start() != pos:
                break
            value += float(m.group(1)) * _UNITS[m.group(2)]
            pos = m.end()
        if pos != len(s) or not s:
            raise argparse.ArgumentTypeError(
                f"invalid duration {text!r}: use a number of seconds or a duration such "
                f"as 30s, 1m or 1h30m")
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {text!r}")
    if value > MAX_DURATION_HOURS * 3600:
        raise argparse.ArgumentTypeError(
            f"must be at most {MAX_DURATION_HOURS}h (the longest duration kubectl reads), "
            f"got {text!r}")
    return value


def positive_duration(text: str) -> float:
    value = duration(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text!r}")
    return value


def int_range(low: int, high: int | None = None) -> Any:
    """An argparse type: an integer in [low, high]."""

    def parse(text: str) -> int:
        try:
            value = int(str(text).strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid integer {text!r}") from None
        if value < low or (high is not None and value > high):
            bound = f"from {low} to {high}" if high is not None else f"at least {low}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
        return value

    parse.__name__ = "integer"
    return parse


def dns_label(what: str, max_len: int = 63) -> Any:
    """An argparse type: a DNS-1123 label (a namespace, a workload's name)."""

    def parse(text: str) -> str:
        if not text:
            raise argparse.ArgumentTypeError(f"{what} must not be empty")
        if len(text) > max_len:
            raise argparse.ArgumentTypeError(
                f"{what} {text!r} is longer than {max_len} characters")
        if not _DNS1123_LABEL.match(text):
            raise argparse.ArgumentTypeError(
                f"{what} {text!r} is not a valid DNS-1123 label: lower case letters, "
                f"digits and '-', starting and ending with a letter or digit")
        return text

    parse.__name__ = what
    return parse


def image(text: str) -> str:
    """An image reference the kubelet can pull (the admission policy's own rule)."""
    if text.strip() and any(c.isspace() for c in text):
        raise argparse.ArgumentTypeError(f"image {text!r} contains whitespace")
    problem = door.image_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def nonempty(what: str) -> Any:
    def parse(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"{what} must not be empty")
        return text

    parse.__name__ = what
    return parse


def check(args: argparse.Namespace, all_namespaces_ok: bool) -> None:
    """Rules across flags, before any request."""
    if getattr(args, "all_namespaces", False) and not all_namespaces_ok:
        raise CliError(f"{args.command} works on one namespace: -A/--all-namespaces is not "
                       f"supported here (use -n NAMESPACE)", EXIT_USAGE)
    if getattr(args, "all_namespaces", False) and getattr(args, "namespace", None):
        raise CliError("use either -n/--namespace or -A/--all-namespaces, not both",
                       EXIT_USAGE)


_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def dns_subdomain(what: str) -> Any:
    """An argparse type: a DNS-1123 subdomain (an object's name), at most 253."""

    def parse(text: str) -> str:
        if not text or len(text) > 253 or not _DNS1123_SUBDOMAIN.match(text):
            raise argparse.ArgumentTypeError(
                f"{what} name {text!r} is not a valid DNS-1123 subdomain: lower case "
                f"letters, digits, '-' and '.', starting and ending with a letter or digit")
        return text

    parse.__name__ = what
    return parse
