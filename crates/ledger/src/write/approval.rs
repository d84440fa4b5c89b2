//! Approvals: a claim that matches an approval policy is held, unforwarded, until enough
//! operators approve it (then a server takes it and forwards it), one rejects it, or its window
//! passes. Each step is an event of the log.

use serde_json::json;

use super::log::{append, moved, NewEvent};
use crate::canon::canonical_string;
use crate::db::vals;
use crate::entry_row::{map_row, row_by_id, Row, ROW_COLS};
use crate::error::{LedgerError, Result};
use crate::model::{check_undecided, Approval, ApprovalEnd, Decider, EventKind, Millis, State};
use crate::prepared::Claim;
use crate::read;
use crate::store::{ApprovalAsk, ClaimOutcome, DecideRequest, Redrive};
use crate::writer::Ctx;

/// Holds entry `id`, just claimed (new or re-armed) for `c`, for the approval `ask`: nothing is
/// forwarded, and no lease runs until it is taken. Its TTL counts from its window's end.
pub(super) fn hold(
    ctx: &mut Ctx<'_>,
    id: i64,
    c: &Claim,
    ask: &ApprovalAsk,
) -> Result<ClaimOutcome> {
    let (req, at) = (&c.req, c.req.at);
    let expires_at = at + ask.expires_ms;
    let approvers = ask
        .approvers
        .as_ref()
        .map(|a| serde_json::to_string(a).unwrap_or_default());
    ctx.exec_later(
        "UPDATE entries SET state = 'awaiting_approval', lease_owner = NULL, \
         lease_expires_at = NULL, approval_policy = ?2, approval_hash = ?3, \
         approvals_needed = ?4, approval_expires_at = ?5, approved_by = '[]', \
         approval_end = NULL, approval_ended_at = NULL, expires_at = ?6, approvers = ?7, \
         expiry_logged = 0 WHERE id = ?1",
        vals![
            id,
            &ask.policy,
            &ask.policy_hash,
            i64::from(ask.needed),
            expires_at,
            expires_at + req.ttl_ms,
            approvers.as_deref()
        ],
    )?;
    moved(ctx, Some(State::Pending), Some(State::AwaitingApproval));
    let mut detail = json!({
        "policy": ask.policy,
        "policy_hash": ask.policy_hash,
        "approvals": ask.needed,
        "approvers": ask.approvers,
        "expires_at": expires_at,
        "fingerprint": req.fingerprint,
    });
    if let Some(why) = &ask.unevaluated {
        detail["unevaluated"] = json!(why);
    }
    append(
        ctx,
        NewEvent {
            at,
            kind: EventKind::ApprovalRequested,
            entry_id: Some(id),
            route: &req.route,
            scope: &req.scope,
            key: &req.key,
            actor: None,
            detail: canonical_string(&detail),
            payload_digest: None,
            tail: None,
        },
    )?;
    Ok(ClaimOutcome::AwaitingApproval {
        entry_id: id,
        expires_at,
        requested: true,
    })
}

/// What a claim of a held entry's key gets: still held, or refused for good once its window
/// passed (logged here if the sweeper has not).
pub(super) fn claim_held(ctx: &mut Ctx<'_>, row: &Row, at: Millis) -> Result<ClaimOutcome> {
    if row.approval_lapsed(at) {
        lapse(ctx, row, at)?;
        return Ok(ClaimOutcome::NotApproved {
            entry_id: row.id,
            end: ApprovalEnd::Expired,
            reason: None,
        });
    }
    Ok(ClaimOutcome::AwaitingApproval {
        entry_id: row.id,
        expires_at: row.approval_expires_at.unwrap_or(at),
        requested: false,
    })
}

/// An operator's approval or rejection of held entry `req.entry_id`.
pub(crate) fn decide(ctx: &mut Ctx<'_>, req: &DecideRequest) -> Result<Approval> {
    super::operator::check_actor(&req.actor)?;
    let row = row_by_id(ctx.db, req.entry_id)?;
    check_undecided(row.id, row.state, row.approval_end, req.approve)?;
    let approval = read::approval(ctx.db, row.id)?
        .ok_or_else(|| LedgerError::Corrupt(format!("entry {} holds no approval", row.id)))?;
    check_decision(&row, &approval, req)?;
    let bound = json!({
        "policy": approval.policy,
        "policy_hash": approval.policy_hash,
        "fingerprint": row.fingerprint,
        "expires_at": approval.expires_at,
    });
    if req.approve {
        approve(ctx, &row, approval, req, bound)
    } else {
        let mut ev = row.event(req.at, EventKind::Rejected, bound);
        ev.actor = Some(&req.actor);
        close(ctx, &row, ApprovalEnd::Rejected, ev)?;
        Ok(Approval {
            end: Some(ApprovalEnd::Rejected),
            ended_at: Some(req.at),
            ..approval
        })
    }
}

/// Whether `req` may decide on held entry `row`: on the request it holds, and as
/// [`Approval::refusal`] allows.
fn check_decision(row: &Row, approval: &Approval, req: &DecideRequest) -> Result<()> {
    let refuse = |why: String| Err(LedgerError::ApprovalRefused(why));
    if req
        .fingerprint
        .as_ref()
        .is_some_and(|fp| *fp != row.fingerprint)
    {
        return refuse(format!(
            "entry {} holds another request than the one decided on (fingerprint {})",
            row.id, row.fingerprint
        ));
    }
    match approval.refusal(
        row.id,
        req.at,
        req.approve,
        Decider::of(&req.actor.operator),
    ) {
        Some(why) => refuse(why),
        None => Ok(()),
    }
}

/// Adds an approval; the last one the policy needs releases the call (a server takes it). The
/// approval as it now stands.
fn approve(
    ctx: &mut Ctx<'_>,
    row: &Row,
    mut approval: Approval,
    req: &DecideRequest,
    mut detail: serde_json::Value,
) -> Result<Approval> {
    approval.approved_by.push(req.actor.operator.clone());
    let by = &approval.approved_by;
    let released = by.len() >= approval.needed as usize;
    let by_json = serde_json::to_string(by).unwrap_or_default();
    ctx.db.exec(
        "UPDATE entries SET approved_by = ?2, updated_at = ?3, approval_end = ?4, \
         approval_ended_at = ?5 WHERE id = ?1",
        vals![
            row.id,
            &by_json,
            req.at,
            released.then_some(ApprovalEnd::Approved.as_str()),
            released.then_some(req.at)
        ],
    )?;
    detail["approvals"] = json!(by.len());
    detail["needed"] = json!(approval.needed);
    let mut ev = row.event(req.at, EventKind::Approved, detail);
    ev.actor = Some(&req.actor);
    append(ctx, ev)?;
    if released {
        approval.end = Some(ApprovalEnd::Approved);
        approval.ended_at = Some(req.at);
    }
    Ok(approval)
}

/// Ends held entry `row`'s approval as `end` (rejected, or expired) with the event `ev` that
/// says so: it fails, never runs, and its retries are told why (a rejection's operator and
/// reason are kept as the entry's resolution).
fn close(ctx: &mut Ctx<'_>, row: &Row, end: ApprovalEnd, ev: NewEvent<'_>) -> Result<()> {
    ctx.db.exec(
        "UPDATE entries SET state = 'failed', approval_end = ?2, approval_ended_at = ?3, \
         updated_at = ?3, resolved_by = ?4, resolution_reason = ?5, expires_at = ?6, \
         expiry_logged = 0 WHERE id = ?1",
        vals![
            row.id,
            end.as_str(),
            ev.at,
            ev.actor.map(|a| a.operator.as_str()),
            ev.actor.map(|a| a.reason.as_str()),
            ev.at + ttl_of(row)
        ],
    )?;
    moved(ctx, Some(State::AwaitingApproval), Some(State::Failed));
    append(ctx, ev)?;
    Ok(())
}

/// How long the entry's key is kept once it is settled: what its claim asked for, which the
/// hold added to the approval's window.
fn ttl_of(row: &Row) -> i64 {
    match (row.expires_at, row.approval_expires_at) {
        (Some(e), Some(a)) => (e - a).max(0),
        _ => 0,
    }
}

/// Takes up to `limit` approved entries for `owner` to forward, oldest approval first: each is
/// pending again under a lease of `lease_ms` from now, its TTL counted from now, and logged as a
/// claim after the approval. One taker wins each entry, whichever instance asks.
pub(crate) fn take_approved(
    ctx: &mut Ctx<'_>,
    owner: &str,
    lease_ms: i64,
    at: Millis,
    limit: u32,
) -> Result<Vec<Redrive>> {
    let lock = ctx.db.dialect().skip_locked();
    let rows: Vec<Row> = ctx.db.all(
        &format!(
            "SELECT {ROW_COLS} FROM entries WHERE state = 'awaiting_approval' \
             AND approval_end = 'approved' ORDER BY approval_ended_at, id LIMIT ?1{lock}"
        ),
        vals![i64::from(limit)],
        map_row,
    )?;
    let mut taken = Vec::with_capacity(rows.len());
    for row in rows {
        ctx.db.exec(
            "UPDATE entries SET state = 'pending', lease_owner = ?2, lease_expires_at = ?3, \
             updated_at = ?4, expires_at = ?5 WHERE id = ?1",
            vals![row.id, owner, at + lease_ms, at, at + ttl_of(&row)],
        )?;
        moved(ctx, Some(State::AwaitingApproval), Some(State::Pending));
        append(
            ctx,
            row.event(
                at,
                EventKind::Claim,
                json!({"attempt": row.attempts, "after": "approval", "owner": owner}),
            ),
        )?;
        taken.push(super::operator::handed_out(ctx, row.id, row.attempts, at)?);
    }
    Ok(taken)
}

/// Ends held entry `row`'s approval as expired: it fails, and never runs.
pub(super) fn lapse(ctx: &mut Ctx<'_>, row: &Row, at: Millis) -> Result<()> {
    let detail = json!({"expires_at": row.approval_expires_at});
    let ev = row.event(at, EventKind::ApprovalExpired, detail);
    close(ctx, row, ApprovalEnd::Expired, ev)
}

/// The held entries whose window has passed undecided, at most `limit`.
pub(super) fn lapsed(ctx: &mut Ctx<'_>, at: Millis, limit: usize) -> Result<Vec<Row>> {
    let lock = ctx.db.dialect().skip_locked();
    ctx.db.all(
        &format!(
            "SELECT {ROW_COLS} FROM entries WHERE state = 'awaiting_approval' \
             AND approval_end IS NULL AND approval_expires_at <= ?1 \
             ORDER BY approval_expires_at, id LIMIT {limit}{lock}"
        ),
        vals![at],
        map_row,
    )
}
