//! The log's intake on PostgreSQL, and the sequencer that empties it.
//!
//! A write batch appends its events to `intake` unnumbered (`writer/flush.rs`): it needs nothing
//! of the log's head, so the batches of several instances need not take turns for the chain. The
//! sequencer, one at a time under [`SEQ_LOCK`], takes the events the intake holds committed in
//! the order of their ids, numbers each after the log's head, chains it, and inserts it into
//! `events`, in one transaction that also deletes them from the intake: an event is in one of the
//! two tables, never both, never neither. An id is handed out when a row is inserted but is seen
//! only once its batch commits, so a row with a lower id that commits later is taken later, after
//! rows with higher ids: the log's order is the order in which the sequencer found events
//! committed. An event written after another was acknowledged (a completion after its claim) was
//! inserted after that one committed, so it has the higher id and comes after it.
//!
//! **Invariant: only the sequencer numbers events on PostgreSQL, and it holds [`SEQ_LOCK`] from
//! reading the head to its commit.**

use crate::chain::ChainHasher;
use crate::db::{vals, Db, Dialect};
use crate::error::Result;
use crate::model::Event;
use crate::postgres::locks::{begin_locked, SEQ_LOCK};
use crate::read;
use crate::writer::{inserts, Head, Rows, INTAKE_COLS};

/// The most events one step takes.
pub(crate) const STEP: usize = 4096;

/// Takes up to `max` of the oldest committed events of the intake into the log, in a transaction
/// of its own on `db`: how many.
pub(crate) fn sequence(db: &mut dyn Db, hasher: &ChainHasher, max: usize) -> Result<usize> {
    db.defer(&begin_locked(SEQ_LOCK))?;
    let taken = take(db, hasher, max).and_then(|(_, n)| db.batch("COMMIT").map(|()| n));
    if taken.is_err() {
        let _ = db.batch("ROLLBACK");
    }
    taken
}

/// Takes [`SEQ_LOCK`] (PostgreSQL) in the open transaction, with its next statement, until it
/// ends. The books' jobs (a checkpoint, an archive segment, a retention run) take it before they
/// read what they check (the last checkpoint, the last segment), so two instances that both
/// believe they lead take turns at them.
pub(crate) fn lock_books(db: &mut dyn Db) -> Result<()> {
    match db.dialect() {
        Dialect::Sqlite => Ok(()),
        Dialect::Postgres => db.defer(&format!("SELECT pg_advisory_xact_lock({SEQ_LOCK})")),
    }
}

/// Takes every committed event of the intake into the log, in the open transaction, which holds
/// [`SEQ_LOCK`] from here to its end: the log's head after them.
pub(crate) fn take_all(db: &mut dyn Db, hasher: &ChainHasher) -> Result<Head> {
    lock_books(db)?;
    loop {
        let (head, n) = take(db, hasher, STEP)?;
        if n < STEP {
            return Ok(head);
        }
    }
}

/// Inserts events numbered and chained into the log, with the transaction's next statement.
pub(crate) fn insert_numbered(db: &mut dyn Db, events: &[Event]) -> Result<()> {
    for (sql, params) in inserts(events, Rows::Numbered) {
        db.defer_exec(sql, &params)?;
    }
    Ok(())
}

/// One step, in the open transaction holding [`SEQ_LOCK`]: the head after it and how many it took.
fn take(db: &mut dyn Db, hasher: &ChainHasher, max: usize) -> Result<(Head, usize)> {
    let mut head = Head::after(read::head(db)?);
    let mut events = db.all(
        &TAKE,
        vals![i64::try_from(max).unwrap_or(i64::MAX)],
        read::event_row,
    )?;
    for ev in &mut events {
        ev.seq = head.seq + 1;
        ev.prev_hash = std::mem::take(&mut head.hash);
        ev.hash = hasher.hash(ev);
        head.seq = ev.seq;
        head.hash.clone_from(&ev.hash);
    }
    insert_numbered(db, &events)?;
    Ok((head, events.len()))
}

/// Deletes the `?1` oldest rows of the intake and returns them, oldest first, as the log's rows
/// before they are numbered and chained: the rows one statement's snapshot holds, so exactly the
/// rows it returns are gone.
static TAKE: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "WITH taken AS (DELETE FROM intake WHERE id IN \
         (SELECT id FROM intake ORDER BY id LIMIT ?1) RETURNING id, {INTAKE_COLS}) \
         SELECT CAST(0 AS BIGINT), {INTAKE_COLS}, '', '' FROM taken ORDER BY id"
    )
});
