// Generated from crates/ledger/src/model.rs by the ipc_bindings test; do not edit.
import type { EventKind } from "./EventKind";
import type { State } from "./State";

/** Every kind of event the log holds, in the ledger's order. */
export const EVENT_KINDS: readonly EventKind[] = [
  "claim",
  "attempt",
  "complete",
  "outcome_unknown",
  "release",
  "collision",
  "duplicate_suspect",
  "lease_expired",
  "expired",
  "resolve",
  "replay",
  "reconcile",
  "purge",
  "review",
  "reopen",
  "loop_suspect",
  "archive",
  "checkpoint",
  "retention",
  "approval_requested",
  "approved",
  "rejected",
  "approval_expired",
];

/** Every state an entry may be in. */
export const STATES: readonly State[] = [
  "pending",
  "completed",
  "released",
  "failed",
  "awaiting_approval",
];
