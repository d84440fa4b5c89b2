//! Group commit, for every backend.
//!
//! One writer thread per process owns the only write connection. Writes are queued as jobs; the
//! writer takes every job waiting (up to [`MAX_BATCH`]), opens one transaction that holds the
//! ledger's write lock (SQLite: `BEGIN IMMEDIATE`; PostgreSQL: a transaction-scoped advisory lock,
//! so the writers of several processes take turns), runs each job inside its own savepoint (one
//! failing job does not undo the others), commits once — one fsync for the whole batch — and only
//! then answers each job's [`Ticket`]. Throughput grows with concurrency; no write is acknowledged
//! before it is durable; the hash chain has one writer at a time, so it stays one chain.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;

use crate::chain::{ChainHasher, GENESIS};
use crate::db::Db;
use crate::error::{LedgerError, Result};
use crate::model::Event;
use crate::read;
use crate::store::Ticket;
use crate::write;

/// The most jobs one transaction takes.
pub const MAX_BATCH: usize = 4096;

/// What the writer hands a job: the open transaction and the chain head; the job's events and
/// counter changes wait in `out` until the batch writes them (`write::flush`).
pub(crate) struct Ctx<'c> {
    pub db: &'c mut dyn Db,
    pub head: Head,
    pub hasher: &'c ChainHasher,
    pub out: Deferred,
}

/// Writes deferred to the end of a batch: they are only ever read after it commits, and one
/// multi-row statement per batch is much cheaper than one statement per job (on PostgreSQL the
/// entry counts would otherwise be one hot row updated by every job).
#[derive(Debug, Default)]
pub(crate) struct Deferred {
    pub events: Vec<Event>,
    /// (hour, kind, n): the hourly event counts.
    pub bumps: Vec<(i64, String, i64)>,
    /// Entries gained (or lost) per state, in `State::ALL` order.
    pub counts: [i64; 4],
}

impl Deferred {
    pub fn bump(&mut self, hour: i64, kind: &str, n: i64) {
        match self
            .bumps
            .iter_mut()
            .find(|(h, k, _)| *h == hour && k == kind)
        {
            Some((_, _, m)) => *m += n,
            None => self.bumps.push((hour, kind.to_owned(), n)),
        }
    }

    fn merge(&mut self, job: Deferred) {
        self.events.extend(job.events);
        for (hour, kind, n) in &job.bumps {
            self.bump(*hour, kind, *n);
        }
        for (a, b) in self.counts.iter_mut().zip(job.counts) {
            *a += b;
        }
    }

    fn clear(&mut self) {
        self.events.clear();
        self.bumps.clear();
        self.counts = [0; 4];
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Head {
    pub seq: i64,
    pub hash: String,
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
}

type Reply = Box<dyn FnOnce(Option<&str>) + Send>;
/// A queued write: run against the open batch transaction, or told why there is none.
type Job = Box<dyn FnOnce(std::result::Result<&mut Ctx<'_>, &str>) -> (bool, Reply) + Send>;

/// What the writer has done: committed transactions (each one fsync) and the jobs they carried.
#[derive(Debug, Default)]
pub struct WriterCounters {
    pub commits: AtomicU64,
    pub jobs: AtomicU64,
}

/// The handle on a writer thread.
#[derive(Debug)]
pub(crate) struct Writer {
    /// Set when the ledger's recorded chain algorithm differs from the hasher: reads work, writes
    /// are refused (`true`: a key is required; `false`: a key was given for an unkeyed log).
    refusal: Option<bool>,
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    handle: Mutex<Option<JoinHandle<()>>>,
    pub counters: Arc<WriterCounters>,
}

impl Writer {
    pub fn spawn(
        conn: impl WriteConn,
        hasher: ChainHasher,
        max_batch: usize,
        refusal: Option<bool>,
    ) -> Result<Writer> {
        let (tx, rx) = mpsc::channel::<Job>();
        let counters = Arc::new(WriterCounters::default());
        let c = counters.clone();
        let max_batch = max_batch.clamp(1, MAX_BATCH);
        let handle = std::thread::Builder::new()
            .name("idemgate-ledger-writer".into())
            .spawn(move || writer_loop(conn, hasher, rx, &c, max_batch))?;
        Ok(Writer {
            refusal,
            tx: Mutex::new(Some(tx)),
            handle: Mutex::new(Some(handle)),
            counters,
        })
    }

    /// Commits and jobs so far (group commit: jobs / commits is the batching factor).
    pub fn counters(&self) -> (u64, u64) {
        (
            self.counters.commits.load(Ordering::Relaxed),
            self.counters.jobs.load(Ordering::Relaxed),
        )
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

    /// Queues a job. `f` runs inside the batch transaction; its result is sent once the batch has
    /// committed (or the commit's error, if it did not).
    pub fn submit<T, F>(&self, f: F) -> Ticket<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Ctx<'_>) -> Result<T> + Send + 'static,
    {
        if let Some(key_required) = self.refusal {
            return Ticket::ready(Err(if key_required {
                LedgerError::ChainKeyRequired
            } else {
                LedgerError::ChainKeyUnexpected
            }));
        }
        let (reply, ticket) = Ticket::channel();
        let job: Job = Box::new(move |ctx: std::result::Result<&mut Ctx<'_>, &str>| {
            let r = match ctx {
                Ok(ctx) => f(ctx),
                Err(e) => Err(LedgerError::Unavailable(e.to_owned())),
            };
            let failed = r.is_err();
            let done: Reply = Box::new(move |commit_err: Option<&str>| {
                let _ = reply.send(match commit_err {
                    Some(e) => Err(LedgerError::Unavailable(format!("commit failed: {e}"))),
                    None => r,
                });
            });
            (failed, done)
        });
        let sender = self.tx.lock().ok().and_then(|g| g.clone());
        match sender {
            Some(s) => {
                if let Err(mpsc::SendError(job)) = s.send(job) {
                    drop(job);
                    return Ticket::ready(Err(LedgerError::Closed));
                }
                ticket
            }
            None => Ticket::ready(Err(LedgerError::Closed)),
        }
    }
}

/// Begins a batch and reads the chain head inside it.
fn begin(conn: &mut impl WriteConn) -> Result<Head> {
    conn.begin()?;
    let head = read::head(conn.db());
    match head {
        Ok(h) => Ok(h.map_or_else(
            || Head {
                seq: 0,
                hash: GENESIS.into(),
            },
            |h| Head {
                seq: h.seq,
                hash: h.hash,
            },
        )),
        Err(e) => {
            let _ = conn.db().batch("ROLLBACK");
            Err(e)
        }
    }
}

fn writer_loop(
    mut conn: impl WriteConn,
    hasher: ChainHasher,
    rx: mpsc::Receiver<Job>,
    counters: &WriterCounters,
    max_batch: usize,
) {
    let mut batch: Vec<Job> = Vec::with_capacity(64);
    let mut replies: Vec<Reply> = Vec::with_capacity(64);
    let mut deferred = Deferred::default();
    while let Ok(first) = rx.recv() {
        batch.push(first);
        while batch.len() < max_batch {
            match rx.try_recv() {
                Ok(j) => batch.push(j),
                Err(_) => break,
            }
        }
        let mut head = match begin(&mut conn) {
            Ok(h) => h,
            Err(e) => {
                let e = e.to_string();
                tracing::error!(error = %e, "ledger writer could not begin a transaction");
                for job in batch.drain(..) {
                    let (_, reply) = job(Err(&e));
                    reply(None);
                }
                continue;
            }
        };
        let db = conn.db();
        // Each job runs inside savepoint `job`, so a failing job is undone alone. One statement
        // between jobs: a success releases and re-opens it; a failure rolls back to it (which keeps
        // it open). COMMIT releases the last.
        let mut savepoint = db.defer("SAVEPOINT job");
        let last = batch.len().saturating_sub(1);
        for (i, job) in batch.drain(..).enumerate() {
            if let Err(e) = &savepoint {
                tracing::error!(error = %e, "savepoint failed");
            }
            let saved = head.clone();
            let mut ctx = Ctx {
                db: &mut *db,
                head,
                hasher: &hasher,
                out: Deferred::default(),
            };
            let (failed, reply) = job(Ok(&mut ctx));
            let Ctx {
                head: new_head,
                out,
                ..
            } = ctx;
            if failed {
                head = saved;
                savepoint = db.defer("ROLLBACK TO SAVEPOINT job");
            } else {
                head = new_head;
                deferred.merge(out);
                if i < last {
                    savepoint = db.defer("RELEASE SAVEPOINT job; SAVEPOINT job");
                }
            }
            replies.push(reply);
        }
        let flushed = write::flush(db, &deferred);
        deferred.clear();
        let committed = flushed
            .and_then(|()| db.batch("COMMIT"))
            .map_err(|e| e.to_string());
        match &committed {
            Ok(()) => {
                conn.committed();
                counters.commits.fetch_add(1, Ordering::Relaxed);
                counters
                    .jobs
                    .fetch_add(replies.len() as u64, Ordering::Relaxed);
            }
            Err(e) => {
                tracing::error!(error = %e, "ledger commit failed");
                let _ = db.batch("ROLLBACK");
            }
        }
        let err = committed.as_ref().err().map(String::as_str);
        for reply in replies.drain(..) {
            reply(err);
        }
    }
    conn.finish();
}
