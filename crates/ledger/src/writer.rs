//! Group commit, for every backend.
//!
//! One writer thread per process owns the only write connection. Writes are queued as jobs; the
//! writer takes every job waiting (up to [`MAX_BATCH`]), opens one transaction (SQLite: `BEGIN
//! IMMEDIATE`, the file's write lock; PostgreSQL: beside the batches of other processes, each
//! locking the rows it decides on: `postgres/mod.rs`), runs the jobs, commits once — one fsync for
//! the whole batch — and only then answers each job's [`Ticket`]. Throughput grows with
//! concurrency; no write is acknowledged before it is durable. On SQLite the writer numbers and
//! chains each event after the head its batch read; on PostgreSQL events go to the intake and the
//! sequencer chains them (`write/intake.rs`). Either way the chain has one writer at a time, so
//! it stays one chain.
//!
//! One failing job must not undo the others. Jobs rarely fail, and a savepoint per job is costly
//! (SQLite copies every page a job touches to the statement journal: a third of the writer's
//! time), so a batch first runs without savepoints; if a job fails, the transaction is rolled back
//! and the batch runs again, each job inside its own savepoint. Jobs are therefore re-runnable:
//! they change nothing outside the transaction and their `Ctx`.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use crate::ahead::{Ahead, Touch};
use crate::chain::{ChainHasher, GENESIS};
use crate::db::{Db, Dialect, Val};
use crate::error::{LedgerError, Result};
use crate::model::{now_millis, ChainHead};
use crate::read;
use crate::store::{Reply, Ticket, WriterHealth};
use crate::telemetry::{self, Failures};

mod flush;
pub(crate) use flush::{counter_sql, flush, inserts, Deferred, Rows, INTAKE_COLS};

/// The most jobs one transaction takes.
pub const MAX_BATCH: usize = 4096;

/// What the writer hands a job: the open transaction and the chain head; the job's events and
/// counter changes wait in `out` until the batch writes them ([`flush`]).
pub(crate) struct Ctx<'c> {
    pub db: &'c mut dyn Db,
    pub head: Head,
    pub hasher: &'c ChainHasher,
    pub out: Deferred,
    /// The rows this batch read ahead (PostgreSQL's first run of a batch: [`crate::ahead`]).
    pub ahead: Option<&'c mut Ahead>,
}

impl Ctx<'_> {
    /// A write whose result the job does not need: while reading ahead, sent with the batch's
    /// next statement instead of on its own round trip.
    pub fn exec_later(&mut self, sql: &str, params: &[Val<'_>]) -> Result<()> {
        if self.ahead.is_some() {
            self.db.defer_exec(sql, params)
        } else {
            self.db.exec(sql, params).map(|_| ())
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Head {
    pub seq: i64,
    pub hash: String,
}

impl Head {
    /// The head a new event follows: `head`, or the genesis of an empty log.
    pub fn after(head: Option<ChainHead>) -> Head {
        head.map_or_else(
            || Head {
                seq: 0,
                hash: GENESIS.into(),
            },
            |h| Head {
                seq: h.seq,
                hash: h.hash,
            },
        )
    }
}

/// A backend's write connection.
pub(crate) trait WriteConn: Send + 'static {
    /// Begins a batch transaction holding the ledger's write lock, (re)connecting first if needed.
    fn begin(&mut self) -> Result<()>;
    /// The connection of the transaction `begin` opened.
    fn db(&mut self) -> &mut dyn Db;
    /// Called after each committed batch, outside any transaction.
    fn committed(&mut self) {}
    /// Called once the queue is closed and drained.
    fn finish(&mut self) {}
    /// Whether the connection was lost (the next `begin` replaces it).
    fn lost(&mut self) -> bool {
        false
    }
    /// The round trips to the database so far (PostgreSQL: a statement, or a pipeline of them;
    /// SQLite has none).
    fn round_trips(&self) -> u64 {
        0
    }
    /// The statements sent so far (PostgreSQL; a run of one statement's rows merged counts once).
    fn statements(&self) -> u64 {
        0
    }
}

/// A queued write (see the module's comment on running it twice).
trait Job: Send {
    /// What it may change.
    fn touch(&self) -> &Touch;
    /// Runs against the open batch transaction; `true` if it failed.
    fn run(&mut self, ctx: &mut Ctx<'_>) -> bool;
    /// Whether its last run failed as [`LedgerError::transient`] says.
    fn transient(&self) -> bool;
    /// There is no transaction to run in.
    fn refuse(&mut self, why: &str);
    /// Answers the ticket with the job's result, or the commit's error.
    fn answer(self: Box<Self>, commit_err: Option<&str>);
}

struct Queued<T, F> {
    touch: Touch,
    f: F,
    result: Option<Result<T>>,
    reply: Reply<T>,
}

impl<T, F> Job for Queued<T, F>
where
    T: Send,
    F: FnMut(&mut Ctx<'_>) -> Result<T> + Send,
{
    fn touch(&self) -> &Touch {
        &self.touch
    }

    fn run(&mut self, ctx: &mut Ctx<'_>) -> bool {
        // A job that panics fails alone (rolled back to its savepoint on the batch's second run),
        // instead of ending the writer thread, after which every write in the process would be
        // refused as `ledger-closed` until a restart. What it changed is undone with the batch
        // or its savepoint, and its `Ctx` is dropped, so nothing half-done survives the unwind.
        let f = &mut self.f;
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(ctx))).unwrap_or_else(
            |panic| {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                Err(LedgerError::Internal(format!(
                    "a ledger write panicked: {what}"
                )))
            },
        );
        let failed = r.is_err();
        self.result = Some(r);
        failed
    }

    fn transient(&self) -> bool {
        matches!(&self.result, Some(Err(e)) if e.transient())
    }

    fn refuse(&mut self, why: &str) {
        self.result = Some(Err(LedgerError::Unavailable(why.to_owned())));
    }

    fn answer(self: Box<Self>, commit_err: Option<&str>) {
        let r = match (commit_err, self.result) {
            (Some(e), _) => Err(LedgerError::Unavailable(format!("commit failed: {e}"))),
            (None, Some(r)) => r,
            (None, None) => Err(LedgerError::Unavailable("the job did not run".into())),
        };
        let _ = self.reply.send(r);
    }
}

/// What the writer has done: committed transactions (each one fsync) and the jobs they carried.
#[derive(Debug, Default)]
pub struct WriterCounters {
    pub commits: AtomicU64,
    pub jobs: AtomicU64,
    /// Round trips to the database, as of the last commit.
    pub round_trips: AtomicU64,
    /// Statements sent to the database, as of the last commit.
    pub statements: AtomicU64,
    /// Batches run a second time, each job in its savepoint.
    pub reruns: AtomicU64,
    /// When a batch last failed to begin or commit (Unix ms; 0: never).
    pub failed_at: AtomicI64,
}

/// The handle on a writer thread.
#[derive(Debug)]
pub(crate) struct Writer {
    /// Set when the ledger's recorded chain algorithm differs from the hasher: reads work, writes
    /// are refused (`true`: a key is required; `false`: a key was given for an unkeyed log).
    refusal: Option<bool>,
    tx: Mutex<Option<mpsc::Sender<Box<dyn Job>>>>,
    handle: Mutex<Option<JoinHandle<()>>>,
    pub counters: Arc<WriterCounters>,
}

/// The writer thread's name (`/proc/PID/task/TID/comm`, where tests and benches find it).
pub(crate) const THREAD_NAME: &str = "idemgate-writer";

impl Writer {
    pub fn spawn(
        conn: impl WriteConn,
        hasher: ChainHasher,
        max_batch: usize,
        refusal: Option<bool>,
    ) -> Result<Writer> {
        let (tx, rx) = mpsc::channel::<Box<dyn Job>>();
        let counters = Arc::new(WriterCounters::default());
        let c = counters.clone();
        let max_batch = max_batch.clamp(1, MAX_BATCH);
        let handle = std::thread::Builder::new()
            .name(THREAD_NAME.into())
            .spawn(move || writer_loop(conn, hasher, rx, &c, max_batch))?;
        Ok(Writer {
            refusal,
            tx: Mutex::new(Some(tx)),
            handle: Mutex::new(Some(handle)),
            counters,
        })
    }

    /// Whether every write is refused (the chain key does not match the ledger).
    pub fn refuses(&self) -> bool {
        self.refusal.is_some()
    }

    /// Commits and jobs so far (group commit: jobs / commits is the batching factor).
    pub fn round_trips(&self) -> u64 {
        self.counters.round_trips.load(Ordering::Relaxed)
    }

    pub fn statements(&self) -> u64 {
        self.counters.statements.load(Ordering::Relaxed)
    }

    pub fn reruns(&self) -> u64 {
        self.counters.reruns.load(Ordering::Relaxed)
    }

    pub fn counters(&self) -> (u64, u64) {
        (
            self.counters.commits.load(Ordering::Relaxed),
            self.counters.jobs.load(Ordering::Relaxed),
        )
    }

    /// Whether the thread is there, and when a batch of its last failed. Never waits: while
    /// [`Writer::close`] holds the handle to join the thread, the writer counts as stopped.
    pub fn health(&self) -> WriterHealth {
        let running = self
            .handle
            .try_lock()
            .is_ok_and(|h| h.as_ref().is_some_and(|h| !h.is_finished()));
        let failed_at = self.counters.failed_at.load(Ordering::Relaxed);
        WriterHealth {
            running,
            last_failure_at: (failed_at > 0).then_some(failed_at),
        }
    }

    /// Stops accepting writes, lets the writer finish every queued job and waits for it.
    pub fn close(&self) {
        if let Ok(mut tx) = self.tx.lock() {
            tx.take();
        }
        if let Ok(mut w) = self.handle.lock() {
            if let Some(h) = w.take() {
                let _ = h.join();
            }
        }
    }

    /// Queues a job that may change anything. `f` runs inside the batch transaction (possibly
    /// twice: see the module's comment); its result is sent once the batch has committed (or the
    /// commit's error, if it did not).
    pub fn submit<T, F>(&self, f: F) -> Ticket<T>
    where
        T: Send + 'static,
        F: FnMut(&mut Ctx<'_>) -> Result<T> + Send + 'static,
    {
        self.submit_touching(Touch::Any, f)
    }

    /// [`Writer::submit`] for a job that changes only what `touch` names.
    pub fn submit_touching<T, F>(&self, touch: Touch, f: F) -> Ticket<T>
    where
        T: Send + 'static,
        F: FnMut(&mut Ctx<'_>) -> Result<T> + Send + 'static,
    {
        let (reply, ticket) = Ticket::channel();
        self.submit_replying(touch, f, reply);
        ticket
    }

    /// [`Writer::submit_touching`], its outcome sent to `reply`: a ticket handed out before the
    /// job reached the writer (a claim first tried as a replay on a read) is answered by it.
    pub fn submit_replying<T, F>(&self, touch: Touch, f: F, reply: Reply<T>)
    where
        T: Send + 'static,
        F: FnMut(&mut Ctx<'_>) -> Result<T> + Send + 'static,
    {
        if let Some(key_required) = self.refusal {
            let _ = reply.send(Err(if key_required {
                LedgerError::ChainKeyRequired
            } else {
                LedgerError::ChainKeyUnexpected
            }));
            return;
        }
        let job: Box<dyn Job> = Box::new(Queued {
            touch,
            f,
            result: None,
            reply,
        });
        let sender = self.tx.lock().ok().and_then(|g| g.clone());
        if let Some(s) = sender {
            // A job the writer will not take drops its reply: its ticket reads `Closed`.
            let _ = s.send(job);
        }
    }
}

/// Begins a batch: its transaction with the write lock; on SQLite the chain head, on PostgreSQL
/// (whose events go to the intake, unnumbered) with `read_ahead` the rows its jobs will read (the
/// `BEGIN` goes with the read, one round trip for all). A connection found lost on the way is
/// replaced, once.
fn begin(
    conn: &mut impl WriteConn,
    batch: &[Box<dyn Job>],
    read_ahead: bool,
) -> Result<(Head, Option<Ahead>)> {
    let mut replaced = false;
    loop {
        conn.begin()?;
        let db = conn.db();
        let read = if db.dialect() == Dialect::Sqlite {
            read::head(db).map(|h| (h, None))
        } else if read_ahead {
            Ahead::read(db, batch.iter().map(|j| j.touch())).map(|a| (None, a))
        } else {
            // Nothing to read: one statement all the same, to find a lost connection here.
            db.one("SELECT CAST(1 AS BIGINT)", &[], |r| r.int(0))
                .map(|_| (None, None))
        };
        match read {
            Ok((head, ahead)) => return Ok((Head::after(head), ahead)),
            Err(e) => {
                let _ = conn.db().batch("ROLLBACK");
                if replaced || !conn.lost() {
                    return Err(e);
                }
                tracing::warn!(error = %e, "ledger connection lost; reconnecting");
                replaced = true;
            }
        }
    }
}

/// Runs every job of `batch` in the open transaction, merging what succeeded into `deferred`.
/// Without savepoints it stops at the first failure and returns `false` (the caller rolls back);
/// with them, a failed job is rolled back alone.
fn run_jobs(
    db: &mut dyn Db,
    batch: &mut [Box<dyn Job>],
    mut head: Head,
    hasher: &ChainHasher,
    deferred: &mut Deferred,
    savepoints: bool,
    mut ahead: Option<&mut Ahead>,
) -> bool {
    // With savepoints, each job runs inside savepoint `job`, with one statement between jobs: a
    // success releases and re-opens it; a failure rolls back to it (which keeps it open). COMMIT
    // releases the last.
    let mut savepoint = if savepoints {
        db.defer("SAVEPOINT job")
    } else {
        Ok(())
    };
    let last = batch.len().saturating_sub(1);
    for (i, job) in batch.iter_mut().enumerate() {
        if let Err(e) = &savepoint {
            tracing::error!(error = %e, "savepoint failed");
        }
        if let (Some(a), Touch::Any) = (ahead.as_deref_mut(), job.touch()) {
            a.touching(&Touch::Any);
        }
        let mut ctx = Ctx {
            db: &mut *db,
            head: head.clone(),
            hasher,
            out: Deferred::default(),
            ahead: ahead.as_deref_mut(),
        };
        let failed = job.run(&mut ctx);
        let Ctx {
            head: new_head,
            out,
            ..
        } = ctx;
        if let Some(a) = ahead.as_deref_mut() {
            a.touching(job.touch());
        }
        if !failed {
            head = new_head;
            deferred.merge(out);
            if savepoints && i < last {
                savepoint = db.defer("RELEASE SAVEPOINT job; SAVEPOINT job");
            }
        } else if savepoints {
            savepoint = db.defer("ROLLBACK TO SAVEPOINT job");
        } else {
            return false;
        }
    }
    true
}

/// A batch could not begin or commit: logged (without flooding), counted on `/metrics`, and
/// its time kept for [`Writer::health`].
fn batch_failed(failures: &mut Failures, counters: &WriterCounters, error: &dyn std::fmt::Display) {
    failures.failed(error);
    telemetry::commit_failed();
    counters.failed_at.store(now_millis(), Ordering::Relaxed);
}

/// The passes a batch may take: one without savepoints, then (if a job failed) one with a
/// savepoint per job, and again while a job fails there because PostgreSQL broke a deadlock or a
/// serialization conflict with another instance's batch ([`LedgerError::transient`]): rolled
/// back, the batch lets the other one commit, and runs again after it.
const PASSES: usize = 4;

/// Runs `batch` in one transaction and commits it (again, each job in its savepoint, if a job
/// fails): whether a transaction began (or why not), when the write lock was held, and the
/// commit's result with the time its last statements went out.
fn run_batch(
    conn: &mut impl WriteConn,
    batch: &mut [Box<dyn Job>],
    hasher: &ChainHasher,
    deferred: &mut Deferred,
    counters: &WriterCounters,
) -> (
    std::result::Result<(), String>,
    Option<Instant>,
    Result<Instant>,
) {
    let mut begun = Ok(());
    let mut locked = None;
    let mut committed = Err(LedgerError::Internal("the batch did not run".into()));
    for pass in 0..PASSES {
        let (savepoints, last) = (pass > 0, pass + 1 == PASSES);
        if savepoints {
            counters.reruns.fetch_add(1, Ordering::Relaxed);
            telemetry::rerun();
        }
        let read_ahead = !savepoints && conn.db().dialect() == Dialect::Postgres;
        let (head, mut ahead) = match begin(conn, batch, read_ahead) {
            Ok(started) => started,
            // The read ahead failed on a live connection: run without it.
            Err(e) if read_ahead && !conn.lost() => {
                tracing::warn!(error = %e, "reading the batch's rows ahead failed");
                continue;
            }
            Err(e) => {
                begun = Err(e.to_string());
                break;
            }
        };
        locked.get_or_insert_with(Instant::now);
        deferred.clear();
        if !run_jobs(
            conn.db(),
            batch,
            head,
            hasher,
            deferred,
            savepoints,
            ahead.as_mut(),
        ) {
            // A job failed: undo the batch and run it again with a savepoint per job.
            let _ = conn.db().batch("ROLLBACK");
            continue;
        }
        if savepoints && !last && batch.iter().any(|j| j.transient()) {
            let _ = conn.db().batch("ROLLBACK");
            continue;
        }
        let db = conn.db();
        let started = Instant::now();
        committed = flush(db, deferred)
            .and_then(|()| db.batch("COMMIT"))
            .map(|()| started);
        if let Err(e) = &committed {
            let _ = conn.db().batch("ROLLBACK");
            // A write sent behind failed (it surfaces here, with the COMMIT it went out with, which
            // the server then ran as a rollback): run the batch again, each job in its savepoint,
            // to fail that job alone. Only if the server said so: a connection lost on the way
            // leaves the commit unknown, and the batch must not run twice. A later pass's commit
            // refused to break a deadlock runs again as its jobs would.
            if (ahead.is_some() || (e.transient() && !last)) && e.refused_by_server() {
                continue;
            }
        }
        break;
    }
    (begun, locked, committed)
}

fn writer_loop(
    mut conn: impl WriteConn,
    hasher: ChainHasher,
    rx: mpsc::Receiver<Box<dyn Job>>,
    counters: &WriterCounters,
    max_batch: usize,
) {
    let mut batch: Vec<Box<dyn Job>> = Vec::with_capacity(64);
    let mut deferred = Deferred::default();
    let mut failures = Failures::new("ledger commit");
    while let Ok(first) = rx.recv() {
        batch.push(first);
        while batch.len() < max_batch {
            match rx.try_recv() {
                Ok(j) => batch.push(j),
                Err(_) => break,
            }
        }
        // When the batch asked for the write lock and when it got it (on PostgreSQL with the rows
        // it reads ahead): from `locked` to the commit, other writers wait for what it holds.
        let asked = Instant::now();
        let (begun, locked, committed) =
            run_batch(&mut conn, &mut batch, &hasher, &mut deferred, counters);
        if let Err(e) = begun {
            batch_failed(
                &mut failures,
                counters,
                &format_args!("could not begin a transaction: {e}"),
            );
            for mut job in batch.drain(..) {
                job.refuse(&e);
                job.answer(None);
            }
            continue;
        }
        deferred.clear();
        let committed = committed.map_err(|e| e.to_string());
        match &committed {
            Ok(started) => {
                conn.committed();
                counters
                    .round_trips
                    .store(conn.round_trips(), Ordering::Relaxed);
                counters
                    .statements
                    .store(conn.statements(), Ordering::Relaxed);
                counters.commits.fetch_add(1, Ordering::Relaxed);
                counters
                    .jobs
                    .fetch_add(batch.len() as u64, Ordering::Relaxed);
                let locked = locked.unwrap_or(asked);
                telemetry::committed(telemetry::Batch {
                    writes: batch.len(),
                    lock_wait: locked - asked,
                    lock_held: locked.elapsed(),
                    commit: started.elapsed(),
                });
                failures.succeeded();
            }
            Err(e) => batch_failed(&mut failures, counters, e),
        }
        let err = committed.as_ref().err().map(String::as_str);
        for job in batch.drain(..) {
            job.answer(err);
        }
    }
    conn.finish();
}
