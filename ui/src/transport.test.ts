import { HttpTransport } from "./transport";

describe("HttpTransport (the admin API)", () => {
  it("sends the bearer token and the CLI's filters as query parameters", async () => {
    const seen: [string, RequestInit | undefined][] = [];
    const fake = (async (url: string, init?: RequestInit) => {
      seen.push([url, init]);
      return new Response(JSON.stringify({ entries: [], next_before: null }), { status: 200 });
    }) as unknown as typeof fetch;
    const t = new HttpTransport("http://127.0.0.1:8701", "tok", fake);
    await t.entries({ state: null, stuck: true, collisions: false, expired: false, expiring_within: null, duplicates: false, route: "charges", scope: null, key: null }, 42, 100);
    expect(seen[0][0]).toBe("http://127.0.0.1:8701/admin/v1/entries?stuck=true&route=charges&before=42&limit=100");
    expect((seen[0][1]?.headers as Record<string, string>).authorization).toBe("Bearer tok");
  });

  it("turns problem+json into an ErrorBody with the stable code", async () => {
    const fake = (async () => new Response(JSON.stringify({ code: "missing-reason", detail: "a reason is required" }), { status: 400 })) as unknown as typeof fetch;
    const t = new HttpTransport("http://x", "tok", fake);
    await expect(t.resolve({ entry_id: 1, as: "released", response: null, external_ref: null, operator: "o", reason: "", confirm_destructive: false })).rejects.toEqual({ code: "missing-reason", message: "a reason is required" });
  });
});
