//! The SQLite backend: its migrations, its statements as SQLite compiles them, its writes as the
//! file system sees them.

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
    let claim = "INSERT INTO entries (route, scope, key, fingerprint, effect, state, attempts, \
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
    schema::rewrite_table_sql(
        &conn,
        "entries",
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
        .prepare("SELECT name FROM pragma_index_info('sqlite_autoindex_entries_1') ORDER BY seqno")
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
    // Migration 18 leaves out the rest of an entry's lifecycle too.
    assert!(
        log_index.contains("WHERE kind <> 'claim' AND kind <> 'complete' AND kind <> 'attempt'")
            && log_index.ends_with("AND kind <> 'expired'"),
        "{log_index}"
    );
    // A new ledger gets the same schema.
    let fresh = writer_conn(&dir.path().join("fresh.db"));
    migrate(&fresh).unwrap();
    assert_eq!(unique_columns(&fresh), ["key", "route", "scope"]);
}

/// Migration 11: on a ledger whose newest entry was purged before the upgrade (the purge logged),
/// and on one whose whole log was archived and dropped, no new row takes an id something still
/// names; after it, no purge lends an id again; and a new ledger numbers the same way.
#[test]
fn ids_gone_before_the_upgrade_are_not_handed_out_again() {
    let dir = tempfile::tempdir().unwrap();
    let collision = |conn: &Connection, entry: i64| {
        conn.execute(
            "INSERT INTO collisions (entry_id, at, fingerprint, req_method, req_path, \
             req_headers, req_body) VALUES (?1, 1, 'f', 'POST', '/', '[]', x'')",
            [entry],
        )
        .unwrap();
        conn.last_insert_rowid()
    };
    let event = |conn: &Connection, entry: i64| {
        conn.execute(
            "INSERT INTO events (at, kind, entry_id, route, scope, key, detail, prev_hash, \
             hash) VALUES (1, 'purge', ?1, 'charges', 'agent', 'k', '{}', 'p', 'h')",
            [entry],
        )
        .unwrap();
        conn.last_insert_rowid()
    };

    let conn = writer_conn(&dir.path().join("ledger.db"));
    migrate_to(&conn, 10).unwrap();
    insert_entry(&conn, "kept", "completed").unwrap();
    insert_entry(&conn, "purged", "completed").unwrap();
    let purged = conn.last_insert_rowid();
    collision(&conn, 1);
    let purged_collision = collision(&conn, purged);
    event(&conn, purged);
    conn.execute_batch(
        "DELETE FROM entries WHERE key = 'purged'; DELETE FROM collisions WHERE entry_id <> 1;",
    )
    .unwrap();
    migrate(&conn).unwrap();
    assert_eq!(integrity(&conn), ["ok"]);
    for (table, _) in schema::ROWID_TABLES {
        assert!(schema_sql(&conn, table).contains("PRIMARY KEY AUTOINCREMENT,"));
    }
    insert_entry(&conn, "new", "pending").unwrap();
    let new = conn.last_insert_rowid();
    assert_eq!(new, purged + 1, "the purge's event still names {purged}");
    // Nothing names a collision by id: numbering goes on past the highest left.
    let c = collision(&conn, new);
    assert_eq!(c, purged_collision);
    // From now on the newest entry's or collision's purge does not lend its id either.
    conn.execute_batch(
        "DELETE FROM entries WHERE key = 'new'; DELETE FROM collisions WHERE id > 1;",
    )
    .unwrap();
    insert_entry(&conn, "newer", "pending").unwrap();
    assert_eq!(conn.last_insert_rowid(), new + 1);
    assert_eq!(collision(&conn, new + 1), c + 1);

    let archived = writer_conn(&dir.path().join("archived.db"));
    migrate_to(&archived, 10).unwrap();
    event(&archived, 1);
    let last = event(&archived, 1);
    archived
        .execute(
            "INSERT INTO archived (seq, first_seq, hash, count, file, sha256, bytes, at) \
             VALUES (?1, 1, 'h', 2, 'f', 's', 1, 1)",
            [last],
        )
        .unwrap();
    archived.execute("DELETE FROM events", []).unwrap();
    migrate(&archived).unwrap();
    assert_eq!(event(&archived, 1), last + 1);

    let fresh = writer_conn(&dir.path().join("fresh.db"));
    migrate(&fresh).unwrap();
    insert_entry(&fresh, "a", "pending").unwrap();
    fresh.execute("DELETE FROM entries", []).unwrap();
    insert_entry(&fresh, "b", "pending").unwrap();
    assert_eq!(fresh.last_insert_rowid(), 2);
}

/// Migration 8 changes a unique constraint it recognises, or nothing.
/// Migration 16 starts the expired count from the rows an existing ledger holds: a logged
/// expiry that has passed counts, a pending entry does not, and a flag on an expiry still to come
/// is cleared (the sweeper logs it again when it passes).
#[test]
fn the_expired_count_starts_from_an_existing_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let conn = writer_conn(&dir.path().join("ledger.db"));
    migrate_to(&conn, 15).unwrap();
    for (key, state, expires_at) in [
        ("passed", "completed", 1),
        ("claimed-again", "pending", 1),
        ("to-come", "failed", i64::MAX),
    ] {
        insert_entry(&conn, key, state).unwrap();
        conn.execute(
            "UPDATE entries SET expires_at = ?2, expiry_logged = 1 WHERE key = ?1",
            rusqlite::params![key, expires_at],
        )
        .unwrap();
    }
    migrate(&conn).unwrap();
    let n: i64 = conn
        .query_row("SELECT n FROM expired_counts", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1);
    let flagged: i64 = conn
        .query_row(
            "SELECT expiry_logged FROM entries WHERE key = 'to-come'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(flagged, 0);
}

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
