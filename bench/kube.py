"""The benchmark's own small API client: keep-alive HTTPS per thread, a parallel
creator (burst or fixed rate), watches that timestamp events on arrival, and the
/proc readings of a process. Its User-Agent is ``gpu-bench`` so that the audit log
tells its requests apart from the systems under test."""

from __future__ import annotations

import contextlib
import http.client
import queue
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import orjson

USER_AGENT = "gpu-bench/0.1"
CLK_TCK = 100


def _ticks() -> int:
    import os
    try:
        return os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError):
        return CLK_TCK


CLK_TCK = _ticks()


class Api:
    def __init__(self, port: int, ctx: ssl.SSLContext) -> None:
        self.port, self.ctx = port, ctx
        self._local = threading.local()

    def _conn(self, timeout: float = 30) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx,
                                           timeout=timeout)

    def request(self, method: str, path: str, body: Any = None, *,
                content_type: str = "application/json") -> tuple[int, Any]:
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        data = None
        if body is not None:
            data = orjson.dumps(body)
            headers["Content-Type"] = content_type
        for attempt in range(3):
            conn = getattr(self._local, "conn", None)
            if conn is None:
                conn = self._local.conn = self._conn()
            try:
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
                break
            except (OSError, http.client.HTTPException):
                conn.close()
                self._local.conn = None
                if attempt == 2:
                    raise
                time.sleep(0.1)
        try:
            parsed = orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError:
            parsed = {"raw": raw.decode(errors="replace")}
        return resp.status, parsed

    def must(self, method: str, path: str, body: Any = None, ok: Iterable[int] = (200, 201),
             **kw: Any) -> Any:
        code, out = self.request(method, path, body, **kw)
        if code not in tuple(ok):
            raise RuntimeError(f"{method} {path}: HTTP {code}: {str(out)[:500]}")
        return out

    def text(self, path: str) -> str:
        conn = self._conn(60)
        try:
            conn.request("GET", path, headers={"User-Agent": USER_AGENT})
            return conn.getresponse().read().decode()
        finally:
            conn.close()

    # ------------------------------------------------------------------ watch

    def watch(self, path: str, handle: Callable[[str, dict, float], None]) -> Watch:
        """Lists ``path`` (a collection) and watches it from there; ``handle(type, obj,
        t)`` runs with the arrival time ``t`` (time.time())."""
        w = Watch(self, path, handle)
        w.start()
        return w


class Watch:
    """A watch that survives the server closing it (kube-apiserver drops watchers
    it finds slow under load): it resumes from the last resourceVersion, or lists
    again when that is gone (410), handing every listed object to ``handle`` with
    the time of the list. ``reconnects`` and ``relists`` say how often."""

    def __init__(self, api: Api, path: str, handle: Callable[[str, dict, float], None]) -> None:
        self.api, self.path, self.handle = api, path, handle
        self.error: BaseException | None = None
        self.rv = ""
        self.reconnects = 0
        self.relists = 0
        self._conn: http.client.HTTPSConnection | None = None
        self._resp: http.client.HTTPResponse | None = None
        self._stopping = False
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"watch {path}")

    def start(self) -> None:
        self._list(initial=True)
        self._open()
        self._thread.start()

    def _list(self, initial: bool = False) -> None:
        out = self.api.must("GET", self.path)
        t = time.time()
        for item in out.get("items") or ():
            self.handle("ADDED" if initial else "MODIFIED", item, t)
        self.rv = out["metadata"]["resourceVersion"]
        if not initial:
            self.relists += 1

    def _open(self) -> None:
        conn = self.api._conn(timeout=None)  # type: ignore[arg-type]
        sep = "&" if "?" in self.path else "?"
        conn.request("GET", f"{self.path}{sep}watch=1&allowWatchBookmarks=true"
                            f"&resourceVersion={self.rv}&timeoutSeconds=7200",
                     headers={"Accept": "application/json", "User-Agent": USER_AGENT})
        resp = conn.getresponse()  # headers arrive once the watch is established
        if resp.status != 200:
            conn.close()
            raise RuntimeError(f"watch {self.path}: HTTP {resp.status}")
        self._conn, self._resp = conn, resp
        if self._stopping:
            self._close()

    def _close(self) -> None:
        conn = self._conn
        if conn is not None and conn.sock is not None:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)
        if conn is not None:
            conn.close()

    def _stream(self) -> None:
        assert self._resp is not None
        while True:
            line = self._resp.readline()
            if not line:
                return
            t = time.time()
            ev = orjson.loads(line)
            typ, obj = ev["type"], ev["object"]
            if typ == "ERROR":  # e.g. 410 Gone: list again
                self._list()
                return
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if rv:
                self.rv = rv
            if typ != "BOOKMARK":
                self.handle(typ, obj, t)

    def _run(self) -> None:
        while not self._stopping:
            try:
                self._stream()
            except BaseException as exc:
                if self._stopping:
                    return
                self.error = exc
            if self._stopping:
                return
            self.reconnects += 1
            try:
                self._open()
            except Exception:
                try:
                    self._list()
                    self._open()
                except Exception as exc:
                    self.error = exc
                    time.sleep(0.5)

    def stop(self) -> None:
        self._stopping = True
        self._close()
        self._thread.join(5)


# ---------------------------------------------------------------------- creating


class Creator:
    """Creates objects with ``clients`` threads, each on its own connection.

    ``submit(path, body, key)`` queues one create; ``sent[key]`` is the time.time()
    just before its POST went out. ``run_rate`` paces submissions at ``rate``/s."""

    def __init__(self, api: Api, clients: int) -> None:
        self.api = api
        self.sent: dict[str, float] = {}
        self.done: dict[str, float] = {}
        self.errors: list[str] = []
        self._q: queue.Queue[tuple[str, dict, str] | None] = queue.Queue()
        self._threads = [threading.Thread(target=self._work, daemon=True, name=f"create-{i}")
                         for i in range(clients)]
        for t in self._threads:
            t.start()

    def _work(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            path, body, key = item
            self.sent[key] = time.time()
            try:
                code, out = self.api.request("POST", path, body)
            except Exception as exc:
                self.errors.append(f"{key}: {exc}")
                continue
            if code != 201:
                self.errors.append(f"{key}: HTTP {code}: {str(out)[:200]}")
            else:
                self.done[key] = time.time()

    def submit(self, path: str, body: dict, key: str) -> None:
        self._q.put((path, body, key))

    def run_rate(self, items: list[tuple[str, dict, str]], rate: float,
                 stop: threading.Event) -> threading.Thread:
        def pace() -> None:
            t0 = time.monotonic()
            for i, item in enumerate(items):
                if stop.is_set():
                    return
                delay = t0 + i / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                self._q.put(item)
        t = threading.Thread(target=pace, daemon=True, name="pacer")
        t.start()
        return t

    def close(self) -> None:
        for _ in self._threads:
            self._q.put(None)
        for t in self._threads:
            t.join(30)


# ---------------------------------------------------------------------- /proc


def proc_stats(pid: int) -> dict[str, float]:
    """CPU seconds (utime+stime) and RSS / peak RSS (VmHWM) in MiB of ``pid``."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK
    rss = hwm = 0.0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) / 1024
    return {"cpu_s": cpu, "rss_mib": round(rss, 1), "peak_rss_mib": round(hwm, 1),
            **context_switches(pid)}


def context_switches(pid: int) -> dict[str, int]:
    """Voluntary (a thread blocked: a lock, a socket, the interpreter lock) and
    involuntary (preempted) context switches of every thread ``pid`` has now; a thread
    that has ended is no longer counted."""
    out = {"ctx_voluntary": 0, "ctx_involuntary": 0}
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        try:
            text = status.read_text()
        except OSError:  # the thread ended meanwhile
            continue
        for line in text.splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                out["ctx_voluntary"] += int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches:"):
                out["ctx_involuntary"] += int(line.split()[1])
    return out
