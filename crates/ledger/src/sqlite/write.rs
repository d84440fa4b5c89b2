//! Every write, run by the writer thread inside the batch transaction. This file is the entry state
//! machine: each function checks the entry's state, changes it, and appends the event(s) that say so.

use rusqlite::{params, Connection, OptionalExtension};
use serde_json::json;

use super::read;
use super::Ctx;
use crate::canon::sha256_hex;
use crate::error::{LedgerError, Result};
use crate::model::*;
use crate::store::*;

/// The fields of an event the caller chooses; the rest (seq, hashes) are the chain's.
pub(crate) struct NewEvent<'a> {
    pub at: Millis,
    pub kind: EventKind,
    pub entry_id: Option<i64>,
    pub route: &'a str,
    pub scope: &'a str,
    pub key: &'a str,
    pub actor: Option<&'a Actor>,
    pub detail: serde_json::Value,
    pub payload_digest: Option<String>,
}

/// The hourly counter of replays answered from the ledger (not an event: replays are counters).
pub const REPLAY_ABSORBED: &str = "replay_absorbed";

fn bump_hourly(conn: &Connection, at: Millis, kind: &str) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO event_counts (hour, kind, n) VALUES (?1, ?2, 1) \
         ON CONFLICT (hour, kind) DO UPDATE SET n = n + 1",
    )?
    .execute(params![at - at.rem_euclid(3_600_000), kind])?;
    Ok(())
}

/// Appends one event to the chain and bumps its hourly counter.
pub(crate) fn append(ctx: &mut Ctx<'_>, ne: NewEvent<'_>) -> Result<i64> {
    let mut ev = Event {
        seq: ctx.head.seq + 1,
        at: ne.at,
        kind: ne.kind.as_str().to_owned(),
        entry_id: ne.entry_id,
        route: ne.route.to_owned(),
        scope: ne.scope.to_owned(),
        key: ne.key.to_owned(),
        operator: ne.actor.map(|a| a.operator.clone()),
        reason: ne.actor.map(|a| a.reason.clone()),
        detail: crate::canon::canonical_string(&ne.detail),
        payload_digest: ne.payload_digest,
        prev_hash: std::mem::take(&mut ctx.head.hash),
        hash: String::new(),
    };
    ev.hash = ctx.hasher.hash(&ev);
    ctx.conn
        .prepare_cached(
            "INSERT INTO events (seq, at, kind, entry_id, route, scope, key, operator, reason, detail, \
             payload_digest, prev_hash, hash) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
        )?
        .execute(params![
            ev.seq,
            ev.at,
            ev.kind,
            ev.entry_id,
            ev.route,
            ev.scope,
            ev.key,
            ev.operator,
            ev.reason,
            ev.detail,
            ev.payload_digest,
            ev.prev_hash,
            ev.hash
        ])?;
    bump_hourly(ctx.conn, ev.at, &ev.kind)?;
    ctx.head.seq = ev.seq;
    ctx.head.hash = ev.hash;
    Ok(ev.seq)
}

/// The columns of an entry the state machine needs.
struct Row {
    id: i64,
    route: String,
    scope: String,
    key: String,
    fingerprint: String,
    state: State,
    attempts: i64,
    lease_owner: Option<String>,
    lease_expires_at: Option<Millis>,
    outcome_unknown: bool,
    expires_at: Option<Millis>,
    expiry_logged: bool,
}

impl Row {
    fn stuck(&self, now: Millis) -> bool {
        self.state == State::Pending
            && (self.outcome_unknown || self.lease_expires_at.is_some_and(|l| l <= now))
    }

    fn expired(&self, now: Millis) -> bool {
        self.state != State::Pending && self.expires_at.is_some_and(|e| e <= now)
    }

    fn event<'a>(&'a self, at: Millis, kind: EventKind, detail: serde_json::Value) -> NewEvent<'a> {
        NewEvent {
            at,
            kind,
            entry_id: Some(self.id),
            route: &self.route,
            scope: &self.scope,
            key: &self.key,
            actor: None,
            detail,
            payload_digest: None,
        }
    }
}

const ROW_COLS: &str = "id, route, scope, key, fingerprint, state, attempts, lease_owner, \
                        lease_expires_at, outcome_unknown, expires_at, expiry_logged";

fn map_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    let state: String = r.get(5)?;
    Ok(Row {
        id: r.get(0)?,
        route: r.get(1)?,
        scope: r.get(2)?,
        key: r.get(3)?,
        fingerprint: r.get(4)?,
        state: State::parse(&state).unwrap_or(State::Pending),
        attempts: r.get(6)?,
        lease_owner: r.get(7)?,
        lease_expires_at: r.get(8)?,
        outcome_unknown: r.get(9)?,
        expires_at: r.get(10)?,
        expiry_logged: r.get(11)?,
    })
}

fn row_by_id(conn: &Connection, id: i64) -> Result<Row> {
    conn.prepare_cached(&format!("SELECT {ROW_COLS} FROM entries WHERE id = ?1"))?
        .query_row([id], map_row)
        .optional()?
        .ok_or(LedgerError::EntryNotFound(id))
}

fn headers_json(h: &[(String, String)]) -> String {
    serde_json::to_string(h).unwrap_or_else(|_| "[]".into())
}

fn stored_response(conn: &Connection, id: i64) -> Result<Option<ResponseRecord>> {
    Ok(conn
        .prepare_cached("SELECT resp_status, resp_headers, resp_body FROM entries WHERE id = ?1")?
        .query_row([id], read::response_cols(0))?)
}

pub(crate) fn claim(ctx: &mut Ctx<'_>, req: ClaimRequest) -> Result<ClaimOutcome> {
    let at = req.at;
    let existing = ctx
        .conn
        .prepare_cached(&format!(
            "SELECT {ROW_COLS} FROM entries WHERE route = ?1 AND scope = ?2 AND key = ?3"
        ))?
        .query_row(params![req.route, req.scope, req.key], map_row)
        .optional()?;

    let Some(row) = existing else {
        if let Some(o) = reject_duplicate(ctx, &req)? {
            return Ok(o);
        }
        return insert_claim(ctx, req);
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
        if let Some(o) = reject_duplicate(ctx, &req)? {
            return Ok(o);
        }
        return rearm(ctx, &row, &req, 1, json!({"attempt": 1, "after": "expiry"}));
    }

    if row.fingerprint != req.fingerprint {
        let request = req.request.redacted();
        let digest = sha256_hex(&request.body);
        ctx.conn
            .prepare_cached(
                "INSERT INTO collisions (entry_id, at, fingerprint, req_method, req_path, req_headers, \
                 req_body) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?
            .execute(params![
                row.id,
                at,
                req.fingerprint,
                request.method,
                request.path,
                headers_json(&request.headers),
                request.body
            ])?;
        ctx.conn
            .prepare_cached("UPDATE entries SET collisions = collisions + 1 WHERE id = ?1")?
            .execute([row.id])?;
        let mut ev = row.event(
            at,
            EventKind::Collision,
            json!({"stored_fingerprint": row.fingerprint, "rejected_fingerprint": req.fingerprint}),
        );
        ev.payload_digest = Some(digest);
        append(ctx, ev)?;
        return Ok(ClaimOutcome::Collision { entry_id: row.id });
    }

    match row.state {
        State::Completed => {
            let response = stored_response(ctx.conn, row.id)?.ok_or_else(|| {
                LedgerError::Corrupt(format!("entry {} is completed without a response", row.id))
            })?;
            ctx.conn
                .prepare_cached(
                    "UPDATE entries SET replays = replays + 1, last_replay_at = ?2 WHERE id = ?1",
                )?
                .execute(params![row.id, at])?;
            bump_hourly(ctx.conn, at, REPLAY_ABSORBED)?;
            Ok(ClaimOutcome::Replay {
                entry_id: row.id,
                response,
            })
        }
        State::Failed => Ok(ClaimOutcome::Failed {
            entry_id: row.id,
            response: stored_response(ctx.conn, row.id)?,
        }),
        State::Released => {
            let attempt = row.attempts + 1;
            rearm(
                ctx,
                &row,
                &req,
                attempt,
                json!({"attempt": attempt, "after": "release"}),
            )
        }
        State::Pending if row.stuck(at) => Ok(ClaimOutcome::Stuck { entry_id: row.id }),
        State::Pending => Ok(ClaimOutcome::InFlight {
            entry_id: row.id,
            lease_expires_at: row.lease_expires_at.unwrap_or(at),
        }),
    }
}

/// With the reject policy: refuses a claim whose effect completed under another key in the window.
fn reject_duplicate(ctx: &mut Ctx<'_>, req: &ClaimRequest) -> Result<Option<ClaimOutcome>> {
    let Some(window) = req.reject_duplicates_within_ms else {
        return Ok(None);
    };
    let found = find_duplicate(
        ctx.conn,
        &req.route,
        &req.scope,
        &req.fingerprint,
        &req.key,
        req.at - window,
        None,
    )?;
    let Some((id, key)) = found else {
        return Ok(None);
    };
    append(
        ctx,
        NewEvent {
            at: req.at,
            kind: EventKind::DuplicateSuspect,
            entry_id: Some(id),
            route: &req.route,
            scope: &req.scope,
            key: &req.key,
            actor: None,
            detail: json!({"rejected": true, "duplicate_of": id, "duplicate_of_key": key,
                           "fingerprint": req.fingerprint}),
            payload_digest: Some(sha256_hex(&req.request.body)),
        },
    )?;
    Ok(Some(ClaimOutcome::ProbableDuplicate { entry_id: id, key }))
}

/// The earliest entry (other than `exclude`) that completed the same effect — route, scope and
/// fingerprint — under another key since `since`.
fn find_duplicate(
    conn: &Connection,
    route: &str,
    scope: &str,
    fingerprint: &str,
    key: &str,
    since: Millis,
    exclude: Option<i64>,
) -> Result<Option<(i64, String)>> {
    Ok(conn
        .prepare_cached(
            "SELECT id, key FROM entries WHERE route = ?1 AND scope = ?2 AND fingerprint = ?3 \
             AND state = 'completed' AND completed_at >= ?4 AND key <> ?5 AND id <> ?6 \
             ORDER BY completed_at LIMIT 1",
        )?
        .query_row(
            params![route, scope, fingerprint, since, key, exclude.unwrap_or(-1)],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?)
}

fn insert_claim(ctx: &mut Ctx<'_>, req: ClaimRequest) -> Result<ClaimOutcome> {
    let at = req.at;
    let request = req.request.redacted();
    let digest = sha256_hex(&request.body);
    ctx.conn
        .prepare_cached(
            "INSERT INTO entries (route, scope, key, fingerprint, effect, state, attempts, lease_owner, \
             lease_expires_at, req_method, req_path, req_headers, req_body, created_at, updated_at, \
             expires_at) VALUES (?1, ?2, ?3, ?4, ?5, 'pending', 1, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?12, ?13)",
        )?
        .execute(params![
            req.route,
            req.scope,
            req.key,
            req.fingerprint,
            req.effect.as_str(),
            req.owner,
            at + req.lease_ms,
            request.method,
            request.path,
            headers_json(&request.headers),
            request.body,
            at,
            at + req.ttl_ms,
        ])?;
    let id = ctx.conn.last_insert_rowid();
    append(
        ctx,
        NewEvent {
            at,
            kind: EventKind::Claim,
            entry_id: Some(id),
            route: &req.route,
            scope: &req.scope,
            key: &req.key,
            actor: None,
            detail: json!({"attempt": 1, "fingerprint": req.fingerprint, "owner": req.owner,
                           "method": request.method, "path": request.path}),
            payload_digest: Some(digest),
        },
    )?;
    Ok(ClaimOutcome::Claimed {
        entry_id: id,
        attempt: 1,
    })
}

/// Re-arms an existing row (released, or expired) for a new execution.
fn rearm(
    ctx: &mut Ctx<'_>,
    row: &Row,
    req: &ClaimRequest,
    attempt: i64,
    detail: serde_json::Value,
) -> Result<ClaimOutcome> {
    let at = req.at;
    let request = req.request.clone().redacted();
    let digest = sha256_hex(&request.body);
    ctx.conn
        .prepare_cached(
            "UPDATE entries SET fingerprint = ?2, effect = ?3, state = 'pending', attempts = ?4, \
             lease_owner = ?5, lease_expires_at = ?6, outcome_unknown = 0, last_error = NULL, \
             req_method = ?7, req_path = ?8, req_headers = ?9, req_body = ?10, resp_status = NULL, \
             resp_headers = NULL, resp_body = NULL, duplicate_of = NULL, updated_at = ?11, \
             completed_at = NULL, expires_at = ?12, resolved_by = NULL, resolution_reason = NULL, \
             external_ref = NULL, stuck_logged = 0, expiry_logged = 0 WHERE id = ?1",
        )?
        .execute(params![
            row.id,
            req.fingerprint,
            req.effect.as_str(),
            attempt,
            req.owner,
            at + req.lease_ms,
            request.method,
            request.path,
            headers_json(&request.headers),
            request.body,
            at,
            at + req.ttl_ms,
        ])?;
    let mut ev = row.event(at, EventKind::Claim, detail);
    ev.payload_digest = Some(digest);
    append(ctx, ev)?;
    Ok(ClaimOutcome::Claimed {
        entry_id: row.id,
        attempt,
    })
}

/// The entry must be PENDING and leased by `owner`.
fn owned(conn: &Connection, id: i64, owner: &str, action: &'static str) -> Result<Row> {
    let row = row_by_id(conn, id)?;
    if row.state != State::Pending {
        return Err(LedgerError::InvalidTransition {
            id,
            state: row.state.to_string(),
            action,
            needed: "pending",
        });
    }
    if row.lease_owner.as_deref() != Some(owner) {
        return Err(LedgerError::LeaseLost(id));
    }
    Ok(row)
}

/// Records a retry after an outcome that was not executed, and renews the lease for it.
pub(crate) fn record_attempt(
    ctx: &mut Ctx<'_>,
    rep: OwnerReport,
    attempt: i64,
    lease_ms: i64,
) -> Result<()> {
    let row = owned(ctx.conn, rep.entry_id, &rep.owner, "record attempt")?;
    ctx.conn
        .prepare_cached(
            "UPDATE entries SET attempts = ?2, last_error = ?3, updated_at = ?4, \
             lease_expires_at = ?5 WHERE id = ?1",
        )?
        .execute(params![
            row.id,
            attempt,
            rep.error,
            rep.at,
            rep.at + lease_ms
        ])?;
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

pub(crate) fn complete(ctx: &mut Ctx<'_>, req: CompleteRequest) -> Result<CompleteOutcome> {
    let row = owned(ctx.conn, req.entry_id, &req.owner, "complete")?;
    let resp = req.response.redacted();
    store_completion(ctx.conn, row.id, &resp, req.at, req.ttl_ms)?;
    let mut ev = row.event(req.at, EventKind::Complete, json!({"status": resp.status}));
    ev.payload_digest = Some(sha256_hex(&resp.body));
    append(ctx, ev)?;
    let duplicate_of = match req.duplicate_window_ms {
        Some(window) => flag_duplicate(ctx, &row, window, req.at)?,
        None => None,
    };
    Ok(CompleteOutcome { duplicate_of })
}

fn store_completion(
    conn: &Connection,
    id: i64,
    resp: &ResponseRecord,
    at: Millis,
    ttl_ms: i64,
) -> Result<()> {
    conn.prepare_cached(
        "UPDATE entries SET state = 'completed', resp_status = ?2, resp_headers = ?3, resp_body = ?4, \
         lease_owner = NULL, lease_expires_at = NULL, outcome_unknown = 0, updated_at = ?5, \
         completed_at = ?5, expires_at = ?6, expiry_logged = 0 WHERE id = ?1",
    )?
    .execute(params![id, resp.status, headers_json(&resp.headers), resp.body, at, at + ttl_ms])?;
    Ok(())
}

/// Marks `row` a duplicate suspect when its effect completed under another key within `window`.
fn flag_duplicate(ctx: &mut Ctx<'_>, row: &Row, window: i64, at: Millis) -> Result<Option<i64>> {
    let found = find_duplicate(
        ctx.conn,
        &row.route,
        &row.scope,
        &row.fingerprint,
        &row.key,
        at - window,
        Some(row.id),
    )?;
    let Some((dup_id, dup_key)) = found else {
        return Ok(None);
    };
    ctx.conn
        .prepare_cached("UPDATE entries SET duplicate_of = ?2 WHERE id = ?1")?
        .execute(params![row.id, dup_id])?;
    append(
        ctx,
        row.event(
            at,
            EventKind::DuplicateSuspect,
            json!({"duplicate_of": dup_id, "duplicate_of_key": dup_key, "fingerprint": row.fingerprint}),
        ),
    )?;
    Ok(Some(dup_id))
}

pub(crate) fn mark_unknown(ctx: &mut Ctx<'_>, rep: OwnerReport) -> Result<()> {
    let row = owned(ctx.conn, rep.entry_id, &rep.owner, "mark outcome unknown")?;
    ctx.conn
        .prepare_cached(
            "UPDATE entries SET outcome_unknown = 1, last_error = ?2, updated_at = ?3, stuck_logged = 1 \
             WHERE id = ?1",
        )?
        .execute(params![row.id, rep.error, rep.at])?;
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

pub(crate) fn release(ctx: &mut Ctx<'_>, rep: OwnerReport) -> Result<()> {
    let row = owned(ctx.conn, rep.entry_id, &rep.owner, "release")?;
    ctx.conn
        .prepare_cached(
            "UPDATE entries SET state = 'released', lease_owner = NULL, lease_expires_at = NULL, \
             last_error = ?2, updated_at = ?3 WHERE id = ?1",
        )?
        .execute(params![row.id, rep.error, rep.at])?;
    append(
        ctx,
        row.event(rep.at, EventKind::Release, json!({"error": rep.error})),
    )?;
    Ok(())
}

/// Appends a `kind` event for each entry matching `condition` (at most 1000) and sets `flag` on it,
/// so each is logged once.
fn log_once(
    ctx: &mut Ctx<'_>,
    at: Millis,
    condition: &str,
    flag: &str,
    kind: EventKind,
    detail: impl Fn(&Row) -> serde_json::Value,
) -> Result<u64> {
    let rows: Vec<Row> = ctx
        .conn
        .prepare_cached(&format!(
            "SELECT {ROW_COLS} FROM entries WHERE {condition} LIMIT 1000"
        ))?
        .query_map([at], map_row)?
        .collect::<rusqlite::Result<_>>()?;
    for row in &rows {
        ctx.conn
            .prepare_cached(&format!("UPDATE entries SET {flag} = 1 WHERE id = ?1"))?
            .execute([row.id])?;
        append(ctx, row.event(at, kind, detail(row)))?;
    }
    Ok(rows.len() as u64)
}

/// Logs lease expiries and TTL expiries once each; at most 1000 of each per call.
pub(crate) fn sweep(ctx: &mut Ctx<'_>, at: Millis) -> Result<SweepReport> {
    let lease_expired = log_once(
        ctx,
        at,
        "state = 'pending' AND lease_expires_at <= ?1 AND stuck_logged = 0",
        "stuck_logged",
        EventKind::LeaseExpired,
        |row| json!({"owner": row.lease_owner, "lease_expires_at": row.lease_expires_at}),
    )?;
    let ttl_expired = log_once(
        ctx,
        at,
        "expires_at <= ?1 AND state <> 'pending' AND expiry_logged = 0",
        "expiry_logged",
        EventKind::Expired,
        |row| json!({"state": row.state}),
    )?;
    let report = SweepReport {
        lease_expired,
        ttl_expired,
    };
    Ok(report)
}

fn check_actor(actor: &Actor) -> Result<()> {
    if actor.operator.trim().is_empty() || actor.reason.trim().is_empty() {
        return Err(LedgerError::MissingActor);
    }
    Ok(())
}

pub(crate) fn resolve(ctx: &mut Ctx<'_>, req: ResolveRequest) -> Result<EntrySummary> {
    check_actor(&req.actor)?;
    let row = row_by_id(ctx.conn, req.entry_id)?;
    let refuse = |needed| LedgerError::InvalidTransition {
        id: row.id,
        state: if row.state == State::Pending {
            "pending and in flight".into()
        } else {
            row.state.to_string()
        },
        action: "resolve",
        needed,
    };
    match row.state {
        State::Completed => return Err(refuse("pending (stuck), released or failed")),
        State::Pending if !row.stuck(req.at) => {
            return Err(refuse("a stuck entry (lease passed or outcome unknown)"))
        }
        _ => {}
    }
    let mut detail = json!({"as": req.resolution.name(), "from": row.state});
    let mut digest = None;
    let mut external_ref = None;
    match &req.resolution {
        Resolution::Completed {
            response,
            external_ref: reference,
        } => {
            let resp = response.clone().redacted();
            store_completion(ctx.conn, row.id, &resp, req.at, req.ttl_ms)?;
            detail["status"] = json!(resp.status);
            detail["external_ref"] = json!(reference);
            digest = Some(sha256_hex(&resp.body));
            external_ref = reference.clone();
        }
        Resolution::Failed { response } => {
            let resp = response.clone().map(ResponseRecord::redacted);
            ctx.conn
                .prepare_cached(
                    "UPDATE entries SET state = 'failed', resp_status = ?2, resp_headers = ?3, \
                     resp_body = ?4, lease_owner = NULL, lease_expires_at = NULL, updated_at = ?5, \
                     expires_at = ?6, expiry_logged = 0 WHERE id = ?1",
                )?
                .execute(params![
                    row.id,
                    resp.as_ref().map(|r| r.status),
                    resp.as_ref().map(|r| headers_json(&r.headers)),
                    resp.as_ref().map(|r| r.body.clone()),
                    req.at,
                    req.at + req.ttl_ms
                ])?;
            if let Some(r) = &resp {
                detail["status"] = json!(r.status);
                digest = Some(sha256_hex(&r.body));
            }
        }
        Resolution::Released => {
            ctx.conn
                .prepare_cached(
                    "UPDATE entries SET state = 'released', lease_owner = NULL, lease_expires_at = NULL, \
                     updated_at = ?2 WHERE id = ?1",
                )?
                .execute(params![row.id, req.at])?;
        }
    }
    ctx.conn
        .prepare_cached(
            "UPDATE entries SET resolved_by = ?2, resolution_reason = ?3, external_ref = ?4 WHERE id = ?1",
        )?
        .execute(params![row.id, req.actor.operator, req.actor.reason, external_ref])?;
    let mut ev = row.event(req.at, EventKind::Resolve, detail);
    ev.actor = Some(&req.actor);
    ev.payload_digest = digest;
    append(ctx, ev)?;
    read::entry_summary(ctx.conn, row.id, req.at)
}

pub(crate) fn purge(ctx: &mut Ctx<'_>, req: PurgeRequest) -> Result<Vec<i64>> {
    check_actor(&req.actor)?;
    let mut purged = Vec::with_capacity(req.ids.len());
    for &id in &req.ids {
        let row = row_by_id(ctx.conn, id)?;
        if row.state == State::Pending {
            return Err(LedgerError::InvalidTransition {
                id,
                state: "pending".into(),
                action: "purge",
                needed: "completed, released or failed (resolve a pending entry first)",
            });
        }
        if req.only_expired && !row.expired(req.at) {
            continue;
        }
        ctx.conn
            .prepare_cached("DELETE FROM collisions WHERE entry_id = ?1")?
            .execute([id])?;
        ctx.conn
            .prepare_cached("DELETE FROM entries WHERE id = ?1")?
            .execute([id])?;
        let mut ev = row.event(
            req.at,
            EventKind::Purge,
            json!({"state": row.state, "expired": row.expired(req.at)}),
        );
        ev.actor = Some(&req.actor);
        append(ctx, ev)?;
        purged.push(id);
    }
    Ok(purged)
}

pub(crate) fn redrive(ctx: &mut Ctx<'_>, req: RedriveRequest) -> Result<Redrive> {
    check_actor(&req.actor)?;
    let row = row_by_id(ctx.conn, req.entry_id)?;
    let allowed = match row.state {
        State::Pending => row.stuck(req.at),
        State::Released | State::Failed => true,
        State::Completed => false,
    };
    if !allowed {
        return Err(LedgerError::InvalidTransition {
            id: row.id,
            state: if row.state == State::Pending {
                "pending and in flight".into()
            } else {
                row.state.to_string()
            },
            action: "replay",
            needed: "stuck, released or failed",
        });
    }
    let attempt = row.attempts + 1;
    ctx.conn
        .prepare_cached(
            "UPDATE entries SET state = 'pending', attempts = ?2, lease_owner = ?3, lease_expires_at = ?4, \
             outcome_unknown = 0, updated_at = ?5, stuck_logged = 0, resp_status = NULL, \
             resp_headers = NULL, resp_body = NULL WHERE id = ?1",
        )?
        .execute(params![row.id, attempt, req.owner, req.at + req.lease_ms, req.at])?;
    let mut ev = row.event(
        req.at,
        EventKind::Replay,
        json!({"attempt": attempt, "from": row.state, "owner": req.owner}),
    );
    ev.actor = Some(&req.actor);
    append(ctx, ev)?;
    let detail = read::entry(ctx.conn, row.id, req.at)?;
    let request = detail
        .request
        .clone()
        .ok_or_else(|| LedgerError::Corrupt(format!("entry {} has no stored request", row.id)))?;
    Ok(Redrive {
        entry: detail.summary,
        request,
        attempt,
    })
}

pub(crate) fn note_reconcile(ctx: &mut Ctx<'_>, note: ReconcileNote) -> Result<()> {
    check_actor(&note.actor)?;
    let row = row_by_id(ctx.conn, note.entry_id)?;
    let mut ev = row.event(note.at, EventKind::Reconcile, note.detail);
    ev.actor = Some(&note.actor);
    append(ctx, ev)?;
    Ok(())
}
