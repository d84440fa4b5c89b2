//! Every write, run by the writer thread inside the batch transaction. This file is the entry state
//! machine: each function checks the entry's state, changes it, and appends the event(s) that say so.

use serde_json::json;

use crate::canon::canonical_string;
use crate::db::{vals, Db, Dialect};
use crate::entry_row::{row_by_id, Row};
use crate::error::{LedgerError, Result};
use crate::model::{without_secret_params, ApprovalEnd, Event, EventKind, Millis, State};
use crate::prepared::Claim;
use crate::read;
use crate::store::{Actor, ClaimOutcome, ClaimRequest, OwnerReport};
use crate::writer::Ctx;

mod approval;
mod archival;
mod duplicates;
mod insert;
pub(crate) mod intake;
mod operator;
mod outcome;
mod sweep;
mod tools;
mod tree;
pub(crate) use approval::{decide, take_approved};
pub use archival::RETENTION_OPERATOR;
pub(crate) use archival::{drop_archived, mark_archived, note_checkpoint, note_retention};
#[cfg(test)]
pub(crate) use duplicates::FIND_DUPLICATE;
use duplicates::{flag_duplicate, reject_duplicate};
#[cfg(test)]
pub(crate) use insert::INSERT_OR_LOOKUP;
pub(crate) use insert::{effect_key, effect_locks, EFFECT_LOCK_SPACE};
use insert::{first, First};
pub(crate) use operator::{note_loop, note_reconcile, purge, redrive, reopen, resolve, review};
use outcome::store_completion;
#[cfg(test)]
pub(crate) use outcome::COMPLETION;
pub(crate) use outcome::{complete, mark_unknown, release};
pub(crate) use sweep::sweep;
#[cfg(test)]
pub(crate) use sweep::{EXPIRIES_DUE, LEASES_DUE};
pub(crate) use tools::note_tools;
pub(crate) use tree::{
    cosign_tree_checkpoint, extend_tree, extend_tree_alone, note_tree_checkpoint,
};

/// The fields of an event the caller chooses; the rest (seq, hashes) are the chain's.
pub(crate) struct NewEvent<'a> {
    pub at: Millis,
    pub kind: EventKind,
    pub entry_id: Option<i64>,
    pub route: &'a str,
    pub scope: &'a str,
    pub key: &'a str,
    pub actor: Option<&'a Actor>,
    /// Canonical JSON ([`crate::canon::canonical_string`]).
    pub detail: String,
    pub payload_digest: Option<String>,
    /// The event's [`crate::chain::canonical_tail`] if it was encoded before the job was queued.
    pub tail: Option<&'a [u8]>,
}

/// The hourly counter of replays answered from the ledger (not an event: replays are counters).
pub const REPLAY_ABSORBED: &str = "replay_absorbed";

/// Counts one `kind` in `at`'s hour (written with the batch).
fn bump_hourly(ctx: &mut Ctx<'_>, at: Millis, kind: &str) {
    ctx.out.bump(hour_of(at), kind, 1);
}

/// The start of `at`'s hour.
fn hour_of(at: Millis) -> Millis {
    at - at.rem_euclid(3_600_000)
}

/// An entry left state `from` (`None`: it is new) for `to` (`None`: it was purged). The entry
/// counts by state are written with the batch.
fn moved(ctx: &mut Ctx<'_>, from: Option<State>, to: Option<State>) {
    let at = |s: State| State::ALL.iter().position(|x| *x == s).unwrap_or(0);
    if let Some(s) = from {
        ctx.out.counts[at(s)] -= 1;
    }
    if let Some(s) = to {
        ctx.out.counts[at(s)] += 1;
    }
}

/// Appends one event (written with the batch) and bumps its hourly counter. On SQLite the event
/// is numbered and chained here, after the head the batch read; on PostgreSQL it goes to the
/// intake as it is, and the sequencer numbers and chains it ([`intake`]).
pub(crate) fn append(ctx: &mut Ctx<'_>, ne: NewEvent<'_>) -> Result<()> {
    let tail = ne.tail;
    let mut ev = unnumbered(ne);
    bump_hourly(ctx, ev.at, &ev.kind);
    if ctx.db.dialect() == Dialect::Sqlite {
        chain(ctx, &mut ev, tail);
    }
    ctx.out.events.push(ev);
    Ok(())
}

/// Appends one event numbered now, and returns its seq: on PostgreSQL, after every event the
/// intake holds committed, in the batch's transaction ([`intake::take_all`]). For the books' rare
/// events (an archive segment, a checkpoint, a retention run), whose seq their callers report.
pub(crate) fn append_numbered(ctx: &mut Ctx<'_>, ne: NewEvent<'_>) -> Result<i64> {
    if ctx.db.dialect() == Dialect::Sqlite {
        append(ctx, ne)?;
        return Ok(ctx.head.seq);
    }
    ctx.head = intake::take_all(ctx.db, ctx.hasher)?;
    let tail = ne.tail;
    let mut ev = unnumbered(ne);
    bump_hourly(ctx, ev.at, &ev.kind);
    chain(ctx, &mut ev, tail);
    intake::insert_numbered(ctx.db, std::slice::from_ref(&ev))?;
    Ok(ev.seq)
}

/// The event `ne` describes, not yet numbered or chained.
fn unnumbered(ne: NewEvent<'_>) -> Event {
    Event {
        seq: 0,
        at: ne.at,
        kind: ne.kind.as_str().to_owned(),
        entry_id: ne.entry_id,
        route: ne.route.to_owned(),
        scope: ne.scope.to_owned(),
        key: ne.key.to_owned(),
        operator: ne.actor.map(|a| a.operator.clone()),
        reason: ne.actor.map(|a| a.reason.clone()),
        detail: ne.detail,
        payload_digest: ne.payload_digest,
        prev_hash: String::new(),
        hash: String::new(),
    }
}

/// Numbers `ev` after `ctx`'s head and chains it to it (`tail`: its canonical tail, if encoded
/// before the job was queued); it is the head from then on.
fn chain(ctx: &mut Ctx<'_>, ev: &mut Event, tail: Option<&[u8]>) {
    ev.seq = ctx.head.seq + 1;
    ev.prev_hash = std::mem::take(&mut ctx.head.hash);
    debug_assert!(tail.is_none_or(|t| t == crate::chain::event_tail(ev)));
    ev.hash = ctx.hasher.hash_with_tail(ev, tail);
    ctx.head.seq = ev.seq;
    ctx.head.hash.clone_from(&ev.hash);
}

impl Row {
    fn event<'a>(&'a self, at: Millis, kind: EventKind, detail: serde_json::Value) -> NewEvent<'a> {
        let detail = canonical_string(&detail);
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
            tail: None,
        }
    }
}

/// Replays answered without the writer (`replays::replayable`), not yet written.
#[derive(Debug, Default)]
pub(crate) struct ReplayTally {
    /// Entry id → (replays, the last one's time), in id order: the order the rows are updated in,
    /// so two writers of counts never wait for each other's rows in a cycle.
    entries: std::collections::BTreeMap<i64, (i64, Millis)>,
    /// (hour, replays).
    hours: Vec<(i64, i64)>,
}

impl ReplayTally {
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn add(&mut self, id: i64, at: Millis) {
        self.add_to(id, 1, at);
        self.add_hour(hour_of(at), 1);
    }

    fn add_to(&mut self, id: i64, n: i64, last: Millis) {
        let e = self.entries.entry(id).or_insert((0, last));
        e.0 += n;
        e.1 = e.1.max(last);
    }

    fn add_hour(&mut self, hour: i64, n: i64) {
        match self.hours.iter_mut().find(|(h, _)| *h == hour) {
            Some((_, m)) => *m += n,
            None => self.hours.push((hour, n)),
        }
    }

    /// Adds `other`'s counts to these (a tally that could not be written, kept for a later try).
    pub fn merge(&mut self, other: ReplayTally) {
        for (id, (n, last)) in other.entries {
            self.add_to(id, n, last);
        }
        for (hour, n) in other.hours {
            self.add_hour(hour, n);
        }
    }
}

/// Writes counted replays: the entries' replay counts and the hourly series.
pub(crate) fn count_replays(ctx: &mut Ctx<'_>, tally: &ReplayTally) -> Result<()> {
    add_tally_replays(ctx.db, tally)?;
    for &(hour, n) in &tally.hours {
        ctx.out.bump(hour, REPLAY_ABSORBED, n);
    }
    Ok(())
}

/// How long [`count_replays_alone`] waits for a row another transaction holds before it gives up:
/// well under PostgreSQL's deadlock check (1 s), so when it and a write batch wait for each
/// other's rows, the counts give way first and the batch goes on.
const COUNTS_LOCK_TIMEOUT: &str = "100ms";

/// Writes counted replays in a transaction of their own on `db` (PostgreSQL), one round trip,
/// without the log's write lock: counts are no part of the log, so the instances' write batches
/// need not wait for them. Rows are updated in id order, so two instances' counts never deadlock;
/// a row a write batch holds longer than [`COUNTS_LOCK_TIMEOUT`] fails the whole write, and the
/// caller keeps the tally for a later try.
pub(crate) fn count_replays_alone(db: &mut dyn Db, tally: &ReplayTally) -> Result<()> {
    db.defer(&format!(
        "BEGIN; SET LOCAL lock_timeout = '{COUNTS_LOCK_TIMEOUT}'"
    ))?;
    let written = write_tally(db, tally).and_then(|()| db.batch("COMMIT"));
    if written.is_err() {
        let _ = db.batch("ROLLBACK");
    }
    written
}

fn write_tally(db: &mut dyn Db, tally: &ReplayTally) -> Result<()> {
    add_tally_replays(db, tally)?;
    let counter = crate::writer::counter_sql(db.dialect());
    for &(hour, n) in &tally.hours {
        db.defer_exec(counter, vals![hour, REPLAY_ABSORBED, n])?;
    }
    Ok(())
}

/// Adds the tally's replays to its entries, in id order.
fn add_tally_replays(db: &mut dyn Db, tally: &ReplayTally) -> Result<()> {
    for (&id, &(n, last)) in &tally.entries {
        add_replays(db, id, n, last)?;
    }
    Ok(())
}

/// Adds `n` replays to entry `id`, the last at `last` (the last replay time only moves forward).
/// Held back to ride with the next statement: a tally of many entries costs the batch no round
/// trip of its own each (on PostgreSQL, while the batch holds its rows' locks).
fn add_replays(db: &mut dyn Db, id: i64, n: i64, last: Millis) -> Result<()> {
    db.defer_exec(
        "UPDATE entries SET replays = replays + ?2, last_replay_at = CASE \
         WHEN last_replay_at IS NULL OR last_replay_at < ?3 THEN ?3 ELSE last_replay_at END \
         WHERE id = ?1",
        vals![id, n, last],
    )?;
    Ok(())
}

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

/// The entry must be PENDING and leased by `owner`.
fn owned(db: &mut dyn Db, id: i64, owner: &str, action: &'static str) -> Result<Row> {
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
