"""What the Python suites (tests/mcp, tests/otlp, tests/e2e) share: reading where a server told to
take any free port listens (`idemgate serve`, or one that prints `listening on ADDR`), and polling
for a condition with a deadline. Each suite puts this directory on its `sys.path`."""

import asyncio
import inspect
import json
import select
import subprocess
import time


def listening_on(proc: subprocess.Popen, log: str, what: str, seconds: float = 30) -> int:
    """Waits for the line `listening on ADDR` that a server told to take any free port (port 0)
    writes to the file `log`, and answers the port; fails when `proc` exits first or after
    `seconds`."""
    deadline = time.time() + seconds
    while True:
        with open(log, errors="replace") as f:
            for line in f:
                if line.startswith("listening on "):
                    return int(line.strip().rsplit(":", 1)[1])
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited before it listened: {proc.returncode}")
        if time.time() > deadline:
            raise RuntimeError(f"{what} did not listen within {seconds}s")
        time.sleep(0.05)


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
