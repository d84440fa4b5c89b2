#!/usr/bin/env python3
"""Two builds of `idemgate serve` (or one build under two environments), alternated on one machine.

A change to the hot path is worth its complexity only if it shows through the noise of a shared VM,
where two runs of the same binary can differ by 15%. This runs A and B in turns, several times, each
on a fresh SQLite ledger, and reports every run and the pairs' verdict.

    # this checkout against an older commit (a worktree, built into its own target directory)
    git worktree add ../idemgate-old HEAD~1
    cargo build --release --locked -p idemgate-cli --manifest-path ../idemgate-old/Cargo.toml \
        --target-dir target/old
    python3 bench/ab.py --a target/old/release/idemgate --a-name old --b-name new
    # one binary, two environments
    python3 bench/ab.py --b-env SOME_SETTING=1

Each pair starts A's and B's `idemgate serve`, each on a new ledger, in front of the static upstream
(bench/run.py's), and runs `--rounds` rounds of the scenario: in each round one wrk run against
each, in turns (A B, then B A, ...), so a drift of the machine's speed falls on both alike. Each
ledger grows from one round to the next, as in the full run. Per run:
req/s, p50, p99, errors, the CPU time per request of the serve process split by thread (the ledger
writer, the checkpointer, the tokio workers, the rest), and the bytes its syscalls wrote and read
per request (`/proc/PID/io` wchar and rchar: the WAL, the checkpoint, the database's reads and
the sockets), split the same way. With --wal-map, after each side's last round: what one commit
writes, in pages, per table and index (its WAL's frames, copied under load). Results:
target/bench/ab.md and ab.json. Exits non-zero if a run answered nothing or an error, or if the
writer's thread (but for --scenario passthrough, the HTTP path alone) or, with --wal-map, a commit
that wrote the log was not found.

Needs what bench/run.sh installs (nginx-light, wrk). SQLite ledgers only.
"""

import argparse
import hashlib
import json
import os
import shutil
import signal
import sqlite3
import statistics
import struct
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import host  # noqa: E402  (bench/host.py: ports and /proc)
import run  # noqa: E402  (bench/run.py: the upstream, serve and wrk)

# Each scenario's share of fresh keys and its route: "passthrough" is the HTTP path alone (run.py's
# read route without the ledger).
SCENARIOS = {"first": (1.0, "/v1/charges"), "mix": (0.5, "/v1/charges"), "replays": (0.0, "/v1/charges"),
             "passthrough": (1.0, "/v1/passthrough")}
# Thread names (/proc/PID/task/TID/comm, 15 characters at most) and the column each is summed in.
THREADS = [("idemgate-writer", "writer"), ("idemgate-ckpt", "ckpt"), ("tokio", "workers")]
GROUPS = [group for _, group in THREADS]


def split(by_thread, scale=1):
    """One measure as "writer/ckpt/workers/other", each divided by `scale`."""
    return "/".join(f"{by_thread[g] / scale:.{0 if scale == 1 else 1}f}" for g in GROUPS + ["other"])


def sample(pid):
    """CPU seconds, bytes written and bytes read (wchar, rchar: what the process passed to write
    and read syscalls) so far, per thread group: writer, ckpt, workers, and "all" for the whole
    process (threads that have ended included)."""
    tick = os.sysconf("SC_CLK_TCK")

    def read(path):
        comm, fields = host.proc_stat(path)
        with open(f"{path}/io") as f:
            io = dict(line.split(": ") for line in f.read().splitlines())
        cpu = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
        return comm, (cpu, int(io["wchar"]), int(io["rchar"]))

    out = {g: (0.0, 0, 0) for g in GROUPS}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            comm, v = read(f"/proc/{pid}/task/{tid}")
        except OSError:
            continue  # the thread ended
        group = next((g for prefix, g in THREADS if comm.startswith(prefix)), None)
        if group:
            out[group] = tuple(a + b for a, b in zip(out[group], v))
    _, out["all"] = read(f"/proc/{pid}")
    return out


def measure(serve, scenario, run_id, script, seconds):
    """One wrk run against `serve` (a process), with its CPU and I/O per request by thread group."""
    fresh, path = SCENARIOS[scenario]
    s0 = sample(serve.pid)
    r = run.wrk(serve.port, path, fresh, run_id, script, [serve.pid], seconds)
    s1 = sample(serve.pid)
    n = max(r["requests"], 1)
    per = {g: [(b - a) / n for a, b in zip(s0[g], s1[g])] for g in s0}
    for i, g in enumerate(["cpu_us", "wrote", "read"]):
        scale = 1e6 if i == 0 else 1
        r[g + "_by_thread"] = {t: per[t][i] * scale for t in GROUPS}
        r[g + "_by_thread"]["other"] = per["all"][i] * scale - sum(per[t][i] * scale for t in GROUPS)
    r["wchar_per_req"], r["rchar_per_req"] = per["all"][1], per["all"][2]
    return r


def pair_run(stack, sides, args, pair, script):
    """One pair: both sides' `serve`s, each on a new ledger, up at once; their rounds taken in
    turns (A B, then B A, ...; the next pair starts with B), so that a drift of the machine's speed
    falls on both alike; then, with --wal-map, each one's map; then both stopped."""
    labels = list(sides)
    fresh, _ = SCENARIOS[args.scenario]
    procs = {}
    try:
        for label, (binary, env) in sides.items():
            ledger = os.path.join(stack.work, f"{label}-{pair}.db")
            serve = stack.serve(f"{label}-{pair}", ledger, binary, env)
            procs[label] = (serve, ledger)
            if fresh < 1.0:
                for k in range(run.REPLAY_KEYS):
                    status = run.http_post(serve.port, "/v1/charges", f"replay-{k}")
                    if not 200 <= status < 300:
                        raise SystemExit(f"ab: {label} answered {status} to the warm-up of replay-{k}")
        runs = {label: [] for label in labels}
        for rnd in range(args.rounds):
            for label in labels if (pair + rnd) % 2 == 0 else labels[::-1]:
                serve, _ = procs[label]
                r = measure(serve, args.scenario, f"ab-{label}-{pair}-{rnd}", script, args.seconds)
                print(f"  pair {pair + 1} round {rnd + 1} {label}: {r['rps']:>7.0f} req/s  p99 {r['p99_ms']} ms  "
                      f"errors {r['errors']}  CPU {r['cpu_us'] or 0:.0f} µs/req ({split(r['cpu_us_by_thread'])})  "
                      f"wrote {r['wchar_per_req'] / 1000:.1f} KB/req ({split(r['wrote_by_thread'], 1000)}), "
                      f"read {r['rchar_per_req'] / 1000:.1f} KB/req ({split(r['read_by_thread'], 1000)})",
                      flush=True)
                runs[label].append(r)
        if args.wal_map:
            for label in labels:
                serve, ledger = procs[label]
                m = wal_map(serve, ledger, stack.work, fresh, script, f"ab-{label}-{pair}-map")
                runs[label][-1]["wal_map"] = m
                print(f"  pair {pair + 1} {label}: {m['commits']} commits copied from the WAL wrote "
                      f"{m['frames_per_commit']:.1f} pages each: " +
                      ", ".join(f"{k} {v:.1f}" for k, v in list(m["by_btree"].items())[:6]), flush=True)
        return runs
    finally:
        for serve, ledger in procs.values():
            stack.stop_one(serve)
            remove_db(ledger)


def remove_db(path):
    """Removes the SQLite database at `path` with its WAL and shared-memory files, if there."""
    for suffix in ["", "-wal", "-shm"]:
        try:
            os.remove(path + suffix)
        except FileNotFoundError:
            pass


WAL_MAP_SECONDS = 5


def wal_commits(path):
    """The commits in the WAL file at `path`: {(its salts, the offset of its last frame): its pages}.
    Only frame headers are read, so a frame whose page was still being written counts too."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 32:
        return {}
    # The WAL's header: magic, format, page size, checkpoint sequence, salts, checksums.
    _, _, page_size, _, salt1, salt2 = struct.unpack(">6I", data[:24])
    frame = 24 + page_size
    commits, current, off = {}, [], 32
    # A frame: page number, the database's size after the commit (non-zero on a commit's last
    # frame), the WAL's salts (frames left from an earlier generation of the file differ), checksums.
    while off + frame <= len(data):
        page, commit_size, s1, s2 = struct.unpack(">4I", data[off:off + 16])
        if (s1, s2) != (salt1, salt2):
            break
        current.append(page)
        if commit_size:
            commits[(salt1, salt2, off)] = current
            current = []
        off += frame
    return commits


def paused(pid):
    """Whether every thread of `pid` has stopped (SIGSTOP is delivered asynchronously)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            if host.proc_stat(f"/proc/{pid}/task/{tid}")[1][0] not in "Tt":
                return False
        except OSError:
            pass  # the thread ended
    return True


def wal_map(serve, ledger, work, fresh, script, run_id):
    """What `serve`'s commits write, under load: an untimed wrk run of WAL_MAP_SECONDS during which
    serve is paused (SIGSTOP) four times for a copy of its WAL; the commits found (each counted
    once) and the pages (frames) each wrote, per b-tree (table or index), named afterwards through
    SQLite's dbstat on a copy of the idle ledger."""
    snap = os.path.join(work, "walmap.db")
    commits = {}
    load = threading.Thread(target=run.wrk, args=(serve.port, "/v1/charges", fresh, run_id, script, [serve.pid],
                                                  WAL_MAP_SECONDS))
    load.start()
    try:
        for _ in range(4):
            time.sleep(WAL_MAP_SECONDS / 5)
            os.kill(serve.pid, signal.SIGSTOP)
            try:
                while not paused(serve.pid):
                    time.sleep(0.001)
                shutil.copyfile(ledger + "-wal", snap + "-wal")
            finally:
                os.kill(serve.pid, signal.SIGCONT)
            commits.update(wal_commits(snap + "-wal"))
    finally:
        load.join()
    try:
        # The WAL first: a checkpoint that copies frames into the database meanwhile copies frames
        # the WAL's copy already holds, and a reader of the copies takes those from the WAL.
        for suffix in ["-wal", ""]:
            shutil.copyfile(ledger + suffix, snap + suffix)
        db = sqlite3.connect(f"file:{snap}?mode=ro", uri=True)
        try:
            names = dict((page, name) for name, page in db.execute("SELECT name, pageno FROM dbstat"))
        finally:
            db.close()
    finally:
        remove_db(snap)
    n = max(len(commits), 1)
    by = {}
    for pages in commits.values():
        for page in pages:
            # A page the ledger freed since (few: the ledger deletes little) is named by its new use.
            name = names.get(page, "(free)")
            by[name] = by.get(name, 0) + 1
    return {"commits": len(commits), "frames_per_commit": sum(map(len, commits.values())) / n,
            "by_btree": {k: v / n for k, v in sorted(by.items(), key=lambda kv: -kv[1])}}


def identity(binary, env):
    """What a side runs: the binary's path and sha256 prefix, and its environment."""
    with open(binary, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:12]
    return f"`{binary}` (sha256 {digest})" + ("".join(f" {k}={v}" for k, v in env.items()))


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def plural(n, word):
    return f"{n} {word}" + ("" if n == 1 else "s")


def report(args, labels, ids, results):
    a, b = labels
    size = f"{plural(args.pairs, 'pair')} × {plural(args.rounds, 'round')} × {args.seconds} s"
    lines = [f"# A/B: {args.scenario} calls, {size}", "",
             f"- **{a}**: {ids[a]}", f"- **{b}**: {ids[b]}", "",
             "Medians over the pairs, per round (the ledger grows from one round to the next):", "",
             "Per request: CPU µs, KB written and KB read (syscalls' wchar and rchar: the WAL, the checkpoint, "
             "the database's reads and the sockets), each with its split writer/ckpt/workers/other.", "",
             "| round | side | req/s | p99 ms | CPU µs | by thread | wrote KB | by thread | read KB | by thread |",
             "|---:|---|---:|---:|---:|---|---:|---|---:|---|"]
    for rnd in range(args.rounds):
        for label in labels:
            rs = [pair[label][rnd] for pair in results]

            def med(field):
                return median(r[field] for r in rs)

            def med_split(field, scale=1):
                return split({g: median(r[field][g] for r in rs) for g in GROUPS + ["other"]}, scale)

            lines.append(
                f"| {rnd + 1} | {label} | {med('rps'):.0f} | {med('p99_ms'):.2f} | {med('cpu_us'):.0f} | "
                f"{med_split('cpu_us_by_thread')} | {med('wchar_per_req') / 1000:.1f} | "
                f"{med_split('wrote_by_thread', 1000)} | {med('rchar_per_req') / 1000:.1f} | "
                f"{med_split('read_by_thread', 1000)} |")
    # Each pair's verdict: its B against its A, averaged over the rounds (the same ledger sizes).
    rps_wins = cpu_wins = 0
    rps_ratios, cpu_ratios = [], []
    for pair in results:
        ra = statistics.mean(r["rps"] for r in pair[a])
        rb = statistics.mean(r["rps"] for r in pair[b])
        ca = statistics.mean(r["cpu_us"] or 0 for r in pair[a])
        cb = statistics.mean(r["cpu_us"] or 0 for r in pair[b])
        rps_ratios.append(rb / ra if ra else 0)
        cpu_ratios.append(cb / ca if ca else 0)
        rps_wins += rb > ra
        cpu_wins += cb < ca
    lines += ["", f"{b} against {a}, pair by pair (each pair's mean over its rounds). The same binary on "
              "both sides reads 0.96–1.12× req/s and 0.88–1.04× CPU pair by pair on a 2-core VM: "
              "a difference within that is noise. Bytes written and read per request repeat within ~1%.", "",
              f"- req/s: {' '.join(f'{x:.2f}×' for x in rps_ratios)}; {b} ahead in {rps_wins} of "
              f"{plural(len(results), 'pair')}",
              f"- CPU per request: {' '.join(f'{x:.2f}×' for x in cpu_ratios)}; {b} cheaper in {cpu_wins} of "
              f"{plural(len(results), 'pair')}", ""]
    if args.wal_map:
        maps = {label: [pair[label][-1]["wal_map"] for pair in results] for label in labels}
        names = sorted({k for ms in maps.values() for m in ms for k in m["by_btree"]},
                       key=lambda k: -max(median(m["by_btree"].get(k, 0) for m in maps[label]) for label in labels))
        lines += [f"What a commit wrote, after the last round ({WAL_MAP_SECONDS} s more of the same load, "
                  "its WAL copied four times; medians over the pairs):", "",
                  f"| pages per commit | {a} | {b} |", "|---|---:|---:|",
                  f"| commits copied | {median(m['commits'] for m in maps[a]):.0f} | "
                  f"{median(m['commits'] for m in maps[b]):.0f} |",
                  f"| **all** | **{median(m['frames_per_commit'] for m in maps[a]):.1f}** | "
                  f"**{median(m['frames_per_commit'] for m in maps[b]):.1f}** |"]
        for k in names:
            vals = [median(m["by_btree"].get(k, 0) for m in maps[label]) for label in labels]
            if max(vals) >= 0.5:
                lines.append(f"| {k} | {vals[0]:.1f} | {vals[1]:.1f} |")
        lines.append("")
    return "\n".join(lines)


def check(labels, results, scenario):
    bad = []
    # The HTTP path alone writes nothing to the ledger.
    ledger = scenario != "passthrough"
    for i, pair in enumerate(results):
        for label in labels:
            for rnd, r in enumerate(pair[label]):
                where = f"pair {i + 1} {label} round {rnd + 1}"
                if r["requests"] <= 0:
                    bad.append(f"{where}: no requests")
                if r["errors"]:
                    bad.append(f"{where}: {r['errors']} errors")
                if ledger and r["cpu_us_by_thread"]["writer"] <= 0:
                    bad.append(f"{where}: no CPU time on a thread named idemgate-writer")
                if "wal_map" in r and not (r["wal_map"]["commits"] and "events" in r["wal_map"]["by_btree"]):
                    bad.append(f"{where}: the WAL held no commit that wrote the log")
    if bad:
        raise SystemExit("ab: " + "; ".join(bad))
    print("ab: ok")


def env_pairs(items):
    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise SystemExit(f"ab: --a-env/--b-env take NAME=VALUE, not {item!r}")
        out[k] = v
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--a", default=run.IDEMGATE, help="A's idemgate binary (default: %(default)s)")
    p.add_argument("--b", default=run.IDEMGATE, help="B's idemgate binary (default: %(default)s)")
    p.add_argument("--a-env", action="append", default=[], metavar="NAME=VALUE", help="added to A's environment")
    p.add_argument("--b-env", action="append", default=[], metavar="NAME=VALUE", help="added to B's environment")
    p.add_argument("--a-name", default="A", help="A's name in the report (default: %(default)s)")
    p.add_argument("--b-name", default="B", help="B's name in the report (default: %(default)s)")
    p.add_argument("--scenario", choices=list(SCENARIOS), default="first",
                   help="first: a fresh random key per request; replays: 100 executed keys; mix: half each; "
                        "passthrough: the HTTP path alone (a read route, no ledger)")
    p.add_argument("--pairs", type=int, default=3, help="A then B, or B then A (default: %(default)s)")
    p.add_argument("--rounds", type=int, default=4,
                   help="wrk runs per side and pair, on the same ledger (default: %(default)s)")
    p.add_argument("--wal-map", action="store_true",
                   help="after each side's last round, what its commits wrote: pages per commit, per table and index")
    p.add_argument("--seconds", type=int, default=10, help="length of each wrk run (default: %(default)s)")
    args = p.parse_args()
    if args.a_name == args.b_name:
        raise SystemExit("ab: --a-name and --b-name must differ")
    if min(args.pairs, args.rounds, args.seconds) < 1:
        raise SystemExit("ab: --pairs, --rounds and --seconds must be at least 1")
    sides = {args.a_name: (os.path.abspath(args.a), env_pairs(args.a_env)),
             args.b_name: (os.path.abspath(args.b), env_pairs(args.b_env))}
    for binary, _ in sides.values():
        if not os.access(binary, os.X_OK):
            raise SystemExit(f"ab: {binary} is not an executable")
    labels = [args.a_name, args.b_name]
    ids = {label: identity(*sides[label]) for label in labels}
    os.makedirs(run.OUT, exist_ok=True)
    work = tempfile.mkdtemp(prefix="idemgate-ab-")
    script = os.path.join(work, "load.lua")
    with open(script, "w") as f:
        f.write(run.WRK_SCRIPT)
    stack = run.Stack(work)
    results = []
    try:
        stack.start_upstream()
        for pair in range(args.pairs):
            results.append(pair_run(stack, sides, args, pair, script))
    finally:
        stack.stop()
        shutil.rmtree(work, ignore_errors=True)
    md = report(args, labels, ids, results)
    with open(os.path.join(run.OUT, "ab.md"), "w") as f:
        f.write(md)
    with open(os.path.join(run.OUT, "ab.json"), "w") as f:
        json.dump({"args": vars(args), "sides": ids, "pairs": results}, f, indent=2)
    print(md)
    check(labels, results, args.scenario)


if __name__ == "__main__":
    main()
