"""``kubectl gpu template``: prints a commented GPUWorkload to start from."""

from __future__ import annotations

import argparse
import re

from api.v1alpha1.door import DNS1035
from api.v1alpha1.types import API_VERSION, SchedulingStrategy
from internal.cli import validate
from internal.cli.kube import EXIT_USAGE, CliError, Kube
from internal.cli.output import Printer
from internal.scheduling.mapparser import MapParseError, check_map_against, parse_scheduling_map

HELP = "print a commented GPUWorkload manifest to start from"
NEEDS_CLUSTER = False
#: prints one object (-n sets its namespace): -A is refused
ALL_NAMESPACES = False

TEMPLATE = """\
# A GPUWorkload: the controller picks nodes and GPU devices for each replica,
# records them in status.placements, and creates one Pod (or Job) per replica,
# bound to its node, with CUDA_VISIBLE_DEVICES set to the chosen host indices.
# Submit it with:  kubectl gpu submit FILE   (or kubectl apply -f FILE)
apiVersion: {api_version}
kind: GPUWorkload
metadata:
  name: {name}
{namespace_line}spec:
  # Replicas; more than one makes a gang, placed all-or-nothing.
  replicas: {replicas}
  # GPU devices per replica (the seed's spelling gpuCount is accepted too).
  gpusPerReplica: {gpus}
  # Only devices with at least this much memory (MiB); 0 = any.
  minGPUMemoryMiB: 0
  # An integer >= 0, or low (0) / medium (50) / high (100).
  priority: medium
  # {strategies}
  {strategy_line}
{map_block}  # Only nodes with all these labels.
  # nodeSelector:
  #   gpu.orchestrator.dev/class: a100
  # None, Preferred or Required NVLink between a replica's devices.
  topology: None
  # Pod (default) or Job: the child object per replica.
  workloadKind: Pod
  # Optional, overrides the controller's --device-exposure:
  # cuda-visible-devices | nvidia-visible-devices | device-plugin
  # deviceExposure: cuda-visible-devices
  retryPolicy:
    maxRetries: 5          # unschedulable attempts before Failed
    backoffSeconds: 10     # exponential backoff with full jitter
    maxBackoffSeconds: 300
  # Free text, shown by kubectl gpu describe.
  modelName: my-model
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: main
          image: {image}
          command: ["nvidia-smi", "-L"]
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--name", default="my-gpu-workload",
                   type=validate.dns_label("name", validate.MAX_NAME),
                   help=f"metadata.name: a DNS-1123 label of at most {validate.MAX_NAME} "
                        "characters (its pods are <name>-<index>) (default %(default)s)")
    p.add_argument("--replicas", type=validate.int_range(1, validate.MAX_REPLICAS), default=1,
                   help=f"replicas, 1 to {validate.MAX_REPLICAS} (default %(default)s)")
    p.add_argument("--gpus", type=validate.int_range(1, validate.MAX_GPUS), default=1,
                   help=f"GPUs per replica, 1 to {validate.MAX_GPUS} (the CRD's bound) "
                        "(default %(default)s)")
    p.add_argument("--strategy", default=None,
                   choices=[s.value for s in SchedulingStrategy],
                   help="spec.schedulingStrategy (default: none, so the manager's "
                        "--default-strategy applies)")
    p.add_argument("--map", dest="scheduling_map", default=None, metavar="MAP",
                   help="spec.schedulingMap for --strategy annotationMap: one replica per "
                        "line, '<index>=<node>:<dev>,<dev>' (lines joined by ';' or newlines)")
    p.add_argument("--image", default="nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                   type=validate.image, help="the container image (default %(default)s)")


def check(args: argparse.Namespace) -> None:
    """A gang's name names its Service (a DNS-1035 label); annotationMap needs a map
    naming every replica; a map needs annotationMap."""
    if args.replicas > 1 and not re.match(DNS1035, args.name):
        raise CliError(f"--name {args.name!r} cannot name a gang (--replicas {args.replicas}):"
                       f" its replicas find each other through a headless Service of the same "
                       f"name, a DNS-1035 label (lowercase letters, digits and -, starting "
                       f"with a letter), e.g. w{args.name}", EXIT_USAGE)
    if args.scheduling_map is None:
        if args.strategy == SchedulingStrategy.ANNOTATION_MAP:
            raise CliError("--strategy annotationMap needs --map with one line per replica, "
                           "e.g. --map '0=node1:0,1'", EXIT_USAGE)
        return
    if args.strategy != SchedulingStrategy.ANNOTATION_MAP:
        raise CliError("--map is only read by --strategy annotationMap", EXIT_USAGE)
    args.scheduling_map = "\n".join(
        ln.strip() for ln in args.scheduling_map.replace(";", "\n").splitlines() if ln.strip())
    try:
        entries = parse_scheduling_map(args.scheduling_map)
    except MapParseError as e:
        raise CliError(f"--map: {e}", EXIT_USAGE) from e
    problems = check_map_against(entries, args.replicas)
    if problems:
        raise CliError(f"--map: {'; '.join(problems)}", EXIT_USAGE)


def render(args: argparse.Namespace) -> str:
    ns = getattr(args, "namespace", None)
    smap = getattr(args, "scheduling_map", None)
    if smap:
        map_block = ("  # One replica per line, '<index>=<node>:<dev>,<dev>'.\n"
                     "  schedulingMap: |\n" + "".join(f"    {ln}\n" for ln in smap.splitlines()))
    else:
        map_block = ("  # For annotationMap: one replica per line, '<index>=<node>:<dev>,<dev>'.\n"
                     "  # schedulingMap: |\n  #   0=node1:0,1\n")
    return TEMPLATE.format(
        api_version=API_VERSION, name=args.name,
        namespace_line=f"  namespace: {ns}\n" if ns else "",
        replicas=args.replicas, gpus=args.gpus, image=args.image,
        strategy_line=f"schedulingStrategy: {args.strategy}" if args.strategy else
        "# unset: the manager's --default-strategy (leastLoaded unless it says otherwise)\n"
        "  # schedulingStrategy: leastLoaded",
        strategies=" | ".join(s.value for s in SchedulingStrategy), map_block=map_block)


def run(args: argparse.Namespace, kube: Kube | None, out: Printer) -> int:
    text = render(args)
    if out.structured:
        import yaml

        out.data(yaml.safe_load(text))
    else:
        out.stream.write(text)
    return 0
