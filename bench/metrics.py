"""What the benchmark reads of its own instances' /metrics: their series, and how the ledger's
write lock was used between two readings."""

import socket
import uuid

# The admin token of the benchmark's own instances (their /metrics report the write lock's use).
ADMIN_TOKEN = "bench-" + uuid.uuid4().hex


LOCK_SERIES = ["idemgate_ledger_commits_total", "idemgate_ledger_writes_total",
               "idemgate_ledger_write_lock_held_seconds_sum", "idemgate_ledger_write_lock_wait_seconds_sum"]


def metrics(port):
    """The unlabelled series of the /metrics of the instance whose admin API is on `port`."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(f"GET /metrics HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {ADMIN_TOKEN}\r\n"
                  "connection: close\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return parse_metrics(data)


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
