#!/usr/bin/env python3
"""idemgate against nginx proxy_pass and idempotent-proxy-server, same run, same machine.

Run through bench/run.sh (it installs nginx, wrk, redis-server and idempotent-proxy-server and
builds idemgate in release). Writes target/bench/results.md and results.json and prints the table.

Environment:
  BENCH_SMOKE=1       a few seconds each, a small demo ledger (what CI runs so this cannot rot)
  BENCH_SECONDS       wrk duration per run (default 10; smoke 2)
  BENCH_ROUNDS        alternating rounds (default 3; smoke 1)
  BENCH_EVENTS        demo ledger size for the console calls (default 10000000; smoke 20000)
  IDEMGATE_BIN        the idemgate binary (default target/release/idemgate)
  CONSOLE_BENCH_BIN   the console-bench binary (default target/release/console-bench)
  BARE_PROXY_BIN      the bare-proxy binary (default target/release/bare-proxy)
  IPS_BIN             idempotent-proxy-server (bench/run.sh installs it in ~/.cargo/idemgate-bench-tools)
"""

import asyncio
import gc
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid

import approvals
import tree
from host import (block_device, cpu_seconds, cpu_times, disk_counters, disk_since, free_port, listening_port,
                  machine, peak_rss_mb, reap, serve_ports, steal_since, wait_line, wait_port)
from metrics import ADMIN_TOKEN, gauge, lock_counters, lock_note, lock_use, slow_note, slow_writes, writer_buckets
from report import (BARE, DIRECT, PASS_THROUGH, PEER_DURABLE, PEER_NAME, PG, PG_TWO, TRACED, check, disk_cells,
                    median, report)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMOKE = os.environ.get("BENCH_SMOKE") == "1"
SECONDS = int(os.environ.get("BENCH_SECONDS", "2" if SMOKE else "10"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "1" if SMOKE else "3"))
EVENTS = int(os.environ.get("BENCH_EVENTS", "20000" if SMOKE else "10000000"))
RATE_SECONDS = 2 if SMOKE else 10
SEQUENTIAL = 200 if SMOKE else 3000
IDEMGATE = os.path.abspath(os.environ.get("IDEMGATE_BIN", os.path.join(ROOT, "target/release/idemgate")))
CONSOLE_BENCH = os.path.abspath(os.environ.get("CONSOLE_BENCH_BIN", os.path.join(ROOT, "target/release/console-bench")))
BARE_PROXY = os.path.abspath(os.environ.get("BARE_PROXY_BIN", os.path.join(ROOT, "target/release/bare-proxy")))
IPS = os.path.abspath(os.environ.get("IPS_BIN", os.path.join(
    os.environ.get("CARGO_HOME", os.path.expanduser("~/.cargo")), "idemgate-bench-tools/bin/idempotent-proxy-server")))
# The peer takes minutes to build; a smoke run (BENCH_PEER=0, as CI's) goes without its row.
PEER = os.environ.get("BENCH_PEER", "0" if SMOKE else "1") == "1"
OUT = os.path.join(ROOT, "target/bench")
# Each key's body names its order, as real calls do (one identical body under every key would make
# every call after the first a duplicate suspect, which idemgate flags and logs). A replay sends its
# key's same body.
BODY = '{"amount":4999,"currency":"usd","customer":"cus_123","description":"order KEY"}'


def body(key):
    return BODY.replace("KEY", key)


def post(path, key, extra=""):
    """The bytes of a POST of `key`'s body under `key` (`extra`: more header lines, CRLF-ended)."""
    b = body(key)
    return (f"POST {path} HTTP/1.1\r\nhost: x\r\n{extra}content-type: application/json\r\n"
            f"idempotency-key: {key}\r\ncontent-length: {len(b)}\r\n\r\n{b}").encode()


CONNECTIONS = 64
REPLAY_KEYS = 100


class Stack:
    """The upstream, nginx, redis, idempotent-proxy-server, idemgate on SQLite and idemgate on
    PostgreSQL (a throwaway cluster, tests/pg/cluster.sh), each on its own port."""

    def __init__(self, work):
        self.work = work
        self.procs = []
        # Ports for the servers that cannot be told to take any free port and say which; the
        # others (idemgate, the bare proxy) listen on port 0 and their ports are added as they start.
        self.ports = {k: free_port() for k in ["upstream", "nginx", "redis", "ips", "redis_durable", "ips_durable",
                                               "pg", "otlp_sink"]}
        # name -> processes whose CPU time (with their children's) is that target's cost per request
        self.roots = {}
        self.nginx_masters = {}
        self.pg_env = None
        self.peers = {}

    def spawn(self, name, args, cwd=None, env=None):
        log = open(os.path.join(self.work, f"{name}.log"), "w")
        p = subprocess.Popen(args, cwd=cwd or self.work, env=env, stdout=log, stderr=subprocess.STDOUT)
        p.log = log.name
        self.procs.append(p)
        return p

    def start(self):
        up, ngx = self.ports["upstream"], self.ports["nginx"]
        self.start_upstream()
        # The plain reverse proxy users would otherwise put there: nginx proxy_pass, keep-alive
        # to the upstream, as many workers as cores.
        self.nginx_conf("nginx", f"""
worker_processes auto;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  upstream app {{ server 127.0.0.1:{up}; keepalive 128; }}
  server {{
    listen 127.0.0.1:{ngx} reuseport backlog=4096;
    keepalive_requests 1000000;
    location / {{ proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection ""; }}
  }}
}}""")
        wait_port(ngx, "nginx proxy", self.nginx_masters["nginx"])
        self.roots["nginx"] = [self.nginx_masters["nginx"].pid]
        # The reference row BARE: a proxy with nothing but the HTTP crates idemgate is built on.
        bare = self.spawn("bare-proxy", [BARE_PROXY, "127.0.0.1:0", f"http://127.0.0.1:{up}"])
        self.ports["bare"] = wait_line(bare, bare.log, "bare-proxy", listening_port)
        self.roots[BARE] = [bare.pid]
        if PEER:
            self.start_peer()
        self.start_idemgate()

    def start_peer(self):
        # idempotent-proxy-server keeps its idempotency records in Redis (Debian's redis-server):
        # once at Redis' defaults (no fsync per write), once with every write fsync'd.
        self.start_ips(PEER_NAME, "redis", "ips", ["--appendonly", "no"])
        self.start_ips(PEER_DURABLE, "redis_durable", "ips_durable",
                       ["--appendonly", "yes", "--appendfsync", "always"])

    def start_ips(self, name, redis_port, ips_port, persistence):
        up = self.ports["upstream"]
        data = os.path.join(self.work, redis_port)
        os.makedirs(data, exist_ok=True)
        redis = self.spawn(redis_port, ["redis-server", "--port", str(self.ports[redis_port]), "--bind", "127.0.0.1",
                                        "--dir", data, "--save", "", *persistence])
        wait_port(self.ports[redis_port], redis_port, redis)
        ips_dir = os.path.join(self.work, ips_port)
        os.makedirs(ips_dir, exist_ok=True)
        with open(os.path.join(ips_dir, ".env"), "w") as f:
            f.write(f"SERVER_ADDR=127.0.0.1:{self.ports[ips_port]}\n"
                    f"REDIS_URL=redis://127.0.0.1:{self.ports[redis_port]}\n"
                    f"URL_CHARGES=http://127.0.0.1:{up}/v1/charges\n"
                    # Its idempotency window is REQUEST_TIMEOUT (default 10 s, after which a
                    # replayed key runs again); one hour, so replays stay replays for the whole run.
                    "REQUEST_TIMEOUT=3600000\n"
                    "LOG_LEVEL=error\n")
        ips = self.spawn(ips_port, [IPS], cwd=ips_dir)
        wait_port(self.ports[ips_port], name, ips)
        self.roots[name] = [ips.pid, redis.pid]
        self.peers[name] = ips

    def start_idemgate(self):
        # idemgate: SQLite ledger on disk, every claim fsync'd (WAL, synchronous=FULL) before forwarding.
        self.idemgate = self.serve("idemgate", f"{self.work}/idemgate.db", admin=True)
        self.ports["idemgate"], self.ports["admin"] = self.idemgate.port, self.idemgate.admin
        self.roots["idemgate"] = self.roots[PASS_THROUGH] = [self.idemgate.pid]
        # The same with every call's spans sent to a collector that takes them and does nothing.
        sink = self.ports["otlp_sink"]
        self.nginx_conf("otlp-sink", f"""
worker_processes 1;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  server {{ listen 127.0.0.1:{sink}; location / {{ return 200; }} }}
}}""")
        wait_port(sink, "OTLP sink nginx", self.nginx_masters["otlp-sink"])
        telemetry = f'[telemetry]\notlp_endpoint = "http://127.0.0.1:{sink}"\n'
        self.idemgate_traced = self.serve("idemgate-traced", f"{self.work}/idemgate-traced.db", admin=True,
                                          extra=telemetry)
        self.ports["idemgate_traced"] = self.idemgate_traced.port
        self.ports["admin_traced"] = self.idemgate_traced.admin
        self.roots[TRACED] = [self.idemgate_traced.pid]
        # idemgate on PostgreSQL 15 (Debian's defaults: fsync on, synchronous_commit on), same box.
        # Under /tmp, not in `work`: the postgres user must reach it.
        self.pg_env = dict(os.environ, IDEMGATE_PG_DIR=tempfile.mkdtemp(prefix="idemgate-bench-pg-"),
                           IDEMGATE_PG_PORT=str(self.ports["pg"]))
        url, postmaster = self.cluster("start")
        # Plain, on loopback: the test cluster offers TLS, and without sslmode the ledger would
        # encrypt, and the row would not compare with the others.
        url += "?sslmode=disable"
        self.idemgate_pg = self.serve("idemgate-pg", url, admin=True)
        self.idemgate_pg2 = self.serve("idemgate-pg2", url, admin=True)
        self.ports["idemgate_pg"], self.ports["admin_pg"] = self.idemgate_pg.port, self.idemgate_pg.admin
        self.ports["idemgate_pg2"], self.ports["admin_pg2"] = self.idemgate_pg2.port, self.idemgate_pg2.admin
        # The PostgreSQL server's processes do that ledger's work: the postmaster and its backends.
        self.roots[PG] = [self.idemgate_pg.pid, postmaster]
        self.roots[PG_TWO] = [self.idemgate_pg.pid, self.idemgate_pg2.pid, postmaster]

    def cluster(self, cmd):
        """`tests/pg/cluster.sh cmd` on the stack's cluster (`pg_env`): its URL and its
        postmaster's pid."""
        url = subprocess.run(["bash", os.path.join(ROOT, "tests/pg/cluster.sh"), cmd], env=self.pg_env,
                             check=True, capture_output=True, text=True).stdout.strip()
        with open(os.path.join(self.pg_env["IDEMGATE_PG_DIR"], "data", "postmaster.pid")) as f:
            return url, int(f.readline())

    def start_upstream(self):
        """The static upstream: one nginx worker answering every request with a small JSON 201."""
        up = self.ports["upstream"]
        self.nginx_conf("upstream", f"""
worker_processes 1;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  server {{
    listen 127.0.0.1:{up} reuseport backlog=4096;
    keepalive_requests 1000000;
    location / {{ default_type application/json; return 201 '{{"id":"ch_1","status":"succeeded"}}'; }}
  }}
}}""")
        wait_port(up, "upstream nginx", self.nginx_masters["upstream"])
        self.roots[DIRECT] = [self.nginx_masters["upstream"].pid]

    def serve(self, name, ledger, binary=IDEMGATE, env=None, admin=False, extra=""):
        """`idemgate serve` (`binary`, with `env` added to the environment) on `ledger`, with its
        admin API (for /metrics) if `admin`; `extra` tables in its configuration. Both listen on
        port 0; the process answered has them as `port` and `admin` (None without one)."""
        up = self.ports["upstream"]
        with open(os.path.join(self.work, f"{name}.toml"), "w") as f:
            f.write(f"""[server]
listen = "127.0.0.1:0"
admin_listen = "{'127.0.0.1:0' if admin else 'off'}"
ledger = "{ledger}"

[[routes]]
name = "charges"
method = "POST"
path = "/v1/charges"
upstream = "http://127.0.0.1:{up}"
effect = "write"
timeout = "5s"

# The reference row "{PASS_THROUGH}": the same upstream through idemgate's HTTP path without the
# ledger (a read route without a cache), so the table shows what HTTP alone costs.
[[routes]]
name = "passthrough"
method = "POST"
path = "/v1/passthrough"
upstream = "http://127.0.0.1:{up}"
effect = "read"
timeout = "5s"

{extra}""")
        env = {**os.environ, "IDEMGATE_LOG": "warn", "IDEMGATE_ADMIN_TOKEN": ADMIN_TOKEN, **(env or {})}
        p = self.spawn(name, [binary, "serve", "--config", f"{name}.toml"], env=env)
        p.port, p.admin = wait_line(p, p.log, f"{name} serve", serve_ports)
        return p

    def nginx_conf(self, name, conf):
        d = os.path.join(self.work, name)
        os.makedirs(os.path.join(d, "logs"), exist_ok=True)
        with open(os.path.join(d, "nginx.conf"), "w") as f:
            f.write(f"pid {d}/nginx.pid;\nerror_log {d}/error.log warn;\ndaemon off;\n" + conf)
        conf = os.path.join(d, "nginx.conf")
        self.nginx_masters[name] = self.spawn(f"nginx-{name}", ["nginx", "-p", d, "-c", conf])

    def stop_one(self, p):
        """Stops one process this stack started (SIGTERM, then SIGKILL after 10 s)."""
        p.send_signal(signal.SIGTERM)
        reap(p)

    def stop(self):
        """Stops every process at once (all signalled before any is waited for), then PostgreSQL."""
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            reap(p)
        if self.pg_env:
            subprocess.run(["bash", os.path.join(ROOT, "tests/pg/cluster.sh"), "stop"], env=self.pg_env, check=False)


def targets(stack):
    """name -> (port, path): how each proxy (and each reference row) is addressed; a tuple of
    ports for a target of several instances, loaded at once."""
    return {
        DIRECT: (stack.ports["upstream"], "/v1/charges"),
        BARE: (stack.ports["bare"], "/v1/charges"),
        PASS_THROUGH: (stack.ports["idemgate"], "/v1/passthrough"),
        "nginx": (stack.ports["nginx"], "/v1/charges"),
        **({PEER_NAME: (stack.ports["ips"], "/URL_CHARGES"),
            PEER_DURABLE: (stack.ports["ips_durable"], "/URL_CHARGES")} if PEER else {}),
        "idemgate": (stack.ports["idemgate"], "/v1/charges"),
        TRACED: (stack.ports["idemgate_traced"], "/v1/charges"),
        PG: (stack.ports["idemgate_pg"], "/v1/charges"),
        PG_TWO: ((stack.ports["idemgate_pg"], stack.ports["idemgate_pg2"]), "/v1/charges"),
    }


def instance_admin(stack, name):
    """The admin port of the one idemgate instance behind the target `name` (None for the others)."""
    return {"idemgate": stack.ports["admin"], TRACED: stack.ports["admin_traced"],
            PG: stack.ports["admin_pg"]}.get(name)


def admin_ports(stack, name):
    """The admin ports whose /metrics report `name`'s ledger writer (the PostgreSQL targets)."""
    return {PG: [stack.ports["admin_pg"]], PG_TWO: [stack.ports["admin_pg"], stack.ports["admin_pg2"]]}.get(name, [])


WRK_SCRIPT = r"""
local thread_id = 0
function setup(thread)
  thread_id = thread_id + 1
  thread:set("tid", thread_id)
end
function init(args)
  -- Seeded by the run, the thread and the time, so no two runs draw the same keys.
  local run, seed = os.getenv("BENCH_RUN"), 0
  for i = 1, #run do seed = (seed * 31 + string.byte(run, i)) % 2147483647 end
  math.randomseed(seed + tid * 1000003 + os.time() % 1000000 * 7919)
  n = 0
  fresh_share = tonumber(os.getenv("BENCH_FRESH"))
  replay_keys = tonumber(os.getenv("BENCH_REPLAY_KEYS"))
  body = os.getenv("BENCH_BODY")
  path = os.getenv("BENCH_PATH")
end
local function hex(digits)
  local s = ""
  for _ = 1, digits / 4 do s = s .. string.format("%04x", math.random(0, 0xffff)) end
  return s
end
-- A random UUID v4, as agents send them (keys in order would flatter a b-tree ledger).
local function uuid4()
  return string.format("%s-%s-4%s-%x%s-%s", hex(8), hex(4), string.sub(hex(4), 2),
                       math.random(8, 11), string.sub(hex(4), 2), hex(12))
end
function request()
  n = n + 1
  local key
  if math.random() < fresh_share then
    key = uuid4()
  else
    key = "replay-" .. (n % replay_keys)
  end
  return wrk.format("POST", path, {["Idempotency-Key"] = key, ["Content-Type"] = "application/json"},
                    (string.gsub(body, "KEY", key, 1)))
end
"""

# In a smoke run (a correctness check, not a measurement) wrk also tallies the statuses it got, so
# an error names itself: a `response` hook makes wrk parse every answer, which would cost the
# fast rows of a measured run.
WRK_TALLY = r"""
local threads = {}
local setup_thread = setup
function setup(thread)
  setup_thread(thread)
  table.insert(threads, thread)
end
statuses = {}
function response(status, headers, body)
  if status < 200 or status > 299 then
    local k = tostring(status) .. " " .. string.gsub(string.sub(body or "", 1, 160), "%s+", " ")
    statuses[k] = (statuses[k] or 0) + 1
  end
end
function done(summary, latency, requests)
  for _, t in ipairs(threads) do
    for k, n in pairs(t:get("statuses")) do io.write(string.format("status %d %s\n", n, k)) end
  end
end
"""


def warm_up(name, ports, path):
    """Executes the replay keys once, each through one of `ports` in turn, before any run."""
    for k in range(REPLAY_KEYS):
        status = http_post(ports[k % len(ports)], path, f"replay-{k}")
        if not 200 <= status < 300:
            raise SystemExit(f"bench: {name} answered {status} to the warm-up of replay-{k}")


def print_statuses(r):
    """The errors a run tallied (a smoke run's statuses, socket errors), a line each."""
    for x in r["statuses"]:
        print(f"    {x}", flush=True)


def parse_wrk(text):
    def lat(label):
        m = re.search(rf"^\s*{label}%\s+([\d.]+)(us|ms|s)\s*$", text, re.M)
        if not m:
            return None
        v = float(m.group(1))
        return v / 1000 if m.group(2) == "us" else v * 1000 if m.group(2) == "s" else v

    rps = re.search(r"Requests/sec:\s+([\d.]+)", text)
    total = re.search(r"(\d+) requests in", text)
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    errors = (int(non2xx.group(1)) if non2xx else 0) + (sum(int(x) for x in sock.groups()) if sock else 0)
    statuses = re.findall(r"^status (\d+ .*)$", text, re.M)
    if sock and any(int(x) for x in sock.groups()):
        statuses.append(sock.group(0))
    return {
        "rps": float(rps.group(1)) if rps else 0.0,
        "p50_ms": lat("50"),
        "p99_ms": lat("99"),
        "requests": int(total.group(1)) if total else 0,
        "errors": errors,
        "statuses": statuses,
    }


def wrk(port, path, fresh, run_id, script, roots, seconds=SECONDS, admin=(), connections=CONNECTIONS):
    """One wrk run of `connections` (one per port, at once, the connections shared out, for a
    target of several instances); also the CPU time the target's processes (`roots`, with their
    children) spent per request: what the proxy costs, whatever share of the 2 cores wrk and the
    upstream took. With `admin` ports, also how the ledger's write lock was used."""
    ports = port if isinstance(port, tuple) else (port,)
    env = dict(os.environ, BENCH_FRESH=str(fresh), BENCH_REPLAY_KEYS=str(REPLAY_KEYS),
               BENCH_BODY=BODY, BENCH_PATH=path)
    cpu0, lock0 = cpu_seconds(roots), lock_counters(admin)
    procs = [subprocess.Popen(["wrk", f"-t{max(1, 2 // len(ports))}", f"-c{connections // len(ports)}",
                               f"-d{seconds}s", "--latency", "-s", script, f"http://127.0.0.1:{p}"],
                              env=dict(env, BENCH_RUN=f"{run_id}-{i}"), stdout=subprocess.PIPE, text=True)
             for i, p in enumerate(ports)]
    outs = [parse_wrk(p.communicate()[0]) for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"bench: wrk failed against {ports}")
    r = {"rps": sum(o["rps"] for o in outs), "requests": sum(o["requests"] for o in outs),
         "errors": sum(o["errors"] for o in outs),
         "statuses": [x for o in outs for x in o["statuses"]],
         # Several instances: the slower one's latency.
         "p50_ms": max((o["p50_ms"] for o in outs if o["p50_ms"] is not None), default=None),
         "p99_ms": max((o["p99_ms"] for o in outs if o["p99_ms"] is not None), default=None)}
    r["cpu_us"] = (cpu_seconds(roots) - cpu0) * 1e6 / r["requests"] if r["requests"] else None
    r.update(lock_use(lock0, lock_counters(admin)))
    return r


SCENARIOS = [("first calls", 1.0), ("replays", 0.0), ("mix (50% replays)", 0.5)]
# The second load shape BENCHMARKS.md reports beside the main one: wrk -t2 at 32 connections, 8 s
# rounds (the main table is wrk -t2 at 64).
SHAPE2_CONNECTIONS = 32
SHAPE2_SECONDS = 1 if SMOKE else 8


def scenarios(stack, t, names, which, script, connections=CONNECTIONS, seconds=SECONDS):
    """Each of `which` (scenario, share of fresh keys) against each of `names`, ROUNDS rounds, the
    order reversed every round so drift favours no one: scenario -> name -> medians (and the runs)."""
    out = {}
    for scenario, fresh in which:
        runs = {n: [] for n in names}
        for rnd in range(ROUNDS):
            order = names if rnd % 2 == 0 else list(reversed(names))
            for n in order:
                port, path = t[n]
                r = wrk(port, path, fresh, f"r{rnd}-c{connections}-{scenario[:5]}-{n}", script, stack.roots[n],
                        seconds=seconds, admin=admin_ports(stack, n), connections=connections)
                print(f"  {scenario:<18} -c{connections} round {rnd + 1} {n:<34} {r['rps']:>9.0f} req/s  "
                      f"p50 {r['p50_ms']} ms  p99 {r['p99_ms']} ms  errors {r['errors']}  "
                      f"CPU {r['cpu_us'] or 0:.0f} µs/req{lock_note(r, '  ')}", flush=True)
                print_statuses(r)
                if n in ("idemgate", PG) and fresh == 1.0 and connections == CONNECTIONS:
                    # The tree's integrator runs every 250 ms: its last run's lag, read as the
                    # load ends, is the lag under load (on PostgreSQL it numbers the intake's
                    # events first, so its lag counts the sequencer's too).
                    r["tree_lag_s"] = gauge(instance_admin(stack, n), "idemgate_tree_lag_seconds")
                runs[n].append(r)
        out[scenario] = {
            n: {**{k: median(x[k] for x in rs) for k in ["rps", "p50_ms", "p99_ms", "cpu_us"]},
                "errors": sum(x["errors"] for x in rs),
                **{k: median(x[k] for x in rs)
                   for k in ["jobs_per_batch", "lock_held_ms", "lock_wait_ms"] if all(k in x for x in rs)},
                "runs": rs}
            for n, rs in runs.items()}
    return out


def http_post(port, path, key):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(post(path, key, "connection: close\r\n"))
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return int(data.split(b" ", 2)[1]) if data else 0


async def fixed_rate(port, path, rate, seconds):
    """Open-loop load at `rate` req/s on keep-alive connections; latency from the scheduled send
    time (no coordinated omission). Returns sorted latencies in ms and the error count.

    Python's garbage collector is off for the run: its full collection over the run's 10k tasks
    came at the very end and left the last requests' answers unread for ~50 ms, which counted as
    the target's latency (every run's max)."""
    gc.disable()
    try:
        return await _fixed_rate(port, path, rate, seconds)
    finally:
        gc.enable()


async def _fixed_rate(port, path, rate, seconds):
    conns = []
    for _ in range(32):
        r, w = await asyncio.open_connection("127.0.0.1", port)
        conns.append((r, w))
    free = asyncio.Queue()
    for c in conns:
        free.put_nowait(c)
    lat, errors = [], 0
    start = time.perf_counter()
    total = rate * seconds

    async def one(due):
        nonlocal errors
        r, w = await free.get()
        try:
            w.write(post(path, str(uuid.uuid4())))
            await w.drain()
            head = await r.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            m = re.search(rb"(?i)content-length:\s*(\d+)", head)
            if m:
                await r.readexactly(int(m.group(1)))
            if not 200 <= status < 300:
                errors += 1
            lat.append((time.perf_counter() - due) * 1000)
        except Exception:  # noqa: BLE001 - counted
            errors += 1
        finally:
            free.put_nowait((r, w))

    tasks = []
    for i in range(total):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(due)))
    await asyncio.gather(*tasks)
    for _, w in conns:
        w.close()
    lat.sort()
    return lat, errors


def one_at_a_time(port, path, n):
    """`n` fresh-key requests one after another on one keep-alive connection: each one's latency
    with nothing queued before it (sorted, ms), and the error count."""
    lat, errors = [], 0
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        f = s.makefile("rb")
        for _ in range(n):
            req = post(path, str(uuid.uuid4()))
            t = time.perf_counter()
            s.sendall(req)
            status = int(f.readline().split(b" ", 2)[1])
            length = 0
            while (line := f.readline()) not in (b"\r\n", b""):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            f.read(length)
            lat.append((time.perf_counter() - t) * 1000)
            if not 200 <= status < 300:
                errors += 1
    lat.sort()
    return lat, errors


def pct(sorted_vals, p):
    if not sorted_vals:
        return None
    return sorted_vals[min(len(sorted_vals) - 1, int(len(sorted_vals) * p / 100))]


def main():
    for b in [IDEMGATE, CONSOLE_BENCH, BARE_PROXY, *([IPS] if PEER else [])]:
        if not os.path.exists(b):
            raise SystemExit(f"bench: {b} is missing (run bench/run.sh)")
    os.makedirs(OUT, exist_ok=True)
    work = tempfile.mkdtemp(prefix="idemgate-bench-")
    script = os.path.join(work, "load.lua")
    with open(script, "w") as f:
        f.write(WRK_SCRIPT + (WRK_TALLY if SMOKE else ""))
    stack = Stack(work)
    results = {"machine": machine(), "smoke": SMOKE, "sequential": SEQUENTIAL, "seconds": SECONDS, "rounds": ROUNDS,
               "connections": CONNECTIONS, "scenarios": {}, "rate": {}, "console": {}}
    proxies_t0 = cpu_times()
    try:
        stack.start()
        t = targets(stack)
        # The replay keys: executed once on every target before any run (once per ledger: the two
        # PostgreSQL instances share one).
        for name, (port, path) in t.items():
            if isinstance(port, tuple):
                continue
            warm_up(name, (port,), path)
        results["scenarios"] = scenarios(stack, t, list(t), SCENARIOS, script)
        # The second shape: fewer connections, shorter rounds, the rows the targets compare.
        shape = [n for n in [BARE, PASS_THROUGH, "nginx", PEER_NAME, PEER_DURABLE, "idemgate"] if n in t]
        results["shape2"] = {"connections": SHAPE2_CONNECTIONS, "seconds": SHAPE2_SECONDS,
                             "scenarios": scenarios(stack, t, shape, SCENARIOS[:2], script,
                                                    SHAPE2_CONNECTIONS, SHAPE2_SECONDS)}
        # Added latency at a fixed 1k req/s, against calling the upstream directly.
        rate_targets = {"direct": (stack.ports["upstream"], "/v1/charges"),
                        **{n: x for n, x in t.items() if n not in (DIRECT, BARE, PG_TWO)}}
        dev = block_device(work)
        for n, (port, path) in rate_targets.items():
            admin = instance_admin(stack, n)
            w0 = writer_buckets(admin) if admin else None
            t0, d0 = cpu_times(), disk_counters(dev)
            lat, errors = asyncio.run(fixed_rate(port, path, 1000, RATE_SECONDS))
            # The hypervisor's share of these seconds, and what the disk did in them: the 1k req/s
            # tail follows both, and the whole phase's average hides one noisy run.
            steal, disk = steal_since(t0), disk_since(dev, d0)
            # And whether a long wait was the ledger's writer: a slow commit, a slow batch, or neither.
            slow = slow_writes(w0, writer_buckets(admin)) if admin else None
            # The floor under that: one request at a time on one connection, no queueing at all.
            one, one_errors = one_at_a_time(port, path, SEQUENTIAL)
            results["rate"][n] = {"p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99), "errors": errors + one_errors,
                                  "alone_p50_ms": pct(one, 50), "alone_p99_ms": pct(one, 99), "steal": steal, **disk,
                                  "slow_writes": slow}
            print(f"  1k req/s {n:<34} p50 {pct(lat, 50):.3f} ms  p99 {pct(lat, 99):.3f} ms  errors {errors}; "
                  f"one at a time p50 {pct(one, 50):.3f} ms  p99 {pct(one, 99):.3f} ms; steal {steal:.1%}; "
                  "disk {} MB written, {} ms a write, {} ms a flush".format(*disk_cells(disk)) +
                  (f"; {slow_note(slow)}" if slow else ""), flush=True)
        results["serve_peak_rss_mb"] = peak_rss_mb(stack.idemgate.pid)
        results["ips_peak_rss_mb"] = peak_rss_mb(stack.peers[PEER_NAME].pid) if PEER else None
    finally:
        stack.stop()
    results["proxies_steal"] = steal_since(proxies_t0)
    # An approved call's way to its upstream, which the server takes itself.
    lat = approvals.measure(IDEMGATE, work, 10 if SMOKE else 100)
    results["approval"] = {"calls": len(lat), "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99)}
    print(f"  approval to upstream: p50 {pct(lat, 50):.1f} ms  p99 {pct(lat, 99):.1f} ms ({len(lat)} calls)", flush=True)
    # The console's data calls on a big demo ledger (release build of the same Ops calls).
    ledger = os.path.join(work, "demo.db")
    t0 = time.time()
    subprocess.run([IDEMGATE, "demo", "--ledger", ledger, "--events", str(EVENTS)], check=True,
                   stdout=subprocess.DEVNULL)
    results["console"]["demo_seconds"] = time.time() - t0
    results["tree"] = tree.measure(IDEMGATE, ledger, work, EVENTS)
    for n, key in [("idemgate", "lag_s"), (PG, "pg_lag_s")]:
        results["tree"][key] = max((x.get("tree_lag_s") or 0.0
                                    for x in results["scenarios"]["first calls"].get(n, {}).get("runs", [])),
                                   default=None)
    print("  tree: integrate {integrate_s:.1f} s, prove {prove_ms:.0f} ms, verify --proof {verify_proof_ms:.0f} ms, "
          "lag under first calls {lag_s} s, on PostgreSQL {pg_lag_s} s".format(**results["tree"]), flush=True)
    calls_t0 = cpu_times()
    out = subprocess.run([CONSOLE_BENCH, ledger, "5"], check=True, capture_output=True, text=True)
    results["console"]["steal"] = steal_since(calls_t0)
    results["console"].update(json.loads(out.stdout))
    results["console"]["ledger_mb"] = os.path.getsize(ledger) / 1e6
    shutil.rmtree(work, ignore_errors=True)
    with open(os.path.join(OUT, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    md = report(results)
    with open(os.path.join(OUT, "results.md"), "w") as f:
        f.write(md)
    print(md)
    check(results)


if __name__ == "__main__":
    main()
