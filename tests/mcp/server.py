"""A payments MCP server built with the official MCP Python SDK, for idemgate's tests: it counts
its side effects, so a test can tell a replay from a second charge.

Tools: `charge` (no annotations: destructive by the spec's defaults), `slow_charge` (reports
progress, and charges only at its end, after `seconds`), and `effects` (read-only: how many times
an order was charged).
"""

import argparse
import asyncio
import socket

import uvicorn

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations

charged: dict[str, int] = {}

server = MCPServer("payments")


@server.tool()
def charge(order: str, amount: int, customer: str) -> dict:
    """Charges a customer for an order."""
    charged[order] = charged.get(order, 0) + 1
    return {"charge": f"ch_{order}_{charged[order]}", "amount": amount, "customer": customer}


@server.tool()
async def slow_charge(order: str, seconds: float, ctx: Context) -> dict:
    """Charges after a while, reporting progress."""
    await ctx.report_progress(1, 2)
    await asyncio.sleep(seconds)
    charged[order] = charged.get(order, 0) + 1
    await ctx.report_progress(2, 2)
    return {"charge": f"ch_{order}_{charged[order]}"}


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def effects(order: str) -> int:
    """How many times an order was charged."""
    return charged.get(order, 0)


async def serve(port: int, stateless: bool) -> None:
    """The SDK's streamable HTTP app under uvicorn (what `server.run` does), on a socket bound here
    so that port 0 can be asked for: the line `listening on ADDR` says which port it got."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", port))
    # Listening before it says so: a connection that comes before uvicorn accepts waits its turn.
    sock.listen(128)
    print(f"listening on 127.0.0.1:{sock.getsockname()[1]}", flush=True)
    app = server.streamable_http_app(stateless_http=stateless, host="127.0.0.1")
    config = uvicorn.Config(app, log_level=server.settings.log_level.lower())
    await uvicorn.Server(config).serve(sockets=[sock])


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--stateless", action="store_true")
    a = p.parse_args()
    asyncio.run(serve(a.port, a.stateless))
