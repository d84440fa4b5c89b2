"""What the benchmark reads of its own instances' /metrics: their series, and how the ledger's
write lock was used between two readings."""

import socket
import uuid

# The admin token of the benchmark's own instances (their /metrics report the write lock's use).
ADMIN_TOKEN = "bench-" + uuid.uuid4().hex


LOCK_SERIES = ["idemgate_ledger_commits_total", "idemgate_ledger_writes_total",
               "idemgate_ledger_write_lock_held_seconds_sum", "idemgate_ledger_write_lock_wait_seconds_sum"]


def scrape(port):
    """The /metrics response (head and body) of the instance whose admin API is on `port`."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(f"GET /metrics HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {ADMIN_TOKEN}\r\n"
                  "connection: close\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return data


def metrics(port):
    """The unlabelled series of the /metrics of the instance whose admin API is on `port`."""
    return parse_metrics(scrape(port))


def parse_metrics(data):
    """The unlabelled series of a /metrics response (its head and its body, as received)."""
    body = data.split(b"\r\n\r\n", 1)[-1]
    series = {}
    for line in body.decode(errors="replace").splitlines():
        parts = line.split()
        if len(parts) == 2 and not parts[0].startswith("#"):
            try:
                series[parts[0]] = float(parts[1])
            except ValueError:
                pass
    return series


# The writer's histograms that tell a slow commit (the disk) from a slow batch (its statements) when
# a request waited long: neither slow leaves the request path itself.
SLOW_SERIES = {"commit": "idemgate_ledger_commit_seconds", "batch": "idemgate_ledger_write_lock_held_seconds"}
SLOW = 0.1


def parse_buckets(data, name):
    """The cumulative counts of the histogram `name` in a /metrics response: {upper bound: count}."""
    head = f"{name}_bucket{{le=\""
    out = {}
    for line in data.split(b"\r\n\r\n", 1)[-1].decode(errors="replace").splitlines():
        if line.startswith(head):
            bound, count = line[len(head):].split("\"}", 1)
            out[float(bound)] = float(count)
    return out


def writer_buckets(port):
    """The writer's histograms (SLOW_SERIES) of the instance whose admin API is on `port`."""
    data = scrape(port)
    return {k: parse_buckets(data, name) for k, name in SLOW_SERIES.items()}


def slow_writes(h0, h1):
    """Between two writer_buckets: per histogram, how many took longer than SLOW seconds and the
    upper bound of the slowest bucket any fell in (None when none did)."""
    out = {}
    for k in SLOW_SERIES:
        d = {b: h1[k].get(b, 0.0) - h0[k].get(b, 0.0) for b in h1[k]}
        total = d.get(float("inf"), 0.0)
        within = max((c for b, c in d.items() if b <= SLOW), default=0.0)
        slowest = min((b for b, c in d.items() if c == total), default=None) if total > within else None
        out[k] = {"over": int(total - within), "slowest_s": slowest}
    return out


def slow_note(slow):
    """slow_writes' figures as a phrase."""
    def one(what, x):
        worst = "" if x["slowest_s"] is None else f", the slowest ≤ {x['slowest_s']:g} s"
        return f"{x['over']} {what} over {SLOW * 1000:g} ms{worst}"
    return f"{one('commits', slow['commit'])}, {one('batches', slow['batch'])}"


def slow_cell(slow):
    """slow_writes' figures as a table cell: commits / batches, each with its slowest bucket's
    bound; "–" for a target without a ledger writer of idemgate's."""
    if not slow:
        return "–"

    def one(x):
        return f"{x['over']}" + ("" if x["slowest_s"] is None else f" (≤ {x['slowest_s']:g} s)")
    return f"{one(slow['commit'])} / {one(slow['batch'])}"


def lock_counters(ports):
    """The write-lock series of the instances on admin `ports`, summed (None without any)."""
    if not ports:
        return None
    total = dict.fromkeys(LOCK_SERIES, 0.0)
    for port in ports:
        series = metrics(port)
        for k in LOCK_SERIES:
            total[k] += series.get(k, 0.0)
    return total


def gauge(port, name):
    """One gauge from the /metrics of the instance whose admin API is on `port`."""
    return metrics(port).get(name)


def lock_use(c0, c1):
    """What the write lock did between two lock_counters: jobs per batch, and per batch the time
    it held the lock and waited for it (ms)."""
    if c0 is None or c1 is None:
        return {}
    d = {k: c1[k] - c0[k] for k in LOCK_SERIES}
    commits = d["idemgate_ledger_commits_total"]
    if not commits:
        return {}
    return {"batches": commits, "jobs_per_batch": d["idemgate_ledger_writes_total"] / commits,
            "lock_held_ms": d["idemgate_ledger_write_lock_held_seconds_sum"] * 1000 / commits,
            "lock_wait_ms": d["idemgate_ledger_write_lock_wait_seconds_sum"] * 1000 / commits}


def lock_note(r, sep):
    """How a run's write batches used the ledger's write lock, after `sep`; "" without figures."""
    if "lock_held_ms" not in r:
        return ""
    return (f"{sep}{r['jobs_per_batch']:.1f} jobs a batch, lock held {r['lock_held_ms']:.2f} ms, "
            f"waited {r['lock_wait_ms']:.2f} ms")
