"""A payments MCP server built with the official MCP Python SDK, for idemgate's tests: it counts
its side effects, so a test can tell a replay from a second charge.

Tools: `charge` (no annotations: destructive by the spec's defaults), `slow_charge` (reports
progress, and charges only at its end, after `seconds`), and `effects` (read-only: how many times
an order was charged).
"""

import argparse
import asyncio

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


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--stateless", action="store_true")
    a = p.parse_args()
    server.run(transport="streamable-http", host="127.0.0.1", port=a.port, stateless_http=a.stateless)
