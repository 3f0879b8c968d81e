#!/usr/bin/env python3
"""What one actor record costs etcd itself (docs/capacity.md, "Measured").

Starts one etcd member (`/usr/bin/etcd`, Debian's etcd-server) on loopback
in a temp folder, writes N actor records of the estimated shape (a 30-byte
key `/stasis/actors/<15-char name>`, an 80-byte JSON value) in transactions
of 128 puts (etcd's default --max-txn-ops) through etcd's JSON gateway,
then rewrites every record once (one placement change each, e.g. a move),
and prints after each phase: the backend file size and the part in use
(etcd_mvcc_db_total_size[_in_use]_in_bytes), the member's resident memory
(VmRSS), and bytes per record. Then it compacts, defragments and prints
them again. Stasis is not involved: this is the directory's floor.

    python3 docs/benchmarks/etcd_keys.py [N]      # default 1,000,000
"""

import base64
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

PORT = 27301
TXN_OPS = 128


def b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def post(conn, path, body):
    conn.request("POST", path, json.dumps(body), {"content-type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    if resp.status != 200:
        raise RuntimeError(f"{path}: {resp.status} {data[:200]!r}")
    return json.loads(data)


def metric(name):
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    m = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(m.group(1)) if m else float("nan")


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def record(i, epoch):
    key = f"/stasis/actors/actor-{i:09d}"  # 15 + 15 = 30 bytes
    value = json.dumps(
        {"template": "counter-v1", "worker": f"stasis-worker-{i % 1000:03d}", "epoch": epoch},
        separators=(",", ":"),
    )
    value += " " * (80 - len(value))  # pad to the estimated 80 bytes
    return key, value


def write_all(conn, n, epoch):
    start = time.monotonic()
    for base in range(0, n, TXN_OPS):
        ops = []
        for i in range(base, min(base + TXN_OPS, n)):
            key, value = record(i, epoch)
            ops.append({"request_put": {"key": b64(key), "value": b64(value)}})
        post(conn, "/v3/kv/txn", {"success": ops})
    return time.monotonic() - start


def report(phase, pid, n, base_rss, seconds=None):
    total = metric("etcd_mvcc_db_total_size_in_bytes")
    in_use = metric("etcd_mvcc_db_total_size_in_use_in_bytes")
    rss = rss_bytes(pid)
    grown = rss - base_rss
    rate = f", {n / seconds:,.0f} records/s" if seconds else ""
    print(
        f"{phase}: db {total / 2**20:,.1f} MiB ({total / n:,.0f} B/record), "
        f"in use {in_use / 2**20:,.1f} MiB ({in_use / n:,.0f} B/record), "
        f"RSS {rss / 2**20:,.1f} MiB (+{grown / n:,.0f} B/record over the empty member){rate}",
        flush=True,
    )


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    work = tempfile.mkdtemp(prefix="etcd-keys.")
    url = f"http://127.0.0.1:{PORT}"
    etcd = subprocess.Popen(
        ["etcd", "--name", "m1", "--data-dir", f"{work}/data", "--logger", "zap",
         "--log-level", "error", "--listen-client-urls", url, "--advertise-client-urls", url,
         "--listen-peer-urls", f"http://127.0.0.1:{PORT + 1}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{PORT + 1}",
         "--initial-cluster", f"m1=http://127.0.0.1:{PORT + 1}",
         "--quota-backend-bytes", str(8 * 2**30)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=30)
                post(conn, "/v3/kv/range", {"key": b64("x")})
                break
            except OSError:
                time.sleep(0.1)
        base = rss_bytes(etcd.pid)
        print(f"empty member: RSS {base / 2**20:,.1f} MiB", flush=True)
        report(f"{n:,} records written", etcd.pid, n, base, write_all(conn, n, 1))
        report("every record rewritten once", etcd.pid, n, base, write_all(conn, n, 2))
        rev = int(post(conn, "/v3/kv/range", {"key": b64("x")})["header"]["revision"])
        post(conn, "/v3/kv/compaction", {"revision": rev, "physical": True})
        post(conn, "/v3/maintenance/defragment", {})
        report("compacted and defragmented", etcd.pid, n, base)
    finally:
        etcd.terminate()
        etcd.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
