"""The kubelet's admission for the local control plane's fake nodes.

kwok runs every pod bound to its nodes; a kubelet first admits it (``admission.py``:
the pod count, requests against allocatable, nodeSelector and required node
affinity, host ports, NoExecute taints, against the pods it admitted there before).
This process does that step for kwok: it watches the nodes kwok manages and the pods
bound to them, and for each new pod, in the order the API shows them, decides:

- **admitted**: annotates it ``testenv.gpu-orchestrator.dev/admitted: "true"``;
  kwok's ``pod-ready`` stage makes only such a pod Running (kwok-stages.yaml), so
  no pod runs before it is admitted;
- **rejected**: sets it ``Failed`` with the kubelet's reason and message
  (``OutOfcpu``, ``Pod was rejected: Node didn't have enough resource: cpu,
  requested: 8000, used: 60000, capacity: 64000``), records a Warning Event on it as
  the kubelet does, and appends one JSON line to the ``--record`` file
  (``ControlPlane.admission_rejections`` reads it: a test counts rejections).

A cluster has one kubelet per node, each admitting its own pods on its own. Here the
decisions are made on the watch's thread, in order, a node's pods judged against
those admitted there before; their writes (the PATCH, the Event) go out per node
(``NodeWriters``): a node's in the order decided and one at a time, different
nodes' at once, at most ``--workers`` (8) at a time.

Guarantees:
- A pod counts on its node from its admission until it is Succeeded or Failed
  (being deleted, it still runs and still counts), as the kubelet's active pods.
- One decision per pod (by UID); a pod already admitted (the annotation, or Running)
  when the admitter (re)lists is counted, never judged again. A write that fails
  (neither done nor the pod gone) undoes its decision: the pod is judged again at
  the next list, and meanwhile does not count.
- A pod on a node it does not know yet waits for the node's event.
- Talks to kube-apiserver only (127.0.0.1), as the admin; list, then watch, then
  list again after a watch ends or a request fails (kube-apiserver restarts).
- Every thread stops on exit: SIGTERM drops the writes not sent yet and joins the
  writers (a write in flight ends within its request's 10 s timeout).
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import http.client
import json
import signal
import ssl
import sys
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .admission import Admitted, Rejection, admit, admitted

ADMITTED_ANNOTATION = "testenv.gpu-orchestrator.dev/admitted"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
FINISHED = ("Succeeded", "Failed")


class Api:
    """Requests to kube-apiserver on 127.0.0.1 with a client certificate."""

    def __init__(self, port: int, ca: str, cert: str, key: str) -> None:
        self.port = port
        self.ctx = ssl.create_default_context(cafile=ca)
        self.ctx.load_cert_chain(cert, key)
        self._local = threading.local()

    def _conn(self, timeout: float) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx,
                                           timeout=timeout)

    def request(self, method: str, path: str, body: Any = None,
                content_type: str = "application/merge-patch+json") -> tuple[int, dict]:
        conn = getattr(self._local, "conn", None)
        for attempt in (0, 1):  # a kept-alive connection the server closed: once more
            if conn is None:
                conn = self._local.conn = self._conn(10)
            try:
                data = json.dumps(body).encode() if body is not None else None
                hdrs = {"Accept": "application/json"}
                if data is not None:
                    hdrs["Content-Type"] = content_type
                conn.request(method, path, body=data, headers=hdrs)
                resp = conn.getresponse()
                raw = resp.read()
                return resp.status, (json.loads(raw) if raw else {})
            except (OSError, http.client.HTTPException):
                conn.close()
                conn = self._local.conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def watch(self, path: str, rv: str) -> Iterator[dict]:
        sep = "&" if "?" in path else "?"
        conn = self._conn(90)
        try:
            conn.request("GET", f"{path}{sep}watch=1&resourceVersion={rv}"
                         "&allowWatchBookmarks=true&timeoutSeconds=60",
                         headers={"Accept": "application/json"})
            resp = conn.getresponse()
            if resp.status != 200:
                raise RuntimeError(f"watch {path}: HTTP {resp.status}")
            for line in resp:
                yield json.loads(line)
        finally:
            conn.close()


class NodeWriters:
    """One queue of writes per node, drained by at most ``workers`` threads: a node's
    writes in the order submitted and one at a time (its kubelet), different nodes'
    at once; after each write its node goes to the back of the line. ``flush`` waits
    until every write submitted is done; ``close`` drops the rest and joins every
    thread. Its lock is a leaf: a write runs without it."""

    def __init__(self, workers: int) -> None:
        self._cond = threading.Condition()
        self._queues: dict[str, deque[Callable[[], None]]] = {}  # node -> writes to do
        self._ready: deque[str] = deque()  # nodes with writes and no thread on them
        self._busy: set[str] = set()  # nodes a thread is writing for
        self._closed = False
        self._threads = [threading.Thread(target=self._work, daemon=True,
                                          name=f"writer-{i}") for i in range(workers)]
        for t in self._threads:
            t.start()

    def submit(self, node: str, write: Callable[[], None]) -> None:
        with self._cond:
            if self._closed:
                return
            queue = self._queues.setdefault(node, deque())
            queue.append(write)
            if len(queue) == 1 and node not in self._busy:
                self._ready.append(node)
                self._cond.notify()

    def _work(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._ready or self._closed)
                if self._closed:
                    return
                node = self._ready.popleft()
                self._busy.add(node)
                write = self._queues[node].popleft()
            try:
                write()
            except Exception as exc:  # a writer outlives any one write
                print(f"admitter: writing for {node}: {type(exc).__name__}: {exc}", flush=True)
            with self._cond:
                self._busy.discard(node)
                if self._queues.get(node):
                    self._ready.append(node)
                    self._cond.notify()
                else:
                    self._queues.pop(node, None)
                if not self._busy and not self._ready:
                    self._cond.notify_all()  # flush

    def flush(self, timeout: float | None = None) -> bool:
        """True once every write submitted is done; False after ``timeout``."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._busy and not self._ready, timeout)

    def close(self, timeout: float = 15.0) -> None:
        with self._cond:
            self._closed = True
            self._queues.clear()
            self._ready.clear()
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout)


class Admitter:
    """The admission state (nodes, pods counted per node), the two watch loops and
    the writers of the decisions."""

    def __init__(self, api: Api, record: Path, workers: int = 8) -> None:
        self.api = api
        self.record = record
        self.writers = NodeWriters(workers)
        self.lock = threading.Lock()
        self.nodes: dict[str, dict] = {}  # kwok-managed nodes by name
        self.counted: dict[str, dict[str, Admitted]] = {}  # node -> uid -> what it takes
        self.where: dict[str, str] = {}  # counted uid -> node
        self.decided: set[str] = set()  # UIDs admitted or rejected by us
        self.waiting: dict[str, dict[str, dict]] = {}  # node -> uid -> pod
        self.stop = threading.Event()
        self.rejections = 0

    # ------------------------------------------------------------------ pods

    def _uncount(self, uid: str) -> None:
        node = self.where.pop(uid, None)
        if node is not None:
            self.counted.get(node, {}).pop(uid, None)

    def _count(self, uid: str, node: str, pod: dict) -> None:
        if self.where.get(uid) != node:
            self._uncount(uid)
            self.counted.setdefault(node, {})[uid] = admitted(pod)
            self.where[uid] = node

    def on_pod(self, pod: dict, deleted: bool = False) -> None:
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        node = (pod.get("spec") or {}).get("nodeName")
        status = pod.get("status") or {}
        with self.lock:
            if deleted or not node or status.get("phase") in FINISHED:
                self._uncount(uid)
                for w in self.waiting.values():
                    w.pop(uid, None)
                return
            if (meta.get("annotations") or {}).get(ADMITTED_ANNOTATION) or \
                    status.get("podIP") or status.get("phase") == "Running":
                self._count(uid, node, pod)
                return
            if uid in self.decided or meta.get("deletionTimestamp"):
                return
            target = self.nodes.get(node)
            if target is None:
                self.waiting.setdefault(node, {})[uid] = pod
                return
            if not _kwok(target):
                return
            verdict = admit(pod, target, self.counted.get(node, {}).values())
            self.decided.add(uid)
            if verdict is None:
                self._count(uid, node, pod)
            # submitted under the lock: the node's writes in the order of its decisions
            self.writers.submit(node, functools.partial(self._write, pod, node, verdict))

    def flush(self, timeout: float | None = None) -> bool:
        """True once every decision made so far is written (tests)."""
        return self.writers.flush(timeout)

    def close(self) -> None:
        self.stop.set()
        self.writers.close()

    def _write(self, pod: dict, node: str, verdict: Rejection | None) -> None:
        """A decision's writes, on a writer thread; if they fail, the decision is
        undone (judged again at the next list)."""
        try:
            done = self._admit(pod) if verdict is None else self._reject(pod, node, verdict)
        except Exception as exc:  # kube-apiserver restarting
            print(f"admitter: writing {pod['metadata']['name']}: {type(exc).__name__}: "
                  f"{exc}", flush=True)
            done = False
        if not done:
            with self.lock:
                uid = pod["metadata"]["uid"]
                self.decided.discard(uid)
                if verdict is None and self.where.get(uid) == node:
                    self._uncount(uid)

    def _admit(self, pod: dict) -> bool:
        meta = pod["metadata"]
        code, body = self.api.request(
            "PATCH", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
            {"metadata": {"uid": meta["uid"], "annotations": {ADMITTED_ANNOTATION: "true"}}})
        if code not in (200, 404, 409, 422):  # gone, or another pod of that name now
            print(f"admitter: annotating {meta['namespace']}/{meta['name']}: HTTP {code}: "
                  f"{body}", flush=True)
            return False
        return True

    def _reject(self, pod: dict, node: str, why: Rejection) -> bool:
        meta = pod["metadata"]
        ns, name = meta["namespace"], meta["name"]
        code, body = self.api.request(
            "PATCH", f"/api/v1/namespaces/{ns}/pods/{name}/status",
            {"metadata": {"uid": meta["uid"]},
             "status": {"phase": "Failed", "reason": why.reason,
                        "message": why.status_message}})
        if code != 200:
            if code not in (404, 409, 422):  # else gone, or another pod of that name now
                print(f"admitter: failing {ns}/{name}: HTTP {code}: {body}", flush=True)
                return False
            return True
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.api.request("POST", f"/api/v1/namespaces/{ns}/events", {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{name}.", "namespace": ns},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": ns,
                               "name": name, "uid": meta["uid"]},
            "reason": why.reason, "message": why.status_message, "type": "Warning",
            "source": {"component": "kubelet", "host": node},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }, content_type="application/json")
        line = {"namespace": ns, "name": name, "uid": meta["uid"], "node": node,
                "reason": why.reason, "message": why.status_message,
                "time": time.time()}
        with self.lock:
            self.rejections += 1
            with open(self.record, "a") as out:
                out.write(json.dumps(line) + "\n")
        print(f"admitter: rejected {ns}/{name} on {node}: {why.reason}: {why.message}",
              flush=True)
        return True

    # ----------------------------------------------------------------- nodes

    def on_node(self, node: dict, deleted: bool = False) -> None:
        name = node["metadata"]["name"]
        with self.lock:
            if deleted:
                self.nodes.pop(name, None)
                return
            self.nodes[name] = node
            ready = list(self.waiting.pop(name, {}).values())
        for pod in ready:
            self.on_pod(pod)

    # ----------------------------------------------------------------- loops

    def loop(self, path: str, handle, ready: threading.Event) -> None:
        rv = None  # watch on from here; None: list first
        while not self.stop.is_set():
            try:
                if rv is None:
                    code, listing = self.api.request("GET", path)
                    if code != 200:
                        raise RuntimeError(f"list {path}: HTTP {code}")
                    for item in listing.get("items") or ():
                        handle(item)
                    ready.set()
                    rv = listing["metadata"]["resourceVersion"]
                for ev in self.api.watch(path, rv):
                    if self.stop.is_set():
                        return
                    kind = ev.get("type")
                    if kind == "ERROR":  # 410 Gone: list again
                        rv = None
                        break
                    rv = (ev["object"].get("metadata") or {}).get("resourceVersion") or rv
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        handle(ev["object"], kind == "DELETED")
            except Exception as exc:  # kube-apiserver restarting: list again
                print(f"admitter: {path}: {type(exc).__name__}: {exc}; listing again",
                      flush=True)
                rv = None
                self.stop.wait(0.5)

    def run(self, ready_file: Path | None) -> None:
        nodes_ready, pods_ready = threading.Event(), threading.Event()
        threading.Thread(target=self.loop, args=("/api/v1/nodes", self.on_node, nodes_ready),
                         daemon=True, name="nodes").start()
        nodes_ready.wait()
        field = urllib.parse.quote("spec.nodeName!=")
        threading.Thread(target=self.loop,
                         args=(f"/api/v1/pods?fieldSelector={field}", self.on_pod, pods_ready),
                         daemon=True, name="pods").start()
        pods_ready.wait()
        if ready_file is not None:
            ready_file.touch()
        try:
            self.stop.wait()
        finally:
            self.close()


def _kwok(node: dict) -> bool:
    return ((node.get("metadata") or {}).get("annotations") or {}).get(
        KWOK_NODE_ANNOTATION) == "fake"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hack.testenv.admitter", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, required=True, help="kube-apiserver's port on 127.0.0.1")
    p.add_argument("--ca", required=True)
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--record", type=Path, required=True, help="one JSON line per rejection")
    p.add_argument("--ready-file", type=Path)
    p.add_argument("--workers", type=int, default=8,
                   help="writes of different nodes at once (default 8)")
    a = p.parse_args(argv)
    admitter = Admitter(Api(a.port, a.ca, a.cert, a.key), a.record, a.workers)

    def _term(*_: object) -> None:
        admitter.stop.set()
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, _term)
    print("admitter: admitting pods on kwok's nodes as a kubelet would", flush=True)
    admitter.run(a.ready_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
