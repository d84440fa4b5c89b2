//! Replays answered off the writer are counted in memory and written a few times a second, not
//! one write each: on SQLite by a job of the writer's, on PostgreSQL by a transaction of their own
//! outside the log's write lock.

use std::time::Duration;

use super::Ledger;
use crate::error::LedgerError;
use crate::model::Millis;
use crate::write;

/// How long replay counts gather before they are written. Each write of them updates every entry
/// replayed since, so writing them with every batch would rewrite a hot entry's row once a batch
/// (on PostgreSQL, a new row version each time) instead of a few times a second.
pub(super) const REPLAY_COUNTS_WAIT: Duration = Duration::from_millis(250);

/// Replay counts waiting to be written, and what is arranged to write them.
#[derive(Debug, Default)]
pub(super) struct PendingReplays {
    counts: write::ReplayTally,
    /// When the oldest of `counts` was counted.
    since: Option<std::time::Instant>,
    /// A job that will write `counts` is queued (it takes them when it runs).
    queued: bool,
    /// A thread will write `counts` (SQLite: queue that job) after [`REPLAY_COUNTS_WAIT`].
    timer: bool,
}

impl Ledger {
    /// Counts a replay answered off the writer. The counts are written once they are
    /// [`REPLAY_COUNTS_WAIT`] old: on SQLite by a job queued with the first write then (so they
    /// ride along in its batch) or, when nothing else is written, by a job of their own; on
    /// PostgreSQL by a transaction of their own ([`write::count_replays_alone`]). A stream of
    /// replays costs a few writes of each entry's counts a second, not one a batch.
    pub(super) fn tally_replay(&self, id: i64, at: Millis) {
        let Ok(mut t) = self.replays.lock() else {
            return;
        };
        t.counts.add(id, at);
        t.since.get_or_insert_with(std::time::Instant::now);
        if t.queued || t.timer {
            return;
        }
        t.timer = true;
        drop(t);
        self.count_replays_later();
    }

    /// Writes the replay tally [`REPLAY_COUNTS_WAIT`] from now, on a thread of its own.
    pub(super) fn count_replays_later(&self) {
        let me = self.me.clone();
        let _ = std::thread::Builder::new()
            .name("idemgate-counts".into())
            .spawn(move || {
                std::thread::sleep(REPLAY_COUNTS_WAIT);
                if let Some(l) = me.upgrade() {
                    if let Ok(mut t) = l.replays.lock() {
                        t.timer = false;
                    }
                    l.count_replays_now();
                }
            });
    }

    /// Writes the replay tally: on SQLite queues the job that writes it; on PostgreSQL writes it
    /// on this thread, outside the write lock, and keeps it for a later try when that fails.
    pub(super) fn count_replays_now(&self) {
        if self.replay_reads.is_none() {
            return self.queue_replay_counts(false);
        }
        let tally = match self.replays.lock() {
            Ok(mut t) => {
                t.since = None;
                std::mem::take(&mut t.counts)
            }
            Err(_) => return,
        };
        if tally.is_empty() {
            return;
        }
        if let Err(e) = self.read(|db| write::count_replays_alone(db, &tally)) {
            tracing::debug!(error = %e, "writing replay counts failed; trying again later");
            let Ok(mut t) = self.replays.lock() else {
                return;
            };
            t.counts.merge(tally);
            t.since.get_or_insert_with(std::time::Instant::now);
            if !t.timer && !matches!(e, LedgerError::Closed) {
                t.timer = true;
                drop(t);
                self.count_replays_later();
            }
        }
    }

    /// Queues the job that writes the replay tally (SQLite; on PostgreSQL the tally is written by
    /// [`Ledger::count_replays_now`]), unless it is empty or already queued, or, when
    /// `due_only`, younger than [`REPLAY_COUNTS_WAIT`].
    pub(super) fn queue_replay_counts(&self, due_only: bool) {
        if self.replay_reads.is_some() {
            return;
        }
        {
            let Ok(mut t) = self.replays.lock() else {
                return;
            };
            let young = t.since.is_some_and(|s| s.elapsed() < REPLAY_COUNTS_WAIT);
            if t.queued || t.counts.is_empty() || (due_only && young) {
                return;
            }
            t.queued = true;
        }
        let replays = self.replays.clone();
        // Taken once, on the job's first run: a re-run (see `writer`) writes the same counts.
        let mut taken: Option<write::ReplayTally> = None;
        let _ticket = self.writer.submit(move |ctx| {
            let tally = taken.get_or_insert_with(|| {
                replays
                    .lock()
                    .map(|mut t| {
                        t.queued = false;
                        t.since = None;
                        std::mem::take(&mut t.counts)
                    })
                    .unwrap_or_default()
            });
            write::count_replays(ctx, tally)
        });
    }
}
