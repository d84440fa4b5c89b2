//! Every write, run by the writer thread inside the batch transaction: the entry state machine,
//! each function checking the entry's state, changing it, and appending the event(s) that say so.
//! This file holds the claim; the files under `write/` hold the rest.

use serde_json::json;

use crate::db::{vals, Db};
use crate::entry_row::Row;
use crate::error::{LedgerError, Result};
use crate::model::{without_secret_params, ApprovalEnd, EventKind, State};
use crate::prepared::Claim;
use crate::read;
use crate::store::{ClaimOutcome, ClaimRequest};
use crate::writer::Ctx;

mod announced;
mod approval;
mod archival;
mod duplicates;
mod insert;
pub(crate) mod intake;
mod log;
mod operator;
mod outcome;
mod replays;
mod sweep;
mod tools;
mod tree;
pub(crate) use announced::{announced, note_announced};
pub(crate) use approval::{decide, take_approved};
pub use archival::RETENTION_OPERATOR;
pub(crate) use archival::{drop_archived, mark_archived, note_checkpoint, note_retention};
use duplicates::reject_duplicate;
#[cfg(test)]
pub(crate) use duplicates::FIND_DUPLICATE;
#[cfg(test)]
pub(crate) use insert::INSERT_OR_LOOKUP;
use insert::{first, First};
pub(crate) use log::{append, NewEvent};
use log::{bump_hourly, moved};
pub(crate) use operator::{note_loop, note_reconcile, purge, redrive, reopen, resolve, review};
#[cfg(test)]
pub(crate) use outcome::COMPLETION;
pub(crate) use outcome::{complete, mark_unknown, record_attempt, release};
use replays::{add_replays, REPLAY_ABSORBED};
pub(crate) use replays::{count_replays, count_replays_alone, ReplayTally};
pub(crate) use sweep::sweep;
#[cfg(test)]
pub(crate) use sweep::{EXPIRIES_DUE, LEASES_DUE};
pub(crate) use tools::note_tools;
pub(crate) use tree::{
    cosign_tree_checkpoint, extend_tree, extend_tree_alone, note_tree_checkpoint,
};

/// A claim of a key its entry holds for another request: the request kept as a collision, and
/// logged; nothing runs.
fn collide(ctx: &mut Ctx<'_>, c: &Claim, row: &Row) -> Result<ClaimOutcome> {
    let (req, at) = (&c.req, c.req.at);
    let request = &req.request;
    ctx.db.exec(
        "INSERT INTO collisions (entry_id, at, fingerprint, req_method, req_path, req_headers, \
         req_body) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        vals![
            row.id,
            at,
            &req.fingerprint,
            &request.method,
            &request.path,
            &c.headers,
            &request.body
        ],
    )?;
    ctx.db.exec(
        "UPDATE entries SET collisions = collisions + 1 WHERE id = ?1",
        vals![row.id],
    )?;
    let mut ev = row.event(
        at,
        EventKind::Collision,
        json!({"stored_fingerprint": row.fingerprint, "rejected_fingerprint": req.fingerprint}),
    );
    ev.payload_digest = Some(c.digest.clone());
    append(ctx, ev)?;
    Ok(ClaimOutcome::Collision { entry_id: row.id })
}

pub(crate) fn claim(ctx: &mut Ctx<'_>, c: &Claim) -> Result<ClaimOutcome> {
    let req = &c.req;
    let at = req.at;
    let (row, stored) = match first(ctx, c)? {
        First::Inserted(id) => return claimed(ctx, c, id),
        First::Existing(row, stored) => (row, stored),
        First::Refused => {
            // Only the reject policy refuses a new key: its duplicate is logged and answered.
            return reject_duplicate(ctx, c)?.ok_or_else(|| {
                LedgerError::Corrupt(format!(
                    "the claim of key {:?} was refused as a duplicate, but no duplicate is found",
                    req.key
                ))
            });
        }
    };

    if row.expired(at) {
        // The key's TTL has passed: it may run again. Log the expiry (if the sweeper has not) and
        // re-arm the same row with the new request.
        if !row.expiry_logged {
            append(
                ctx,
                row.event(at, EventKind::Expired, json!({"state": row.state})),
            )?;
        }
        if let Some(o) = reject_duplicate(ctx, c)? {
            return Ok(o);
        }
        return rearm(ctx, &row, c, 1, json!({"attempt": 1, "after": "expiry"}));
    }

    if row.fingerprint != req.fingerprint && !claimed_before_targets_counted(ctx.db, &row, req)? {
        return collide(ctx, c, &row);
    }

    match row.state {
        State::Completed => {
            let response = stored.ok_or_else(|| {
                LedgerError::Corrupt(format!("entry {} is completed without a response", row.id))
            })?;
            add_replays(ctx.db, row.id, 1, at)?;
            bump_hourly(ctx, at, REPLAY_ABSORBED);
            Ok(ClaimOutcome::Replay {
                entry_id: row.id,
                response,
            })
        }
        // A rejected or expired approval, unless an operator has since given an answer.
        State::Failed if stored.is_none() && row.approval_end.is_some() => {
            Ok(ClaimOutcome::NotApproved {
                entry_id: row.id,
                end: row.approval_end.unwrap_or(ApprovalEnd::Rejected),
                reason: read::resolution_reason(ctx.db, row.id)?,
            })
        }
        State::Failed => Ok(ClaimOutcome::Failed {
            entry_id: row.id,
            response: stored,
        }),
        State::Released => {
            let attempt = row.attempts + 1;
            rearm(
                ctx,
                &row,
                c,
                attempt,
                json!({"attempt": attempt, "after": "release"}),
            )
        }
        State::AwaitingApproval => approval::claim_held(ctx, &row, at),
        State::Pending if row.stuck(at) => Ok(ClaimOutcome::Stuck { entry_id: row.id }),
        State::Pending => Ok(ClaimOutcome::InFlight {
            entry_id: row.id,
            lease_expires_at: row.lease_expires_at.unwrap_or(at),
        }),
    }
}

/// Whether `row`, whose fingerprint is not the request's, was claimed with this very request
/// before fingerprints covered the request target ([`crate::canon::with_target`]): its
/// fingerprint is the request's without the target, and it was claimed at the same path and
/// query. The target must be compared here: the fingerprint without it is also what a request
/// at exactly the route's path has today.
fn claimed_before_targets_counted(db: &mut dyn Db, row: &Row, req: &ClaimRequest) -> Result<bool> {
    if req.legacy_fingerprint.as_deref() != Some(row.fingerprint.as_str()) {
        return Ok(false);
    }
    let path = db.opt(
        "SELECT req_path FROM entries WHERE id = ?1",
        vals![row.id],
        |r| r.opt_text(0),
    )?;
    // Stored before secret query parameters were left out of targets (stored ones had them).
    Ok(path
        .flatten()
        .is_some_and(|p| without_secret_params(&p, &[]) == req.request.path))
}

/// Indexes entry `id`'s subjects for search.
fn write_subjects(ctx: &mut Ctx<'_>, id: i64, subjects: &[(String, String)]) -> Result<()> {
    for (name, value) in subjects {
        ctx.exec_later(
            "INSERT INTO subjects (value, name, entry_id) VALUES (?1, ?2, ?3) \
             ON CONFLICT DO NOTHING",
            vals![value, name, id],
        )?;
    }
    Ok(())
}

/// Counts and logs the new entry `id` of a first claim.
fn claimed(ctx: &mut Ctx<'_>, c: &Claim, id: i64) -> Result<ClaimOutcome> {
    let req = &c.req;
    write_subjects(ctx, id, &req.subjects)?;
    moved(ctx, None, Some(State::Pending));
    append(
        ctx,
        NewEvent {
            at: req.at,
            kind: EventKind::Claim,
            entry_id: Some(id),
            route: &req.route,
            scope: &req.scope,
            key: &req.key,
            actor: None,
            detail: c.detail.clone(),
            payload_digest: Some(c.digest.clone()),
            tail: Some(&c.tail),
        },
    )?;
    if let Some(ask) = &req.approval {
        return approval::hold(ctx, id, c, ask);
    }
    Ok(ClaimOutcome::Claimed {
        entry_id: id,
        attempt: 1,
    })
}

/// Re-arms an existing row (released, or expired) for a new execution.
fn rearm(
    ctx: &mut Ctx<'_>,
    row: &Row,
    c: &Claim,
    attempt: i64,
    detail: serde_json::Value,
) -> Result<ClaimOutcome> {
    let req = &c.req;
    let at = req.at;
    let request = &req.request;
    ctx.db.exec(
        "UPDATE entries SET fingerprint = ?2, effect = ?3, state = 'pending', attempts = ?4, \
         lease_owner = ?5, lease_expires_at = ?6, outcome_unknown = 0, last_error = NULL, \
         req_method = ?7, req_path = ?8, req_headers = ?9, req_body = ?10, resp_status = NULL, \
         resp_headers = NULL, resp_body = NULL, duplicate_of = NULL, updated_at = ?11, \
         completed_at = NULL, expires_at = ?12, resolved_by = NULL, resolution_reason = NULL, \
         external_ref = NULL, stuck_logged = 0, expiry_logged = 0, tool = ?13, subjects = ?14, \
         dup_fp = ?15, approval_policy = NULL, approval_hash = NULL, approvals_needed = NULL, \
         approval_expires_at = NULL, approved_by = NULL, approval_end = NULL, \
         approval_ended_at = NULL, approvers = NULL WHERE id = ?1",
        vals![
            row.id,
            &req.fingerprint,
            req.effect.as_str(),
            attempt,
            &req.owner,
            at + req.lease_ms,
            &request.method,
            &request.path,
            &c.headers,
            &request.body,
            at,
            at + req.ttl_ms,
            req.tool.as_deref(),
            c.subjects.as_deref(),
            req.dup_fp.as_deref(),
        ],
    )?;
    ctx.db
        .exec("DELETE FROM subjects WHERE entry_id = ?1", vals![row.id])?;
    write_subjects(ctx, row.id, &req.subjects)?;
    moved(ctx, Some(row.state), Some(State::Pending));
    let mut ev = row.event(at, EventKind::Claim, detail);
    ev.payload_digest = Some(c.digest.clone());
    append(ctx, ev)?;
    if let Some(ask) = &req.approval {
        return approval::hold(ctx, row.id, c, ask);
    }
    Ok(ClaimOutcome::Claimed {
        entry_id: row.id,
        attempt,
    })
}
