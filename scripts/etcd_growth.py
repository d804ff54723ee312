#!/usr/bin/env python3
"""etcd's size under a steady write load through one cluster node (every role), every
30 s: how the log's collection and the history's compaction keep it bounded.

    cargo build --release -p puffer --bin puffer
    python3 scripts/etcd_growth.py RETENTION_S SECONDS   # RETENTION_S: --etcd-history-s

Needs etcd on the PATH; uses ports 24791, 24801 and 7990 on 127.0.0.1 and a directory
in /dev/shm, removed after. Prints seconds, writes, etcd's revision, its file size and
the bytes in use, and the compactions made; then the node's collection status."""
import json, os, pathlib, shutil, subprocess, sys, time, urllib.request

retention, seconds = sys.argv[1], float(sys.argv[2])
home = f"/dev/shm/eg-{retention}"
shutil.rmtree(home, ignore_errors=True)
os.makedirs(home)
ec, ep, http = 24791, 24801, 7990
etcd = subprocess.Popen(["etcd", "--name", "eg", "--data-dir", f"{home}/etcd",
    "--listen-client-urls", f"http://127.0.0.1:{ec}", "--advertise-client-urls", f"http://127.0.0.1:{ec}",
    "--listen-peer-urls", f"http://127.0.0.1:{ep}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{ep}",
    "--initial-cluster", f"eg=http://127.0.0.1:{ep}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=30))
def get(url):
    return json.load(urllib.request.urlopen(url, timeout=30))
def wait(f):
    for _ in range(300):
        try:
            return f()
        except Exception:
            time.sleep(0.1)
    raise SystemExit("did not come up")
wait(lambda: post(f"http://127.0.0.1:{ec}/v3/maintenance/status", {}))
node = subprocess.Popen([str(pathlib.Path(__file__).resolve().parent.parent / "target" / "release" / "puffer"), "serve", "--data", f"{home}/n1",
    "--listen", f"127.0.0.1:{http}", "--etcd", f"127.0.0.1:{ec}", "--etcd-history-s", retention,
    "--roles", "coordinator,ingest,indexer,data"], stdout=subprocess.DEVNULL, stderr=open(f"{home}/n1.log", "w"))
try:
    wait(lambda: get(f"http://127.0.0.1:{http}/v1/admin/cluster")["leads_ingest"] or 1/0)
    post(f"http://127.0.0.1:{http}/v1/tables", {"name": "t", "key": "id", "shards": 4,
        "attributes": [{"name": "v", "type": "string"}]})
    start = time.time(); next_report = 0; written = 0
    print("seconds\twrites\trevision\tdb_bytes\tdb_in_use_bytes\tcompactions")
    while True:
        t = time.time() - start
        if t >= next_report:
            s = post(f"http://127.0.0.1:{ec}/v3/maintenance/status", {})
            h = get(f"http://127.0.0.1:{http}/v1/admin/cluster").get("etcd_history") or {}
            print(f"{t:.0f}\t{written}\t{s['header']['revision']}\t{s['dbSize']}\t{s.get('dbSizeInUse')}\t{h.get('compactions')}", flush=True)
            next_report += 30
            if t >= seconds:
                st = get(f"http://127.0.0.1:{http}/v1/admin/cluster")
                print(json.dumps({k: st.get(k) for k in ["log_gc", "publishing", "etcd_history", "published", "log_tail"]}))
                break
        ops = [{"table": "t", "put": {"id": f"k{(written + i) % 5000}", "v": "x" * 100}} for i in range(20)]
        post(f"http://127.0.0.1:{http}/v1/batches", {"operations": ops})
        written += 20
finally:
    node.terminate(); node.wait(); etcd.terminate(); etcd.wait()
    shutil.rmtree(home, ignore_errors=True)
