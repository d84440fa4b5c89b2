// Export: the log or the entries to a file with its manifest, the checks against it, and the
// archive (the desktop's by directory, the server's own in a browser).
import type { ErrorBody } from "../bindings/ErrorBody";
import type { Exported } from "../bindings/Exported";
import type { Manifest } from "../bindings/Manifest";
import { clear, h } from "../dom";
import { fromLocalInput } from "../format";
import { toErrorBody } from "../transport";
import { archivePanel, type RunJob } from "../audit";
import { type Shell } from "../shell";

export function exportView(app: Shell): void {
  const format = h("select", { testid: "export-format" }, h("option", { attrs: { value: "ndjson" } }, "NDJSON"), h("option", { attrs: { value: "csv" } }, "CSV"));
  const since = h("input", { testid: "export-since", attrs: { type: "datetime-local" } });
  const until = h("input", { testid: "export-until", attrs: { type: "datetime-local" } });
  const path = h("input", { testid: "export-path", attrs: { placeholder: "/path/to/audit.ndjson", value: app.prefs.getItem("exportPath") ?? "" } });
  const overwrite = h("input", { testid: "export-overwrite", attrs: { type: "checkbox" } }) as HTMLInputElement;
  const out = h("pre", { testid: "export-result", class: "small" });
  const vpath = h("input", { testid: "verify-path", attrs: { placeholder: "/path/to/audit.ndjson (its .manifest.json is checked too)" } });
  const vout = h("pre", { testid: "verify-result", class: "small" });
  const against = h("input", { testid: "against-file", attrs: { type: "file", accept: ".json,application/json" } }) as HTMLInputElement;
  const upload = h("input", { testid: "verify-file", attrs: { type: "file", accept: ".ndjson,.csv,.gz,application/x-ndjson,text/csv" } }) as HTMLInputElement;
  const what = h("select", { testid: "export-what" }, h("option", { attrs: { value: "events" } }, "the log"), h("option", { attrs: { value: "entries" } }, "entries with outcomes"));
  const job: RunJob = async (label, outEl, f, show) => {
    const id = `${label}-${Date.now()}`;
    const bar = h("progress", { testid: "job-progress" });
    const stop = h("button", { testid: "job-cancel", on: { click: () => void app.t.cancelJob(id) } }, "Cancel");
    const status = h("span", { class: "hint" });
    clear(outEl);
    outEl.append(bar, stop, status);
    const unlisten = await app.t.onProgress((p) => { if (p.job === id) status.textContent = ` ${p.done} ${what.value === "entries" && label === "export" ? "entries" : "events"}`; });
    try {
      const r = await f(id);
      clear(outEl);
      if (r !== null && show) outEl.append(show(r));
      else outEl.textContent = r === null ? (label === "export" ? "cancelled: nothing was written" : "cancelled") : JSON.stringify(r, null, 2);
    } catch (e) {
      clear(outEl);
      const b = toErrorBody(e);
      outEl.textContent = `${b.code}: ${b.message}`;
    } finally {
      unlisten();
    }
  };
  // In a browser the export is made on the server and downloaded, and a file to verify is
  // uploaded with its manifest: no path of either machine is named.
  const local = app.t.kind === "tauri";
  // The head to note now and check later: the log must still hold it, and only have grown.
  const head = h("p", { class: "hint", testid: "log-head" });
  void app.t.ops.head({}).then((at) => { head.textContent = at ? `The log's head now: #${at.seq} ${at.hash}` : "The log is empty."; }, (e) => app.error(e));
  app.main.append(
    h("h1", null, "Export"),
    h("p", { class: "hint" }, local
      ? "A contiguous run of the log, or the entries created in a range with their outcomes, as NDJSON or CSV, with FILE.manifest.json recording the count, the chain head and the file's sha256 — for compliance. Verify recomputes the chain and checks the manifest."
      : "A contiguous run of the log, or the entries created in a range with their outcomes, as NDJSON or CSV, made on the server and downloaded with FILE.manifest.json (the count, the chain head and the file's sha256) — for compliance. Keep both in one folder: idemgate verify --export FILE checks them."),
    h("div", { class: "panel" }, h("div", { class: "filters" }, what, format, h("label", null, "since ", since), h("label", null, "until ", until), ...(local ? [path, h("label", { attrs: { title: "An existing file is refused: an earlier export is evidence. Tick this to replace it and its manifest." } }, overwrite, " Replace an existing file")] : []),
      h("button", { testid: "action-export", class: "primary", attrs: app.gate("export"), on: { click: () => { if (local) app.prefs.setItem("exportPath", path.value); const cmd = { format: format.value as "ndjson" | "csv", range: { since: fromLocalInput(since.value), until: fromLocalInput(until.value) }, path: local ? path.value.trim() : "", overwrite: local && overwrite.checked }; void job("export", out, (id) => app.t.exportFile(what.value as Exported, cmd, id)); } } }, "Export")), out),
    h("div", { class: "panel" }, h("div", { class: "filters" }, ...(local ? [vpath,
      h("button", { testid: "action-verify", on: { click: () => void job("verify", vout, (id) => app.t.ops.verify_export({ path: vpath.value.trim() }, id)) } }, "Verify file")]
      : [h("label", null, "export ", upload), h("label", null, "manifest ", against),
        h("button", { testid: "action-verify", attrs: { title: "Uploads the file and its manifest; the server checks them as idemgate verify --export does, without the ledger", ...app.gate("verify_upload") }, on: { click: () => void job("verify", vout, () => chosen(upload, "the export file").then((f) => app.t.verifyUpload(f, against.files?.[0] ?? null))) } }, "Verify file")]),
      h("button", { testid: "action-verify-against", attrs: { title: "Does this ledger still hold the heads the export's manifest recorded? (a cut-off tail of the log shows here)", ...app.gate("verify_against") }, on: { click: () => void job("verify-against", vout, (id) => local ? app.t.ops.verify_against({ path: manifestOf(vpath.value.trim()) }, id) : readManifest(against).then((m) => app.t.ops.verify_against_manifest(m, id))) } }, "Check against the ledger"),
      h("button", { testid: "action-verify-ledger", attrs: app.gate("verify_ledger"), on: { click: () => void job("verify-ledger", vout, (id) => app.t.ops.verify_ledger({}, id)) } }, "Verify the ledger")), head, vout),
    archivePanel({ t: app.t, dir: local ? app.archiveDir ?? app.prefs.getItem("archiveDir") ?? "" : null, runJob: job, remember: (d) => { app.archiveDir = d; app.prefs.setItem("archiveDir", d); }, gate: (op) => app.gate(op) }),
  );
}

/** The manifest of an export named by its path, or the manifest itself. */
export function manifestOf(path: string): string {
  return path.endsWith(".manifest.json") ? path : `${path}.manifest.json`;
}

/** The file chosen in `input`; an ErrorBody naming `what` when none is. */
async function chosen(input: HTMLInputElement, what: string): Promise<File> {
  const f = input.files?.[0];
  if (!f) throw { code: "invalid-argument", message: `choose ${what}` } satisfies ErrorBody;
  return f;
}

/** The manifest in a file input, parsed; an ErrorBody when there is none or it is not JSON. */
async function readManifest(input: HTMLInputElement): Promise<Manifest> {
  const f = input.files?.[0];
  if (!f) throw { code: "invalid-argument", message: "choose the export's manifest (FILE.manifest.json)" } satisfies ErrorBody;
  try {
    return JSON.parse(await f.text()) as Manifest;
  } catch (e) {
    throw { code: "invalid-argument", message: `${f.name}: not a manifest: ${String(e)}` } satisfies ErrorBody;
  }
}
