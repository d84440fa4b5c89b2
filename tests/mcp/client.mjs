// An agent on the official MCP TypeScript SDK, through idemgate: it charges, loses the session and
// charges again (a new session, a new request id), and gives up on a slow charge (the SDK then
// sends notifications/cancelled) before calling it again. Prints what it saw as one JSON line.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const url = new URL(process.argv[2]);

async function session() {
  const client = new Client({ name: "ts-agent", version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(url, {
    requestInit: { headers: { "X-Agent-Id": "ts-agent" } },
  });
  await client.connect(transport);
  return { client, close: async () => { await transport.terminateSession(); await client.close(); } };
}

const text = (r) => r.content.map((c) => c.text ?? "").join("");
const args = { order: "ts-1", amount: 1200, customer: "cus_ts" };
const out = {};

let s = await session();
await s.client.listTools();
out.first = text(await s.client.callTool({ name: "charge", arguments: args }));
await s.close();

s = await session();
out.again = text(await s.client.callTool({ name: "charge", arguments: args }));
out.effects = Number(text(await s.client.callTool({ name: "effects", arguments: { order: "ts-1" } })));

const slow = { order: "ts-slow", seconds: 1.5 };
try {
  await s.client.callTool({ name: "slow_charge", arguments: slow }, undefined, { timeout: 300 });
  out.timedOut = false;
} catch (e) {
  out.timedOut = true;
}
await new Promise((r) => setTimeout(r, 2500));
out.slowEffects = Number(text(await s.client.callTool({ name: "effects", arguments: { order: "ts-slow" } })));
const replayed = text(await s.client.callTool({ name: "slow_charge", arguments: slow }));
out.afterTimeout = Number(text(await s.client.callTool({ name: "effects", arguments: { order: "ts-slow" } })));
out.replayed = replayed;
await s.close();
console.log(JSON.stringify(out));
