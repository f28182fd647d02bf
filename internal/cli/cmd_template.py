"""``kubectl gpu template``: prints a commented GPUWorkload to start from."""

from __future__ import annotations

import argparse

from api.v1alpha1.types import API_VERSION, SchedulingStrategy
from internal.cli.kube import Kube
from internal.cli.output import Printer

HELP = "print a commented GPUWorkload manifest to start from"
NEEDS_CLUSTER = False

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
  schedulingStrategy: {strategy}
  # For annotationMap: one replica per line, '<index>=<node>:<dev>,<dev>'.
  # schedulingMap: |
  #   0=node1:0,1
  # Only nodes with all these labels.
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
    p.add_argument("--name", default="my-gpu-workload", help="metadata.name")
    p.add_argument("--replicas", type=int, default=1)
    p.add_argument("--gpus", type=int, default=1, help="GPUs per replica")
    p.add_argument("--strategy", default="leastLoaded",
                   choices=[s.value for s in SchedulingStrategy])
    p.add_argument("--image", default="nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04")


def render(args: argparse.Namespace) -> str:
    ns = getattr(args, "namespace", None)
    return TEMPLATE.format(
        api_version=API_VERSION, name=args.name,
        namespace_line=f"  namespace: {ns}\n" if ns else "",
        replicas=args.replicas, gpus=args.gpus, strategy=args.strategy, image=args.image,
        strategies=" | ".join(s.value for s in SchedulingStrategy))


def run(args: argparse.Namespace, kube: Kube | None, out: Printer) -> int:
    text = render(args)
    if out.structured:
        import yaml

        out.data(yaml.safe_load(text))
    else:
        out.stream.write(text)
    return 0
