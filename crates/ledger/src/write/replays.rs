//! Replays counted: each entry's replays and the hourly series of replays answered from the
//! ledger, in a write batch or (PostgreSQL) in a transaction of their own.

use crate::db::{vals, Db};
use crate::error::Result;
use crate::model::Millis;
use crate::writer::Ctx;

use super::log::hour_of;

/// The hourly counter of replays answered from the ledger (not an event: replays are counters).
pub const REPLAY_ABSORBED: &str = "replay_absorbed";

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
pub(super) fn add_replays(db: &mut dyn Db, id: i64, n: i64, last: Millis) -> Result<()> {
    db.defer_exec(
        "UPDATE entries SET replays = replays + ?2, last_replay_at = CASE \
         WHEN last_replay_at IS NULL OR last_replay_at < ?3 THEN ?3 ELSE last_replay_at END \
         WHERE id = ?1",
        vals![id, n, last],
    )?;
    Ok(())
}
