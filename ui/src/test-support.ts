// What the console's tests share: a fake IPC or admin API under a real App, and the DOM queries
// a user's eye makes.
import { App } from "./app";
import type { Prefs } from "./shell";
import { HttpTransport, TauriTransport } from "./transport";
import type { Action } from "./bindings/Action";
import type { ActionStanding } from "./bindings/ActionStanding";
import type { EntrySummary } from "./bindings/EntrySummary";

export function entry(id: number, over: Partial<EntrySummary> = {}): EntrySummary {
  return {
    id, route: "charges", scope: "agent-1", key: `key-${id}`, state: "pending", stuck: true, fingerprint: "ab", attempts: 1, replays: 0,
    created_at: 1_800_000_000_000, updated_at: 1_800_000_000_000, expires_at: null, effect: "write", lease_expires_at: 1_800_000_030_000,
    outcome_unknown: true, last_error: "upstream timeout", collisions: 0, duplicate_of: null, response_status: null, tool: null, subjects: [], ...over,
  };
}

/** An entry view's actions: each taken but those named, which are refused as the ledger says. */
export function actions(...refused: Action[]): ActionStanding[] {
  const all: Action[] = ["resolve", "release", "replay", "reconcile", "purge"];
  return all.map((action) => ({ action, refused: refused.includes(action) ? `${action} needs another state` : null }));
}

export type Listen = (event: string, f: (e: { payload: unknown }) => void) => Promise<() => void>;

export function setup(handlers: Record<string, (args: Record<string, unknown>) => unknown>, listen: Listen = async () => () => {}) {
  const calls: [string, Record<string, unknown>][] = [];
  // Under which name typed in the header each operation was asked for, in the order of `calls`.
  const asked: (string | null)[] = [];
  // An operation comes through the console's `call` command: recorded, and answered, under its
  // own name, with its job beside its arguments.
  const invoke = async (command: string, raw: Record<string, unknown> = {}) => {
    const [cmd, args] = command === "call"
      ? [raw.name as string, { ...(raw.args as Record<string, unknown>), ...(raw.job ? { job: raw.job } : {}) }]
      : [command, raw];
    calls.push([cmd, args]);
    asked.push(command === "call" ? (raw.operator as string | null) : null);
    const f = handlers[cmd];
    if (!f) throw { code: "unknown-command", message: cmd };
    return f(args);
  };
  const prefs = new Map<string, string>();
  const p: Prefs = { getItem: (k) => prefs.get(k) ?? null, setItem: (k, v) => void prefs.set(k, v) };
  document.body.innerHTML = "";
  const root = document.createElement("div");
  document.body.append(root);
  const app = new App(root, new TauriTransport(invoke, listen, () => p.getItem("operator") ?? ""), p);
  return { app, calls, asked, prefs, root };
}

export const base = {
  ledger_info: () => ({ location: "/tmp/demo.db", error: null }),
  stats: () => ({ entries_by_state: [["pending", 2]], stuck: 2, collisions: 1, expired: 3, duplicate_suspects: 4, events_by_kind: [], head: { seq: 10, hash: "h" }, series: [] }),
  proxy_status: () => ({ running: false, config: null, proxy_addr: null, admin_addr: null, error: null }),
};

/** An admin signed in with their own token, as `GET /admin/v1/whoami` answers. */
export const ADA = { name: "ada", role: "admin", shared: false };

export const tick = () => new Promise((r) => setTimeout(r, 0));
export const q = (testid: string) => document.querySelector(`[data-testid="${testid}"]`) as HTMLElement;

/** Waits (up to 100 ms) for `done`: what a call answered in the background shows. */
export async function until(done: () => unknown) {
  for (let i = 0; i < 20 && !done(); i++) await new Promise((r) => setTimeout(r, 5));
}

/** The console as a browser serves it: an app over the admin API, `fetch` answered by `fake`. */
export async function inBrowser(fake: typeof fetch, save: (name: string) => void = () => undefined, prefs: Map<string, string> = new Map()) {
  document.body.innerHTML = "";
  const root = document.createElement("div");
  document.body.append(root);
  const app = new App(root, new HttpTransport("http://x", "tok", fake, save, 1), { getItem: (k) => prefs.get(k) ?? null, setItem: (k, v) => void prefs.set(k, v) });
  await app.start();
  return app;
}
