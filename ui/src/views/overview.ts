// The Overview: the ledger's counts and charts, the retention policy's last run, and on the
// desktop the embedded proxy.
import { clear, h } from "../dom";
import { seriesFor } from "../format";
import { hourlyChart } from "../chart";
import { retentionPanel } from "../audit";
import { type Shell, type View } from "../shell";

export async function overview(app: Shell): Promise<void> {
  const hours = 72;
  const s = await app.t.ops.stats({ hours });
  const now = Date.now();
  const stat = (label: string, value: number | string, testid?: string, go?: View) =>
    h("div", { class: `stat${go ? " clickable" : ""}`, testid, on: go ? { click: () => void app.go(go) } : undefined }, h("div", { class: "value" }, value), h("div", { class: "label" }, label));
  const byState = Object.fromEntries(s.entries_by_state.map(([k, v]) => [k, v]));
  app.main.append(
    h("h1", null, "Overview"),
    h(
      "div",
      { class: "stats" },
      stat("stuck", s.stuck, "stat-stuck", "stuck"),
      stat("collisions", s.collisions, "stat-collisions", "collisions"),
      stat("duplicate suspects", s.duplicate_suspects, "stat-duplicates", "incidents"),
      stat("expired", s.expired, "stat-expired", "expiries"),
      stat("completed", byState.completed ?? 0),
      stat("pending", byState.pending ?? 0),
      stat("released", byState.released ?? 0),
      stat("failed", byState.failed ?? 0),
      stat("awaiting approval", byState.awaiting_approval ?? 0, "stat-approvals", "approvals"),
      stat("log head", s.head ? `#${s.head.seq}` : "—"),
    ),
  );
  const charts: [string, string, string[]][] = [
    ["executions", "executions", ["complete"]],
    ["replays absorbed", "replays", ["replay_absorbed"]],
    ["collisions", "collisions", ["collision"]],
    ["stuck (lease passed or unknown)", "stuck", ["lease_expired", "outcome_unknown"]],
    ["expiries", "expiries", ["expired"]],
  ];
  const grid = h("div", { class: "charts" });
  for (const [label, what, kinds] of charts) grid.append(hourlyChart(`chart-${kinds[0]}`, label, what, seriesFor(s.series, kinds, now, hours), now));
  const retention = await app.t.ops.retention_status({}).catch(() => null);
  app.archiveDir ??= retention?.archive_dir ?? null;
  // The embedded proxy is the desktop console's; a browser talks to a running `idemgate serve`.
  app.main.append(grid, retentionPanel(retention, now), ...(app.t.kind === "tauri" ? [await proxyPanel(app)] : []));
}

export async function proxyPanel(app: Shell): Promise<HTMLElement> {
  const box = h("div", { class: "panel", testid: "proxy-panel" });
  const render = async () => {
    const st = await app.t.proxyStatus().catch((e) => (app.error(e), null));
    clear(box);
    const cfg = h("input", { testid: "proxy-config", attrs: { placeholder: "/path/to/idemgate.toml", value: st?.config ?? app.prefs.getItem("proxyConfig") ?? "" } });
    const status = st?.running ? `running · proxy ${st.proxy_addr} · admin ${st.admin_addr ?? "off"}` : st?.error ? `stopped: ${st.error}` : "stopped";
    box.append(
      h("h2", null, "Embedded proxy"),
      h("div", { class: `proxy-status ${st?.running ? "ok" : ""}`, testid: "proxy-status" }, status),
      h(
        "div",
        { class: "row" },
        cfg,
        st?.running
          ? h("button", { testid: "proxy-stop", on: { click: async () => { await app.t.proxyStop().catch((e) => app.error(e)); await render(); } } }, "Stop")
          : h("button", { testid: "proxy-start", on: { click: async () => { app.prefs.setItem("proxyConfig", cfg.value); await app.t.proxyStart(cfg.value.trim()).catch((e) => app.error(e)); await render(); } } }, "Start"),
      ),
    );
  };
  await render();
  return box;
}
