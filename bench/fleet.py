#!/usr/bin/env python3
"""A fleet on one PostgreSQL: 1, 2 and 4 instances of `idemgate serve` behind one load generator,
with PostgreSQL on loopback and behind a relay that delays each direction (a database on another
host; this machine has no netem).

    python3 bench/fleet.py          # after bench/run.sh (release build, wrk, PostgreSQL)

For each delay (BENCH_DELAYS_MS, default "0 1": loopback, and 1 ms each way) and each fleet size
(BENCH_FLEET, default "1 2 4"), every size on a database of its own, under two loads: wrk's 64
connections shared out over the instances (the load stays, the fleet grows), and 64 for each
instance (the load grows with the fleet, as it would behind a load balancer that a fleet is sized
for); first calls (fresh keys) then replays (100 keys, executed once first),
BENCH_SECONDS each (default 10), BENCH_ROUNDS rounds (default 2, the order of sizes reversed every
round; medians). Per run: req/s, the ratio to one instance at the same delay, the CPU time per
call of every instance, the relay and PostgreSQL together, and how the instances' write batches
used the ledger's write lock; errors (wrk's non-2xx answers and socket errors, timeouts at 2 s
among them) are counted in the table, not fatal, and so are the deadlocks PostgreSQL broke between
the instances' sessions (each costs the batches in it a second: the server's deadlock_timeout).
Then, on the cluster restarted with
pg_stat_statements (after the fleet's runs, which it would slow), one more first-calls run of one
instance on loopback, and where PostgreSQL's time went: each statement's calls, execution time
and WAL records per first call, the costliest first. Results: target/bench/fleet.md and fleet.json.

The relay is `python3 bench/fleet.py relay LISTEN_PORT TARGET_PORT DELAY_MS`: an asyncio delay
line that holds each chunk read from either side DELAY_MS before writing it on, in order, without
limiting throughput; the timer adds up to a millisecond of its own.
"""

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import host  # noqa: E402  (bench/host.py: ports and /proc)
import run  # noqa: E402  (bench/run.py: the upstream, serve and wrk)
from report import median as median_of  # noqa: E402  (bench/report.py)
from metrics import lock_note  # noqa: E402  (bench/metrics.py: the instances' /metrics)

SECONDS = int(os.environ.get("BENCH_SECONDS", "10"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "2"))
DELAYS = [float(d) for d in os.environ.get("BENCH_DELAYS_MS", "0 1").split()]
SIZES = [int(n) for n in os.environ.get("BENCH_FLEET", "1 2 4").split()]
PATH = "/v1/charges"
# Each scenario and its share of fresh keys.
SCENARIOS = {"first calls": 1.0, "replays": 0.0}


async def pipe(reader, writer, delay):
    """Copies `reader` to `writer`, each chunk `delay` seconds late, in order."""
    loop = asyncio.get_running_loop()
    line = asyncio.Queue()

    async def feed():
        while True:
            data = await reader.read(1 << 16)
            await line.put((loop.time() + delay, data))
            if not data:
                return

    async def deliver():
        while True:
            at, data = await line.get()
            wait = at - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                writer.close()
                return
            writer.write(data)
            await writer.drain()

    try:
        await asyncio.gather(feed(), deliver())
    except (ConnectionError, OSError):
        writer.close()


async def relay(listen, target, delay_ms):
    delay = delay_ms / 1000

    async def accept(client_r, client_w):
        try:
            server_r, server_w = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(pipe(client_r, server_w, delay), pipe(server_r, client_w, delay))

    server = await asyncio.start_server(accept, "127.0.0.1", listen)
    print(f"listening on 127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def psql(port, sql, db="postgres"):
    """`sql`'s rows, each a list of its columns' texts."""
    out = subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-d", db, "-qAt",
                          "-F", "\t", "-c", sql], check=True, capture_output=True, text=True).stdout
    return [line.split("\t") for line in out.splitlines()]


# The costliest statements of a first call, as pg_stat_statements counted them (its texts are
# normalised: constants become $N; a statement's text is cut at 90 characters).
STATEMENTS = """SELECT calls, total_exec_time, wal_records, left(regexp_replace(query, '\\s+', ' ', 'g'), 90)
  FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  ORDER BY total_exec_time DESC LIMIT 12"""


def statements(stack, pg_port, script):
    """One instance on loopback under first calls, on a cluster restarted with pg_stat_statements:
    each statement's calls, execution time (µs) and WAL records per first call answered."""
    psql(pg_port, "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
    postmaster = stack.cluster("restart")[1]
    db = "fleet_statements"
    psql(pg_port, f"CREATE DATABASE {db}")
    psql(pg_port, "CREATE EXTENSION pg_stat_statements", db)
    url = f"postgres://postgres@127.0.0.1:{pg_port}/{db}?sslmode=disable"
    proc = stack.serve(f"fleet-{db}", url, admin=True)
    port, admin = proc.port, proc.admin
    try:
        run.warm_up("the instance", [port], PATH)
        psql(pg_port, "SELECT pg_stat_statements_reset()", db)
        r = run.wrk((port,), PATH, 1.0, db, script, [proc.pid, postmaster], seconds=SECONDS, admin=(admin,))
        rows = psql(pg_port, STATEMENTS, db)
    finally:
        stack.stop_one(proc)
    calls = max(r["requests"], 1)
    out = [{"calls": int(c) / calls, "us": float(t) * 1000 / calls, "wal": int(w) / calls, "statement": q}
           for c, t, w, q in rows]
    if not out:
        raise SystemExit("bench: pg_stat_statements counted no statement of the ledger's")
    return {"rps": r["rps"], "cpu_us": r["cpu_us"], "statements": out}


def statements_report(s):
    lines = [f"One instance on loopback, first calls ({s['rps']:.0f}/s, {s['cpu_us'] or 0:.0f} µs of CPU a call, "
             "idemgate and PostgreSQL), with pg_stat_statements: PostgreSQL's execution time per first call, "
             "by statement, the costliest first.", "",
             "| statement | runs a call | µs a call | WAL records a call |", "|---|---:|---:|---:|"]
    for x in s["statements"]:
        text = x["statement"].replace("|", "\\|")
        lines.append(f"| `{text}` | {x['calls']:.2f} | {x['us']:.1f} | {x['wal']:.1f} |")
    lines.append(f"| these {len(s['statements'])} | | {sum(x['us'] for x in s['statements']):.1f} | "
                 f"{sum(x['wal'] for x in s['statements']):.1f} |")
    return "\n".join(lines) + "\n"


def loads(n):
    """The connections a fleet of `n` is measured with: 64 shared out, and 64 for each instance."""
    return [run.CONNECTIONS] if n == 1 else [run.CONNECTIONS, run.CONNECTIONS * n]


def measure(stack, pg_port, relay_port, postmaster, relay_pid, delay, n, clients, script, rnd):
    """One fleet of `n` on a database of its own, `clients` connections: first calls, then
    replays."""
    db = f"fleet_{int(delay * 1000)}us_{n}_c{clients}_r{rnd}"
    psql(pg_port, f"CREATE DATABASE {db}")
    url = f"postgres://postgres@127.0.0.1:{relay_port if delay else pg_port}/{db}?sslmode=disable"
    procs = [stack.serve(f"fleet-{db}-{i}", url, admin=True) for i in range(n)]
    ports, admins = [p.port for p in procs], [p.admin for p in procs]
    roots = [p.pid for p in procs] + [postmaster] + ([relay_pid] if delay else [])
    try:
        out = {}
        run.warm_up("the fleet", ports, PATH)
        for scenario, fresh in SCENARIOS.items():
            r = run.wrk(tuple(ports), PATH, fresh, f"{db}-{scenario[:5]}", script, roots,
                        seconds=SECONDS, admin=admins, connections=clients)
            out[scenario] = r
            print(f"  PostgreSQL {delay:g} ms away, {n} instance(s), {clients} connections, "
                  f"{scenario:<11} round {rnd + 1}: "
                  f"{r['rps']:>7.0f} req/s  p50 {r['p50_ms']} ms  p99 {r['p99_ms']} ms  "
                  f"CPU {r['cpu_us'] or 0:.0f} µs/call{lock_note(r, ', ')}  errors {r['errors']}",
                  flush=True)
            run.print_statuses(r)
    finally:
        for p in procs:
            stack.stop_one(p)
    out["deadlocks"] = deadlocks(pg_port, db)
    return out


def deadlocks(pg_port, db):
    """The deadlocks PostgreSQL broke in `db`, once every session on it has ended (a session
    reports its counts as it ends)."""
    for _ in range(200):
        if psql(pg_port, f"SELECT count(*) FROM pg_stat_activity WHERE datname = '{db}'")[0][0] == "0":
            return int(psql(pg_port, f"SELECT deadlocks FROM pg_stat_database WHERE datname = '{db}'")[0][0])
        time.sleep(0.05)
    raise SystemExit(f"bench: sessions on {db} still open 10 s after its instances stopped")


def median(runs, scenario, key):
    return median_of(r[scenario].get(key) for r in runs)


def report(results):
    lines = ["| PostgreSQL | instances | connections | first calls/s | × one | × as many on loopback | "
             "CPU µs/call | jobs a batch | lock held ms | lock waited ms | replays/s | × one | errors | "
             "deadlocks |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for delay in DELAYS:
        one = results[(delay, SIZES[0], run.CONNECTIONS)]
        for n, clients in ((n, c) for n in SIZES for c in loads(n)):
            runs = results[(delay, n, clients)]
            first, replays = median(runs, "first calls", "rps"), median(runs, "replays", "rps")
            cell = lambda k, f: f.format(median(runs, "first calls", k)) if median(runs, "first calls", k) else "–"  # noqa: E731
            local = results.get((0.0, n, clients))
            vs_local = f"{first / median(local, 'first calls', 'rps'):.2f}×" if delay and local else "–"
            lines.append(
                f"| {'loopback' if delay == 0 else f'{delay:g} ms away'} | {n} | {clients} | {first:.0f} | "
                f"{first / median(one, 'first calls', 'rps'):.2f}× | {vs_local} | {cell('cpu_us', '{:.0f}')} | "
                f"{cell('jobs_per_batch', '{:.1f}')} | {cell('lock_held_ms', '{:.2f}')} | "
                f"{cell('lock_wait_ms', '{:.2f}')} | {replays:.0f} | "
                f"{replays / median(one, 'replays', 'rps'):.2f}× | "
                f"{sum(r[sc]['errors'] for r in runs for sc in SCENARIOS)} | "
                f"{sum(r['deadlocks'] for r in runs)} |")
    return "\n".join(lines) + "\n"


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "relay":
        asyncio.run(relay(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])))
        return
    if not os.path.exists(run.IDEMGATE):
        raise SystemExit(f"bench: {run.IDEMGATE} is missing (run bench/run.sh)")
    work = tempfile.mkdtemp(prefix="idemgate-fleet-")
    script = os.path.join(work, "load.lua")
    with open(script, "w") as f:
        f.write(run.WRK_SCRIPT)
    stack = run.Stack(work)
    pg_port, relay_port = stack.ports["pg"], None
    results = {}
    try:
        stack.start_upstream()
        stack.pg_env = dict(os.environ, IDEMGATE_PG_DIR=tempfile.mkdtemp(prefix="idemgate-bench-pg-"),
                            IDEMGATE_PG_PORT=str(pg_port))
        postmaster = stack.cluster("start")[1]
        for delay in DELAYS:
            relay_pid = None
            if delay:
                relay_proc = stack.spawn(f"relay-{delay:g}", [sys.executable, os.path.abspath(__file__), "relay",
                                                              "0", str(pg_port), str(delay)])
                relay_port = host.wait_line(relay_proc, relay_proc.log, "relay", host.listening_port)
                relay_pid = relay_proc.pid
            for rnd in range(ROUNDS):
                fleets = [(n, c) for n in SIZES for c in loads(n)]
                for n, clients in (fleets if rnd % 2 == 0 else list(reversed(fleets))):
                    results.setdefault((delay, n, clients), []).append(
                        measure(stack, pg_port, relay_port, postmaster, relay_pid, delay, n, clients,
                                script, rnd))
            if delay:
                stack.stop_one(relay_proc)
        profile = statements(stack, pg_port, script)
    finally:
        stack.stop()
        shutil.rmtree(work, ignore_errors=True)
        if stack.pg_env:
            shutil.rmtree(stack.pg_env["IDEMGATE_PG_DIR"], ignore_errors=True)
    table = report(results) + "\n" + statements_report(profile)
    os.makedirs(run.OUT, exist_ok=True)
    with open(os.path.join(run.OUT, "fleet.md"), "w") as f:
        f.write(table)
    with open(os.path.join(run.OUT, "fleet.json"), "w") as f:
        json.dump({"machine": host.machine(), "seconds": SECONDS, "rounds": ROUNDS,
                   "runs": {f"{d:g} ms/{n}/{c}": r for (d, n, c), r in results.items()},
                   "statements": profile},
                  f, indent=1)
    print(table)


if __name__ == "__main__":
    main()
