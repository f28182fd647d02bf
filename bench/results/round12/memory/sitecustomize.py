import sys, os
if len(sys.argv) > 1 and sys.argv[1] == "manager" and os.environ.get("SCALE5_HEAP"):
    import threading, time, gc, tracemalloc, collections
    tracemalloc.start(1)
    out = os.environ["SCALE5_HEAP"]
    def rss():
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    def deep(o, seen):
        n = 0; stack = [o]
        while stack:
            x = stack.pop()
            if id(x) in seen: continue
            seen.add(id(x)); n += sys.getsizeof(x)
            if isinstance(x, dict):
                stack.extend(x.keys()); stack.extend(x.values())
            elif isinstance(x, (list, tuple)):
                stack.extend(x)
        return n
    def dump(i):
        r = rss()
        snap = tracemalloc.take_snapshot()
        lines = [f"rss {r:.1f} MiB, traced {tracemalloc.get_traced_memory()[0]/2**20:.1f} MiB"]
        try:
            from runtime.informer import SharedIndexInformer
            seen = set()
            for o in gc.get_objects():
                if isinstance(o, SharedIndexInformer):
                    items = list(o.indexer.list())
                    lines.append(f"informer {o.kind}: {len(items)} objects, deep {deep(items, seen)/2**20:.2f} MiB")
        except Exception as e:
            lines.append(f"informer walk failed {e!r}")
        counts = collections.Counter(); sizes = collections.Counter()
        for o in gc.get_objects():
            t = type(o); counts[t.__module__ + "." + t.__qualname__] += 1; sizes[t.__module__ + "." + t.__qualname__] += sys.getsizeof(o)
        for k, v in sizes.most_common(40):
            lines.append(f"type {k}: {counts[k]} objects, {v/2**20:.2f} MiB (shallow)")
        for st in snap.statistics("lineno")[:50]:
            lines.append(f"line {st.traceback[0].filename}:{st.traceback[0].lineno}: {st.size/2**20:.2f} MiB, {st.count}")
        for st in snap.statistics("filename")[:30]:
            lines.append(f"file {st.traceback[0].filename}: {st.size/2**20:.2f} MiB")
        with open(f"{out}-{i:02d}.txt", "w") as f:
            f.write("\n".join(lines) + "\n")
    def loop():
        i = 0; best = 0
        while True:
            time.sleep(3)
            r = rss()
            if r > best + 1.5:
                best = r
                try: dump(i)
                except Exception as e: open(f"{out}-err.txt","a").write(repr(e)+"\n")
                i += 1
    threading.Thread(target=loop, daemon=True, name="scale5-heap").start()
