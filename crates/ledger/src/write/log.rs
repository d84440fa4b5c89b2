//! The events a write appends, numbered and chained on SQLite and left to the sequencer on
//! PostgreSQL, and the counters (entries by state, events by hour) a write moves with them.

use crate::canon::canonical_string;
use crate::db::Dialect;
use crate::entry_row::Row;
use crate::error::Result;
use crate::model::{Event, EventKind, Millis, State};
use crate::store::Actor;
use crate::writer::Ctx;

use super::intake;

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

/// Counts one `kind` in `at`'s hour (written with the batch).
pub(super) fn bump_hourly(ctx: &mut Ctx<'_>, at: Millis, kind: &str) {
    ctx.out.bump(hour_of(at), kind, 1);
}

/// The start of `at`'s hour.
pub(super) fn hour_of(at: Millis) -> Millis {
    at - at.rem_euclid(3_600_000)
}

/// An entry left state `from` (`None`: it is new) for `to` (`None`: it was purged). The entry
/// counts by state are written with the batch.
pub(super) fn moved(ctx: &mut Ctx<'_>, from: Option<State>, to: Option<State>) {
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
    pub(super) fn event<'a>(
        &'a self,
        at: Millis,
        kind: EventKind,
        detail: serde_json::Value,
    ) -> NewEvent<'a> {
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
