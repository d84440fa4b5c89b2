//! The sweep: lease passings and TTL expiries, each logged once, and approvals whose window
//! passed undecided.

use std::sync::LazyLock;

use serde_json::json;

use super::log::append;
use crate::db::vals;
use crate::entry_row::{map_row, Row, ROW_COLS};
use crate::error::Result;
use crate::model::{EventKind, Millis};
use crate::store::SweepReport;
use crate::writer::Ctx;

/// How many lease passings, and how many expiries, one sweep logs at most (the rest wait for the
/// next sweep, a second later).
const SWEEP_LIMIT: usize = 1000;

/// The entries whose lease has passed and which are not yet logged as stuck, in the order their
/// leases passed: a range of `entries_lease_due`, which holds only those not yet logged.
pub(crate) static LEASES_DUE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {ROW_COLS} FROM entries WHERE state = 'pending' AND stuck_logged = 0 \
         AND lease_expires_at <= ?1 ORDER BY lease_expires_at, id LIMIT {SWEEP_LIMIT}"
    )
});

/// The entries whose TTL has passed and whose expiry is not yet logged, in the order they expired:
/// a range of `entries_expires` under `expiry_logged = 0`. The entries already logged (kept until
/// purged) are outside it, so a sweep costs what is due, not what has expired so far.
pub(crate) static EXPIRIES_DUE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {ROW_COLS} FROM entries WHERE expiry_logged = 0 AND expires_at <= ?1 \
         AND state <> 'pending' AND state <> 'awaiting_approval' ORDER BY expires_at, id \
         LIMIT {SWEEP_LIMIT}"
    )
});

/// Appends a `kind` event for each entry `due` (at `at`) selects and sets `flag` on it, so each is
/// logged once.
fn log_once(
    ctx: &mut Ctx<'_>,
    at: Millis,
    due: &str,
    flag: &str,
    kind: EventKind,
    detail: impl Fn(&Row) -> serde_json::Value,
) -> Result<u64> {
    let due = format!("{due}{}", ctx.db.dialect().skip_locked());
    let rows: Vec<Row> = ctx.db.all(&due, vals![at], map_row)?;
    let set_flag = format!("UPDATE entries SET {flag} = 1 WHERE id = ?1");
    for row in &rows {
        ctx.db.exec(&set_flag, vals![row.id])?;
        append(ctx, row.event(at, kind, detail(row)))?;
    }
    Ok(rows.len() as u64)
}

/// Logs lease expiries and TTL expiries once each; at most [`SWEEP_LIMIT`] of each per call.
pub(crate) fn sweep(ctx: &mut Ctx<'_>, at: Millis) -> Result<SweepReport> {
    let lease_expired = log_once(
        ctx,
        at,
        &LEASES_DUE,
        "stuck_logged",
        EventKind::LeaseExpired,
        |row| json!({"owner": row.lease_owner, "lease_expires_at": row.lease_expires_at}),
    )?;
    let ttl_expired = log_once(
        ctx,
        at,
        &EXPIRIES_DUE,
        "expiry_logged",
        EventKind::Expired,
        |row| json!({"state": row.state}),
    )?;
    let lapsed = super::approval::lapsed(ctx, at, SWEEP_LIMIT)?;
    for row in &lapsed {
        super::approval::lapse(ctx, row, at)?;
    }
    ctx.db
        .exec("DELETE FROM loop_windows WHERE ends <= ?1", vals![at])?;
    let report = SweepReport {
        lease_expired,
        ttl_expired,
        approvals_expired: lapsed.len() as u64,
    };
    Ok(report)
}
