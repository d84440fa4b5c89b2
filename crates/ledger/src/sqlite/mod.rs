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
//! them on the writer after a commit, stalling every queued write for the copy and its fsync.

mod schema;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::config::DbConfig;
use rusqlite::types::{ToSql, ToSqlOutput, ValueRef};
use rusqlite::{Connection, OpenFlags};

use crate::db::{Db, Dialect, Row, Val};
use crate::error::{LedgerError, Result};
use crate::ledger::{self, Ledger, OpenOptions, ReadPool};
use crate::writer::{WriteConn, Writer, MAX_BATCH};

pub use schema::current_version as schema_version;

const BUSY_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the checkpointer moves the WAL into the database file.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(100);
/// The writer checkpoints itself only when the WAL has grown past this many pages (~64 MiB): a
/// backstop for a checkpointer that cannot keep up. Under continuous writes it is also where the
/// WAL starts over: a PASSIVE checkpoint never finds the WAL fully copied when the writer's next
/// transaction begins, which is what lets SQLite restart it (BENCHMARKS.md, "what is left").
const WRITER_AUTOCHECKPOINT: i64 = 16_384;

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
        let path = path.as_ref().to_path_buf();
        if !opts.create && !path.exists() {
            return Err(LedgerError::NotFound(path.display().to_string()));
        }
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() && !dir.exists() {
                std::fs::create_dir_all(dir)?;
            }
        }
        let mut conn = open(
            &path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE,
        )?;
        migrate(&conn)?;
        // WAL: readers never block the writer; FULL: every commit is fsync'd.
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
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
        Ok(Ledger::new(opts.hasher, readers, writer))
    }
}

struct SqliteWriter {
    conn: Connection,
    checkpointer: Option<Checkpointer>,
}

/// Runs `PRAGMA wal_checkpoint(PASSIVE)` every [`CHECKPOINT_EVERY`] on a connection of its own.
/// PASSIVE never waits for (or blocks) the writer or readers; it copies what it can.
struct Checkpointer {
    stop: std::sync::mpsc::Sender<()>,
    handle: std::thread::JoinHandle<()>,
}

impl Checkpointer {
    fn spawn(path: &Path) -> Result<Checkpointer> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let handle = std::thread::Builder::new()
            .name("idemgate-ckpt".into())
            .spawn(move || {
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(CHECKPOINT_EVERY)
                {
                    if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
                    {
                        tracing::warn!(error = %e, "ledger checkpoint failed");
                    }
                }
            })?;
        Ok(Checkpointer { stop, handle })
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

/// A connection that runs the ledger's statements (the writer's, a reader's), with its statement
/// cache and a stable query plan.
fn open(path: &Path, flags: OpenFlags) -> Result<Connection> {
    let conn = Connection::open_with_flags(path, flags | OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::vals;
    use crate::write::FIND_DUPLICATE;
    use rusqlite::StatementStatus;

    /// How many times `FIND_DUPLICATE` was compiled again over five runs through the statement
    /// cache, on a connection opened like the writer's, with or without a stable plan.
    fn recompiles(path: &Path, stable_plan: bool) -> i32 {
        let mut conn = open(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE,
        )
        .unwrap();
        migrate(&conn).unwrap();
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, stable_plan)
            .unwrap();
        for i in 0..5i64 {
            let found = <dyn Db>::opt(
                &mut conn,
                &FIND_DUPLICATE,
                vals!["charges", "agent", "f00d", i, "k", i],
                |r| r.int(0),
            )
            .unwrap();
            assert_eq!(found, None);
        }
        let n = conn
            .prepare_cached(&FIND_DUPLICATE)
            .unwrap()
            .get_status(StatementStatus::RePrepare);
        n
    }

    #[test]
    fn the_writer_compiles_its_statements_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        assert_eq!(recompiles(&path, true), 0);
        // What the stable plan prevents: the same runs without it compile the statement again
        // (so this test can tell the two apart).
        assert!(recompiles(&path, false) >= 4);
    }
}
