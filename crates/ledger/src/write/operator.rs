//! The writes an operator asks for: resolve, purge, re-drive (a replay's claim), the note of a
//! reconcile, and an incident's review and its withdrawal. Each checks who asks and why, then the
//! entry's state, as the proxy's writes do.

use serde_json::json;

use super::log::{append, moved, NewEvent};
use super::outcome::store_completion;
use crate::canon::canonical_string;
use crate::canon::sha256_hex;
use crate::db::vals;
use crate::entry_row::{row_by_id, Row};
use crate::error::{LedgerError, Result};
use crate::model::{Action, EntrySummary, EventKind, Millis, Review, State};
use crate::prepared::headers_json;
use crate::read;
use crate::store::{
    Actor, LoopNote, PurgeRequest, ReconcileNote, Redrive, RedriveRequest, Resolution,
    ResolveRequest, ReviewRequest,
};
use crate::writer::Ctx;

pub(super) fn check_actor(actor: &Actor) -> Result<()> {
    if actor.operator.trim().is_empty() || actor.reason.trim().is_empty() {
        return Err(LedgerError::MissingActor);
    }
    Ok(())
}

pub(crate) fn resolve(ctx: &mut Ctx<'_>, req: &ResolveRequest) -> Result<EntrySummary> {
    check_actor(&req.actor)?;
    let row = row_by_id(ctx.db, req.entry_id)?;
    let action = match req.resolution {
        Resolution::Released => Action::Release,
        Resolution::Completed { .. } | Resolution::Failed { .. } => Action::Resolve,
    };
    check_takes(&row, action, req.at)?;
    let mut detail = json!({"as": req.resolution.name(), "from": row.state});
    let mut digest = None;
    let mut external_ref = None;
    match &req.resolution {
        Resolution::Completed {
            response,
            external_ref: reference,
        } => {
            store_completion(ctx.db, row.id, response, req.at, req.ttl_ms)?;
            moved(ctx, Some(row.state), Some(State::Completed));
            detail["status"] = json!(response.status);
            detail["external_ref"] = json!(reference);
            digest = Some(sha256_hex(&response.body));
            external_ref = reference.clone();
        }
        Resolution::Failed { response } => {
            let resp = response.as_ref();
            let headers = resp.map(|r| headers_json(&r.headers));
            ctx.db.exec(
                "UPDATE entries SET state = 'failed', resp_status = ?2, resp_headers = ?3, \
                 resp_body = ?4, lease_owner = NULL, lease_expires_at = NULL, updated_at = ?5, \
                 expires_at = ?6, expiry_logged = 0 WHERE id = ?1",
                vals![
                    row.id,
                    resp.map(|r| i64::from(r.status)),
                    headers.as_ref(),
                    resp.map(|r| &r.body),
                    req.at,
                    req.at + req.ttl_ms
                ],
            )?;
            moved(ctx, Some(row.state), Some(State::Failed));
            if let Some(r) = resp {
                detail["status"] = json!(r.status);
                digest = Some(sha256_hex(&r.body));
            }
        }
        Resolution::Released => {
            ctx.db.exec(
                "UPDATE entries SET state = 'released', lease_owner = NULL, lease_expires_at = NULL, \
                 updated_at = ?2 WHERE id = ?1",
                vals![row.id, req.at],
            )?;
            moved(ctx, Some(row.state), Some(State::Released));
        }
    }
    ctx.db.exec(
        "UPDATE entries SET resolved_by = ?2, resolution_reason = ?3, external_ref = ?4 WHERE id = ?1",
        vals![
            row.id,
            &req.actor.operator,
            &req.actor.reason,
            external_ref.as_ref()
        ],
    )?;
    let mut ev = row.event(req.at, EventKind::Resolve, detail);
    ev.actor = Some(&req.actor);
    ev.payload_digest = digest;
    append(ctx, ev)?;
    read::entry_summary(ctx.db, row.id, req.at)
}

fn check_takes(row: &Row, action: Action, at: Millis) -> Result<()> {
    action.check(row.id, row.state, row.stuck(at))
}

pub(crate) fn purge(ctx: &mut Ctx<'_>, req: &PurgeRequest) -> Result<Vec<i64>> {
    check_actor(&req.actor)?;
    let mut purged = Vec::with_capacity(req.ids.len());
    for &id in &req.ids {
        let row = row_by_id(ctx.db, id)?;
        if req.expired_by.is_some_and(|by| !row.expired(by)) {
            continue;
        }
        check_takes(&row, Action::Purge, req.at)?;
        for table in ["collisions", "subjects"] {
            ctx.db.exec(
                &format!("DELETE FROM {table} WHERE entry_id = ?1"),
                vals![id],
            )?;
        }
        ctx.db
            .exec("DELETE FROM entries WHERE id = ?1", vals![id])?;
        moved(ctx, Some(row.state), None);
        let mut ev = row.event(
            req.at,
            EventKind::Purge,
            json!({"state": row.state, "expired": row.expired(req.at)}),
        );
        ev.actor = Some(&req.actor);
        append(ctx, ev)?;
        purged.push(id);
    }
    // An incident's review is keyed by its first entry, and lasts while any of the incident's
    // entries does: a purged first entry leaves its suspects an incident still reviewed.
    ctx.db.exec(
        "DELETE FROM reviews WHERE NOT EXISTS (SELECT 1 FROM entries \
         WHERE entries.id = reviews.entry_id OR entries.duplicate_of = reviews.entry_id)",
        &[],
    )?;
    Ok(purged)
}

pub(crate) fn redrive(ctx: &mut Ctx<'_>, req: &RedriveRequest) -> Result<Redrive> {
    check_actor(&req.actor)?;
    let row = row_by_id(ctx.db, req.entry_id)?;
    check_takes(&row, Action::Replay, req.at)?;
    let attempt = row.attempts + 1;
    ctx.db.exec(
        "UPDATE entries SET state = 'pending', attempts = ?2, lease_owner = ?3, lease_expires_at = ?4, \
         outcome_unknown = 0, updated_at = ?5, stuck_logged = 0, resp_status = NULL, \
         resp_headers = NULL, resp_body = NULL WHERE id = ?1",
        vals![row.id, attempt, &req.owner, req.at + req.lease_ms, req.at],
    )?;
    moved(ctx, Some(row.state), Some(State::Pending));
    let mut ev = row.event(
        req.at,
        EventKind::Replay,
        json!({"attempt": attempt, "from": row.state, "owner": req.owner}),
    );
    ev.actor = Some(&req.actor);
    append(ctx, ev)?;
    handed_out(ctx, row.id, attempt, req.at)
}

/// Entry `id`, just leased for `attempt`, as its new lease owner drives it: the entry and its
/// stored request.
pub(super) fn handed_out(ctx: &mut Ctx<'_>, id: i64, attempt: i64, at: Millis) -> Result<Redrive> {
    let detail = read::entry(ctx.db, id, at)?;
    let request = detail
        .request
        .ok_or_else(|| LedgerError::Corrupt(format!("entry {id} has no stored request")))?;
    Ok(Redrive {
        entry: detail.summary,
        request,
        attempt,
    })
}

pub(crate) fn note_reconcile(ctx: &mut Ctx<'_>, note: &ReconcileNote) -> Result<()> {
    check_actor(&note.actor)?;
    let row = row_by_id(ctx.db, note.entry_id)?;
    let mut ev = row.event(note.at, EventKind::Reconcile, note.detail.clone());
    ev.actor = Some(&note.actor);
    append(ctx, ev)?;
    Ok(())
}

/// Marks the incident whose first entry is `req.entry_id` reviewed, through its newest suspect:
/// a later suspect opens it again. Logged under the first entry, or under its oldest suspect
/// when the first entry was purged.
pub(crate) fn review(ctx: &mut Ctx<'_>, req: &ReviewRequest) -> Result<i64> {
    check_actor(&req.actor)?;
    let first = req.entry_id;
    let (row, through) = incident(ctx, first, "review")?;
    ctx.db
        .exec("DELETE FROM reviews WHERE entry_id = ?1", vals![first])?;
    ctx.db.exec(
        "INSERT INTO reviews (entry_id, through, operator, reason, at) VALUES (?1, ?2, ?3, ?4, ?5)",
        vals![
            first,
            through,
            &req.actor.operator,
            &req.actor.reason,
            req.at
        ],
    )?;
    let mut ev = row.event(
        req.at,
        EventKind::Review,
        json!({"incident": first, "through": through}),
    );
    ev.actor = Some(&req.actor);
    append(ctx, ev)?;
    Ok(through)
}

/// Withdraws the review of the incident whose first entry is `req.entry_id`, which is open
/// again; the review it withdrew. Logged as [`review`] is; refused for an incident no one
/// reviewed.
pub(crate) fn reopen(ctx: &mut Ctx<'_>, req: &ReviewRequest) -> Result<Review> {
    check_actor(&req.actor)?;
    let first = req.entry_id;
    let (row, _) = incident(ctx, first, "reopen")?;
    let withdrawn =
        read::review_of(ctx.db, first)?.ok_or_else(|| LedgerError::InvalidTransition {
            id: first,
            state: "not reviewed".into(),
            action: "reopen",
            needed: "a reviewed incident",
        })?;
    ctx.db
        .exec("DELETE FROM reviews WHERE entry_id = ?1", vals![first])?;
    let mut ev = row.event(
        req.at,
        EventKind::Reopen,
        json!({"incident": first, "through": withdrawn.through, "reviewed_by": withdrawn.operator}),
    );
    ev.actor = Some(&req.actor);
    append(ctx, ev)?;
    Ok(withdrawn)
}

/// The incident whose first entry is `first`: the entry its events are logged under (the first,
/// or its oldest suspect when the first was purged) and its newest suspect. Refused, for
/// `action`, when `first` begins no incident.
fn incident(ctx: &mut Ctx<'_>, first: i64, action: &'static str) -> Result<(Row, i64)> {
    let (oldest, through) = ctx.db.one(
        "SELECT MIN(id), MAX(id) FROM entries WHERE duplicate_of = ?1",
        vals![first],
        |r| Ok((r.opt_int(0)?, r.opt_int(1)?)),
    )?;
    let row = match (row_by_id(ctx.db, first), oldest) {
        (Err(LedgerError::EntryNotFound(_)), Some(oldest)) => row_by_id(ctx.db, oldest)?,
        (r, _) => r?,
    };
    let through = through.ok_or_else(|| LedgerError::InvalidTransition {
        id: first,
        state: "without duplicate suspects".into(),
        action,
        needed: "the first entry of an incident",
    })?;
    Ok((row, through))
}

/// Logs a loop suspect the proxy's loop guard saw: no entry changes.
pub(crate) fn note_loop(ctx: &mut Ctx<'_>, note: &LoopNote) -> Result<()> {
    append(
        ctx,
        NewEvent {
            at: note.at,
            kind: EventKind::LoopSuspect,
            entry_id: None,
            route: &note.route,
            scope: &note.scope,
            key: &note.key,
            actor: None,
            detail: canonical_string(&note.detail),
            payload_digest: None,
            tail: None,
        },
    )?;
    Ok(())
}
