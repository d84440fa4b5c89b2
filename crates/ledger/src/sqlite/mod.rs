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
mod tests {
    use super::*;
    use crate::db::vals;
    use crate::write::FIND_DUPLICATE;
    use rusqlite::StatementStatus;

    /// How many times `FIND_DUPLICATE` was compiled again over five runs through the statement
    /// cache, on a connection opened like the writer's, with or without a stable plan.
    fn recompiles(path: &Path, stable_plan: bool) -> i32 {
        let mut conn = open_writer(path).unwrap();
        migrate(&conn).unwrap();
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, stable_plan)
            .unwrap();
        for i in 0..5i64 {
            let found = <dyn Db>::opt(
                &mut conn,
                &FIND_DUPLICATE[0],
                vals!["charges", "agent", "f00d", i, "k", i],
                |r| r.int(0),
            )
            .unwrap();
            assert_eq!(found, None);
        }
        let n = conn
            .prepare_cached(&FIND_DUPLICATE[0])
            .unwrap()
            .get_status(StatementStatus::RePrepare);
        n
    }

    /// The opcodes of `sql` as `conn` compiles it.
    fn opcodes(conn: &Connection, sql: &str) -> Vec<String> {
        let mut stmt = conn.prepare(&format!("EXPLAIN {sql}")).unwrap();
        let nulls = vec![rusqlite::types::Value::Null; stmt.parameter_count()];
        let ops = stmt
            .query_map(rusqlite::params_from_iter(nulls), |r| r.get::<_, String>(1))
            .unwrap();
        ops.map(|o| o.unwrap()).collect()
    }

    /// Whether `conn` builds a temporary b-tree to run the hot path's writes on SQLite: a first
    /// claim's insert (of the columns every schema version has, as the state check sees it),
    /// a completion's update.
    fn hot_path_builds_btrees(conn: &Connection) -> bool {
        let claim =
            "INSERT INTO entries (route, scope, key, fingerprint, effect, state, attempts, \
                     created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, 'pending', 1, ?6, ?6)";
        let (complete, _) = crate::write::COMPLETION.get(Dialect::Sqlite);
        [claim, complete.as_str()]
            .iter()
            .any(|sql| opcodes(conn, sql).iter().any(|o| o == "OpenEphemeral"))
    }

    /// Claim number `i` of a test's stream: its own key, fingerprint and body.
    fn numbered_claim(i: u64) -> crate::store::ClaimRequest {
        let c = crate::testing::charge(&format!("key-{i:016x}"), 1);
        crate::store::ClaimRequest {
            fingerprint: format!("{:064x}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
            request: crate::model::RequestRecord {
                body: format!("{{\"order\":{i}}}").into_bytes(),
                ..c.request
            },
            owner: "test".into(),
            ..c
        }
    }

    fn writer_conn(path: &Path) -> Connection {
        open_writer(path).unwrap()
    }

    /// An entry in state `state`, inserted directly.
    fn insert_entry(conn: &Connection, key: &str, state: &str) -> rusqlite::Result<usize> {
        insert_entry_in(conn, "charges", "agent", key, state)
    }

    /// An entry of `route` and `scope` in state `state`, inserted directly.
    fn insert_entry_in(
        conn: &Connection,
        route: &str,
        scope: &str,
        key: &str,
        state: &str,
    ) -> rusqlite::Result<usize> {
        conn.execute(
            "INSERT INTO entries (route, scope, key, fingerprint, effect, state, created_at, \
             updated_at) VALUES (?1, ?2, ?3, 'f', 'write', ?4, 1, 1)",
            [route, scope, key, state],
        )
    }

    /// The text of the schema object `name`.
    fn schema_sql(conn: &Connection, name: &str) -> String {
        conn.query_row(
            "SELECT sql FROM sqlite_schema WHERE name = ?1",
            [name],
            |r| r.get(0),
        )
        .unwrap()
    }

    fn user_version(conn: &Connection) -> i64 {
        conn.pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap()
    }

    /// A ledger at `version` whose entries table has `to` where migration 1 wrote `from` (changed
    /// by the migrations' own procedure, which fails unless it finds `from`): migrating must fail
    /// as corrupt, and change nothing. Returns the connection, for what else the caller checks.
    fn refused_after_tampering(dir: &Path, version: i64, from: &str, to: &str) -> Connection {
        let conn = writer_conn(&dir.join("ledger.db"));
        migrate_to(&conn, version).unwrap();
        schema::rewrite_entries_sql(
            &conn,
            from,
            to,
            "the test's tampering found no text to change",
        )
        .unwrap();
        let before = schema_sql(&conn, "entries");
        assert!(!before.contains(from));

        assert!(matches!(migrate(&conn), Err(LedgerError::Corrupt(_))));
        assert_eq!(user_version(&conn), version);
        assert_eq!(schema_sql(&conn, "entries"), before);
        conn
    }

    /// Migration 7: the state check no longer builds a b-tree for every claim and completion, an
    /// existing ledger keeps its rows, and every connection sees the new check — including one
    /// opened before the migration ran (the schema version was bumped).
    #[test]
    fn the_state_check_is_rewritten_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        let conn = writer_conn(&path);
        migrate_to(&conn, 6).unwrap();
        insert_entry(&conn, "before", "completed").unwrap();
        // What migration 7 removes (so this test can tell the two schemas apart).
        assert!(hot_path_builds_btrees(&conn));
        let other = writer_conn(&path);
        assert!(hot_path_builds_btrees(&other));

        migrate(&conn).unwrap();
        assert_eq!(user_version(&conn), schema::current_version());
        assert!(!hot_path_builds_btrees(&conn));
        let claim = &crate::write::INSERT_OR_LOOKUP.get(Dialect::Sqlite)[0];
        assert!(!opcodes(&conn, claim).iter().any(|o| o == "OpenEphemeral"));
        // The other connection compiles from its copy of the schema until a statement of its own
        // finds the schema version changed.
        let n: i64 = other
            .query_row("SELECT count(*) FROM entries", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 1);
        assert!(!hot_path_builds_btrees(&other));
        let check: String = conn
            .query_row(
                "SELECT integrity_check FROM pragma_integrity_check",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(check, "ok");
        let kept: String = conn
            .query_row("SELECT state FROM entries WHERE key = 'before'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(kept, "completed");
        // The same states pass, and no other.
        for (i, state) in ["pending", "completed", "released", "failed"]
            .iter()
            .enumerate()
        {
            insert_entry(&other, &format!("k{i}"), state).unwrap();
        }
        for c in [&conn, &other] {
            let refused = insert_entry(c, "bogus", "done").unwrap_err();
            assert!(
                refused.to_string().contains("CHECK constraint failed"),
                "{refused}"
            );
        }
        // A new ledger gets the same schema.
        let fresh = writer_conn(&dir.path().join("fresh.db"));
        migrate(&fresh).unwrap();
        assert!(!hot_path_builds_btrees(&fresh));
    }

    /// Migration 7 changes a state check it recognises, or nothing: on an entries table whose
    /// check is not migration 1's, opening fails and the ledger stays at version 6.
    #[test]
    fn the_state_check_rewrite_refuses_a_table_it_does_not_know() {
        let dir = tempfile::tempdir().unwrap();
        refused_after_tampering(dir.path(), 6, schema::STATE_CHECK_IN, "CHECK (state <> '')");
    }

    /// The columns of the entries' unique constraint's index, in order.
    fn unique_columns(conn: &Connection) -> Vec<String> {
        let mut st = conn
            .prepare(
                "SELECT name FROM pragma_index_info('sqlite_autoindex_entries_1') ORDER BY seqno",
            )
            .unwrap();
        let names = st.query_map([], |r| r.get(0)).unwrap();
        names.collect::<rusqlite::Result<_>>().unwrap()
    }

    fn integrity(conn: &Connection) -> Vec<String> {
        let mut st = conn
            .prepare("SELECT integrity_check FROM pragma_integrity_check")
            .unwrap();
        let rows = st.query_map([], |r| r.get(0)).unwrap();
        rows.collect::<rusqlite::Result<_>>().unwrap()
    }

    /// Migration 8: the unique constraint's index leads with the key and holds every entry (it
    /// was rebuilt in the new order: a ledger of many keys passes `integrity_check`), the
    /// constraint still refuses a second `(route, scope, key)` on every connection, and the log's
    /// key index no longer holds claims.
    #[test]
    fn the_unique_constraint_leads_with_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        let conn = writer_conn(&path);
        migrate_to(&conn, 7).unwrap();
        assert_eq!(unique_columns(&conn), ["route", "scope", "key"]);
        // Keys whose order differs from their (route, scope) order, so that an index left in the
        // old order is out of order in the new one.
        for i in 0..3_000 {
            let key = format!("{:08x}", (i as u32).wrapping_mul(2_654_435_761));
            let (route, scope) = (format!("r{}", i % 3), format!("s{}", i % 7));
            insert_entry_in(&conn, &route, &scope, &key, "completed").unwrap();
        }
        let other = writer_conn(&path);
        assert_eq!(unique_columns(&other), ["route", "scope", "key"]);

        migrate(&conn).unwrap();
        assert_eq!(user_version(&conn), schema::current_version());
        assert_eq!(integrity(&conn), ["ok"]);
        let n: i64 = other
            .query_row("SELECT count(*) FROM entries", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 3_000);
        for c in [&conn, &other] {
            assert_eq!(unique_columns(c), ["key", "route", "scope"]);
            let key = format!("{:08x}", 17u32.wrapping_mul(2_654_435_761));
            let found: i64 = c
                .query_row(
                    "SELECT count(*) FROM entries INDEXED BY sqlite_autoindex_entries_1 \
                     WHERE key = ?1",
                    [&key],
                    |r| r.get(0),
                )
                .unwrap();
            assert_eq!(found, 1);
        }
        insert_entry(&other, "twice", "completed").unwrap();
        for c in [&conn, &other] {
            let refused = insert_entry(c, "twice", "completed").unwrap_err();
            assert!(
                refused.to_string().contains("UNIQUE constraint failed"),
                "{refused}"
            );
        }
        insert_entry_in(&conn, "charges", "agent-2", "twice", "completed").unwrap();
        assert_eq!(integrity(&conn), ["ok"]);
        let log_index = schema_sql(&conn, "events_key");
        assert!(log_index.ends_with("WHERE kind <> 'claim' AND kind <> 'complete'"));
        // A new ledger gets the same schema.
        let fresh = writer_conn(&dir.path().join("fresh.db"));
        migrate(&fresh).unwrap();
        assert_eq!(unique_columns(&fresh), ["key", "route", "scope"]);
    }

    /// Migration 8 changes a unique constraint it recognises, or nothing.
    #[test]
    fn the_unique_constraint_rewrite_refuses_a_table_it_does_not_know() {
        let dir = tempfile::tempdir().unwrap();
        // The same index, its constraint spelled otherwise.
        let conn = refused_after_tampering(
            dir.path(),
            7,
            schema::UNIQUE_ROUTE_FIRST,
            "UNIQUE (route,scope,key)",
        );
        assert_eq!(unique_columns(&conn), ["route", "scope", "key"]);
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

    /// The writer's `write` system calls (`/proc/self/task/TID/io`, `syscw`) over 100 claims, each
    /// awaited, so each its own commit of ~15 WAL frames: through `walbuf`, one `pwrite` a commit
    /// (and a few for the writer's in-line checkpoints); without it, two per frame. Runs in a
    /// process of its own ([`the_writer_writes_each_commit_in_a_few_calls`]), so no other test's
    /// writer thread is counted.
    #[test]
    #[ignore = "run by the_writer_writes_each_commit_in_a_few_calls in a process of its own"]
    fn writer_writes_per_commit() {
        use crate::chain::ChainHasher;
        use crate::store::Storage;

        let dir = tempfile::tempdir().unwrap();
        let l = Ledger::sqlite(
            dir.path().join("ledger.db"),
            OpenOptions {
                create: true,
                hasher: ChainHasher::unkeyed(),
            },
        )
        .unwrap();
        let claim = |i: u64| l.claim(numbered_claim(i)).wait().unwrap();
        claim(0);
        let writes = || -> u64 {
            let [task] = &crate::testing::writer_threads()[..] else {
                panic!("one writer thread in this process");
            };
            let io = std::fs::read_to_string(task.join("io")).unwrap();
            let line = io.lines().find(|l| l.starts_with("syscw:")).unwrap();
            line["syscw:".len()..].trim().parse().unwrap()
        };
        let before = writes();
        for i in 1..=100 {
            claim(i);
        }
        println!("writes per commit: {}", (writes() - before) as f64 / 100.0);
    }

    /// Runs [`writer_writes_per_commit`] in a process of its own, started by `cmd`: this test
    /// binary, or a tracer whose last argument is this test binary. Its standard output; panics
    /// if it cannot start or fails.
    #[cfg(target_os = "linux")]
    fn writer_alone(mut cmd: std::process::Command) -> String {
        let out = cmd
            .args([
                "--exact",
                "sqlite::tests::writer_writes_per_commit",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {:?} (is it installed?): {e}",
                    cmd.get_program()
                )
            });
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_writer_writes_each_commit_in_a_few_calls() {
        let stdout = writer_alone(std::process::Command::new(std::env::current_exe().unwrap()));
        let per_commit: f64 = stdout
            .lines()
            .find_map(|l| l.split_once("writes per commit: ").map(|(_, n)| n))
            .unwrap_or_else(|| panic!("no count in {stdout}"))
            .parse()
            .unwrap();
        // ~15 frames a commit: 30 calls without the shim.
        assert!(per_commit <= 3.0, "{per_commit} write calls per commit");
    }

    /// Every sync of the ledger's files is an `fdatasync`, never an `fsync`: SQLite calls `fsync`
    /// unless it is built with `HAVE_FDATASYNC` (.cargo/config.toml), and on a journaled file
    /// system `fsync` then waits for a journal commit whenever the file's timestamps changed
    /// (more than twice as long a sync on ext4 with a journal). The 101 commits of [`writer_writes_per_commit`] in a process
    /// of their own, under `strace`.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_ledger_syncs_with_fdatasync() {
        let dir = tempfile::tempdir().unwrap();
        let trace = dir.path().join("syncs.txt");
        let mut strace = std::process::Command::new("strace");
        strace
            .args(["-f", "-qq", "-y", "-e", "trace=fsync,fdatasync", "-o"])
            .arg(&trace)
            .arg(std::env::current_exe().unwrap());
        writer_alone(strace);
        let trace = std::fs::read_to_string(&trace).unwrap();
        let calls = |name: &str, file: &str| {
            trace
                .lines()
                .filter(|l| l.contains(&format!(" {name}(")) && l.contains(file))
                .count()
        };
        assert_eq!(calls("fsync", ""), 0, "{trace}");
        // One sync of the WAL per commit (and a few for checkpoints).
        assert!(calls("fdatasync", "ledger.db-wal>") >= 101, "{trace}");
    }

    /// Under continuous writes the WAL starts over soon after it passes [`RESTART_FROM`] frames,
    /// not at the writer's backstop (whose in-line checkpoint held every claim for 6–18 ms).
    /// Claims are kept in flight the whole time, so the writer commits back to back.
    #[test]
    fn the_wal_starts_over_under_continuous_writes() {
        use crate::chain::ChainHasher;
        use crate::store::Storage;
        use std::collections::VecDeque;
        use std::io::Read;
        use std::time::{Duration, Instant};

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        let l = Ledger::sqlite(
            &path,
            OpenOptions {
                create: true,
                hasher: ChainHasher::unkeyed(),
            },
        )
        .unwrap();
        let wal = dir.path().join("ledger.db-wal");
        // The WAL's header (32 bytes), then frames of a 24-byte header and a 4 KiB page.
        let backstop = 32 + WRITER_AUTOCHECKPOINT as u64 * (24 + 4096);
        let claim = |i: u64| l.claim(numbered_claim(i));
        let deadline = Instant::now() + Duration::from_secs(120);
        let (mut in_flight, mut next) = (VecDeque::new(), 0u64);
        let (mut salt, mut restarts) = (None, 0);
        while restarts < 3 {
            assert!(
                Instant::now() < deadline,
                "the WAL started over {restarts} times in 2 minutes of writes"
            );
            while in_flight.len() < 256 {
                in_flight.push_back(claim(next));
                next += 1;
            }
            in_flight.pop_front().unwrap().wait().unwrap();
            if next % 64 != 0 {
                continue;
            }
            let mut header = [0u8; 32];
            let Ok(mut f) = std::fs::File::open(&wal) else {
                continue;
            };
            let size = f.metadata().unwrap().len();
            assert!(
                size < backstop,
                "the WAL grew to the writer's backstop ({size} bytes) before starting over"
            );
            // SQLite changes the header's first salt each time the WAL starts over.
            if f.read_exact(&mut header).is_ok() {
                let now = u32::from_be_bytes(header[16..20].try_into().unwrap());
                if salt.is_some_and(|s| s != now) {
                    restarts += 1;
                }
                salt = Some(now);
            }
        }
    }
}
