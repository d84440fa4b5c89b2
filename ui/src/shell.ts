// What a view may use of the console's shell (`app.ts`), and what views share: a view is handed
// the shell as this interface, so the shell's module imports the views and no view imports it.
import type { EntryFilter } from "./bindings/EntryFilter";
import type { EntrySummary } from "./bindings/EntrySummary";
import type { Event } from "./bindings/Event";
import type { Preview } from "./bindings/Preview";
import type { CommandName } from "./bindings/commands";
import type { Transport } from "./transport";
import type { VirtualList } from "./vlist";

export type View = "overview" | "log" | "stuck" | "collisions" | "expiries" | "incidents" | "approvals" | "export" | "entry" | "search";

/** A list row's height, in pixels. */
export const ROW = 30;
/** How many entries or events one page of a list asks for. */
export const PAGE = 200;

/** Where the console keeps its preferences (localStorage in the app; a Map in tests). */
export interface Prefs {
  getItem(k: string): string | null;
  setItem(k: string, v: string): void;
}

export interface ActionSpec {
  title: string;
  preview: Preview;
  /** Extra inputs (e.g. resolve's outcome fields). */
  fields?: HTMLElement;
  /** Runs the action; `progress(done, total)`; stops early once `stop` is aborted (the dialog's
   * Stop): a loop checks `stop.aborted`, one long call listens for its `abort`. Returns a summary. */
  run: (operator: string, reason: string, progress: (done: number, total: number) => void, stop: AbortSignal) => Promise<string>;
}

/** The shell as a view sees it. */
export interface Shell {
  /** The view shown. */
  view: View;
  /** Where the shown view draws. */
  main: HTMLElement;
  /** The shown view's list, which the shell's keys scroll. */
  list: VirtualList<EntrySummary> | VirtualList<Event> | null;
  /** The shown view's intervals, cleared when another view is shown. */
  timers: number[];
  /** The entry last shown, which the Entry view reopens. */
  lastEntry: number | null;
  /** The shown view's own keys (the Approvals view's a and r): `true` when it took the key. */
  viewKeys: ((key: string) => boolean) | null;
  /** The archive directory the Export view opens with: the retention policy's, or the last one used. */
  archiveDir: string | null;
  readonly t: Transport;
  readonly prefs: Prefs;
  /** Attributes of a button for `cmd`: disabled, and saying why, when the role may not run it. */
  gate(cmd: CommandName, enabled?: boolean): Record<string, string | boolean>;
  /** Shows an error in the banner. */
  error(e: unknown): void;
  /** Shows `view` (an entry's when `entryId` is given). */
  go(view: View, entryId?: number): Promise<void>;
  /** Runs a job the server can stop, with its progress; what to say when it ends. */
  runJob<T>(kind: string, count: number, progress: (done: number, total: number) => void, stop: AbortSignal, call: (job: string) => Promise<T | null>, say: { stopped: string; done: (r: T) => string }): Promise<string>;
  /** The action dialog: the preview, a reason, then the run with its progress. */
  action(spec: ActionSpec): Promise<void>;
}

/** The entry filter a search term asks for: `route:`, `scope:`, `tool:` or `key:` a value, any
 * other `name:value` a subject, and a bare term a key or a subject's value. */
export function searchFilter(term: string): Pick<EntryFilter, "route" | "scope" | "tool" | "key" | "subject" | "search"> {
  const f = { route: null, scope: null, tool: null, key: null, subject: null, search: null } as Pick<EntryFilter, "route" | "scope" | "tool" | "key" | "subject" | "search">;
  const v = term.trim();
  const m = /^([A-Za-z0-9_-]+):(.+)$/.exec(v);
  if (!m) {
    if (v) f.search = v;
    return f;
  }
  const [, name, value] = m;
  if (name === "route" || name === "scope" || name === "tool" || name === "key") f[name] = value;
  else f.subject = `${name}=${value}`;
  return f;
}

/** Subjects as a row shows them (values) or the entry view (`name=value`). */
export function subjectsText(s: [string, string][], sep?: string): string {
  return s.map(([n, v]) => (sep ? `${n}${sep}${v}` : v)).join(" · ");
}
