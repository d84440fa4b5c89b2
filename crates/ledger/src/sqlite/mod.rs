//! The SQLite backend.
//!
//! One writer thread owns the only write connection. Writes are queued as jobs; the writer takes
//! every job waiting (up to [`MAX_BATCH`]), runs them in one IMMEDIATE transaction, each inside its own
//! savepoint (so one failing job does not undo the others), commits once — in WAL mode with
//! `synchronous=FULL` that is one fsync for the whole batch — and only then answers each job's
//! [`Ticket`]. That is group commit: throughput grows with concurrency, no claim is acknowledged
//! before it is durable. Readers use their own read-only connections from a small pool.
//!
//! Several processes may open one file: the IMMEDIATE transaction takes SQLite's write lock, and every
//! claim reads the key's row inside it, so exactly one claim wins across processes too.

mod read;
mod schema;
mod write;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use crate::chain::{self, ChainHasher, VerifyReport};
use crate::error::{LedgerError, Result};
use crate::model::*;
use crate::store::*;

pub use schema::current_version as schema_version;

/// The most jobs one transaction takes.
pub const MAX_BATCH: usize = 4096;

const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// What the writer hands a job: the open transaction's connection and the chain head.
pub(crate) struct Ctx<'c> {
    pub conn: &'c Connection,
    pub head: Head,
    pub hasher: &'c ChainHasher,
}

#[derive(Clone, Debug)]
pub(crate) struct Head {
    pub seq: i64,
    pub hash: String,
}

type Reply = Box<dyn FnOnce(Option<&str>) + Send>;
/// A queued write: run against the open batch transaction, or told why there is none.
type Job = Box<dyn FnOnce(std::result::Result<&mut Ctx<'_>, &str>) -> (bool, Reply) + Send>;

/// How to open a ledger.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// Create the file when it does not exist (else [`LedgerError::NotFound`]).
    pub create: bool,
    pub hasher: ChainHasher,
}

impl OpenOptions {
    /// Open an existing ledger, with the chain key from the environment.
    pub fn existing() -> Result<Self> {
        Ok(OpenOptions {
            create: false,
            hasher: ChainHasher::from_env()?,
        })
    }

    /// Open or create, with the chain key from the environment.
    pub fn create() -> Result<Self> {
        Ok(OpenOptions {
            create: true,
            hasher: ChainHasher::from_env()?,
        })
    }
}

/// A SQLite ledger. Cheap to share behind an `Arc`; dropping the last handle stops the writer after
/// it has finished every queued job.
#[derive(Debug)]
pub struct SqliteLedger {
    path: PathBuf,
    hasher: ChainHasher,
    /// Set when the ledger's recorded chain algorithm differs from the hasher: reads work, writes are
    /// refused (`true`: a key is required; `false`: a key was given for an unkeyed log).
    write_refusal: Option<bool>,
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    readers: Mutex<Vec<Connection>>,
    counters: Arc<WriterCounters>,
}

/// What the writer has done: committed transactions (each one fsync) and the jobs they carried.
#[derive(Debug, Default)]
pub struct WriterCounters {
    pub commits: AtomicU64,
    pub jobs: AtomicU64,
}

impl SqliteLedger {
    /// Opens (and if asked, creates) the ledger at `path`, running pending migrations.
    pub fn open(path: impl AsRef<Path>, opts: OpenOptions) -> Result<Arc<SqliteLedger>> {
        SqliteLedger::open_with_batch(path, opts, MAX_BATCH)
    }

    /// [`SqliteLedger::open`] with at most `max_batch` jobs per transaction: 1 is one transaction
    /// (one fsync) per write, the baseline group commit is measured against (benches/claims.rs).
    pub fn open_with_batch(
        path: impl AsRef<Path>,
        opts: OpenOptions,
        max_batch: usize,
    ) -> Result<Arc<SqliteLedger>> {
        let max_batch = max_batch.clamp(1, MAX_BATCH);
        let path = path.as_ref().to_path_buf();
        if !opts.create && !path.exists() {
            return Err(LedgerError::NotFound(path.display().to_string()));
        }
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() && !dir.exists() {
                std::fs::create_dir_all(dir)?;
            }
        }
        let conn = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        migrate(&conn)?;
        // WAL: readers never block the writer; FULL: every commit is fsync'd.
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        let recorded = record_alg(&conn, &opts.hasher)?;
        let write_refusal = match chain::check_alg(&opts.hasher, &recorded) {
            Ok(()) => None,
            Err(LedgerError::ChainKeyRequired) => Some(true),
            Err(_) => Some(false),
        };

        let (tx, rx) = mpsc::channel::<Job>();
        let hasher = opts.hasher.clone();
        let counters = Arc::new(WriterCounters::default());
        let c = counters.clone();
        let writer = std::thread::Builder::new()
            .name("idemgate-ledger-writer".into())
            .spawn(move || writer_loop(conn, hasher, rx, &c, max_batch))?;
        Ok(Arc::new(SqliteLedger {
            path,
            hasher: opts.hasher,
            write_refusal,
            tx: Mutex::new(Some(tx)),
            writer: Mutex::new(Some(writer)),
            readers: Mutex::new(Vec::new()),
            counters,
        }))
    }

    /// Commits and jobs so far (group commit: jobs / commits is the batching factor).
    pub fn writer_counters(&self) -> (u64, u64) {
        (
            self.counters.commits.load(Ordering::Relaxed),
            self.counters.jobs.load(Ordering::Relaxed),
        )
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stops accepting writes, lets the writer finish every queued job and waits for it.
    pub fn close(&self) {
        if let Ok(mut tx) = self.tx.lock() {
            tx.take();
        }
        if let Ok(mut w) = self.writer.lock() {
            if let Some(h) = w.take() {
                let _ = h.join();
            }
        }
        if let Ok(mut r) = self.readers.lock() {
            r.clear();
        }
    }

    /// Queues a job for the writer. `f` runs inside the batch transaction; its result is sent once
    /// the batch has committed (or the commit's error, if it did not).
    pub(crate) fn submit<T, F>(&self, f: F) -> Ticket<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Ctx<'_>) -> Result<T> + Send + 'static,
    {
        if let Some(key_required) = self.write_refusal {
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

    /// Runs `f` on a pooled read-only connection.
    pub(crate) fn read<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let conn = match self.readers.lock().ok().and_then(|mut p| p.pop()) {
            Some(c) => c,
            None => {
                let c = Connection::open_with_flags(
                    &self.path,
                    OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
                )?;
                c.busy_timeout(BUSY_TIMEOUT)?;
                c
            }
        };
        let r = f(&conn);
        if let Ok(mut p) = self.readers.lock() {
            if p.len() < 8 {
                p.push(conn);
            }
        }
        r
    }
}

impl Drop for SqliteLedger {
    fn drop(&mut self) {
        self.close();
    }
}

fn migrate(conn: &Connection) -> Result<()> {
    let supported = schema::current_version();
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if version > supported {
        return Err(LedgerError::TooNew {
            found: version,
            supported,
        });
    }
    if version == supported {
        return Ok(());
    }
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let run = || -> Result<()> {
        // Another process may have migrated while we waited for the lock.
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        if version > supported {
            return Err(LedgerError::TooNew {
                found: version,
                supported,
            });
        }
        for (i, m) in schema::MIGRATIONS.iter().enumerate().skip(version as usize) {
            conn.execute_batch(m)?;
            conn.pragma_update(None, "user_version", (i + 1) as i64)?;
        }
        Ok(())
    };
    match run() {
        Ok(()) => {
            conn.execute_batch("COMMIT")?;
            Ok(())
        }
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

/// Records the chain algorithm the first time a ledger is written; returns the recorded one.
fn record_alg(conn: &Connection, hasher: &ChainHasher) -> Result<String> {
    let existing: Option<String> = conn
        .query_row("SELECT value FROM meta WHERE name = 'chain_alg'", [], |r| {
            r.get(0)
        })
        .map(Some)
        .or_else(|e| match e {
            rusqlite::Error::QueryReturnedNoRows => Ok(None),
            e => Err(e),
        })?;
    if let Some(a) = existing {
        return Ok(a);
    }
    conn.execute(
        "INSERT OR IGNORE INTO meta (name, value) VALUES ('chain_alg', ?1)",
        [hasher.alg()],
    )?;
    Ok(
        conn.query_row("SELECT value FROM meta WHERE name = 'chain_alg'", [], |r| {
            r.get(0)
        })?,
    )
}

fn load_head(conn: &Connection) -> rusqlite::Result<Head> {
    match conn.query_row(
        "SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1",
        [],
        |r| {
            Ok(Head {
                seq: r.get(0)?,
                hash: r.get(1)?,
            })
        },
    ) {
        Ok(h) => Ok(h),
        Err(rusqlite::Error::QueryReturnedNoRows) => Ok(Head {
            seq: 0,
            hash: chain::GENESIS.into(),
        }),
        Err(e) => Err(e),
    }
}

fn writer_loop(
    conn: Connection,
    hasher: ChainHasher,
    rx: mpsc::Receiver<Job>,
    counters: &WriterCounters,
    max_batch: usize,
) {
    let mut batch: Vec<Job> = Vec::with_capacity(64);
    let mut replies: Vec<Reply> = Vec::with_capacity(64);
    while let Ok(first) = rx.recv() {
        batch.push(first);
        while batch.len() < max_batch {
            match rx.try_recv() {
                Ok(j) => batch.push(j),
                Err(_) => break,
            }
        }
        let begun = conn
            .execute_batch("BEGIN IMMEDIATE")
            .map_err(|e| e.to_string());
        let head = begun
            .clone()
            .and_then(|()| load_head(&conn).map_err(|e| e.to_string()));
        let mut head = match head {
            Ok(h) => h,
            Err(e) => {
                tracing::error!(error = %e, "ledger writer could not begin a transaction");
                let _ = conn.execute_batch("ROLLBACK");
                for job in batch.drain(..) {
                    let (_, reply) = job(Err(&e));
                    reply(None);
                }
                continue;
            }
        };
        for job in batch.drain(..) {
            let saved = head.clone();
            if let Err(e) = conn.execute_batch("SAVEPOINT job") {
                tracing::error!(error = %e, "savepoint failed");
            }
            let mut ctx = Ctx {
                conn: &conn,
                head,
                hasher: &hasher,
            };
            let (failed, reply) = job(Ok(&mut ctx));
            head = ctx.head;
            if failed {
                let _ = conn.execute_batch("ROLLBACK TO job; RELEASE job");
                head = saved;
            } else {
                let _ = conn.execute_batch("RELEASE job");
            }
            replies.push(reply);
        }
        let committed = conn.execute_batch("COMMIT").map_err(|e| e.to_string());
        match &committed {
            Ok(()) => {
                counters.commits.fetch_add(1, Ordering::Relaxed);
                counters
                    .jobs
                    .fetch_add(replies.len() as u64, Ordering::Relaxed);
            }
            Err(e) => {
                tracing::error!(error = %e, "ledger commit failed");
                let _ = conn.execute_batch("ROLLBACK");
            }
        }
        let err = committed.as_ref().err().map(String::as_str);
        for reply in replies.drain(..) {
            reply(err);
        }
    }
    // All senders gone: checkpoint so the main file holds everything.
    let _ = conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)");
}

impl Storage for SqliteLedger {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    fn location(&self) -> String {
        self.path.display().to_string()
    }

    fn chain_alg(&self) -> Result<String> {
        self.read(|c| {
            Ok(
                c.query_row("SELECT value FROM meta WHERE name = 'chain_alg'", [], |r| {
                    r.get(0)
                })?,
            )
        })
    }

    fn claim(&self, req: ClaimRequest) -> Ticket<ClaimOutcome> {
        self.submit(move |ctx| write::claim(ctx, req))
    }

    fn record_attempt(&self, report: OwnerReport, attempt: i64, lease_ms: i64) -> Ticket<()> {
        self.submit(move |ctx| write::record_attempt(ctx, report, attempt, lease_ms))
    }

    fn complete(&self, req: CompleteRequest) -> Ticket<CompleteOutcome> {
        self.submit(move |ctx| write::complete(ctx, req))
    }

    fn mark_unknown(&self, report: OwnerReport) -> Ticket<()> {
        self.submit(move |ctx| write::mark_unknown(ctx, report))
    }

    fn release(&self, report: OwnerReport) -> Ticket<()> {
        self.submit(move |ctx| write::release(ctx, report))
    }

    fn sweep(&self, at: Millis) -> Ticket<SweepReport> {
        self.submit(move |ctx| write::sweep(ctx, at))
    }

    fn resolve(&self, req: ResolveRequest) -> Ticket<EntrySummary> {
        self.submit(move |ctx| write::resolve(ctx, req))
    }

    fn purge(&self, req: PurgeRequest) -> Ticket<Vec<i64>> {
        self.submit(move |ctx| write::purge(ctx, req))
    }

    fn redrive(&self, req: RedriveRequest) -> Ticket<Redrive> {
        self.submit(move |ctx| write::redrive(ctx, req))
    }

    fn note_reconcile(&self, note: ReconcileNote) -> Ticket<()> {
        self.submit(move |ctx| write::note_reconcile(ctx, note))
    }

    fn entry(&self, id: i64, now: Millis) -> Result<EntryDetail> {
        self.read(|c| read::entry(c, id, now))
    }

    fn entries(&self, filter: &EntryFilter, page: Page, now: Millis) -> Result<Vec<EntrySummary>> {
        self.read(|c| read::entries(c, filter, page, now))
    }

    fn events(&self, filter: &EventFilter, page: Page) -> Result<Vec<Event>> {
        self.read(|c| read::events(c, filter, page))
    }

    fn scan_events(
        &self,
        range: EventRange,
        f: &mut dyn FnMut(Event) -> Result<bool>,
    ) -> Result<()> {
        self.read(|c| read::scan_events(c, range, f))
    }

    fn incidents(&self, page: Page, now: Millis) -> Result<Vec<Incident>> {
        self.read(|c| read::incidents(c, page, now))
    }

    fn stats(&self, now: Millis, hours: u32) -> Result<Stats> {
        self.read(|c| read::stats(c, now, hours))
    }

    fn head(&self) -> Result<Option<ChainHead>> {
        self.read(|c| {
            let h = load_head(c)?;
            Ok((h.seq > 0).then_some(ChainHead {
                seq: h.seq,
                hash: h.hash,
            }))
        })
    }

    fn contains(&self, head: &ChainHead) -> Result<bool> {
        self.read(|c| {
            let found: Option<String> = c
                .query_row("SELECT hash FROM events WHERE seq = ?1", [head.seq], |r| {
                    r.get(0)
                })
                .map(Some)
                .or_else(|e| match e {
                    rusqlite::Error::QueryReturnedNoRows => Ok(None),
                    e => Err(e),
                })?;
            Ok(found.as_deref() == Some(head.hash.as_str()))
        })
    }

    fn verify(&self, progress: Progress<'_>) -> Result<VerifyReport> {
        let alg = self.chain_alg()?;
        chain::check_alg(&self.hasher, &alg)?;
        self.read(|c| {
            let mut stmt = c.prepare(&format!(
                "SELECT {} FROM events ORDER BY seq",
                read::EVENT_COLS
            ))?;
            let rows = stmt.query_map([], read::event_row)?;
            chain::verify_events(
                &self.hasher,
                chain::ChainStart::Genesis,
                rows.map(|r| r.map_err(LedgerError::from)),
                progress,
            )
        })
    }
}
