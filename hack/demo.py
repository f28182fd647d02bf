"""``make demo``: on a running local control plane (``make cluster-up``), install
config/, run the controller, the webhook and one NVML agent per node (on its fixture
backend) as background processes (their PIDs go into the control plane's state.json,
so ``make cluster-down`` stops them too), apply
the samples and the seed-path StatefulSet, and print what a user would look at. It
ends as the seed's deliverable does: every pod with its node, and the check service's
own logs of the pods on node3 and node4 (the local control plane runs our check
service for pods of the gpu-scheduler-check image, hack/testenv/checkpods.py).

kwok runs no containers, so the manager and the webhook run here as local processes;
config/'s manager Deployment is scaled to 0 rather than left with Pending look-alikes,
and the demo says so.
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

from hack.testenv.controlplane import free_port
from hack.testenv.dra import device_class, nvidia_slice
from hack.testenv.process import Process, tail

ROOT = Path(__file__).resolve().parent.parent
NS_WORKLOADS = "demo"
NS_SEED = "seed-path"
WEBHOOK_CONFIG = "gpu-orchestrator-demo"
#: the agent's fixture backend by a node's GPU count (internal/agent/fixtures)
AGENT_FIXTURES = {"4": "pcie-4", "8": "h100-sxm-8"}


class Demo:
    def __init__(self, d: Path) -> None:
        self.dir = d.resolve()
        self.state_file = self.dir / "state.json"
        if not self.state_file.exists():
            sys.exit(f"demo: no control plane in {self.dir}; run `make cluster-up` first")
        self.state = json.loads(self.state_file.read_text())
        self.kubeconfig = self.state["kubeconfig"]

    def kubectl(self, *args: str, check: bool = True, input: str | None = None) -> str:
        p = subprocess.run(["kubectl", f"--kubeconfig={self.kubeconfig}", *args],
                           capture_output=True, text=True, input=input)
        if check and p.returncode != 0:
            raise SystemExit(f"demo: kubectl {' '.join(args)} failed:\n{p.stdout}{p.stderr}")
        return p.stdout

    def show(self, title: str, *args: str) -> None:
        print(f"\n== kubectl {' '.join(args)}   # {title}", flush=True)
        print(self.kubectl(*args), end="", flush=True)

    def spawn(self, name: str, argv: list[str], ready_log: str, timeout: float = 60) -> None:
        proc = Process(name, argv, self.dir / "logs" / f"{name}.log")
        proc.start()
        self.state["processes"][name] = {"pid": proc.pid, "exe": argv[0]}
        self.state_file.write_text(json.dumps(self.state, indent=2))
        proc.wait_ready(lambda: ready_log in proc.log.read_text(errors="replace"), timeout)
        print(f"demo: {name} running (pid {proc.pid}, log {proc.log})", flush=True)

    def wait(self, what: str, fn, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not fn():
            if time.monotonic() > deadline:
                print(f"demo: gave up waiting for {what}", file=sys.stderr)
                return
            time.sleep(0.5)

    def pods_running(self, ns: str, count: int) -> bool:
        pods = json.loads(self.kubectl("get", "pods", "-n", ns, "-o", "json"))["items"]
        return sum(p["status"].get("phase") == "Running" for p in pods) >= count

    # ------------------------------------------------------------------------------

    def run(self) -> None:
        self.kubectl("apply", "-k", str(ROOT / "config"))
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        self.show("installed by kubectl apply -k config", "get", "crds",
                  "gpuworkloads.gpu.orchestrator.dev", "gpunodes.gpu.orchestrator.dev")
        # The manager runs below as a local process (kwok nodes run no containers and
        # nothing would schedule the Deployment's pods): no Pending copies of it.
        self.kubectl("scale", "-n", "gpu-orchestrator-system", "deployment",
                     "gpu-orchestrator-manager", "--replicas=0")
        print("\ndemo: the manager and the webhook run as local processes (below); "
              "config/'s manager Deployment is scaled to 0 here, since kwok runs no "
              "containers.\ndemo: the agent DaemonSet has no pods: it runs only on nodes "
              "labelled nvidia.com/gpu.present=true (docs/install.md, step 3); one agent "
              "per node runs here instead, on NVML recorded as JSON (its fixture backend).",
              flush=True)
        py = sys.executable
        self.run_agents()
        self.spawn("manager", [
            py, str(ROOT / "main.py"), "manager", f"--kubeconfig={self.kubeconfig}",
            "--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0",
            "--enable-pod-binding", "--enable-dra", "--log-format=console",
            # the default, said out loud: a `make run` beside this one stands by
            "--leader-elect=true"], "controller.starting")
        port = free_port()
        self.register_webhook(port)
        self.spawn("webhook", [
            py, str(ROOT / "main.py"), "webhook", f"--kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1", f"--port={port}", "--host=127.0.0.1",
            f"--cert-dir={self.dir / 'webhook-certs'}",
            f"--webhook-config-name={WEBHOOK_CONFIG}", "--log-format=console"],
            "webhook_serving")
        self.wait("the webhook's CA bundle", lambda: json.loads(self.kubectl(
            "get", "mutatingwebhookconfiguration", WEBHOOK_CONFIG, "-o", "json"))[
            "webhooks"][0]["clientConfig"].get("caBundle"), 30)

        print("\n### GPUWorkloads: one sample per strategy, and the seed's 5-replica map")
        self.kubectl("create", "namespace", NS_WORKLOADS, check=False)
        # The seed's map pins exact devices: apply it first, then the strategies'
        # samples fill what is left.
        self.kubectl("apply", "-n", NS_WORKLOADS, "-f",
                     str(ROOT / "config" / "samples" / "gpuworkload_annotationmap_seed.yaml"))
        self.wait("the seed workload's 5 pods", lambda: self.pods_running(NS_WORKLOADS, 5))
        self.kubectl("apply", "-n", NS_WORKLOADS, "-k", str(ROOT / "config" / "samples"))
        self.wait("every sample's pod", lambda: self.pods_running(NS_WORKLOADS, 11))
        self.show("placements", "get", "gpuworkloads", "-n", NS_WORKLOADS)
        self.show("each pod's node and devices", "get", "pods", "-n", NS_WORKLOADS, "-o",
                  "custom-columns=NAME:.metadata.name,STATUS:.status.phase,"
                  "NODE:.spec.nodeName,IP:.status.podIP,"
                  "CUDA_VISIBLE_DEVICES:.spec.containers[0].env[?(@.name=="
                  "\"CUDA_VISIBLE_DEVICES\")].value")

        gpu = str(Path(sys.executable).parent / "kubectl-gpu")
        print("\n== kubectl gpu nodes   # each device: free, or the workload holding it",
              flush=True)
        print(subprocess.run([gpu, "--kubeconfig", self.kubeconfig, "nodes"], text=True,
                             capture_output=True).stdout, end="", flush=True)

        print("\n### Seed path: a StatefulSet with schedulerName gpu-scheduler and the map "
              "annotation (the GPUWorkloads are deleted first: they hold those devices)")
        self.kubectl("delete", "-n", NS_WORKLOADS, "-k", str(ROOT / "config" / "samples"),
                     "--wait=true")
        # Their pods go after them (garbage collection, then the grace period): until
        # then they still hold the devices the StatefulSet's map names.
        self.wait("the samples' pods gone", lambda: not json.loads(self.kubectl(
            "get", "pods", "-n", NS_WORKLOADS, "-o", "json"))["items"], 90)
        self.kubectl("create", "namespace", NS_SEED, check=False)
        self.kubectl("apply", "-n", NS_SEED, "-f",
                     str(ROOT / "config" / "samples" / "gpu-scheduler-check-statefulset.yaml"))
        self.wait("the StatefulSet's 5 pods", lambda: self.pods_running(NS_SEED, 5), 90)
        self.show("bound by gpu-scheduler", "get", "pods", "-n", NS_SEED, "-o", "wide")
        self.show("injected by the webhook", "get", "pods", "-n", NS_SEED, "-o",
                  "custom-columns=NAME:.metadata.name,NODE:.spec.nodeName,"
                  "CUDA_VISIBLE_DEVICES:.spec.containers[0].env[?(@.name=="
                  "\"CUDA_VISIBLE_DEVICES\")].value")
        self.run_dra()
        self.ending()

    def ending(self) -> None:
        """The seed's deliverable: every pod, then the check logs of node3 and node4."""
        self.show("every pod and its node", "get", "pod", "-o", "wide", "-A")
        pods = json.loads(self.kubectl("get", "pods", "-n", NS_SEED, "-o", "json"))["items"]
        on = sorted((p["spec"].get("nodeName") or "", p["metadata"]["name"]) for p in pods)
        for node, name in on:
            if node not in ("node3", "node4"):
                continue
            self.wait(f"{name}'s first log line",
                      lambda n=name: self.kubectl("logs", "-n", NS_SEED, n, check=False), 30)
            self.show(f"the check service on {node}", "logs", "-n", NS_SEED, name)

    def run_dra(self) -> None:
        """One ``deviceExposure: dra`` workload on ResourceSlices shaped like the NVIDIA
        driver's (no driver runs on kwok nodes: the demo publishes them)."""
        print("\n### DRA: ResourceSlices like the NVIDIA driver's, one dra workload "
              "(a ResourceClaim per replica, allocated by the controller)")
        nodes = json.loads(self.kubectl("get", "nodes", "-o", "json"))["items"]
        docs = [device_class()] + [
            nvidia_slice(n["metadata"]["name"],
                         int(n["status"]["allocatable"].get("nvidia.com/gpu", "0")))
            for n in nodes]
        self.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                           "items": docs}))
        self.kubectl("apply", "-n", NS_WORKLOADS, "-f",
                     str(ROOT / "config" / "samples" / "gpuworkload_dra.yaml"))
        self.wait("the dra workload's 2 pods", lambda: self.pods_running(NS_WORKLOADS, 2), 90)
        self.show("claims: allocated by us, reserved for the pods", "get", "resourceclaims",
                  "-n", NS_WORKLOADS, "-o",
                  "custom-columns=NAME:.metadata.name,"
                  "NODE:.status.allocation.nodeSelector.nodeSelectorTerms[0].matchFields[0]"
                  ".values[0],DEVICES:.status.allocation.devices.results[*].device,"
                  "RESERVED-FOR:.status.reservedFor[*].name")
        gpu = str(Path(sys.executable).parent / "kubectl-gpu")
        print("\n== kubectl gpu describe train-dra   # each replica's claim and its state",
              flush=True)
        print(subprocess.run([gpu, "--kubeconfig", self.kubeconfig, "describe", "train-dra",
                              "-n", NS_WORKLOADS], text=True, capture_output=True).stdout,
              end="", flush=True)

    def run_agents(self) -> None:
        """One NVML agent per node, as a local process on the fixture backend
        (``--nvml-backend fixture:<name>``, internal/agent/fixtures: 4 x L40S, or 8 x
        H100 for a node of 8 GPUs), so each GPUNode has its devices' model, memory and
        health; waits until every GPUNode reports them."""
        nodes = json.loads(self.kubectl("get", "nodes", "-o", "json"))["items"]
        reporting = []
        for n in nodes:
            name = n["metadata"]["name"]
            gpus = n["status"].get("allocatable", {}).get("nvidia.com/gpu", "0")
            fixture = AGENT_FIXTURES.get(gpus)
            if fixture is None:
                print(f"demo: no agent fixture with {gpus} GPUs: {name} runs without an "
                      "agent (health Unknown)", flush=True)
                continue
            self.spawn(f"agent-{name}", [
                sys.executable, str(ROOT / "main.py"), "agent", f"--node-name={name}",
                f"--kubeconfig={self.kubeconfig}", f"--nvml-backend=fixture:{fixture}",
                "--interval=5", "--metrics-bind-address=0", "--log-format=console"],
                "agent.labels")
            reporting.append(name)

        def reported() -> bool:
            items = json.loads(self.kubectl("get", "gpunodes", "-o", "json"))["items"]
            have = {g["metadata"]["name"] for g in items
                    if (g.get("status") or {}).get("devices")}
            return set(reporting) <= have
        self.wait("every agent's GPUNode", reported, 30)

    def register_webhook(self, port: int) -> None:
        """config/webhook's configuration, called by URL on 127.0.0.1 (never through a
        Service); the webhook patches its own CA bundle in."""
        doc = yaml.safe_load((ROOT / "config/webhook/mutating_webhook_configuration.yaml")
                             .read_text())
        doc = copy.deepcopy(doc)
        doc["metadata"] = {"name": WEBHOOK_CONFIG}
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"].get("path", "/mutate")
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}"}
        self.kubectl("apply", "-f", "-", input=json.dumps(doc))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hack.demo", description=__doc__)
    p.add_argument("--dir", type=Path, default=Path(".testenv"))
    a = p.parse_args(argv)
    demo = Demo(a.dir)
    try:
        demo.run()
    except Exception as exc:
        for name in ("manager", "webhook", *sorted(
                p for p in demo.state["processes"] if p.startswith("agent-"))):
            log = demo.dir / "logs" / f"{name}.log"
            if log.exists():
                print(f"\n--- {name} log tail ---\n{tail(log)}", file=sys.stderr)
        raise SystemExit(f"demo: {exc}") from exc
    return 0


if __name__ == "__main__":
    sys.exit(main())
