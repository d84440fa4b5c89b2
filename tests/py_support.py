"""What the Python suites (tests/mcp, tests/otlp, tests/e2e) and the benchmark (bench/host.py) share:
picking a port for a server that cannot take any free port and say which, reading where one that
can listens (`idemgate serve`, or one that prints `listening on ADDR`), and polling for a condition
with a deadline. Each puts this directory on its `sys.path`."""

import asyncio
import inspect
import json
import random
import select
import socket
import subprocess
import time


_GIVEN = set()


def free_port() -> int:
    """A port free now, below the kernel's range of ephemeral ports, that this process has not
    handed out before: for a server that cannot be told to take any free port and say which. A port
    in that range may be given to any connection made before the server binds it; one below it is
    only ever bound by name."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
    span = low // 2
    start = random.randrange(span)
    for i in range(span):
        port = low - span + (start + i) % span
        if port in _GIVEN:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _GIVEN.add(port)
        return port
    raise RuntimeError(f"no free port below {low}")


def wait_line(proc: subprocess.Popen, log: str, what: str, parse, seconds: float = 30):
    """Waits for the first line `proc` writes to the file `log` that `parse` makes something of
    (not None), and answers that; fails when `proc` exits first or after `seconds`."""
    deadline = time.time() + seconds
    while True:
        with open(log, errors="replace") as f:
            for line in f:
                got = parse(line)
                if got is not None:
                    return got
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited before it listened: {proc.returncode}")
        if time.time() > deadline:
            raise RuntimeError(f"{what} did not say where it listens within {seconds}s")
        time.sleep(0.05)


def listening_port(line: str):
    """The port in a `listening on ADDR` line (the MCP test server's, bare-proxy's, the fleet's
    relay's), or None for any other line."""
    if not line.startswith("listening on "):
        return None
    return int(line.strip().rsplit(":", 1)[1])


def serve_line(line: str):
    """The proxy's and the admin API's addresses (the admin's None when off) from `idemgate serve`'s
    `listening` line, or None for any other line."""
    try:
        at = json.loads(line)["listening"]
        return at["proxy"], at["admin"]
    except (ValueError, KeyError, TypeError):
        return None


def serve_ports(line: str):
    """[`serve_line`] as ports."""
    at = serve_line(line)
    return None if at is None else tuple(map(_port, at))


def _port(addr):
    return None if addr is None else int(addr.rsplit(":", 1)[1])


def listening_on(proc: subprocess.Popen, log: str, what: str, seconds: float = 30) -> int:
    """Waits for the line `listening on ADDR` that a server told to take any free port (port 0)
    writes to the file `log`, and answers the port."""
    return wait_line(proc, log, what, listening_port, seconds)


def serve_addresses(proc: subprocess.Popen, seconds: float = 30) -> tuple:
    """Waits for the line `idemgate serve` prints on stdout once both its listeners are up, and
    answers their addresses (proxy, admin or None). A server told to listen on port 0 binds one
    the kernel picks and no one else holds, which a port picked here and let go cannot promise."""
    if not select.select([proc.stdout], [], [], seconds)[0]:
        raise RuntimeError(f"idemgate serve did not listen within {seconds}s")
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"idemgate serve exited before it listened: {proc.wait()}")
    at = serve_line(line)
    if at is None:
        raise RuntimeError(f"idemgate serve said {line!r}, not where it listens")
    return at


def serve_listening(proc: subprocess.Popen, seconds: float = 30) -> tuple:
    """[`serve_addresses`] as ports."""
    return tuple(map(_port, serve_addresses(proc, seconds)))


def eventually(what: str, check, seconds: float = 30):
    """Polls `check` until it gives a true value, and returns it; fails after `seconds`."""
    deadline = time.time() + seconds
    while True:
        got = check()
        if got:
            return got
        if time.time() > deadline:
            raise AssertionError(f"{what}: not within {seconds}s")
        time.sleep(0.05)


async def eventually_async(what: str, check, seconds: float = 30):
    """`eventually` on an event loop: `check` may be a function or one that awaits."""
    deadline = time.time() + seconds
    while True:
        got = check()
        if inspect.isawaitable(got):
            got = await got
        if got:
            return got
        if time.time() > deadline:
            raise AssertionError(f"{what}: not within {seconds}s")
        await asyncio.sleep(0.05)
