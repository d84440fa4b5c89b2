//! What the ledger tells an operator about its writer and its checkpoints.
//!
//! Metrics go through the `metrics` facade: nothing is recorded until a program installs a
//! recorder (`idemgate serve` does, for its `/metrics`; the CLI and the console do not). Each
//! call looks its series up in the recorder installed at that moment, so a ledger opened before
//! the recorder is installed still reports. One lookup per commit, not per write.
//!
//! A failure that repeats (a full disk fails every commit and every checkpoint until space is
//! freed) is logged by [`Failures`]: the first at once, then one line a minute with the count, and
//! one line when it succeeds again, instead of a line per commit or per checkpoint pass.

use std::fmt::Display;
use std::time::{Duration, Instant};

/// Describes the ledger's series to the recorder installed now, and exports its counters at 0
/// from the start: a failure counter that first appears at 1 loses that first increase to
/// `increase()` and `rate()`.
pub fn register_metrics() {
    metrics::describe_counter!(
        "idemgate_ledger_commits_total",
        "Ledger transactions committed by this process (on SQLite, each one fsync)"
    );
    metrics::describe_counter!(
        "idemgate_ledger_writes_total",
        "Writes (claims, completions, replay counts, sweeps, operator actions) in those commits"
    );
    metrics::describe_histogram!(
        "idemgate_ledger_commit_seconds",
        metrics::Unit::Seconds,
        "The COMMIT alone: on SQLite the WAL's write and fsync"
    );
    metrics::describe_histogram!(
        "idemgate_ledger_write_lock_wait_seconds",
        metrics::Unit::Seconds,
        "A batch's wait for the ledger's write lock (PostgreSQL: shared, and the rows it reads ahead)"
    );
    metrics::describe_histogram!(
        "idemgate_ledger_write_lock_held_seconds",
        metrics::Unit::Seconds,
        "How long a batch held the write lock: its statements and its COMMIT"
    );
    metrics::describe_counter!(
        "idemgate_ledger_commit_failures_total",
        "Batches that could not begin or commit; every write in them was refused"
    );
    metrics::describe_counter!(
        "idemgate_ledger_batch_reruns_total",
        "Batches run a second time, each write in a savepoint of its own, because one of them \
         failed (on PostgreSQL, also a conflict with a write sent with the COMMIT)"
    );
    metrics::describe_counter!(
        "idemgate_ledger_checkpoint_failures_total",
        "SQLite checkpoint passes that failed; the WAL grows until one succeeds"
    );
    for name in [
        "idemgate_ledger_commits_total",
        "idemgate_ledger_writes_total",
        "idemgate_ledger_commit_failures_total",
        "idemgate_ledger_batch_reruns_total",
        "idemgate_ledger_checkpoint_failures_total",
    ] {
        metrics::counter!(name).increment(0);
    }
}

/// A committed batch, timed.
pub(crate) struct Batch {
    /// The jobs in it.
    pub writes: usize,
    /// From asking for the write lock to holding it.
    pub lock_wait: Duration,
    /// From holding the write lock to the commit's end.
    pub lock_held: Duration,
    /// The `COMMIT` statement (on SQLite the WAL's write and its fsync; on PostgreSQL the round
    /// trip that carries it with the batch's writes, and the server's flush).
    pub commit: Duration,
}

/// A transaction committed.
pub(crate) fn committed(b: Batch) {
    metrics::counter!("idemgate_ledger_commits_total").increment(1);
    metrics::counter!("idemgate_ledger_writes_total").increment(b.writes as u64);
    metrics::histogram!("idemgate_ledger_commit_seconds").record(b.commit.as_secs_f64());
    metrics::histogram!("idemgate_ledger_write_lock_wait_seconds")
        .record(b.lock_wait.as_secs_f64());
    metrics::histogram!("idemgate_ledger_write_lock_held_seconds")
        .record(b.lock_held.as_secs_f64());
}

/// A batch could not begin or commit: every job in it was answered `ledger-unavailable`.
pub(crate) fn commit_failed() {
    metrics::counter!("idemgate_ledger_commit_failures_total").increment(1);
}

/// A batch runs again, each job in its savepoint: one failed in its first run.
pub(crate) fn rerun() {
    metrics::counter!("idemgate_ledger_batch_reruns_total").increment(1);
}

/// A checkpoint pass (or the database file's sync after it) failed; the WAL keeps growing.
pub(crate) fn checkpoint_failed() {
    metrics::counter!("idemgate_ledger_checkpoint_failures_total").increment(1);
}

/// How long a run of failures goes between two log lines.
const QUIET_FOR: Duration = Duration::from_secs(60);
/// A run of failures ends with a success this long after its last failure. A success sooner
/// does not end it: an empty commit (a sweep that found nothing) succeeds on a full disk too, and
/// would otherwise make every failure after it the first of a new run, with a line of its own.
const RECOVERED_AFTER: Duration = Duration::from_secs(5);

/// Logs a run of failures of one operation without flooding the log.
#[derive(Debug)]
pub(crate) struct Failures {
    /// What fails, as the log names it ("ledger commit", "ledger checkpoint").
    what: &'static str,
    run: Option<Run>,
}

#[derive(Debug)]
struct Run {
    since: Instant,
    logged: Instant,
    last: Instant,
    total: u64,
    unlogged: u64,
}

/// What a failure or a success should log.
#[derive(Debug, PartialEq)]
enum Line {
    /// The first failure of a run.
    First,
    /// The run goes on: `failures` since the last line.
    Still {
        failures: u64,
    },
    /// The run ended: `failures` in all, over `secs`.
    Recovered {
        failures: u64,
        secs: u64,
    },
    Quiet,
}

impl Failures {
    pub fn new(what: &'static str) -> Failures {
        Failures { what, run: None }
    }

    /// Notes a failure; logs it if it starts a run or a minute passed since the last line.
    pub fn failed(&mut self, error: &dyn Display) {
        match self.failed_at(Instant::now()) {
            Line::First => tracing::error!(error = %error, "{} failed", self.what),
            Line::Still { failures } => tracing::error!(
                error = %error,
                failures,
                "{} still failing ({failures} failures since the last line)",
                self.what
            ),
            _ => {}
        }
    }

    /// Notes a success; logs the end of a run.
    pub fn succeeded(&mut self) {
        if let Line::Recovered { failures, secs } = self.succeeded_at(Instant::now()) {
            tracing::warn!(
                failures,
                secs,
                "{} succeeds again, after {failures} failures over {secs} s",
                self.what
            );
        }
    }

    fn failed_at(&mut self, now: Instant) -> Line {
        let Some(run) = &mut self.run else {
            self.run = Some(Run {
                since: now,
                logged: now,
                last: now,
                total: 1,
                unlogged: 0,
            });
            return Line::First;
        };
        run.total += 1;
        run.unlogged += 1;
        run.last = now;
        if now.duration_since(run.logged) < QUIET_FOR {
            return Line::Quiet;
        }
        run.logged = now;
        Line::Still {
            failures: std::mem::take(&mut run.unlogged),
        }
    }

    fn succeeded_at(&mut self, now: Instant) -> Line {
        match &self.run {
            Some(run) if now.duration_since(run.last) >= RECOVERED_AFTER => {
                let line = Line::Recovered {
                    failures: run.total,
                    secs: now.duration_since(run.since).as_secs(),
                };
                self.run = None;
                line
            }
            _ => Line::Quiet,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_of_failures_logs_its_start_a_line_a_minute_and_its_end() {
        let mut f = Failures::new("ledger commit");
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert_eq!(f.succeeded_at(at(0)), Line::Quiet);
        assert_eq!(f.failed_at(at(0)), Line::First);
        for s in 1..60 {
            assert_eq!(f.failed_at(at(s * 1000)), Line::Quiet, "second {s}");
            // An empty commit between two failures does not end the run.
            assert_eq!(f.succeeded_at(at(s * 1000 + 500)), Line::Quiet);
        }
        // A minute after the first line: the 59 quiet failures and this one.
        assert_eq!(f.failed_at(at(60_000)), Line::Still { failures: 60 });
        assert_eq!(f.failed_at(at(61_000)), Line::Quiet);
        assert_eq!(f.failed_at(at(120_000)), Line::Still { failures: 2 });
        assert_eq!(f.succeeded_at(at(124_999)), Line::Quiet);
        assert_eq!(
            f.succeeded_at(at(125_000)),
            Line::Recovered {
                failures: 63,
                secs: 125
            }
        );
        assert_eq!(f.succeeded_at(at(126_000)), Line::Quiet);
        // A new run starts over.
        assert_eq!(f.failed_at(at(200_000)), Line::First);
    }
}
