//! A claimed entry's outcome, as its lease owner reports it: completed with a response, released
//! to run again, or marked unknown for an operator.

use serde_json::json;

use super::duplicates::flag_duplicate;
use super::log::{append, moved};
use crate::db::{vals, Db, Dialect, PerDialect, Val};
use crate::entry_row::{map_row, row_by_id, Row, ROW_COLS};
use crate::error::{LedgerError, Result};
use crate::model::{EventKind, Millis, ResponseRecord, State};
use crate::prepared::{headers_json, Completion};
use crate::store::{CompleteOutcome, OwnerReport};
use crate::writer::Ctx;

pub(crate) fn complete(ctx: &mut Ctx<'_>, c: &Completion) -> Result<CompleteOutcome> {
    let req = &c.req;
    let resp = &req.response;
    let params = completion_params(req.entry_id, resp, &c.headers, req.at, req.ttl_ms);
    // Only a PENDING entry leased by `owner` completes. `maybe_duplicate`: false where the batch
    // read ahead, under the effect's lock, that no other entry completed it in the window.
    let (row, maybe_duplicate, locked) = match ctx.db.dialect() {
        // Read, then written: a RETURNING clause would have SQLite buffer the row in an ephemeral
        // table it opens and closes on every run (the writer holds the lock in between anyway).
        Dialect::Sqlite => {
            let row = owned(ctx.db, req.entry_id, &req.owner, "complete")?;
            ctx.db.exec(&COMPLETION.get(Dialect::Sqlite).0, &params)?;
            (row, true, false)
        }
        Dialect::Postgres => match ctx.ahead.as_deref_mut().and_then(|a| a.entry(req.entry_id)) {
            // Read ahead (checked here), written with the batch's next statement.
            Some((row, maybe_duplicate, locked)) => {
                check_owned(&row, &req.owner, "complete")?;
                ctx.exec_later(&COMPLETION.get(Dialect::Postgres).0, &params)?;
                (row, maybe_duplicate, locked)
            }
            None => (complete_now(ctx, req, params)?, true, false),
        },
    };
    moved(ctx, Some(State::Pending), Some(State::Completed));
    let mut ev = row.event(req.at, EventKind::Complete, json!({"status": resp.status}));
    ev.payload_digest = Some(c.digest.clone());
    append(ctx, ev)?;
    // Another instance's batch may complete the same effect, or claim it under the reject
    // policy, at the same time: each takes the effect's lock before it looks or commits (the
    // read ahead took it for an effect the instance knew).
    if ctx.db.dialect() == Dialect::Postgres && !locked {
        crate::postgres::locks::effect_locks(ctx.db, &[&row.route], &[row.effect()])?;
    }
    let none_before =
        !maybe_duplicate && ctx.ahead.as_deref().is_some_and(|a| a.no_duplicate(&row));
    let duplicate_of = match req.duplicate_window_ms {
        Some(window) if !none_before => flag_duplicate(ctx, &row, window, req.at)?,
        _ => None,
    };
    if let Some(a) = ctx.ahead.as_deref_mut() {
        a.completed(&row);
    }
    Ok(CompleteOutcome { duplicate_of })
}

/// A completion on PostgreSQL, checked and written in one statement: one round trip.
fn complete_now<'a>(
    ctx: &mut Ctx<'_>,
    req: &'a crate::store::CompleteRequest,
    mut params: Vec<Val<'a>>,
) -> Result<Row> {
    params.push(Val::Text(&req.owner));
    match ctx
        .db
        .opt(&COMPLETION.get(Dialect::Postgres).1, &params, map_row)?
    {
        Some(row) => Ok(row),
        // Not updated: say why.
        None => {
            owned(ctx.db, req.entry_id, &req.owner, "complete")?;
            Err(LedgerError::Corrupt(format!(
                "entry {} could not be completed",
                req.entry_id
            )))
        }
    }
}

/// The completion of an entry (?1) with a response (status ?2, headers ?3, body ?4) at ?5, replayed
/// until ?6: as is, and — with ?7 the lease owner — only if PENDING and leased by it, returning the
/// entry's row.
pub(crate) static COMPLETION: PerDialect<(String, String)> = PerDialect::new(|d| {
    let update = format!(
        "{} entries SET state = 'completed', resp_status = ?2, resp_headers = ?3, resp_body = ?4, \
         lease_owner = NULL, lease_expires_at = NULL, outcome_unknown = 0, updated_at = ?5, \
         completed_at = ?5, expires_at = ?6, expiry_logged = 0 WHERE id = ?1",
        d.update()
    );
    let guarded =
        format!("{update} AND state = 'pending' AND lease_owner = ?7 RETURNING {ROW_COLS}");
    (update, guarded)
});

fn completion_params<'a>(
    id: i64,
    resp: &'a ResponseRecord,
    headers: &'a str,
    at: Millis,
    ttl_ms: i64,
) -> Vec<Val<'a>> {
    vals![
        id,
        i64::from(resp.status),
        headers,
        &resp.body,
        at,
        at + ttl_ms
    ]
    .to_vec()
}

/// Stores `resp` as entry `id`'s outcome (the caller has checked the entry's state).
pub(super) fn store_completion(
    db: &mut dyn Db,
    id: i64,
    resp: &ResponseRecord,
    at: Millis,
    ttl_ms: i64,
) -> Result<()> {
    let headers = headers_json(&resp.headers);
    let params = completion_params(id, resp, &headers, at, ttl_ms);
    db.exec(&COMPLETION.get(db.dialect()).0, &params)?;
    Ok(())
}

pub(crate) fn mark_unknown(ctx: &mut Ctx<'_>, rep: &OwnerReport) -> Result<()> {
    let row = owned(ctx.db, rep.entry_id, &rep.owner, "mark outcome unknown")?;
    ctx.db.exec(
        "UPDATE entries SET outcome_unknown = 1, last_error = ?2, updated_at = ?3, stuck_logged = 1 \
         WHERE id = ?1",
        vals![row.id, &rep.error, rep.at],
    )?;
    append(
        ctx,
        row.event(
            rep.at,
            EventKind::OutcomeUnknown,
            json!({"error": rep.error}),
        ),
    )?;
    Ok(())
}

pub(crate) fn release(ctx: &mut Ctx<'_>, rep: &OwnerReport) -> Result<()> {
    let row = owned(ctx.db, rep.entry_id, &rep.owner, "release")?;
    ctx.db.exec(
        "UPDATE entries SET state = 'released', lease_owner = NULL, lease_expires_at = NULL, \
         last_error = ?2, updated_at = ?3 WHERE id = ?1",
        vals![row.id, &rep.error, rep.at],
    )?;
    moved(ctx, Some(State::Pending), Some(State::Released));
    append(
        ctx,
        row.event(rep.at, EventKind::Release, json!({"error": rep.error})),
    )?;
    Ok(())
}

/// The entry must be PENDING and leased by `owner`.
pub(super) fn owned(db: &mut dyn Db, id: i64, owner: &str, action: &'static str) -> Result<Row> {
    let row = row_by_id(db, id)?;
    check_owned(&row, owner, action)?;
    Ok(row)
}

/// `row` must be PENDING and leased by `owner`.
fn check_owned(row: &Row, owner: &str, action: &'static str) -> Result<()> {
    if row.state != State::Pending {
        return Err(LedgerError::InvalidTransition {
            id: row.id,
            state: row.state.to_string(),
            action,
            needed: "pending",
        });
    }
    if row.lease_owner.as_deref() != Some(owner) {
        return Err(LedgerError::LeaseLost(row.id));
    }
    Ok(())
}

/// Records a retry after an outcome that was not executed, and renews the lease for it.
pub(crate) fn record_attempt(
    ctx: &mut Ctx<'_>,
    rep: &OwnerReport,
    attempt: i64,
    lease_ms: i64,
) -> Result<()> {
    let row = owned(ctx.db, rep.entry_id, &rep.owner, "record attempt")?;
    ctx.db.exec(
        "UPDATE entries SET attempts = ?2, last_error = ?3, updated_at = ?4, \
         lease_expires_at = ?5 WHERE id = ?1",
        vals![row.id, attempt, &rep.error, rep.at, rep.at + lease_ms],
    )?;
    append(
        ctx,
        row.event(
            rep.at,
            EventKind::Attempt,
            json!({"attempt": attempt, "error": rep.error}),
        ),
    )?;
    Ok(())
}
