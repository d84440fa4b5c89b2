"""The benchmark's report: the rows' names, the Markdown tables of a run's results, and the checks a
run must pass (no errors where none may be)."""

import statistics

from metrics import slow_cell

PEER_NAME = "idempotent-proxy-server"
# The same peer with its Redis as durable as idemgate's ledger: every write fsync'd before the
# answer (`appendfsync always`).
PEER_DURABLE = "idempotent-proxy-server, Redis fsync always"
PG = "idemgate (PostgreSQL)"
# idemgate on SQLite with [telemetry] on: a span per call, sent over OTLP to a sink that answers 200.
TRACED = "idemgate, spans over OTLP"
# Two `idemgate serve` instances sharing one PostgreSQL ledger, loaded at once (half the
# connections each): what a second instance adds to the first.
PG_TWO = "idemgate (PostgreSQL, 2 instances)"
# Reference rows, not contenders: what bounds the others on this machine. DIRECT is wrk against the
# static upstream itself (one hop, the cheapest answer any server here can give: the ceiling of a
# replay); BARE is a reverse proxy with nothing but the HTTP crates idemgate is built on (hyper's
# server and pooled client on tokio: the ceiling of idemgate's HTTP path); PASS_THROUGH is idemgate
# forwarding without its ledger (the ceiling of a first call with idemgate's HTTP path).
DIRECT = "upstream, direct (one hop)"
BARE = "hyper, bare proxy (tests/src/bin/bare-proxy.rs)"
PASS_THROUGH = "idemgate, pass-through (no ledger)"
REFERENCES = [DIRECT, BARE, PASS_THROUGH]


def median(values):
    """The median of the values that are not None (None when there are none)."""
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def fmt(v, spec):
    return "–" if v is None else format(v, spec)


def disk_cells(x):
    """A fixed-rate run's disk columns (disk_since's), formatted: MB written, ms a write, ms a flush."""
    return fmt(x["disk_mb"], ".0f"), fmt(x["disk_ms_per_write"], ".2f"), fmt(x["disk_ms_per_flush"], ".2f")


def ratio(a, b):
    return f"{a / b:.2f}×" if a and b else "–"


def scenario_table(lines, scenarios):
    """One table of wrk runs (scenario -> proxy -> medians), each row against nginx and the peer."""
    lines.append("| scenario | proxy | req/s | p50 ms | p99 ms | errors | CPU µs/req | vs nginx | "
                 "vs idempotent-proxy-server | vs idempotent-proxy-server, fsync always |")
    lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for sc, rows in scenarios.items():
        ngx, ips = rows["nginx"]["rps"], rows.get(PEER_NAME, {}).get("rps")
        durable = rows.get(PEER_DURABLE, {}).get("rps")
        for n, x in rows.items():
            name = f"*{n}*" if n in REFERENCES else n
            cpu = f"{x['cpu_us']:.0f}" if x.get("cpu_us") is not None else "–"
            lines.append(f"| {sc} | {name} | {x['rps']:.0f} | {x['p50_ms']:.2f} | {x['p99_ms']:.2f} | {x['errors']} | "
                         f"{cpu} | {ratio(x['rps'], ngx)} | {ratio(x['rps'], ips)} | {ratio(x['rps'], durable)} |")
    lines.append("")


def report(r):
    lines = []
    m = r["machine"]
    lines.append(f"Machine: {m['cpus']} CPUs ({m['cpu']}), Linux {m['kernel']}; {m['nginx']}; {m['wrk']}. "
                 f"wrk -t2 -c{r['connections']} -d{r['seconds']}s, {r['rounds']} alternating round(s), medians. "
                 f"The hypervisor took {r['proxies_steal']:.0%} of this VM's CPU time (steal) during the proxies' runs."
                 + (" **Smoke run: not a measurement.**" if r["smoke"] else ""))
    lines.append("")
    lines.append("CPU µs/req: the CPU time of the target's own processes per request (idempotent-proxy-server "
                 "with its redis-server, idemgate on PostgreSQL with the PostgreSQL server, nginx with its workers), "
                 "read from /proc over each run. The rows in italics are references, not contenders: "
                 f"*{DIRECT}* is the ceiling of any answer on this machine, *{BARE}* the ceiling of a proxy "
                 f"built on idemgate's HTTP crates, *{PASS_THROUGH}* the ceiling of a first call through "
                 "idemgate's HTTP path.")
    lines.append("")
    scenario_table(lines, r["scenarios"])
    s2 = r.get("shape2")
    if s2:
        lines.append(f"The second load shape: wrk -t2 -c{s2['connections']} -d{s2['seconds']}s, {r['rounds']} "
                     "alternating round(s), medians, for the rows the targets compare:")
        lines.append("")
        scenario_table(lines, s2["scenarios"])
    lines.append("The PostgreSQL ledger's write batches (from the instances' /metrics; medians of the runs): how "
                 "many jobs a batch carried, how long it held the write lock, which batches share (its statements "
                 "and its COMMIT), how long it waited for it and the rows it read ahead; and first calls against "
                 "the SQLite row:")
    lines.append("")
    lines.append("| scenario | target | jobs a batch | lock held ms a batch | lock wait ms a batch | req/s vs idemgate (SQLite) |")
    lines.append("|---|---|---:|---:|---:|---:|")
    for sc, rows in r["scenarios"].items():
        for n in [PG, PG_TWO]:
            x = rows.get(n, {})
            if "lock_held_ms" in x:
                lines.append(f"| {sc} | {n} | {x['jobs_per_batch']:.1f} | {x['lock_held_ms']:.2f} | "
                             f"{x['lock_wait_ms']:.2f} | {ratio(x['rps'], rows['idemgate']['rps'])} |")
    lines.append("")
    lines.append("Fixed 1,000 req/s (open loop, fresh keys), latency from the scheduled send time; and, as the "
                 f"floor under it, {r['sequential']:,} fresh-key requests one at a time on one connection (nothing "
                 "queued before any of them). Steal: the CPU time the hypervisor took from this VM during "
                 "that target's fixed-rate run. Disk: what the disk holding the ledgers did in that run "
                 "(/proc/diskstats, every process's I/O): MB written, and the mean time a write and a flush "
                 "(what an fsync waits for) took, queueing included. Writer: idemgate's ledger commits and write "
                 "batches in that run that took over 100 ms, with the bound of the slowest one's bucket (its "
                 "/metrics); a p99 far above the p50 with none was not a wait for the writer:")
    lines.append("")
    lines.append("| target | p50 ms | p99 ms | p99 added over direct | steal | disk: MB written | ms a write | "
                 "ms a flush | writer: slow commits / batches | one at a time: p50 ms | p99 ms | errors |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    d = r["rate"]["direct"]["p99_ms"]
    for n, x in r["rate"].items():
        name = f"*{n}*" if n in REFERENCES else n
        lines.append(f"| {name} | {x['p50_ms']:.3f} | {x['p99_ms']:.3f} | {x['p99_ms'] - d:+.3f} | {x['steal']:.1%} | "
                     f"{' | '.join(disk_cells(x))} | {slow_cell(x.get('slow_writes'))} | "
                     f"{x['alone_p50_ms']:.3f} | {x['alone_p99_ms']:.3f} | {x['errors']} |")
    lines.append("")
    a = r.get("approval")
    if a:
        lines.append(f"A call held for approval, {a['calls']} one after another: from the answer to the approval that "
                     "releases it (durable before it is answered) to the upstream receiving it, which the server "
                     "forwards itself (an approval through its own admin API wakes it at once):")
        lines.append("")
        lines.append("| path | p50 ms | p99 ms |")
        lines.append("|---|---:|---:|")
        lines.append(f"| approval → upstream | {a['p50_ms']:.1f} | {a['p99_ms']:.1f} |")
        lines.append("")
    t = r.get("tree")
    if t:
        lines.append(f"The log's Merkle tree on the {r['console']['events']:,}-event demo ledger below (each a whole "
                     "process: open the ledger, do it, exit; medians of 5), and how long the newest events waited for "
                     "the server's integrator as each first-calls run of idemgate ended (the largest of the rounds):")
        lines.append("")
        lines.append("| step | time |")
        lines.append("|---|---:|")
        lines.append(f"| integrate the whole log into a new tree | {t['integrate_s']:.1f} s |")
        lines.append(f"| `idemgate prove` of one event | {t['prove_ms']:.0f} ms |")
        lines.append(f"| `idemgate verify --proof` | {t['verify_proof_ms']:.0f} ms |")
        if t.get("lag_s") is not None:
            lines.append(f"| integrator lag under first calls | {t['lag_s']:.3f} s |")
        if t.get("pg_lag_s") is not None:
            lines.append(f"| integrator lag under first calls, PostgreSQL (its intake numbered first) | "
                         f"{t['pg_lag_s']:.3f} s |")
        lines.append("")
    c = r["console"]
    lines.append(f"Console data calls on a {c['events']:,}-event demo ledger ({c['ledger_mb']:.0f} MB, seeded in "
                 f"{c['demo_seconds']:.0f} s), medians of 5; steal during these calls {c['steal']:.0%}:")
    lines.append("")
    lines.append("| call | time |")
    lines.append("|---|---:|")
    for k, label in [("overview_stats_ms", "overview stats (24 h)"), ("entries_first_page_ms", "entries, first page"),
                     ("entries_next_page_ms", "entries, next page"), ("stuck_first_page_ms", "stuck, first page"),
                     ("log_first_page_ms", "log, first page"), ("log_search_ms", "log, filtered search (a key)"),
                     ("log_search_first_ms", "log, the first search (builds its skip index)"),
                     ("key_lookup_ms", "key lookup"), ("collision_diff_ms", "collision diff (entry view)"),
                     ("subject_search_ms", "subject search (a customer id: the console's search box)"),
                     ("subject_lookup_ms", "subject search by name (customer=cus_…)")]:
        if k in c:
            lines.append(f"| {label} | {c[k]:.1f} ms |")
    lines.append(f"| export of the newest {c['exported_events']:,} events (NDJSON) | {c['export_s']:.2f} s |")
    lines.append(f"| verify of all {c['events']:,} events | {c['verify_all_s']:.2f} s |")
    lines.append(f"| archive of the {c['archived_events']:,} older events ({c['archive_mb']:.0f} MB of segments) | {c['archive_s']:.2f} s |")
    lines.append(f"| verify of the whole history (segments + live log) | {c['verify_history_s']:.2f} s |")
    lines.append(f"| console backend peak RSS | {c['peak_rss_mb']:.0f} MB |")
    lines.append(f"| `idemgate serve` peak RSS under the load above | {r['serve_peak_rss_mb'] or 0:.0f} MB |")
    if r.get("ips_peak_rss_mb") is not None:
        lines.append(f"| idempotent-proxy-server peak RSS under the same load | {r['ips_peak_rss_mb']:.0f} MB |")
    lines.append("")
    return "\n".join(lines)


def check_scenarios(bad, shape, scenarios):
    """What check() requires of one table of wrk runs (`shape` prefixes each complaint)."""
    for sc, rows in scenarios.items():
        for n, x in rows.items():
            if x["rps"] <= 0:
                bad.append(f"{shape}{sc}/{n}: no requests")
            if not x.get("cpu_us"):
                bad.append(f"{shape}{sc}/{n}: no CPU time measured for its processes")
            if x["errors"] and (n.startswith("idemgate") or n in (DIRECT, BARE)):
                bad.append(f"{shape}{sc}/{n}: {x['errors']} errors")
            if n in (PG, PG_TWO) and "lock_held_ms" not in x:
                bad.append(f"{shape}{sc}/{n}: no write-lock series on the instances' /metrics")


def check(r):
    """The harness must have measured something real: every target answered and used CPU, and
    idemgate (and the upstream) without errors. Errors of the others are reported in the table, not
    fatal."""
    bad = []
    shapes = [("", r["scenarios"])] + ([(f"-c{r['shape2']['connections']} ", r["shape2"]["scenarios"])]
                                        if r.get("shape2") else [])
    for shape, scenarios in shapes:
        check_scenarios(bad, shape, scenarios)
    for n, x in r["rate"].items():
        if x["errors"] and (n.startswith("idemgate") or n == "direct"):
            bad.append(f"1k req/s {n}: {x['errors']} errors")
    if not r.get("approval", {}).get("calls"):
        bad.append("approval to upstream: no call measured")
    if bad:
        raise SystemExit("bench: " + "; ".join(bad))
    print("bench: ok")
