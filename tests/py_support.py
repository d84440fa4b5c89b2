"""What the Python suites (tests/mcp, tests/otlp) share: a free port, waiting for a listener,
reading where `idemgate serve` listens, and polling for a condition with a deadline. Each suite
puts this directory on its `sys.path`."""

import asyncio
import inspect
import json
import select
import socket
import subprocess
import time


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port: int, what: str, proc: subprocess.Popen) -> None:
    """Waits until something listens on `port`; fails when `proc` exits first or after 30 s."""
    deadline = time.time() + 30
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited: {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on {port}")


def serve_addresses(proc: subprocess.Popen, seconds: float = 30) -> tuple:
    """Waits for the line `idemgate serve` prints on stdout once both its listeners are up, and
    answers their addresses (proxy, admin or None). A server told to listen on port 0 binds one
    the kernel picks and no one else holds, which a port picked here and let go cannot promise."""
    if not select.select([proc.stdout], [], [], seconds)[0]:
        raise RuntimeError(f"idemgate serve did not listen within {seconds}s")
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"idemgate serve exited before it listened: {proc.wait()}")
    at = json.loads(line)["listening"]
    return at["proxy"], at["admin"]


def serve_listening(proc: subprocess.Popen, seconds: float = 30) -> tuple:
    """[`serve_addresses`] as ports."""
    return tuple(None if addr is None else int(addr.rsplit(":", 1)[1])
                 for addr in serve_addresses(proc, seconds))


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
