//! For tests only (of this crate and of the workspace): a claim to make, fresh PostgreSQL databases
//! on the test cluster `tests/pg/cluster.sh` starts, an S3-compatible server, and where to read
//! what the ledger's writer thread did.

use std::sync::atomic::{AtomicU32, Ordering};

mod s3;
pub use s3::{S3, TEST_S3};

use crate::db::{Db, Row};
use crate::model::{now_millis, Effect, Millis, RequestRecord, ResponseRecord};
use crate::postgres::PgConn;
use crate::store::{ApprovalAsk, ClaimOutcome, ClaimRequest, CompleteRequest, Storage};

/// A claim of `key` on a `charges` route at `at`, by owner `o`, leased and kept for 60 s.
pub fn charge(key: &str, at: Millis) -> ClaimRequest {
    ClaimRequest {
        route: "charges".into(),
        scope: "agent".into(),
        key: key.into(),
        fingerprint: format!("fp-{key}"),
        legacy_fingerprint: None,
        effect: Effect::Write,
        request: RequestRecord {
            method: "POST".into(),
            path: "/v1/charges".into(),
            headers: vec![],
            body: b"{}".to_vec(),
        },
        owner: "o".into(),
        lease_ms: 60_000,
        ttl_ms: 60_000,
        reject_duplicates_within_ms: None,
        tool: None,
        subjects: Vec::new(),
        dup_fp: None,
        approval: None,
        at,
    }
}

/// [`charge`], held for one operator's approval within an hour.
pub fn held_charge(key: &str, at: Millis) -> ClaimRequest {
    ClaimRequest {
        approval: Some(ApprovalAsk {
            policy: "charges".into(),
            policy_hash: "h".into(),
            needed: 1,
            expires_ms: 3_600_000,
            approvers: None,
            unevaluated: None,
        }),
        ..charge(key, at)
    }
}

/// `n` charges (keys `k0`, `k1`, …) claimed and completed two minutes ago and kept for a second:
/// `n` expired entries, to purge. Their ids, in order.
///
/// # Panics
/// When the ledger cannot take them.
pub fn expired_charges(store: &dyn Storage, n: usize) -> Vec<i64> {
    let at = now_millis() - 120_000;
    let claims: Vec<_> = (0..n)
        .map(|i| {
            let mut c = charge(&format!("k{i}"), at);
            c.ttl_ms = 1_000;
            store.claim(c)
        })
        .collect();
    let mut ids = Vec::with_capacity(n);
    let completions: Vec<_> = claims
        .into_iter()
        .map(|t| {
            let ClaimOutcome::Claimed { entry_id, .. } = t.wait().expect("claim") else {
                panic!("not claimed");
            };
            ids.push(entry_id);
            store.complete(CompleteRequest {
                entry_id,
                owner: "o".into(),
                response: ResponseRecord {
                    status: 201,
                    headers: vec![],
                    body: b"{}".to_vec(),
                },
                ttl_ms: 1_000,
                duplicate_window_ms: None,
                at,
            })
        })
        .collect();
    for t in completions {
        t.wait().expect("complete");
    }
    ids
}

/// The `/proc/self/task/TID` directories of this process's ledger writer threads (none where
/// there is no `/proc`): what the writer alone did is in their `io` and `schedstat`.
pub fn writer_threads() -> Vec<std::path::PathBuf> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .flatten()
        .map(|t| t.path())
        .filter(|t| {
            std::fs::read_to_string(t.join("comm"))
                .is_ok_and(|c| c.trim() == crate::writer::THREAD_NAME)
        })
        .collect()
}

/// The variable naming the test cluster (`postgres://…/postgres`), or `skip`.
pub const TEST_PG: &str = "IDEMGATE_TEST_PG";

/// The test cluster's URL, or `None` when `IDEMGATE_TEST_PG=skip`.
///
/// # Panics
/// When `IDEMGATE_TEST_PG` is unset: a PostgreSQL test must not pass by not running.
pub fn test_cluster() -> Option<String> {
    match std::env::var(TEST_PG) {
        Ok(v) if v == "skip" => None,
        Ok(v) if !v.is_empty() => Some(v),
        _ => panic!(
            "{TEST_PG} is not set: start a test cluster with `bash tests/pg/cluster.sh start` and \
             export {TEST_PG}=<the URL it prints> (or {TEST_PG}=skip to skip the PostgreSQL tests)"
        ),
    }
}

fn connect(url: &str) -> Result<PgConn, String> {
    let target = crate::postgres::Target::of(url).map_err(|e| e.to_string())?;
    PgConn::connect(&target).map_err(|e| e.to_string())
}

/// Keeps every other connection from reading a table of a PostgreSQL ledger until dropped: its
/// readers wait in their next statement that reads it.
pub struct TableLocked(PgConn);

impl std::fmt::Debug for TableLocked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TableLocked")
    }
}

/// Locks `table` of the PostgreSQL ledger at `url` (`ACCESS EXCLUSIVE`, in a transaction of a
/// connection of its own).
///
/// # Panics
/// When the lock cannot be taken.
pub fn lock_table(url: &str, table: &str) -> TableLocked {
    let mut c = connect(url).expect("connect");
    c.batch(&format!(
        "BEGIN; LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"
    ))
    .expect("lock the table");
    TableLocked(c)
}

impl Drop for TableLocked {
    fn drop(&mut self) {
        let _ = self.0.batch("ROLLBACK");
    }
}

/// A transaction left open on a PostgreSQL ledger, on a connection of its own: what it wrote is
/// seen by others once [`Open::commit`] commits it; dropped, it is rolled back.
pub struct Open(PgConn);

impl std::fmt::Debug for Open {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Open")
    }
}

/// Begins a transaction on the PostgreSQL ledger at `url` and runs `sql` in it.
///
/// # Panics
/// When either fails.
pub fn begin(url: &str, sql: &str) -> Open {
    let mut c = connect(url).expect("connect");
    c.batch(&format!("BEGIN; {sql}")).expect("begin");
    Open(c)
}

/// Holds, in a transaction of its own on the PostgreSQL ledger at `url`, the lock of the effect
/// of entry `id` (its route and its fingerprint or duplicate values), as a completion of that
/// effect does until it commits; dropped, the lock is let go.
///
/// # Panics
/// When the lock cannot be taken.
pub fn hold_effect_lock(url: &str, id: i64) -> Open {
    begin(
        url,
        &format!(
            "SELECT pg_advisory_xact_lock({}, {}) FROM entries WHERE id = {id}",
            crate::postgres::locks::EFFECT_LOCK_SPACE,
            crate::postgres::locks::effect_key("route", "COALESCE(dup_fp, fingerprint)")
        ),
    )
}

impl Open {
    /// The integer `sql` reads inside the transaction.
    ///
    /// # Panics
    /// When the read fails.
    pub fn i64(&mut self, sql: &str) -> i64 {
        let db: &mut dyn Db = &mut self.0;
        db.one(sql, &[], |r: &dyn Row| r.int(0)).expect("read")
    }

    /// Commits the transaction.
    ///
    /// # Panics
    /// When the commit fails.
    pub fn commit(mut self) {
        self.0.batch("COMMIT").expect("commit");
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        let _ = self.0.batch("ROLLBACK");
    }
}

/// Holds the PostgreSQL ledger's write lock until dropped: every instance's writer waits in its
/// next batch's begin, and the jobs queued meanwhile all go in the batch after it.
pub struct WriteLockHeld(PgConn);

impl std::fmt::Debug for WriteLockHeld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WriteLockHeld")
    }
}

/// Takes the write lock of the PostgreSQL ledger at `url` on a connection of its own.
///
/// # Panics
/// When the lock cannot be taken.
pub fn hold_write_lock(url: &str) -> WriteLockHeld {
    let mut c = connect(url).expect("connect");
    c.batch(&format!(
        "SELECT pg_advisory_lock({})",
        crate::postgres::locks::WRITE_LOCK
    ))
    .expect("take the write lock");
    WriteLockHeld(c)
}

impl Drop for WriteLockHeld {
    fn drop(&mut self) {
        let _ = self.0.batch(&format!(
            "SELECT pg_advisory_unlock({})",
            crate::postgres::locks::WRITE_LOCK
        ));
    }
}

/// A new, empty database on the test cluster; its URL. `None` when PostgreSQL tests are skipped.
pub fn fresh_postgres(tag: &str) -> Option<String> {
    static N: AtomicU32 = AtomicU32::new(0);
    let admin = test_cluster()?;
    let tag: String = tag
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(30)
        .collect::<String>()
        .to_ascii_lowercase();
    let name = format!(
        "idemgate_{tag}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    postgres_exec(&admin, &format!("CREATE DATABASE {name}"))
        .unwrap_or_else(|e| panic!("CREATE DATABASE {name} on the test cluster {admin}: {e}"));
    Some(with_database(&admin, &name))
}

/// `url` naming database `db` instead.
pub fn with_database(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let (scheme, rest) = base.split_once("://").unwrap_or(("postgres", base));
    let host = rest.split_once('/').map_or(rest, |(h, _)| h);
    match query {
        Some(q) => format!("{scheme}://{host}/{db}?{q}"),
        None => format!("{scheme}://{host}/{db}"),
    }
}

/// Runs `sql` on the database at `url` on a connection of its own (to tamper, or to inspect).
pub fn postgres_exec(url: &str, sql: &str) -> Result<(), String> {
    connect(url)?.batch(sql).map_err(|e| e.to_string())
}

/// The first column of the first row of `sql` as text.
pub fn postgres_text(url: &str, sql: &str) -> Result<String, String> {
    let mut c = connect(url)?;
    let db: &mut dyn Db = &mut c;
    db.one(sql, &[], |r: &dyn Row| r.text(0))
        .map_err(|e| e.to_string())
}

/// The first column of the first row of `sql` as an integer.
pub fn postgres_i64(url: &str, sql: &str) -> Result<i64, String> {
    let mut c = connect(url)?;
    let db: &mut dyn Db = &mut c;
    db.one(sql, &[], |r: &dyn Row| r.int(0))
        .map_err(|e| e.to_string())
}
