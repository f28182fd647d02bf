"""Each pod's create -> the admitter's mark -> kwok's first status patch (Running),
per namespace, from a kube-apiserver audit log (a `python -m bench ... --keep` work
dir's audit.log): python run_delay.py <workdir>/audit.log"""

import collections
import datetime as dt
import json
import statistics
import sys


def ts(s: str) -> float:
    return dt.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def q(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")


def main(path: str) -> None:
    seen: dict[tuple[str, str], dict[str, float]] = collections.defaultdict(dict)
    with open(path) as log:
        for line in log:
            e = json.loads(line)
            o = e.get("objectRef") or {}
            ns, name, sub = o.get("namespace"), o.get("name"), o.get("subresource")
            if o.get("resource") != "pods" or not name or ns in (None, "kube-system", "default"):
                continue
            t, ua = ts(e["requestReceivedTimestamp"]), e.get("userAgent", "")
            code = (e.get("responseStatus") or {}).get("code")
            if e["verb"] == "create" and not sub and code == 201:
                seen[(ns, name)].setdefault("create", t)
            elif e["verb"] == "patch" and not sub and not ua and e["user"]["username"] == "admin":
                seen[(ns, name)].setdefault("mark", t)  # the admitter (no User-Agent)
            elif e["verb"] == "patch" and sub == "status" and "kwok" in ua:
                seen[(ns, name)].setdefault("running", t)
    by: dict[str, list[dict[str, float]]] = collections.defaultdict(list)
    for (ns, _), d in seen.items():
        by[ns].append(d)

    def span(ds: list[dict[str, float]], a: str, b: str) -> list[float]:
        return [d[b] - d[a] for d in ds if a in d and b in d]
    for ns, ds in sorted(by.items()):
        run, mark = span(ds, "create", "running"), span(ds, "create", "mark")
        after = span(ds, "mark", "running")
        if not run or ns.startswith("warm"):
            continue
        print(f"{ns}: pods {len(ds)} running {len(run)}; create->Running p50 "
              f"{statistics.median(run):.2f} p99 {q(run, .99):.2f} min {min(run):.2f} "
              f"max {max(run):.2f}; create->mark p50 {statistics.median(mark):.2f} "
              f"max {max(mark):.2f}; mark->Running p50 {statistics.median(after):.2f}")


if __name__ == "__main__":
    main(sys.argv[1])
