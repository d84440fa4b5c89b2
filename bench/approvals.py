"""How soon an approved call reaches its upstream: from the answer to an operator's approval
(the decision is durable before it) to the upstream receiving the stored request that
`idemgate serve` forwards itself. One `serve` on a SQLite ledger, an upstream that notes when each
key first arrives, and calls held one after another, each approved through the admin API."""

import http.server
import json
import os
import subprocess
import threading
import time
import urllib.request
import uuid

from host import serve_ports, wait_line

TOKEN = "bench-" + uuid.uuid4().hex


def _upstream():
    """A threaded HTTP upstream that notes, per idempotency key, when it first arrived; the
    condition is notified on each arrival."""
    seen = {}
    arrived = threading.Condition()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - the stdlib's name
            at = time.time()
            self.rfile.read(int(self.headers.get("content-length") or 0))
            with arrived:
                seen.setdefault(self.headers.get("idempotency-key", ""), at)
                arrived.notify_all()
            self.send_response(201)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, seen, arrived


def _call(port, method, path, body, headers):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def measure(idemgate, work, n):
    """Sorted milliseconds from each approval's answer to its call's arrival upstream."""
    upstream, seen, arrived = _upstream()
    config = os.path.join(work, "approvals.toml")
    with open(config, "w") as f:
        f.write(f'''[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
ledger = "{os.path.join(work, 'approvals.db')}"

[[routes]]
name = "refunds"
method = "POST"
path = "/v1/refunds"
upstream = "http://127.0.0.1:{upstream.server_address[1]}"
upstream_auth = {{ secret_env = "BENCH_UPSTREAM_TOKEN", header = "Authorization" }}
effect = "write"
[routes.approval]
hold = "1ms"
''')
    env = dict(os.environ, IDEMGATE_ADMIN_TOKEN=TOKEN, BENCH_UPSTREAM_TOKEN="Bearer bench")
    log = os.path.join(work, "approvals.log")
    with open(log, "w") as out:
        serve = subprocess.Popen([idemgate, "serve", "--config", config], env=env, stdout=out,
                                 stderr=subprocess.STDOUT)
    lat = []
    try:
        port, admin = wait_line(serve, log, "idemgate serve (approvals)", serve_ports)
        auth = {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
        for i in range(n):
            key = f"approval-{i}-{uuid.uuid4()}"
            status, body = _call(port, "POST", "/v1/refunds", b'{"amount":60000}',
                                 {"idempotency-key": key, "content-type": "application/json"})
            if status != 202:
                raise SystemExit(f"bench: a held call was answered {status}: {body[:200]!r}")
            entry = json.loads(body)["entry_id"]
            status, body = _call(admin, "POST", f"/admin/v1/approvals/{entry}/approve",
                                 b'{"reason":"benchmark"}', auth)
            approved = time.time()
            if status != 200:
                raise SystemExit(f"bench: the approval was answered {status}: {body[:200]!r}")
            with arrived:
                got = arrived.wait_for(lambda: key in seen, timeout=10)
            if not got:
                raise SystemExit(f"bench: approved call {entry} did not reach the upstream in 10 s")
            lat.append(max(0.0, seen[key] - approved) * 1000)
    finally:
        serve.terminate()
        serve.wait(timeout=30)
        upstream.shutdown()
    lat.sort()
    return lat
