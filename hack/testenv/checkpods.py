"""The check pods' own logs on the local control plane.

kwok runs no containers, so ``kubectl logs`` of a pod on a fake node has nothing to
print. For the seed's check service this module does what a kubelet would: for
every container of a bound, running pod whose image is ``gpu-scheduler-check``
(any registry, any tag or digest), it starts *our* check service
(``python -m internal.check``) as a local process with the container's arguments and
the container's environment as the pod spec gives it (literal values, such as the
``CUDA_VISIBLE_DEVICES`` the webhook or the controller injected, and the downward
API fields ``spec.nodeName``, ``metadata.name``, ``metadata.namespace``), writes its
stdout and stderr to a file in the kubelet's log format, and registers that file
with kwok (a ``Logs`` object named after the pod) so that ``kubectl logs POD``
prints it.

Guarantees:
- Only that image is run this way, and only our module: the container's
  ``command`` is never run, its ``args`` are only arguments to the check service
  (which rejects unknown ones, as the real image would), and of its environment only
  the variables the service reads are passed. Pods with any other image
  get no process and no Logs object, so ``kubectl logs`` says what kwok says for
  every fake pod (no logs), never something made up.
- The process gets SIGTERM when its pod is deleted (at the start of the grace
  period, as a kubelet does) or ends, and at ``stop`` of this runner (cluster-down,
  or the end of a test session); it also dies with the runner (PR_SET_PDEATHSIG).

Run by ``ControlPlane`` as one more background process (``check-pods``); pure
helpers (:func:`is_check_image`, :func:`container_env`) are unit-tested.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import datetime as dt
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
CHECK_IMAGE = "gpu-scheduler-check"
LOGS_GROUP, LOGS_VERSION, LOGS_PLURAL = "kwok.x-k8s.io", "v1alpha1", "logs"
# The minimal definition of kwok's Logs kind that kwok --enable-crds=Logs watches.
LOGS_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{LOGS_PLURAL}.{LOGS_GROUP}"},
    "spec": {
        "group": LOGS_GROUP, "scope": "Namespaced",
        "names": {"kind": "Logs", "listKind": "LogsList", "plural": LOGS_PLURAL,
                  "singular": "logs"},
        "versions": [{
            "name": LOGS_VERSION, "served": True, "storage": True,
            "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {
                "type": "object", "x-kubernetes-preserve-unknown-fields": True}},
        }],
    },
}
# The variables the check service reads: only these reach its process, so a pod spec
# cannot steer the interpreter or the loader (PYTHONPATH, PYTHONSTARTUP, LD_PRELOAD).
CHECK_ENV = frozenset({"NODE_NAME", "POD_NAME", "HOSTNAME", "CUDA_VISIBLE_DEVICES",
                       "NVIDIA_VISIBLE_DEVICES"})
# Downward-API fields a check pod's env may name, and where they are in the pod.
FIELD_PATHS = {
    "spec.nodeName": ("spec", "nodeName"),
    "spec.serviceAccountName": ("spec", "serviceAccountName"),
    "metadata.name": ("metadata", "name"),
    "metadata.namespace": ("metadata", "namespace"),
    "metadata.uid": ("metadata", "uid"),
    "status.podIP": ("status", "podIP"),
    "status.hostIP": ("status", "hostIP"),
}


def is_check_image(image: str) -> bool:
    """``gpu-scheduler-check``, ``reg.io/team/gpu-scheduler-check:0.1.0`` or ``...@sha256:..``."""
    name = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return name.split(":", 1)[0] == CHECK_IMAGE


def container_env(pod: Mapping[str, Any], container: Mapping[str, Any]) -> dict[str, str]:
    """What the check service reads of the environment the container would see from
    its pod spec (``CHECK_ENV``): ``HOSTNAME``, literal values and the downward-API
    fields above. Any other variable is left out."""
    env = {"HOSTNAME": pod["metadata"]["name"]}
    for item in container.get("env") or []:
        if item.get("name") not in CHECK_ENV:
            continue
        if "value" in item:
            env[item["name"]] = str(item["value"])
            continue
        path = ((item.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        if path in FIELD_PATHS:
            section, key = FIELD_PATHS[path]
            value = (pod.get(section) or {}).get(key)
            if value is not None:
                env[item["name"]] = str(value)
    return env


def wants_process(pod: Mapping[str, Any]) -> bool:
    """Bound, running and not being deleted: a kubelet would have the container up."""
    return bool(pod["spec"].get("nodeName")) \
        and (pod.get("status") or {}).get("phase") == "Running" \
        and not pod["metadata"].get("deletionTimestamp")


def _die_with_parent() -> None:
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class CheckProcess:
    """One check-service process and the thread copying its output into a file in the
    kubelet's (CRI) log format: ``<RFC3339Nano> stdout F <line>``."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        base = {k: os.environ[k] for k in ("PATH", "LANG") if k in os.environ}
        self.proc = subprocess.Popen(
            argv, env={**base, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", **env},
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, preexec_fn=_die_with_parent)
        self._copier = threading.Thread(target=self._copy, daemon=True)
        self._copier.start()

    def _copy(self) -> None:
        assert self.proc.stdout is not None
        with open(self.log, "ab", buffering=0) as out:
            for line in self.proc.stdout:
                ts = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
                out.write(f"{ts} stdout F ".encode() + line.rstrip(b"\n") + b"\n")

    def stop(self, grace: float = 5.0) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._copier.join(timeout=2)


class Runner:
    """Watches pods and keeps one check process per check container of a running pod."""

    def __init__(self, kubeconfig: str, log_dir: Path) -> None:
        from kubernetes import client, config

        self.api_client = config.new_client_from_config(config_file=kubeconfig)
        self.api_client.user_agent = "testenv-check-pods"  # told apart in audit logs
        self.core = client.CoreV1Api(self.api_client)
        self.custom = client.CustomObjectsApi(self.api_client)
        self.log_dir = log_dir
        self.running: dict[tuple[str, str], CheckProcess] = {}  # (pod uid, container)
        self.pods: dict[str, tuple[str, str]] = {}  # uid -> (namespace, name)
        self._stop = threading.Event()

    # -- one pod --------------------------------------------------------------------

    def sync(self, pod: dict[str, Any], deleted: bool = False) -> None:
        meta = pod["metadata"]
        uid, ns, name = meta["uid"], meta["namespace"], meta["name"]
        checks = [c for c in pod["spec"].get("containers") or [] if is_check_image(c.get("image", ""))]
        if not checks:
            return
        if deleted or not wants_process(pod):
            self._end(uid)
            return
        for c in checks:
            key = (uid, c["name"])
            if key in self.running:
                continue
            log = self.log_dir / f"{ns}_{name}_{uid}" / f"{c['name']}.log"
            argv = [sys.executable, "-m", "internal.check", *[str(a) for a in c.get("args") or []]]
            self.running[key] = CheckProcess(argv, container_env(pod, c), log)
        if uid in self.pods:
            return
        from kubernetes.client.exceptions import ApiException

        try:
            self._register(ns, name, uid, [(c["name"], self.log_dir / f"{ns}_{name}_{uid}" /
                                            f"{c['name']}.log") for c in checks])
        except ApiException as exc:
            # kube-apiserver restarting, the namespace terminating: its processes run,
            # and the Logs object is made on the pod's next event or the next listing
            # (it was never made again once a first try failed: kubectl logs found none)
            print(f"check-pods: Logs of {ns}/{name} not made ({exc.status} {exc.reason}); "
                  "retried on its next event", flush=True)
            return
        self.pods[uid] = (ns, name)

    def _register(self, ns: str, name: str, uid: str, logs: list[tuple[str, Path]]) -> None:
        body = {
            "apiVersion": f"{LOGS_GROUP}/{LOGS_VERSION}", "kind": "Logs",
            "metadata": {"name": name, "namespace": ns,
                         "annotations": {"testenv.gpu-orchestrator.dev/pod-uid": uid}},
            "spec": {"logs": [{"containers": [c], "logsFile": str(p), "follow": True}
                              for c, p in logs]},
        }
        from kubernetes.client.exceptions import ApiException

        try:
            self.custom.create_namespaced_custom_object(LOGS_GROUP, LOGS_VERSION, ns,
                                                        LOGS_PLURAL, body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            # A pod of the same name from before (a StatefulSet's replacement).
            self.custom.patch_namespaced_custom_object(LOGS_GROUP, LOGS_VERSION, ns,
                                                       LOGS_PLURAL, name, body)

    def _end(self, uid: str) -> None:
        for key in [k for k in self.running if k[0] == uid]:
            self.running.pop(key).stop()
        where = self.pods.pop(uid, None)
        if where is None:
            return
        ns, name = where
        from kubernetes.client.exceptions import ApiException

        try:
            current = self.custom.get_namespaced_custom_object(
                LOGS_GROUP, LOGS_VERSION, ns, LOGS_PLURAL, name)
            if current["metadata"].get("annotations", {}).get(
                    "testenv.gpu-orchestrator.dev/pod-uid") == uid:
                self.custom.delete_namespaced_custom_object(
                    LOGS_GROUP, LOGS_VERSION, ns, LOGS_PLURAL, name)
        except ApiException as exc:
            if exc.status != 404:
                raise

    # -- the loop -------------------------------------------------------------------

    def _sync_one(self, pod: dict[str, Any], deleted: bool = False) -> None:
        """``sync``, whose failure for one pod (an API error) ends neither the listing
        nor the watch: the runner keeps serving every other pod."""
        try:
            self.sync(pod, deleted=deleted)
        except Exception as exc:
            print(f"check-pods: pod {pod['metadata'].get('namespace')}/"
                  f"{pod['metadata'].get('name')} not synced ({type(exc).__name__}: {exc})",
                  flush=True)

    def _end_one(self, uid: str) -> None:
        try:
            self._end(uid)
        except Exception as exc:
            print(f"check-pods: pod {uid} not ended ({type(exc).__name__}: {exc})", flush=True)

    def run(self, ready_file: Path | None = None) -> None:
        from kubernetes import watch

        while not self._stop.is_set():
            try:
                listing = self.api_client.sanitize_for_serialization(
                    self.core.list_pod_for_all_namespaces())
            except Exception as exc:  # kube-apiserver restarting or unreachable: retry
                print(f"check-pods: list failed ({type(exc).__name__}: {exc}); retrying",
                      flush=True)
                self._stop.wait(1)
                continue
            seen = set()
            for pod in listing["items"]:
                seen.add(pod["metadata"]["uid"])
                self._sync_one(pod)
            for uid in [u for u in {*self.pods, *(k[0] for k in self.running)} if u not in seen]:
                self._end_one(uid)
            if ready_file is not None:
                ready_file.touch()
                ready_file = None
            w = watch.Watch()
            try:
                for ev in w.stream(self.core.list_pod_for_all_namespaces,
                                   resource_version=listing["metadata"]["resourceVersion"],
                                   timeout_seconds=60, _request_timeout=90):
                    if self._stop.is_set():
                        break
                    pod = self.api_client.sanitize_for_serialization(ev["object"])
                    if ev["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        self._sync_one(pod, deleted=ev["type"] == "DELETED")
            except Exception as exc:  # a dropped or expired watch: list again
                print(f"check-pods: watch ended ({type(exc).__name__}: {exc}); relisting",
                      flush=True)
                self._stop.wait(1)
            finally:
                w.stop()

    def stop(self) -> None:
        self._stop.set()
        for uid in list({k[0] for k in self.running}):
            for key in [k for k in self.running if k[0] == uid]:
                self.running.pop(key).stop()


def install_logs_crd(api) -> None:
    """Creates kwok's Logs CRD (``api`` is ControlPlane.api) and waits until served."""
    import time

    code, body = api("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", LOGS_CRD)
    if code not in (201, 409):
        raise RuntimeError(f"creating the kwok Logs CRD: HTTP {code}: {body}")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if api("GET", f"/apis/{LOGS_GROUP}/{LOGS_VERSION}/{LOGS_PLURAL}")[0] == 200:
            return
        time.sleep(0.1)
    raise RuntimeError("the kwok Logs CRD was not served after 30s")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hack.testenv.checkpods", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--log-dir", type=Path, required=True)
    p.add_argument("--ready-file", type=Path)
    a = p.parse_args(argv)
    runner = Runner(a.kubeconfig, a.log_dir)

    def _term(*_: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, _term)
    print(f"check-pods: running the {CHECK_IMAGE} image's pods, logs in {a.log_dir}", flush=True)
    try:
        runner.run(a.ready_file)
    finally:
        runner.stop()
        print("check-pods: stopped every check process", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
