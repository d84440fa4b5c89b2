// Generated from crates/ops/src/commands.rs and crates/ops/src/op by the ipc_bindings test; do not edit.
import type { Role } from "./Role";

export const COMMANDS = {
  stats: { role: "viewer", http: [["GET", "/admin/v1/stats"]], desktop: true },
  entries: { role: "viewer", http: [["GET", "/admin/v1/entries"]], desktop: true },
  show: { role: "viewer", http: [["GET", "/admin/v1/entries/{entry_id}"]], desktop: true },
  log: { role: "viewer", http: [["GET", "/admin/v1/events"]], desktop: true },
  incidents: { role: "viewer", http: [["GET", "/admin/v1/incidents"]], desktop: true },
  review_incident: { role: "operator", http: [["POST", "/admin/v1/incidents/{entry_id}/review"]], desktop: true },
  reopen_incident: { role: "operator", http: [["POST", "/admin/v1/incidents/{entry_id}/reopen"]], desktop: true },
  preview_resolve: { role: "operator", http: [["GET", "/admin/v1/entries/{entry_id}/resolve/preview"]], desktop: true },
  resolve: { role: "operator", http: [["POST", "/admin/v1/entries/{entry_id}/resolve"]], desktop: true },
  replay: { role: "operator", http: [["POST", "/admin/v1/entries/{entry_id}/replay"]], desktop: true },
  reconcile: { role: "operator", http: [["POST", "/admin/v1/entries/{entry_id}/reconcile"]], desktop: true },
  preview_bulk: { role: "operator", http: [["POST", "/admin/v1/bulk/preview"]], desktop: true },
  bulk: { role: "operator", http: [["POST", "/admin/v1/bulk"]], desktop: true },
  preview_purge: { role: "admin", http: [["POST", "/admin/v1/purge/preview"]], desktop: true },
  purge: { role: "admin", http: [["POST", "/admin/v1/purge"]], desktop: true },
  export: { role: "admin", http: [], desktop: true },
  export_entries: { role: "admin", http: [], desktop: true },
  start_export: { role: "admin", http: [["POST", "/admin/v1/exports"]], desktop: false },
  export_jobs: { role: "viewer", http: [["GET", "/admin/v1/exports"]], desktop: false },
  export_job: { role: "viewer", http: [["GET", "/admin/v1/exports/{id}"]], desktop: false },
  cancel_export: { role: "admin", http: [["DELETE", "/admin/v1/exports/{id}"]], desktop: false },
  verify_ledger: { role: "admin", http: [["GET", "/admin/v1/verify"]], desktop: true },
  head: { role: "viewer", http: [["GET", "/admin/v1/head"]], desktop: true },
  prove: { role: "viewer", http: [["GET", "/admin/v1/events/{seq}/proof"]], desktop: true },
  prove_consistency: { role: "viewer", http: [["POST", "/admin/v1/proofs/consistency"]], desktop: true },
  verify_against: { role: "admin", http: [], desktop: true },
  verify_against_manifest: { role: "admin", http: [["POST", "/admin/v1/verify/against"]], desktop: true },
  verify_export: { role: "admin", http: [], desktop: true },
  retention_status: { role: "viewer", http: [["GET", "/admin/v1/retention"]], desktop: true },
  archive_segments: { role: "admin", http: [], desktop: true },
  verify_archive: { role: "admin", http: [], desktop: true },
  archived: { role: "viewer", http: [["GET", "/admin/v1/archive"]], desktop: true },
  verify_history: { role: "admin", http: [["GET", "/admin/v1/archive/verify"]], desktop: true },
  archive: { role: "admin", http: [], desktop: true },
  run_retention: { role: "admin", http: [], desktop: true },
  approvals: { role: "viewer", http: [["GET", "/admin/v1/approvals"]], desktop: true },
  approve: { role: "operator", http: [["POST", "/admin/v1/approvals/{entry_id}/approve"]], desktop: true },
  reject: { role: "operator", http: [["POST", "/admin/v1/approvals/{entry_id}/reject"]], desktop: true },
  ledger_info: { role: "viewer", http: [], desktop: true },
  open_ledger: { role: "viewer", http: [], desktop: true },
  server_info: { role: "viewer", http: [["GET", "/admin/v1/server"]], desktop: false },
  whoami: { role: "viewer", http: [["GET", "/admin/v1/whoami"]], desktop: false },
  openapi: { role: "viewer", http: [["GET", "/admin/v1/openapi.json"]], desktop: false },
  metrics: { role: "viewer", http: [["GET", "/metrics"]], desktop: false },
  export_download: { role: "admin", http: [["GET", "/admin/v1/exports/{id}/file"], ["GET", "/admin/v1/exports/{id}/manifest"]], desktop: false },
  verify_upload: { role: "admin", http: [["POST", "/admin/v1/verify/export"]], desktop: false },
  cancel_job: { role: "viewer", http: [], desktop: true },
  proxy_status: { role: "viewer", http: [], desktop: true },
  proxy_start: { role: "admin", http: [], desktop: true },
  proxy_stop: { role: "admin", http: [], desktop: true },
} as const satisfies Record<string, { role: Role; http: readonly (readonly [string, string])[]; desktop: boolean }>;

export type CommandName = keyof typeof COMMANDS;

/** The roles, lowest first: each may do what the ones before it may. */
export const ROLES: readonly Role[] = ["viewer", "operator", "admin"];

/** Whether `role` may run `cmd` through the admin API. */
export function allows(role: Role, cmd: CommandName): boolean {
  return ROLES.indexOf(role) >= ROLES.indexOf(COMMANDS[cmd].role);
}
