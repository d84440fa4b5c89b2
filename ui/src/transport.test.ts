import { HttpTransport, TauriTransport } from "./transport";

describe("HttpTransport (the admin API)", () => {
  it("sends the bearer token and the CLI's filters as query parameters", async () => {
    const seen: [string, RequestInit | undefined][] = [];
    const fake = (async (url: string, init?: RequestInit) => {
      seen.push([url, init]);
      return new Response(JSON.stringify({ entries: [], next_before: null }), { status: 200 });
    }) as unknown as typeof fetch;
    const t = new HttpTransport("http://127.0.0.1:8701", "tok", fake);
    await t.ops.entries({ state: null, stuck: true, collisions: false, route: "charges", before: 42, limit: 100 });
    expect(seen[0][0]).toBe("http://127.0.0.1:8701/admin/v1/entries?stuck=true&route=charges&before=42&limit=100");
    expect((seen[0][1]?.headers as Record<string, string>).authorization).toBe("Bearer tok");
  });

  it("puts a request's path parameters in the route and the rest in the body, and refuses what only the desktop offers", async () => {
    const seen: [string, RequestInit | undefined][] = [];
    const fake = (async (url: string, init?: RequestInit) => {
      seen.push([url, init]);
      return new Response(JSON.stringify({}), { status: 200 });
    }) as unknown as typeof fetch;
    const t = new HttpTransport("http://x", "tok", fake);
    await t.ops.replay({ entry_id: 7, operator: "o", reason: "r", confirm_destructive: true });
    await t.ops.show({ entry_id: 8 });
    expect(seen.map(([u, i]) => `${i?.method} ${u} ${i?.body ?? ""}`.trim())).toEqual([
      'POST http://x/admin/v1/entries/7/replay {"operator":"o","reason":"r","confirm_destructive":true}',
      "GET http://x/admin/v1/entries/8",
    ]);
    await expect(t.ops.archive_segments({ path: "/var/lib/idemgate/archive" })).rejects.toMatchObject({ code: "unsupported" });
    expect(seen).toHaveLength(2);
  });

  it("asks the server where its proxy listens", async () => {
    const seen: string[] = [];
    const fake = (async (url: string) => {
      seen.push(url);
      return new Response(JSON.stringify({ version: "0.1.0", proxy_addr: "0.0.0.0:8700", admin_addr: "127.0.0.1:8701", ledger: "/var/lib/idemgate.db" }), { status: 200 });
    }) as unknown as typeof fetch;
    const t = new HttpTransport("http://127.0.0.1:8701", "tok", fake);
    expect(await t.proxyStatus()).toEqual({ running: true, config: null, proxy_addr: "0.0.0.0:8700", admin_addr: "http://127.0.0.1:8701", error: null });
    expect(seen).toEqual(["http://127.0.0.1:8701/admin/v1/server"]);
  });

  it("names the server's ledger, or the server and why it cannot", async () => {
    let status = 200;
    const fake = (async () => new Response(JSON.stringify(status === 200 ? { version: "0.1.0", proxy_addr: "127.0.0.1:8700", admin_addr: "127.0.0.1:8701", ledger: "postgres://idemgate@db/idemgate" } : { code: "unauthorized", detail: "a valid admin token is required" }), { status })) as unknown as typeof fetch;
    const t = new HttpTransport("http://127.0.0.1:8701", "tok", fake);
    expect(await t.ledgerInfo()).toEqual({ location: "postgres://idemgate@db/idemgate (idemgate serve at http://127.0.0.1:8701)", error: null });
    status = 401;
    expect(await t.ledgerInfo()).toEqual({ location: "idemgate serve at http://127.0.0.1:8701", error: { code: "unauthorized", message: "a valid admin token is required" } });
  });

  it("turns problem+json into an ErrorBody with the stable code", async () => {
    const fake = (async () => new Response(JSON.stringify({ code: "missing-reason", detail: "a reason is required" }), { status: 400 })) as unknown as typeof fetch;
    const t = new HttpTransport("http://x", "tok", fake);
    await expect(t.ops.resolve({ entry_id: 1, as: "released", response: null, external_ref: null, operator: "o", reason: "", confirm_destructive: false })).rejects.toEqual({ code: "missing-reason", message: "a reason is required" });
  });

  it("exports as a job on the server, then saves the file and its manifest under their own names", async () => {
    const manifest = { manifest_version: 1, format: "ndjson", alg: "sha256", file: "idemgate-export-ab12.ndjson", sha256: "00", bytes: 3, count: 2, first_seq: 1, last_seq: 2, first_prev_hash: null, chain_head: null, ledger_head: null, since: null, until: null, created_at: "t", ledger: "l" };
    const job = (state: string, done: number) => ({ id: "ab12", state, format: "ndjson", since: null, until: null, created_at: "t", ended_at: null, expires_at: null, done, manifest: state === "done" ? manifest : null, error: null, file_url: state === "done" ? "/admin/v1/exports/ab12/file" : null, manifest_url: state === "done" ? "/admin/v1/exports/ab12/manifest" : null });
    const seen: string[] = [];
    let polls = 0;
    const fake = (async (url: string, init?: RequestInit) => {
      const path = url.replace("http://x", "");
      seen.push(`${init?.method} ${path} ${init?.body ?? ""}`.trim());
      if (path === "/admin/v1/exports") return new Response(JSON.stringify(job("running", 0)), { status: 202 });
      if (path === "/admin/v1/exports/ab12") return new Response(JSON.stringify(++polls < 2 ? job("running", 4096) : job("done", 2)), { status: 200 });
      if (path.endsWith("/file")) return new Response("{}\n{}\n", { status: 200 });
      return new Response(JSON.stringify(manifest), { status: 200 });
    }) as unknown as typeof fetch;
    const saved: [string, string][] = [];
    const t = new HttpTransport("http://x", "tok", fake, (name, blob) => void blob.text().then((b) => saved.push([name, b])), 1);
    const progress: number[] = [];
    await t.onProgress((p) => { if (p.job === "j1") progress.push(p.done); });
    const m = await t.exportFile("events", { format: "ndjson", range: { since: 1795168800000, until: null }, path: "/not/sent", overwrite: true }, "j1");
    expect(m).toEqual(manifest);
    expect(seen[0]).toBe('POST /admin/v1/exports {"what":"events","format":"ndjson","since":1795168800000,"until":null}');
    expect(seen.slice(1)).toEqual(["GET /admin/v1/exports/ab12", "GET /admin/v1/exports/ab12", "GET /admin/v1/exports/ab12/file", "GET /admin/v1/exports/ab12/manifest"]);
    expect(progress).toEqual([0, 4096, 2]);
    await new Promise((r) => setTimeout(r, 10));
    expect(saved).toEqual([["idemgate-export-ab12.ndjson", "{}\n{}\n"], ["idemgate-export-ab12.ndjson.manifest.json", JSON.stringify(manifest)]]);
  });

  it("cancels an export by deleting it on the server, and says it was cancelled", async () => {
    const seen: string[] = [];
    const running = { id: "cd34", state: "running", format: "csv", since: null, until: null, created_at: "t", ended_at: null, expires_at: null, done: 0, manifest: null, error: null, file_url: null, manifest_url: null };
    const fake = (async (url: string, init?: RequestInit) => {
      seen.push(`${init?.method} ${url.replace("http://x", "")}`);
      if (init?.method === "DELETE") return new Response(null, { status: 204 });
      return new Response(JSON.stringify(running), { status: init?.method === "POST" ? 202 : 200 });
    }) as unknown as typeof fetch;
    const t = new HttpTransport("http://x", "tok", fake, () => { throw new Error("nothing to save"); }, 5);
    const done = t.exportFile("entries", { format: "csv", range: { since: null, until: null }, path: "", overwrite: false }, "j2");
    await new Promise((r) => setTimeout(r, 20));
    expect(await t.cancelJob("j2")).toBe(true);
    expect(await done).toBeNull();
    expect(seen).toContain("DELETE /admin/v1/exports/cd34");
    expect(await t.cancelJob("j2")).toBe(false);
  });

  it("cancels a verify or a purge by dropping its request (the server stops it), and says it was cancelled", async () => {
    const seen: string[] = [];
    // A server still verifying: it answers only when the request is dropped, with the error a dropped fetch gives.
    const fake = ((url: string, init?: RequestInit) => {
      seen.push(`${init?.method} ${url.replace("http://x", "")}`);
      return new Promise<Response>((_, reject) => init?.signal?.addEventListener("abort", () => reject(new DOMException("aborted", "AbortError"))));
    }) as unknown as typeof fetch;
    const t = new HttpTransport("http://x", "tok", fake);
    const ledger = t.ops.verify_ledger({}, "v1");
    const manifest = { manifest_version: 1, format: "ndjson", alg: "sha256", file: "f.ndjson", sha256: "00", bytes: 3, count: 2, first_seq: 1, last_seq: 2, first_prev_hash: null, chain_head: null, ledger_head: null, since: null, until: null, created_at: "t", ledger: "l" } as const;
    const against = t.ops.verify_against_manifest(manifest, "v2");
    await new Promise((r) => setTimeout(r, 5));
    expect(seen).toEqual(["GET /admin/v1/verify", "POST /admin/v1/verify/against"]);
    expect(await t.cancelJob("v1")).toBe(true);
    expect(await ledger).toBeNull();
    expect(await t.cancelJob("v1")).toBe(false);
    expect(await t.cancelJob("v2")).toBe(true);
    expect(await against).toBeNull();
    const purge = t.ops.purge({ target: "expired", filter: { state: null, stuck: false, collisions: false, expired: true, expiring_within: null, duplicates: false, route: null, scope: null, key: null, tool: null, subject: null, search: null }, operator: "o", reason: "r", confirm_destructive: false }, "p1");
    await new Promise((r) => setTimeout(r, 5));
    expect(seen[2]).toBe("POST /admin/v1/purge");
    expect(await t.cancelJob("p1")).toBe(true);
    expect(await purge).toBeNull();
  });

  it("gives a verify's report, and its failure, as they come when nobody cancels", async () => {
    const report = { ok: true, alg: "sha256", count: 2, first_seq: 1, head: null, first_bad_seq: null, problem: null, cancelled: false };
    let fail = false;
    const fake = (async () => (fail ? new Response(JSON.stringify({ code: "ledger-unavailable", detail: "disk gone" }), { status: 503 }) : new Response(JSON.stringify(report), { status: 200 }))) as unknown as typeof fetch;
    const t = new HttpTransport("http://x", "tok", fake);
    expect(await t.ops.verify_ledger({}, "v3")).toEqual(report);
    fail = true;
    await expect(t.ops.verify_ledger({}, "v4")).rejects.toEqual({ code: "ledger-unavailable", message: "disk gone" });
    expect(await t.cancelJob("v4")).toBe(false);
  });

  it("asks for a verify's or a purge's answer as it goes: each progress line reported, then its result or its problem", async () => {
    const report = { ok: true, alg: "sha256", count: 8200, first_seq: 1, head: null, first_bad_seq: null, problem: null, cancelled: false };
    const accepts: (string | undefined)[] = [];
    let last = JSON.stringify({ result: report });
    const fake = (async (_url: string, init?: RequestInit) => {
      accepts.push((init?.headers as Record<string, string>).accept);
      // Lines cut across chunks, as the network may deliver them.
      const text = `{"progress":4096}\n{"progress":8192}\n{"progress":8200}\n${last}\n`;
      const bytes = new TextEncoder().encode(text);
      const body = new ReadableStream<Uint8Array>({
        start(c) {
          c.enqueue(bytes.slice(0, 10));
          c.enqueue(bytes.slice(10, 40));
          c.enqueue(bytes.slice(40));
          c.close();
        },
      });
      return new Response(body, { status: 200, headers: { "content-type": "application/x-ndjson" } });
    }) as unknown as typeof fetch;
    const t = new HttpTransport("http://x", "tok", fake);
    const heard: string[] = [];
    await t.onProgress((p) => heard.push(`${p.job} ${p.done}`));
    expect(await t.ops.verify_ledger({}, "v5")).toEqual(report);
    expect(heard).toEqual(["v5 4096", "v5 8192", "v5 8200"]);
    expect(accepts).toEqual(["application/x-ndjson"]);
    last = JSON.stringify({ problem: { code: "ledger-unavailable", detail: "disk gone", status: 503 } });
    await expect(t.ops.verify_ledger({}, "v6")).rejects.toEqual({ code: "ledger-unavailable", message: "disk gone" });
    last = "";
    await expect(t.ops.verify_ledger({}, "v7")).rejects.toEqual({ code: "network", message: "the answer ended before its result" });
  });

  it("cancels a purge whose answer has begun, and says it was cancelled after what it heard", async () => {
    const fake = (async (_url: string, init?: RequestInit) => {
      const body = new ReadableStream<Uint8Array>({
        start(c) {
          c.enqueue(new TextEncoder().encode(`{"progress":1000}\n`));
          init?.signal?.addEventListener("abort", () => c.error(new DOMException("aborted", "AbortError")));
        },
      });
      return new Response(body, { status: 200, headers: { "content-type": "application/x-ndjson" } });
    }) as unknown as typeof fetch;
    const t = new HttpTransport("http://x", "tok", fake);
    const heard: number[] = [];
    await t.onProgress((p) => heard.push(p.done));
    const purge = t.ops.purge({ target: "expired", filter: { state: null, stuck: false, collisions: false, expired: true, expiring_within: null, duplicates: false, route: null, scope: null, key: null, tool: null, subject: null, search: null }, operator: "o", reason: "r", confirm_destructive: false }, "p2");
    await new Promise((r) => setTimeout(r, 5));
    expect(heard).toEqual([1000]);
    expect(await t.cancelJob("p2")).toBe(true);
    expect(await purge).toBeNull();
  });

  it("gives a failed export's error", async () => {
    const failed = { id: "ef56", state: "failed", format: "csv", since: null, until: null, created_at: "t", ended_at: "t", expires_at: "t", done: 0, manifest: null, error: { code: "ledger-unavailable", message: "disk gone" }, file_url: null, manifest_url: null };
    const fake = (async () => new Response(JSON.stringify(failed), { status: 202 })) as unknown as typeof fetch;
    const t = new HttpTransport("http://x", "tok", fake, () => undefined, 1);
    await expect(t.exportFile("entries", { format: "csv", range: { since: null, until: null }, path: "", overwrite: false }, "j3")).rejects.toEqual({ code: "ledger-unavailable", message: "disk gone" });
  });
});

describe("TauriTransport (the desktop console)", () => {
  it("runs an operation of the command table through the console's call command, with its job", async () => {
    const seen: [string, unknown][] = [];
    let typed = "";
    const t = new TauriTransport(async (cmd, args) => { seen.push([cmd, args]); return null; }, async () => () => {}, () => typed);
    const cmd = { target: "ids" as const, ids: [7], operator: "o", reason: "r", confirm_destructive: false };
    await t.ops.purge(cmd, "p1");
    typed = " dana ";
    await t.ops.stats({ hours: 24 });
    await t.ledgerInfo();
    await t.cancelJob("p1");
    // Each call carries the name typed in the header, when there is one.
    expect(seen).toEqual([
      ["call", { name: "purge", args: cmd, job: "p1", operator: null }],
      ["call", { name: "stats", args: { hours: 24 }, job: null, operator: "dana" }],
      ["ledger_info", undefined],
      ["cancel_job", { job: "p1" }],
    ]);
  });
});

