//! The SQLite backend: one file, WAL mode, `synchronous=FULL` (every commit is fsync'd).
//!
//! The shared writer (`writer.rs`) owns the only write connection and takes SQLite's write lock
//! with `BEGIN IMMEDIATE` for each batch. Readers use their own read-only connections from a small
//! pool; WAL means they never block the writer. Several processes may open one file: the IMMEDIATE
//! transaction takes the file's write lock, and every claim reads the key's row inside it, so exactly
//! one claim wins across processes too.
//!
//! Checkpoints (moving committed pages from the WAL into the database file, with an fsync of the
//! file) run on a thread and connection of their own, [`Checkpointer`]: SQLite's default would run
//! them on the writer after a commit, stalling every queued write for the copy and its fsync. The
//! writer checkpoints only to start a long WAL over, right after the checkpointer has copied it
//! (a few commits' frames), or as a backstop.

mod schema;
mod walbuf;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::config::DbConfig;
use rusqlite::types::{ToSql, ToSqlOutput, ValueRef};
use rusqlite::{Connection, OpenFlags};

use crate::db::{Db, Dialect, Row, Val};
use crate::error::{LedgerError, Result};
use crate::ledger::{self, Ledger, OpenOptions, ReadPool};
use crate::replays::ReplayCache;
use crate::telemetry::{self, Failures};
use crate::writer::{WriteConn, Writer, MAX_BATCH};

pub use schema::current_version as schema_version;

const BUSY_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the checkpointer moves the WAL into the database file.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(100);
/// The writer checkpoints itself in line only when the WAL has grown past this many pages (~64
/// MiB): a backstop for a checkpointer that cannot keep up.
const WRITER_AUTOCHECKPOINT: i64 = 16_384;
/// From this many WAL frames (~16 MiB) on, the writer starts the WAL over right after the
/// checkpointer has copied it in full ([`SqliteWriter::begin`]). SQLite starts a WAL over only
/// when a write transaction begins with every frame copied; under continuous commits one always
/// lands between the checkpointer's copy and the writer's next transaction, so without this the
/// WAL grew to the backstop every ~0.6 s at 1k req/s, and the writer's in-line checkpoint held
/// every claim for 6–18 ms (BENCHMARKS.md, "The 1k req/s tail").
const RESTART_FROM: i64 = 4_096;

impl Ledger {
    /// Opens (and if asked, creates) the SQLite ledger at `path`, running pending migrations.
    pub fn sqlite(path: impl AsRef<Path>, opts: OpenOptions) -> Result<Arc<Ledger>> {
        Ledger::sqlite_with_batch(path, opts, MAX_BATCH)
    }

    /// [`Ledger::sqlite`] with at most `max_batch` jobs per transaction: 1 is one transaction
    /// (one fsync) per write, the baseline group commit is measured against (benches/claims.rs).
    pub fn sqlite_with_batch(
        path: impl AsRef<Path>,
        opts: OpenOptions,
        max_batch: usize,
    ) -> Result<Arc<Ledger>> {
        // Absolute, once: a relative path is the working directory's, which the ledger's location
        // (the start line, a log, a manifest) would not say (`./idemgate.db` under systemd is
        // `/idemgate.db`), and every connection opens the file it named at the start.
        let path = std::path::absolute(path.as_ref()).unwrap_or_else(|_| path.as_ref().into());
        if !opts.create && !path.exists() {
            return Err(LedgerError::NotFound(path.display().to_string()));
        }
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() && !dir.exists() {
                std::fs::create_dir_all(dir)?;
            }
        }
        let mut conn = open_writer(&path)?;
        migrate(&conn)?;
        // WAL: readers never block the writer.
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        // Savepoints (a batch run again after a failed job) and statements that may abort copy the
        // pages they change to a statement journal; keep it in memory (a temp file meant a pwrite
        // per page, ~15% of the writer's time when every job had a savepoint).
        conn.pragma_update(None, "temp_store", "MEMORY")?;
        // The writer touches index pages all over the ledger (keys are random); SQLite's default
        // 2 MiB cache re-read them from the OS on every batch (in-process claims 15k/s; 24k/s with
        // 64 MiB). But a bigger cache costs every commit: when a b-tree split has swapped page
        // numbers through the lock-byte page's number, SQLite's commit walks the whole cache
        // (`pcache1TruncateUnsafe`) — with 64 MiB filled, 15–20% of the writer's time under HTTP
        // load. 16 MiB: the writer's CPU per first call 210–229 → 160–167 µs (BENCHMARKS.md).
        conn.pragma_update(None, "cache_size", -16_384)?;
        let recorded = ledger::record_alg(&mut conn, &opts.hasher)?;
        let head = crate::read::head(&mut conn)?.map_or(0, |h| h.seq);
        let cache = ReplayCache::open(&path, head);
        let refusal = ledger::write_refusal(&opts.hasher, &recorded);
        conn.pragma_update(None, "wal_autocheckpoint", WRITER_AUTOCHECKPOINT)?;
        let checkpointer = Some(Checkpointer::spawn(&path)?);
        let writer = Writer::spawn(
            SqliteWriter { conn, checkpointer },
            opts.hasher.clone(),
            max_batch,
            refusal,
        )?;
        let readers = Box::new(Readers {
            path,
            pool: Mutex::new(Vec::new()),
        });
        Ok(Ledger::new(opts.hasher, readers, writer, cache))
    }
}

struct SqliteWriter {
    conn: Connection,
    checkpointer: Option<Checkpointer>,
}

/// Runs `PRAGMA wal_checkpoint(PASSIVE)` every [`CHECKPOINT_EVERY`] on a connection of its own.
/// PASSIVE never waits for (or blocks) the writer or readers; it copies what it can.
///
/// SQLite syncs the database file after a checkpoint only if no commit landed while it copied —
/// under continuous commits, never — so the checkpointer syncs it itself after every pass that
/// copied frames. Otherwise the copied pages stay dirty until the writer's own checkpoint, whose
/// sync then flushed all of them (5–18 ms, every claim waiting; now ~1 ms).
struct Checkpointer {
    stop: std::sync::mpsc::Sender<()>,
    handle: std::thread::JoinHandle<()>,
    /// Set when a checkpoint has just copied a WAL of [`RESTART_FROM`] frames or more in full.
    copied: Arc<AtomicBool>,
}

impl Checkpointer {
    fn spawn(path: &Path) -> Result<Checkpointer> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        let db_file = std::fs::File::open(path)?;
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let copied = Arc::new(AtomicBool::new(false));
        let flag = copied.clone();
        let handle = std::thread::Builder::new()
            .name("idemgate-ckpt".into())
            .spawn(move || {
                let mut last_done = 0;
                let mut failures = Failures::new("ledger checkpoint");
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(CHECKPOINT_EVERY)
                {
                    let pass = conn
                        .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
                            Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
                        })
                        .map_err(LedgerError::from)
                        .and_then(|(log, done)| {
                            if done != last_done && done > 0 {
                                db_file.sync_data()?;
                            }
                            Ok((log, done))
                        });
                    match pass {
                        Ok((log, done)) => {
                            failures.succeeded();
                            last_done = done;
                            if log >= RESTART_FROM && done == log {
                                flag.store(true, Ordering::Relaxed);
                            }
                        }
                        Err(e) => {
                            failures.failed(&e);
                            telemetry::checkpoint_failed();
                        }
                    }
                }
            })?;
        Ok(Checkpointer {
            stop,
            handle,
            copied,
        })
    }

    fn stop(self) {
        drop(self.stop);
        let _ = self.handle.join();
    }
}

/// A write connection of its own on the (migrated) ledger at `path` (for `copy`).
pub(crate) fn write_conn(path: &str) -> Result<impl WriteConn> {
    let conn = open(Path::new(path), OpenFlags::SQLITE_OPEN_READ_WRITE)?;
    Ok(SqliteWriter {
        conn,
        checkpointer: None,
    })
}

impl WriteConn for SqliteWriter {
    fn begin(&mut self) -> Result<()> {
        // The checkpointer has just copied a long WAL: copy the few commits since and sync, so this
        // transaction finds the WAL fully copied and starts it over (SQLite restarts a WAL only
        // then; under continuous commits it otherwise grows to the backstop, whose in-line
        // checkpoint copies up to 100 ms of frames: 6–18 ms with every claim waiting).
        let restart = self.checkpointer.as_ref();
        if restart.is_some_and(|c| c.copied.swap(false, Ordering::Relaxed)) {
            if let Err(e) = self
                .conn
                .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
            {
                tracing::warn!(error = %e, "ledger checkpoint failed");
            }
        }
        Ok(self.conn.execute_batch("BEGIN IMMEDIATE")?)
    }

    fn db(&mut self) -> &mut dyn Db {
        &mut self.conn
    }

    fn finish(&mut self) {
        if let Some(c) = self.checkpointer.take() {
            c.stop();
        }
        // Checkpoint so the main file holds everything.
        let _ = self.conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)");
    }
}

#[derive(Debug)]
struct Readers {
    path: PathBuf,
    pool: Mutex<Vec<Connection>>,
}

impl ReadPool for Readers {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    fn inline(&self) -> bool {
        true
    }

    fn location(&self) -> String {
        self.path.display().to_string()
    }

    fn with(&self, f: &mut dyn FnMut(&mut dyn Db)) -> Result<()> {
        let mut conn = match self.pool.lock().ok().and_then(|mut p| p.pop()) {
            Some(c) => c,
            None => open(&self.path, OpenFlags::SQLITE_OPEN_READ_ONLY)?,
        };
        f(&mut conn);
        if let Ok(mut p) = self.pool.lock() {
            if p.len() < 8 {
                p.push(conn);
            }
        }
        Ok(())
    }

    fn clear(&self) {
        if let Ok(mut p) = self.pool.lock() {
            p.clear();
        }
    }
}

impl ToSql for Val<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match *self {
            Val::Null => ValueRef::Null,
            Val::Int(i) => ValueRef::Integer(i),
            Val::Text(s) => ValueRef::Text(s.as_bytes()),
            Val::Blob(b) => ValueRef::Blob(b),
            // Arrays are PostgreSQL's; no SQLite statement binds one.
            Val::Texts(_) | Val::Ints(_) => {
                return Err(rusqlite::Error::ToSqlConversionFailure(
                    "SQLite has no array parameters".into(),
                ))
            }
        }))
    }
}

impl Row for rusqlite::Row<'_> {
    fn opt_int(&self, i: usize) -> Result<Option<i64>> {
        Ok(self.get(i)?)
    }

    fn opt_text(&self, i: usize) -> Result<Option<String>> {
        Ok(self.get(i)?)
    }

    fn opt_blob(&self, i: usize) -> Result<Option<Vec<u8>>> {
        Ok(self.get(i)?)
    }

    fn with_opt_str(&self, i: usize, f: &mut dyn FnMut(Option<&str>)) -> Result<()> {
        f(str_at(self, i)?);
        Ok(())
    }
}

/// Column `i` as text borrowed from the row (`None`: NULL).
fn str_at<'r>(r: &'r rusqlite::Row<'_>, i: usize) -> Result<Option<&'r str>> {
    let v = r.get_ref(i)?;
    match v {
        rusqlite::types::ValueRef::Null => Ok(None),
        _ => v.as_str().map(Some).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(i, v.data_type(), Box::new(e)).into()
        }),
    }
}

impl Db for Connection {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn exec(&mut self, sql: &str, params: &[Val<'_>]) -> Result<u64> {
        let n = self
            .prepare_cached(sql)?
            .execute(rusqlite::params_from_iter(params))?;
        Ok(n as u64)
    }

    fn batch(&mut self, sql: &str) -> Result<()> {
        Ok(self.execute_batch(sql)?)
    }

    fn last_insert_id(&self) -> Result<i64> {
        Ok(self.last_insert_rowid())
    }

    fn each(
        &mut self,
        sql: &str,
        params: &[Val<'_>],
        f: &mut dyn FnMut(&dyn Row) -> Result<bool>,
    ) -> Result<()> {
        let mut stmt = self.prepare_cached(sql)?;
        let mut rows = stmt.query(rusqlite::params_from_iter(params))?;
        while let Some(r) = rows.next()? {
            if !f(r)? {
                break;
            }
        }
        Ok(())
    }
}

/// A connection through the default VFS: a reader's, or `copy`'s writer.
fn open(path: &Path, flags: OpenFlags) -> Result<Connection> {
    let conn = Connection::open_with_flags(path, flags | OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
    setup(conn)
}

/// The writer's connection: through [`walbuf`], which writes each commit's WAL frames in a few
/// `pwrite`s, and with `synchronous = FULL` (every commit fsync'd), which the shim requires and
/// which is set before anything is written.
fn open_writer(path: &Path) -> Result<Connection> {
    walbuf::register().map_err(|rc| {
        LedgerError::Db(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rc),
            Some("cannot register the WAL write buffer's VFS".into()),
        ))
    })?;
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags_and_vfs(path, flags, walbuf::NAME)?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    setup(conn)
}

/// What every connection that runs the ledger's statements gets: a busy timeout, its statement
/// cache and a stable query plan.
fn setup(conn: Connection) -> Result<Connection> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.set_prepared_statement_cache_capacity(64);
    // One plan per statement, whatever its bound values (QPSG). Without it SQLite marks some
    // statements to be compiled again when a parameter is re-bound (it let a bound value steer
    // the plan), and rusqlite's statement cache clears the bindings of every statement it takes
    // back, which expires such a statement outright: the duplicate check was compiled again on
    // every run, a quarter of the writer's time per first call (BENCHMARKS.md). The ledger runs no
    // ANALYZE and no LIKE on an indexed prefix, so none of its plans needs a bound value.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    Ok(conn)
}

fn migrate(conn: &Connection) -> Result<()> {
    migrate_to(conn, schema::current_version())
}

/// Runs the migrations up to version `supported` (tests stop before the last ones).
fn migrate_to(conn: &Connection, supported: i64) -> Result<()> {
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
        let pending = schema::MIGRATIONS
            .iter()
            .enumerate()
            .take(supported as usize);
        for (i, m) in pending.skip(version as usize) {
            match m {
                schema::Migration::Sql(sql) => conn.execute_batch(sql)?,
                schema::Migration::Code(f) => f(conn)?,
            }
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

#[cfg(test)]
mod tests;
