"""idemgate's MCP gateway mode with clients and a server no one here wrote: the official MCP Python
SDK's server (server.py) behind `idemgate serve`, called by the official Python SDK's client (over
the 2025-11-25 session handshake and the 2026-07-28 stateless revision) and by the official
TypeScript SDK's client (client.mjs).

Each scenario checks what the server did (its own count of charges) and what the ledger holds.
Prints one line per scenario and `mcp-sdk: N passed, M failed`; exits non-zero on any failure.

Usage: python sdk_test.py IDEMGATE_BIN   (run by tests/mcp/run.sh, which installs the SDKs)
"""

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import traceback
import urllib.request

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from py_support import eventually_async, listening_on, serve_listening  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TOKEN = "mcp-sdk-test-admin-token-0123456789"


class Stack:
    """The SDK's server on one port, `idemgate serve` in front of it on another."""

    def __init__(self, idemgate: str):
        self.dir = tempfile.mkdtemp(prefix="idemgate-mcp-")
        log = os.path.join(self.dir, "server.log")
        self.server = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "server.py")],
            stdout=open(log, "w"),
            stderr=subprocess.STDOUT,
        )
        self.up_port = listening_on(self.server, log, "the MCP server")
        self.ledger = os.path.join(self.dir, "ledger.db")
        cfg = os.path.join(self.dir, "idemgate.toml")
        with open(cfg, "w") as f:
            f.write(f"""
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
ledger = "{self.ledger}"

[defaults]
lease = "30s"

[[routes]]
name = "tools"
path = "/mcp"
upstream = "http://127.0.0.1:{self.up_port}"
protocol = "mcp"
scope.header = "X-Agent-Id"
timeout = "20s"
upstream_auth = {{ secret_env = "PAYMENTS_TOKEN", header = "Authorization" }}

[routes.tools."charge".approval]
when = 'args.amount > 50000'
hold = "200ms"

[routes.tools."slow_charge".approval]
when = 'args.seconds > 100'
expires = "1s"
hold = "100ms"
""")
        self.idemgate = idemgate
        self.proxy = subprocess.Popen(
            [idemgate, "serve", "--config", cfg],
            env={**os.environ, "IDEMGATE_ADMIN_TOKEN": TOKEN, "IDEMGATE_LOG": "info",
                 "PAYMENTS_TOKEN": "Bearer sk_test_mcp"},
            stdout=subprocess.PIPE,
            text=True,
            stderr=open(os.path.join(self.dir, "serve.log"), "w"),
        )
        self.port, self.admin_port = serve_listening(self.proxy)
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    def entries(self, **query) -> list:
        q = "&".join(f"{k}={v}" for k, v in query.items())
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.admin_port}/admin/v1/entries?{q}",
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        with urllib.request.urlopen(req) as r:
            return json.load(r)["entries"]

    def decide(self, entry_id: int, verdict: str, reason: str) -> None:
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.admin_port}/admin/v1/approvals/{entry_id}/{verdict}",
            data=json.dumps({"operator": "olga", "reason": reason}).encode(),
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req) as r:
            assert r.status == 200, r.status

    def show(self, entry_id: int) -> str:
        out = subprocess.run(
            [self.idemgate, "show", "--ledger", self.ledger, str(entry_id)],
            capture_output=True, text=True, check=True,
        )
        return out.stdout

    def stop(self) -> None:
        for p in (self.proxy, self.server):
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


def client(stack: Stack, mode: str, agent: str = "py-agent", timeout: float | None = None) -> Client:
    http = create_mcp_http_client(headers={"X-Agent-Id": agent})
    return Client(
        streamable_http_client(stack.url, http_client=http),
        mode=mode,
        read_timeout_seconds=timeout,
    )


def text(result) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


async def effects(stack: Stack, mode: str, order: str) -> int:
    async with client(stack, mode) as c:
        r = await c.call_tool("effects", {"order": order})
        return int(text(r))


async def retried_charge_runs_once(stack: Stack, mode: str) -> None:
    order = f"ord-{mode}"
    args = {"order": order, "amount": 4999, "customer": "cus_123"}
    # An agent calls, loses the answer, restarts and calls again: a new session, a new id.
    async with client(stack, mode) as c:
        tools = {t.name for t in (await c.list_tools()).tools}
        assert {"charge", "slow_charge", "effects"} <= tools, tools
        first = await c.call_tool("charge", args)
    async with client(stack, mode) as c:
        again = await c.call_tool("charge", args)
    assert not first.is_error, first
    assert text(first) == text(again), (text(first), text(again))
    assert f"ch_{order}_1" in text(again), text(again)
    assert await effects(stack, mode, order) == 1
    # A read passes through every time and leaves no entry.
    assert await effects(stack, mode, order) == 1
    assert not stack.entries(tool="effects"), stack.entries(tool="effects")
    # Replays answered off the writer are counted with a later batch: wait for the count.
    def replayed():
        mine = [e for e in stack.entries(tool="charge") if e["scope"] == "py-agent"]
        return any(e["replays"] >= 1 for e in mine)

    await eventually_async("the replay counted on the entry", replayed)


async def progress_is_streamed(stack: Stack, mode: str) -> None:
    seen = []

    async def progress(p, total, message):
        seen.append(p)

    async with client(stack, mode) as c:
        r = await c.call_tool(
            "slow_charge", {"order": f"prog-{mode}", "seconds": 0.2}, progress_callback=progress
        )
    assert not r.is_error, r
    assert seen and seen[0] == 1, seen


async def a_client_that_gives_up_does_not_cancel(stack: Stack, mode: str) -> None:
    order = f"gone-{mode}"
    args = {"order": order, "seconds": 1.5}
    try:
        async with client(stack, mode, timeout=0.3) as c:
            await c.call_tool("slow_charge", args)
        raise AssertionError("the call should have timed out")
    except AssertionError:
        raise
    except Exception:  # the SDK's timeout (an McpError, or a task group's wrapper of it)
        pass
    # The upstream finishes the call the client gave up on: its count reaches one.
    await eventually_async("the call ran to its end", lambda: ran_once(stack, mode, order))
    async with client(stack, mode) as c:
        r = await c.call_tool("slow_charge", args)
    assert f"ch_{order}_1" in text(r), text(r)
    assert await effects(stack, mode, order) == 1, "the retry was a replay"


async def ran_once(stack: Stack, mode: str, order: str) -> bool:
    n = await effects(stack, mode, order)
    assert n <= 1, f"{order} ran {n} times"
    return n == 1


async def two_agents_are_kept_apart(stack: Stack, mode: str) -> None:
    args = {"order": f"shared-{mode}", "amount": 5, "customer": "cus_9"}
    async with client(stack, mode, agent="agent-a") as c:
        await c.call_tool("charge", args)
    async with client(stack, mode, agent="agent-b") as c:
        r = await c.call_tool("charge", args)
    assert f"ch_shared-{mode}_2" in text(r), "each agent's call is its own: " + text(r)


def held_entry(result) -> int:
    """The entry a held call's tool result names."""
    t = text(result)
    assert result.is_error and t.startswith("held for approval by an operator, entry "), t
    return int(t.split("entry ", 1)[1].split(",", 1)[0])


async def a_large_charge_waits_for_an_operator(stack: Stack, mode: str) -> None:
    order = f"big-{mode}"
    args = {"order": order, "amount": 60000, "customer": "cus_7"}
    seen = []

    async def progress(p, total, message):
        seen.append(message)

    async with client(stack, mode) as c:
        entry = held_entry(await c.call_tool("charge", args, progress_callback=progress))
    assert seen and "held for approval" in (seen[0] or ""), seen
    assert await effects(stack, mode, order) == 0, "nothing ran before the approval"
    stack.decide(entry, "approve", "agreed with the customer")
    await eventually_async("the approved charge ran", lambda: ran_once(stack, mode, order))
    async with client(stack, mode) as c:
        r = await c.call_tool("charge", args)
    assert not r.is_error and f"ch_{order}_1" in text(r), text(r)
    assert await effects(stack, mode, order) == 1
    # Rejected: the agent is told why, and the charge never runs.
    order = f"no-{mode}"
    args = {"order": order, "amount": 90000, "customer": "cus_8"}
    async with client(stack, mode) as c:
        entry = held_entry(await c.call_tool("charge", args))
    stack.decide(entry, "reject", "not this customer")
    async with client(stack, mode) as c:
        r = await c.call_tool("charge", args)
    assert r.is_error and "not this customer" in text(r), text(r)
    assert await effects(stack, mode, order) == 0


async def an_undecided_charge_expires(stack: Stack, mode: str) -> None:
    order = f"late-{mode}"
    args = {"order": order, "seconds": 500}
    async with client(stack, mode) as c:
        held_entry(await c.call_tool("slow_charge", args))

    async def expired():
        async with client(stack, mode) as c:
            r = await c.call_tool("slow_charge", args)
        assert r.is_error, text(r)
        return "no operator decided on this call in time" in text(r)

    await eventually_async("the held charge to expire", expired)
    assert await effects(stack, mode, order) == 0


def typescript_client(stack: Stack) -> None:
    out = subprocess.run(
        ["node", os.path.join(HERE, "client.mjs"), stack.url],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr + out.stdout
    v = json.loads(out.stdout.strip().splitlines()[-1])
    assert v["first"] == v["again"], v
    assert v["effects"] == 1, v
    assert v["timedOut"] is True, v
    assert v["afterTimeout"] == v["slowEffects"] == 1, v
    entry = next(e for e in stack.entries(tool="charge") if e["scope"] == "ts-agent")
    shown = stack.show(entry["id"])
    assert "tools · charge" in shown, shown
    assert '"order": "ts-1"' in shown, shown


def main() -> int:
    idemgate = sys.argv[1]
    stack = Stack(idemgate)
    passed = failed = 0
    scenarios = []
    for mode in ["legacy", "2026-07-28"]:
        for s in (retried_charge_runs_once, progress_is_streamed,
                  a_client_that_gives_up_does_not_cancel, two_agents_are_kept_apart,
                  a_large_charge_waits_for_an_operator, an_undecided_charge_expires):
            scenarios.append((f"python {mode}: {s.__name__}", lambda s=s, m=mode: asyncio.run(s(stack, m))))
    scenarios.append(("typescript 2025-11-25: retried charge, timeout", lambda: typescript_client(stack)))
    try:
        for name, run in scenarios:
            try:
                run()
                passed += 1
                print(f"ok    {name}", flush=True)
            except Exception:
                failed += 1
                print(f"FAIL  {name}\n{traceback.format_exc()}", flush=True)
    finally:
        stack.stop()
        if failed:
            for log in ("serve.log", "server.log"):
                print(f"--- {log}\n" + open(os.path.join(stack.dir, log)).read()[-4000:])
    print(f"mcp-sdk: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
