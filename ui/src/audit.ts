// The audit trail over years in the console: the retention policy's last run (Overview), and the
// archive's segments listed and verified (Export). What they show comes from the operations layer;
// nothing here decides anything.
import type { ArchiveVerifyReport } from "./bindings/ArchiveVerifyReport";
import type { RetentionStatus } from "./bindings/RetentionStatus";
import type { SegmentCheck } from "./bindings/SegmentCheck";
import { clear, h } from "./dom";
import { isoTime, relative } from "./format";
import type { CommandName } from "./bindings/commands";
import { toErrorBody, type Transport } from "./transport";

/** The Overview's panel on retention: the policy of the last run, when it ran, what it did. */
export function retentionPanel(st: RetentionStatus | null, now: number): HTMLElement {
  const box = h("div", { class: "panel", testid: "retention-panel" }, h("h2", null, "Retention"));
  // A shared ledger's books are kept by one instance at a time: say which.
  if (st?.leader) box.append(h("div", { class: "hint", testid: "retention-leader" }, `kept by instance ${st.leader.instance}, leading since ${isoTime(st.leader.since)}`));
  if (!st || st.last_run_at === null) {
    box.append(h("p", { class: "hint", testid: "retention-none" }, "No retention policy has run on this ledger: its log only grows. Set [retention] in the server's configuration, or run idemgate retention run."));
    return box;
  }
  const did = `purged ${st.last_run?.purged ?? 0} · ${st.last_run?.segments ?? 0} segment(s) sealed`;
  box.append(
    h("div", { testid: "retention-policy" }, st.policy ?? ""),
    h("div", { testid: "retention-last-run" }, `last run ${relative(st.last_run_at, now)} (${isoTime(st.last_run_at)}) · ${did}`),
    h("div", { class: "hint", testid: "retention-archive" }, st.archived_through === null
      ? "nothing archived yet"
      : `archived through #${st.archived_through} in ${st.segments} segment(s)${st.archive_dir ? ` · ${st.archive_dir}` : ""}`),
  );
  return box;
}

/** Runs long work with progress and Cancel in `out` (the Export view's job runner). */
export type RunJob = (label: string, out: HTMLElement, f: (id: string) => Promise<unknown>, show?: (r: unknown) => Node) => Promise<void>;

function kb(n: number): string {
  return n >= 1 << 20 ? `${(n / (1 << 20)).toFixed(1)} MiB` : `${Math.max(1, Math.round(n / 1024))} KiB`;
}

/** One segment as a table row: its range, size, signed head, and what verifying it found. */
function segmentRow(s: SegmentCheck): HTMLElement {
  const cp = s.checkpoint;
  return h(
    "tr",
    { testid: "segment-row", class: s.ok ? "" : "bad" },
    h("td", null, `#${s.first_seq ?? "?"}–#${s.last_seq ?? "?"}`),
    h("td", null, String(s.count)),
    h("td", null, kb(s.bytes)),
    h("td", { testid: "segment-signed" }, cp ? `#${cp.seq} ${cp.hash.slice(0, 12)}… by ${cp.origin}` : "not signed"),
    h("td", null, s.recorded === false ? "not recorded" : "recorded"),
    h("td", { testid: "segment-status" }, !s.checked ? "—" : s.ok ? "ok" : s.problems.join("; ")),
    h("td", { class: "hint" }, s.file),
  );
}

function segmentTable(segments: SegmentCheck[]): HTMLElement {
  return h(
    "table",
    { class: "diff", testid: "segment-table" },
    h("tr", null, ...["range", "events", "size", "signed head", "ledger", "verified", "file"].map((c) => h("th", null, c))),
    ...segments.map(segmentRow),
  );
}

/** What verifying the archive found, segment by segment, with the live log after them. */
export function archiveReport(r: ArchiveVerifyReport): HTMLElement {
  const verdict = r.ok ? `OK · ${r.count} events verified, segments and live log, head #${r.head?.seq ?? "—"}` : r.cancelled ? "stopped" : "FAILED";
  return h(
    "div",
    null,
    h("div", { testid: "archive-verdict", class: r.ok ? "ok" : "bad" }, verdict),
    segmentTable(r.segments),
    ...r.problems.map((p) => h("div", { class: "bad", testid: "archive-problem" }, p)),
    ...(r.unfinished.length ? [h("div", { class: "hint" }, `left by a run cut short (the next run finishes it): ${r.unfinished.join(", ")}`)] : []),
  );
}

/** Where the archive panel's work goes: a directory of this machine (desktop), or the server's own archive (a browser). */
export interface ArchivePanel {
  t: Transport;
  /** The directory to offer (desktop); `null` in a browser, which may not name the server's paths. */
  dir: string | null;
  runJob: RunJob;
  remember: (dir: string) => void;
  /** A button's attributes for an operation the signed-in role may not run (disabled, with why). */
  gate: (op: CommandName) => Record<string, string | boolean>;
}

/** The Export view's archive panel: its segments, and a verify with progress. */
export function archivePanel(p: ArchivePanel): HTMLElement {
  const { t, runJob } = p;
  const input = p.dir === null ? null : h("input", { testid: "archive-dir", attrs: { placeholder: "/var/lib/idemgate/archive or s3://bucket/prefix", value: p.dir } });
  const path = () => {
    const d = input?.value.trim() ?? "";
    if (input) p.remember(d);
    return d;
  };
  const out = h("div", { testid: "archive-result" });
  const list = async () => {
    const d = path();
    clear(out);
    try {
      out.append(segmentTable(await (input ? t.ops.archive_segments({ path: d }) : t.ops.archived({}))));
    } catch (e) {
      const b = toErrorBody(e);
      out.textContent = `${b.code}: ${b.message}`;
    }
  };
  const verify = () => {
    const d = path();
    void runJob("verify-archive", out, (id) => (input ? t.ops.verify_archive({ path: d }, id) : t.ops.verify_history({}, id)), (r) => archiveReport(r as ArchiveVerifyReport));
  };
  return h(
    "div",
    { class: "panel", testid: "archive-panel" },
    h("h2", null, "Archive"),
    h("p", { class: "hint" }, `Sealed, compressed segments of the old log, each with a manifest and its signed head${input ? "" : ", in the server's archive ([retention] archive_dir)"}. Verify walks every segment and the live log after them, and names a missing, altered or reordered segment.`),
    h(
      "div",
      { class: "filters" },
      ...(input ? [input] : []),
      h("button", { testid: "action-archive-list", attrs: p.gate(input ? "archive_segments" : "archived"), on: { click: () => void list() } }, "List segments"),
      h("button", { testid: "action-archive-verify", attrs: p.gate(input ? "verify_archive" : "verify_history"), on: { click: verify } }, "Verify the archive"),
    ),
    out,
  );
}
