//! Embedded migrations. `PRAGMA user_version` is the schema version; every pending migration runs in
//! one IMMEDIATE transaction at open, and a database newer than [`MIGRATIONS`] is refused.

use rusqlite::Connection;

use crate::error::{LedgerError, Result};

/// One migration: SQL, or code for a change SQL alone cannot make.
pub enum Migration {
    Sql(&'static str),
    Code(fn(&Connection) -> Result<()>),
}

pub const MIGRATIONS: &[Migration] = &[
    // 1: entries, collisions, the log and its counters.
    Migration::Sql(
        r#"
CREATE TABLE meta (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
) STRICT;

CREATE TABLE entries (
    id                INTEGER PRIMARY KEY,
    route             TEXT NOT NULL,
    scope             TEXT NOT NULL,
    key               TEXT NOT NULL,
    fingerprint       TEXT NOT NULL,
    effect            TEXT NOT NULL,
    state             TEXT NOT NULL CHECK (state IN ('pending', 'completed', 'released', 'failed')),
    attempts          INTEGER NOT NULL DEFAULT 0,
    lease_owner       TEXT,
    lease_expires_at  INTEGER,
    outcome_unknown   INTEGER NOT NULL DEFAULT 0,
    last_error        TEXT,
    req_method        TEXT,
    req_path          TEXT,
    req_headers       TEXT,
    req_body          BLOB,
    resp_status       INTEGER,
    resp_headers      TEXT,
    resp_body         BLOB,
    replays           INTEGER NOT NULL DEFAULT 0,
    last_replay_at    INTEGER,
    collisions        INTEGER NOT NULL DEFAULT 0,
    duplicate_of      INTEGER,
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL,
    completed_at      INTEGER,
    expires_at        INTEGER,
    resolved_by       TEXT,
    resolution_reason TEXT,
    external_ref      TEXT,
    stuck_logged      INTEGER NOT NULL DEFAULT 0,
    expiry_logged     INTEGER NOT NULL DEFAULT 0,
    UNIQUE (route, scope, key)
) STRICT;

CREATE INDEX entries_pending ON entries (lease_expires_at) WHERE state = 'pending';
CREATE INDEX entries_expires ON entries (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX entries_effect ON entries (route, scope, fingerprint, completed_at) WHERE state = 'completed';
CREATE INDEX entries_duplicates ON entries (duplicate_of) WHERE duplicate_of IS NOT NULL;
CREATE INDEX entries_collisions ON entries (id) WHERE collisions > 0;
CREATE INDEX entries_key ON entries (key);
CREATE INDEX entries_scope ON entries (scope, id);
CREATE INDEX entries_route ON entries (route, id);

-- Entry counts by state, kept by triggers so the overview never counts the table.
CREATE TABLE entry_counts (
    state TEXT PRIMARY KEY,
    n     INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
INSERT INTO entry_counts (state, n) VALUES ('pending', 0), ('completed', 0), ('released', 0), ('failed', 0);
CREATE TRIGGER entries_count_insert AFTER INSERT ON entries BEGIN
    UPDATE entry_counts SET n = n + 1 WHERE state = NEW.state;
END;
CREATE TRIGGER entries_count_delete AFTER DELETE ON entries BEGIN
    UPDATE entry_counts SET n = n - 1 WHERE state = OLD.state;
END;
CREATE TRIGGER entries_count_update AFTER UPDATE OF state ON entries WHEN OLD.state <> NEW.state BEGIN
    UPDATE entry_counts SET n = n - 1 WHERE state = OLD.state;
    UPDATE entry_counts SET n = n + 1 WHERE state = NEW.state;
END;

CREATE TABLE collisions (
    id          INTEGER PRIMARY KEY,
    entry_id    INTEGER NOT NULL,
    at          INTEGER NOT NULL,
    fingerprint TEXT NOT NULL,
    req_method  TEXT NOT NULL,
    req_path    TEXT NOT NULL,
    req_headers TEXT NOT NULL,
    req_body    BLOB NOT NULL
) STRICT;
CREATE INDEX collisions_entry ON collisions (entry_id);

CREATE TABLE events (
    seq            INTEGER PRIMARY KEY,
    at             INTEGER NOT NULL,
    kind           TEXT NOT NULL,
    entry_id       INTEGER,
    route          TEXT NOT NULL,
    scope          TEXT NOT NULL,
    key            TEXT NOT NULL,
    operator       TEXT,
    reason         TEXT,
    detail         TEXT NOT NULL,
    payload_digest TEXT,
    prev_hash      TEXT NOT NULL,
    hash           TEXT NOT NULL
) STRICT;
CREATE INDEX events_entry ON events (entry_id, seq);
CREATE INDEX events_kind ON events (kind, seq);
CREATE INDEX events_key ON events (key, seq);
CREATE INDEX events_route ON events (route, seq);
CREATE INDEX events_scope ON events (scope, seq);
CREATE INDEX events_operator ON events (operator, seq) WHERE operator IS NOT NULL;
CREATE INDEX events_at ON events (at);

CREATE TRIGGER events_append_only_update BEFORE UPDATE ON events BEGIN
    SELECT RAISE(ABORT, 'the idemgate log is append-only: UPDATE refused');
END;
CREATE TRIGGER events_append_only_delete BEFORE DELETE ON events BEGIN
    SELECT RAISE(ABORT, 'the idemgate log is append-only: DELETE refused');
END;

-- Hourly event counts by kind, kept by the writer, for the overview's time series.
CREATE TABLE event_counts (
    hour INTEGER NOT NULL,
    kind TEXT NOT NULL,
    n    INTEGER NOT NULL,
    PRIMARY KEY (hour, kind)
) STRICT, WITHOUT ROWID;
"#,
    ),
    // 2: the Stuck list and its count read only the (few) pending entries, newest first, instead
    // of scanning every entry backwards (134 ms on a 1M-event ledger; BENCHMARKS.md).
    Migration::Sql(
        r#"
CREATE INDEX entries_pending_id ON entries (id) WHERE state = 'pending';
"#,
    ),
    // 3: the entry counts are written once per batch by the writer (write::flush), not by a trigger
    // on every change (on PostgreSQL that trigger made one hot row every job waited on).
    Migration::Sql(
        r#"
DROP TRIGGER entries_count_insert;
DROP TRIGGER entries_count_delete;
DROP TRIGGER entries_count_update;
"#,
    ),
    // 4: the overview's count of expired entries (expiry passed, not pending) reads the expiry
    // index alone: with `state` in it the count needs no table row per entry (229 → 53 ms with
    // 366k expired entries; BENCHMARKS.md). The hot path's writes (claim, complete)
    // set `expires_at` with `state`, so the index costs them nothing more; a release or an
    // operator's action now moves the entry's index row too.
    Migration::Sql(
        r#"
DROP INDEX entries_expires;
CREATE INDEX entries_expires ON entries (expires_at, state) WHERE expires_at IS NOT NULL;
"#,
    ),
    // 5: the sweeper (every second, on the writer) reads only what is due: leases not yet logged
    // as stuck, expiries not yet logged. It scanned every entry in id order for the expiries (the
    // planner preferred that to sorting), and every pending entry, stuck ones included, for the
    // leases: a ledger with 150k entries stalled the writer 50–80 ms a second (BENCHMARKS.md).
    // `expiry_logged` leads the expiry index, so the entries already logged — they stay until an
    // operator purges them — are outside the sweeper's range; the expired count reads both values.
    // The hot path already moves these index rows (a claim inserts pending, a completion sets
    // `state` and `expires_at`), so they cost it nothing more.
    Migration::Sql(
        r#"
DROP INDEX entries_pending;
CREATE INDEX entries_lease_due ON entries (lease_expires_at) WHERE state = 'pending' AND stuck_logged = 0;
DROP INDEX entries_expires;
CREATE INDEX entries_expires ON entries (expiry_logged, expires_at, state) WHERE expires_at IS NOT NULL;
"#,
    ),
    // 6: two fewer random-key index rows per first call: 7–9% less WAL per first call, and the
    // 1M-event demo ledger writes in 82 s instead of 101–116 s (BENCHMARKS.md). Keys are random,
    // so each key-ordered index row lands on its own page, and a commit writes that page whole.
    // `entries_key` went: an entry is found by its key through the log, whose claim event carries
    // the entry's key and id (`read::ENTRY_KEY`). `events_key` no longer holds the `complete`
    // events: a completion is always logged under its entry, whose other events are in the index,
    // so the log finds it through `events_entry` (`read::EVENT_KEY`). Every other event stays,
    // including the ones that name another entry than their key's (a duplicate refused under the
    // reject policy).
    Migration::Sql(
        r#"
DROP INDEX entries_key;
DROP INDEX events_key;
CREATE INDEX events_key ON events (key, seq) WHERE kind <> 'complete';
"#,
    ),
    // 7: the entries' state check as comparisons. SQLite tests `x IN (list of 3 or more
    // constants)` against a temporary b-tree that it builds for every statement run: for each
    // claim and each completion, 2 pages zeroed, a b-tree created, filled with 4 rows and closed,
    // ~6% of the writer's time per claim (BENCHMARKS.md). The four comparisons allow the same
    // states.
    Migration::Code(state_check_as_comparisons),
    // 8: one random-key index row per claim instead of two. Keys are random (agents send UUIDs),
    // so each key-ordered index row lands on a page of its own and every commit writes that page
    // whole: with random keys, the log's key index was ~40% of a claim's WAL and of the writer's
    // time (BENCHMARKS.md). The entries' unique constraint now leads with the key, so it finds the
    // entries of a key by itself (`read::ENTRY_KEY`), and `events_key` keeps only the events that
    // are not a claim or a completion: those two are always logged under their entry, with its key
    // and id, and are found through the entries of the key, or through a purge's event when the
    // entry is gone (`read::EVENT_KEY`).
    Migration::Code(key_first),
    // 9: what an entry is about in the business's terms. `tool`: the MCP tool of a `tools/call`
    // entry, listed and filtered by it (`route · tool`). `subjects`: the route's named values of
    // the request (a customer, an amount), shown with the entry and searched through the
    // `subjects` table. `dup_fp`: the route's `duplicate_on` values, which make two entries the
    // same effect instead of their whole fingerprint. Only routes that name them have them, so
    // their indexes hold nothing for the others. `reviews`: the incidents an operator marked
    // reviewed, by their first entry.
    Migration::Sql(
        r#"
ALTER TABLE entries ADD COLUMN tool TEXT;
ALTER TABLE entries ADD COLUMN subjects TEXT;
ALTER TABLE entries ADD COLUMN dup_fp TEXT;
CREATE INDEX entries_tool ON entries (route, tool, id) WHERE tool IS NOT NULL;
CREATE INDEX entries_dup ON entries (route, dup_fp, completed_at)
    WHERE dup_fp IS NOT NULL AND state = 'completed';
CREATE TABLE subjects (
    value    TEXT NOT NULL,
    name     TEXT NOT NULL,
    entry_id INTEGER NOT NULL,
    PRIMARY KEY (value, name, entry_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX subjects_entry ON subjects (entry_id);
CREATE TABLE reviews (
    entry_id INTEGER PRIMARY KEY,
    through  INTEGER NOT NULL,
    operator TEXT NOT NULL,
    reason   TEXT NOT NULL,
    at       INTEGER NOT NULL
) STRICT;
"#,
    ),
    // 10: archival. `archived` records each sealed segment of the log (its range, its last
    // event's hash, its file and digest); its greatest `seq` is the ledger's `archived_through`.
    // A row is refused unless it is beyond the last one and names an event the log holds, with
    // that event's hash — or a range no live event is in any more (a ledger copied with its
    // archive record): so events are deleted only once a segment that ends with them has been
    // recorded, and the delete trigger refuses every other DELETE, as before. Rows never change.
    Migration::Sql(
        r#"
CREATE TABLE archived (
    seq       INTEGER PRIMARY KEY,
    first_seq INTEGER NOT NULL,
    hash      TEXT NOT NULL,
    count     INTEGER NOT NULL,
    file      TEXT NOT NULL,
    sha256    TEXT NOT NULL,
    bytes     INTEGER NOT NULL,
    at        INTEGER NOT NULL
) STRICT;
CREATE TRIGGER archived_checks BEFORE INSERT ON archived
    WHEN (NOT EXISTS (SELECT 1 FROM events WHERE seq = NEW.seq AND hash = NEW.hash)
           AND EXISTS (SELECT 1 FROM events WHERE seq <= NEW.seq))
      OR NEW.seq <= COALESCE((SELECT MAX(seq) FROM archived), 0)
BEGIN
    SELECT RAISE(ABORT, 'an archive checkpoint must name a logged event past the last one');
END;
CREATE TRIGGER archived_append_only_update BEFORE UPDATE ON archived BEGIN
    SELECT RAISE(ABORT, 'the idemgate archive record is append-only: UPDATE refused');
END;
CREATE TRIGGER archived_append_only_delete BEFORE DELETE ON archived BEGIN
    SELECT RAISE(ABORT, 'the idemgate archive record is append-only: DELETE refused');
END;
DROP TRIGGER events_append_only_delete;
CREATE TRIGGER events_append_only_delete BEFORE DELETE ON events
    WHEN OLD.seq > COALESCE((SELECT MAX(seq) FROM archived), 0)
BEGIN
    SELECT RAISE(ABORT, 'the idemgate log is append-only: DELETE refused');
END;
"#,
    ),
    // 11: an id is never handed out twice. The log, the collisions and every `duplicate_of` link
    // name entries by id, so an entry purged while it was the newest must not lend its id to the
    // next claim (a rowid is one past the highest row left); likewise a collision's id and an
    // event's sequence number.
    Migration::Code(never_reuse_ids),
    // 12: each MCP route's tools as their upstream last listed them, so a restarted or another
    // instance on this ledger knows which are reads.
    Migration::Sql(
        r#"
CREATE TABLE tool_effects (
    route    TEXT NOT NULL,
    upstream TEXT NOT NULL,
    tool     TEXT NOT NULL,
    effect   TEXT NOT NULL,
    at       INTEGER NOT NULL,
    PRIMARY KEY (route, upstream, tool)
) STRICT, WITHOUT ROWID;
"#,
    ),
    // 13: loop-guard windows counted in the ledger, as on PostgreSQL (its migration 9). A
    // SQLite ledger has one server, which counts in its memory: the table stays empty.
    Migration::Sql(
        r#"
CREATE TABLE loop_windows (
    name  TEXT PRIMARY KEY,
    ends  INTEGER NOT NULL,
    calls INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE INDEX loop_windows_ends ON loop_windows (ends);
"#,
    ),
    // 14: approvals. A call that matches an approval policy waits, unforwarded, in a state of
    // its own; the entry keeps the policy it matched, who approved it, and how it ended.
    Migration::Code(approvals),
    // 15: the log's Merkle tree (`tree.rs`): each leaf's event, the stored hashes in Go tlog's
    // StoredHashIndex order, and the signed checkpoints of the tree (with the cosignatures
    // witnesses added). Each only grows; the integrator fills the first two after commit.
    Migration::Sql(
        r#"
CREATE TABLE tree_leaves (
    leaf INTEGER PRIMARY KEY,
    seq  INTEGER NOT NULL UNIQUE
) STRICT;
CREATE TABLE tree_hashes (
    idx  INTEGER PRIMARY KEY,
    hash BLOB NOT NULL
) STRICT;
CREATE TABLE tree_checkpoints (
    size INTEGER PRIMARY KEY,
    note TEXT NOT NULL,
    at   INTEGER NOT NULL
) STRICT;
"#,
    ),
    // 16: the overview's expired count without counting millions of index rows: the entries
    // whose expiry is logged (and which are not pending) are counted by triggers on their updates
    // and deletes, which do nothing unless that changes (a new entry is never logged, and the
    // claim's insert stays trigger-free); only those not yet logged are counted in the index.
    // A logged entry's expiry has passed (every update that moves `expires_at` clears the flag);
    // one that broke that before is unflagged, and its expiry is logged again when it passes.
    Migration::Sql(
        r#"
CREATE TABLE expired_counts (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    n  INTEGER NOT NULL
) STRICT;
UPDATE entries SET expiry_logged = 0
    WHERE expiry_logged = 1 AND expires_at > CAST(strftime('%s', 'now') AS INTEGER) * 1000;
INSERT INTO expired_counts (id, n)
    SELECT 1, COUNT(*) FROM entries WHERE expiry_logged = 1 AND state <> 'pending';
CREATE TRIGGER expired_count_delete AFTER DELETE ON entries
    WHEN OLD.expiry_logged = 1 AND OLD.state <> 'pending'
BEGIN
    UPDATE expired_counts SET n = n - 1;
END;
CREATE TRIGGER expired_count_update AFTER UPDATE OF expiry_logged, state ON entries
    WHEN (OLD.expiry_logged = 1 AND OLD.state <> 'pending')
        <> (NEW.expiry_logged = 1 AND NEW.state <> 'pending')
BEGIN
    UPDATE expired_counts SET n = n + CASE WHEN NEW.expiry_logged = 1 AND NEW.state <> 'pending'
        THEN 1 ELSE -1 END;
END;
"#,
    ),
    // 17: the log's delete guard fails the statement (FAIL) instead of undoing it (ABORT). A
    // statement that may ABORT across many rows keeps every page it changes in a statement
    // journal (in memory here), to undo it: archival's removal of 20,000 events at a time held
    // ~17 MB more for it. A row the guard refuses was never deletable, the rows deleted before it
    // were, and the writer rolls back a job that fails anyway.
    Migration::Sql(
        r#"
DROP TRIGGER events_append_only_delete;
CREATE TRIGGER events_append_only_delete BEFORE DELETE ON events
    WHEN OLD.seq > COALESCE((SELECT MAX(seq) FROM archived), 0)
BEGIN
    SELECT RAISE(FAIL, 'the idemgate log is append-only: DELETE refused');
END;
"#,
    ),
    // 18: the log's key index leaves out the rest of an entry's lifecycle: its attempts,
    // releases, lease expiries and TTL expiries are logged, as its claim and completion are,
    // under the entry's key and id (`Row::event`), so the log finds them through the entry, or
    // through the purge of an entry that is gone (`read::EVENT_KEY`). Each of them was a row on
    // a random page of the index (an expiry for nearly every entry): the sweeper wrote them, and
    // archival deleted them, a page each.
    Migration::Sql(
        r#"
DROP INDEX events_key;
CREATE INDEX events_key ON events (key, seq)
    WHERE kind <> 'claim' AND kind <> 'complete' AND kind <> 'attempt' AND kind <> 'release' AND kind <> 'lease_expired' AND kind <> 'expired';
"#,
    ),
];

/// The entries' state check as migration 7 leaves it, and as migration 14 rewrites it.
pub const STATE_CHECK_APPROVALS: &str = "CHECK (state = 'pending' OR state = 'completed' OR \
     state = 'released' OR state = 'failed' OR state = 'awaiting_approval')";

/// Migration 14: the new state in the entries' check (in place, as in migration 7), and the
/// approval's columns.
fn approvals(conn: &Connection) -> Result<()> {
    rewrite_table_sql(
        conn,
        "entries",
        STATE_CHECK_EQ,
        STATE_CHECK_APPROVALS,
        "the entries table does not have the state check that migration 7 wrote",
    )?;
    conn.execute_batch(APPROVAL_COLUMNS)?;
    Ok(())
}

/// The approval's columns, and the indexes of the calls held now (the sweeper's and the
/// release's reads, the open inbox) and of every call ever held (the whole inbox).
const APPROVAL_COLUMNS: &str = "
ALTER TABLE entries ADD COLUMN approval_policy TEXT;
ALTER TABLE entries ADD COLUMN approval_hash TEXT;
ALTER TABLE entries ADD COLUMN approvals_needed INTEGER;
ALTER TABLE entries ADD COLUMN approval_expires_at INTEGER;
ALTER TABLE entries ADD COLUMN approvers TEXT;
ALTER TABLE entries ADD COLUMN approved_by TEXT;
ALTER TABLE entries ADD COLUMN approval_end TEXT;
ALTER TABLE entries ADD COLUMN approval_ended_at INTEGER;
CREATE INDEX entries_awaiting ON entries (approval_expires_at) WHERE state = 'awaiting_approval';
CREATE INDEX entries_held ON entries (id) WHERE approval_policy IS NOT NULL;
INSERT INTO entry_counts (state, n) VALUES ('awaiting_approval', 0);
";

/// The entries' state check as written by migration 1, and as migration 7 rewrites it.
pub const STATE_CHECK_IN: &str = "CHECK (state IN ('pending', 'completed', 'released', 'failed'))";
pub const STATE_CHECK_EQ: &str = "CHECK (state = 'pending' OR state = 'completed' OR \
     state = 'released' OR state = 'failed')";

/// Migration 7. SQLite's ALTER TABLE cannot change a CHECK constraint, and rebuilding `entries`
/// would copy every stored request and response at start-up. A CHECK constraint is not stored
/// in the rows, so its text in `sqlite_schema` is changed in place ([`rewrite_table_sql`]),
/// inside the migrations' transaction.
fn state_check_as_comparisons(conn: &Connection) -> Result<()> {
    rewrite_table_sql(
        conn,
        "entries",
        STATE_CHECK_IN,
        STATE_CHECK_EQ,
        "the entries table does not have the state check that migration 1 created",
    )
}

/// Replaces `from` with `to` in `table`'s text in `sqlite_schema`, by SQLite's
/// procedure for schema changes its ALTER TABLE cannot make (lang_altertable.html, "Making Other
/// Kinds Of Table Schema Changes"): writable schema, the new text, the schema version bumped so
/// that every other connection reads the schema again. Refuses, changing nothing, a table whose
/// text does not have `from` (`refusal`: why).
pub(super) fn rewrite_table_sql(
    conn: &Connection,
    table: &str,
    from: &str,
    to: &str,
    refusal: &str,
) -> Result<()> {
    let version: i64 = conn.pragma_query_value(None, "schema_version", |r| r.get(0))?;
    conn.pragma_update(None, "writable_schema", "ON")?;
    let changed = conn
        .execute(
            "UPDATE sqlite_schema SET sql = replace(sql, ?1, ?2) \
             WHERE type = 'table' AND name = ?3 AND instr(sql, ?1) > 0",
            [from, to, table],
        )
        .map_err(LedgerError::from)
        .and_then(|n| match n {
            1 => Ok(conn.pragma_update(None, "schema_version", version + 1)?),
            // Not the table migration 1 created: the caller rolls back, and nothing changes.
            _ => Err(LedgerError::Corrupt(refusal.into())),
        });
    // RESET: as OFF, and this connection reads the schema again too.
    conn.pragma_update(None, "writable_schema", "RESET")?;
    changed
}

/// The entries' unique constraint as written by migration 1, and as migration 8 rewrites it.
pub const UNIQUE_ROUTE_FIRST: &str = "UNIQUE (route, scope, key)";
pub const UNIQUE_KEY_FIRST: &str = "UNIQUE (key, route, scope)";

/// Migration 8. As in migration 7, SQLite's ALTER TABLE cannot change a table's constraint, and
/// rebuilding `entries` would copy every stored request and response. The constraint's columns
/// are reordered in the table's text in `sqlite_schema`; its index (`sqlite_autoindex_entries_1`,
/// whose own schema row has no text: SQLite derives it from the table's) is then ordered the old
/// way, and `REINDEX` rebuilds it from the table's rows in the new order. Both run in the
/// migrations' transaction, so no other connection sees the index between the two. Then the
/// log's key index drops its claims.
fn key_first(conn: &Connection) -> Result<()> {
    rewrite_table_sql(
        conn,
        "entries",
        UNIQUE_ROUTE_FIRST,
        UNIQUE_KEY_FIRST,
        "the entries table does not have the unique constraint that migration 1 created",
    )?;
    conn.execute_batch(
        "REINDEX sqlite_autoindex_entries_1;
         DROP INDEX events_key;
         CREATE INDEX events_key ON events (key, seq) WHERE kind <> 'claim' AND kind <> 'complete';",
    )?;
    Ok(())
}

/// The tables whose ids are never reused, with their id column as migration 1 wrote it.
pub const ROWID_TABLES: [(&str, &str); 3] = [
    ("entries", "id                INTEGER PRIMARY KEY,"),
    ("collisions", "id          INTEGER PRIMARY KEY,"),
    ("events", "seq            INTEGER PRIMARY KEY,"),
];

/// Migration 11. SQLite's `AUTOINCREMENT` keeps each table's highest id ever in `sqlite_sequence`
/// and numbers past it; the keyword changes no row (an `AUTOINCREMENT` table's b-tree is a plain
/// rowid table's), so it is added to the tables' text in place, as in migrations 7 and 8, instead
/// of copying every stored request and response. The high-water marks start at the highest id
/// anything the ledger still holds names (a purged entry's events, collisions, subjects or review;
/// a link to an entry names an older one), and past the archived events. An entry purged before
/// the upgrade whose every event was archived since is named by nothing left to read.
fn never_reuse_ids(conn: &Connection) -> Result<()> {
    // `sqlite_sequence` is made by the first AUTOINCREMENT table created, and stays.
    conn.execute_batch(
        "CREATE TABLE idemgate_make_sequence (id INTEGER PRIMARY KEY AUTOINCREMENT);
         DROP TABLE idemgate_make_sequence;",
    )?;
    for (table, column) in ROWID_TABLES {
        let autoincrement = column.replace(" PRIMARY KEY,", " PRIMARY KEY AUTOINCREMENT,");
        rewrite_table_sql(
            conn,
            table,
            column,
            &autoincrement,
            &format!("the {table} table does not have the id column that migration 1 created"),
        )?;
    }
    conn.execute_batch(
        "DELETE FROM sqlite_sequence WHERE name IN ('entries', 'collisions', 'events');
         INSERT INTO sqlite_sequence (name, seq) VALUES
           ('entries', max(
              coalesce((SELECT max(id) FROM entries), 0),
              coalesce((SELECT max(entry_id) FROM events), 0),
              coalesce((SELECT max(entry_id) FROM collisions), 0),
              coalesce((SELECT max(entry_id) FROM subjects), 0),
              coalesce((SELECT max(entry_id) FROM reviews), 0))),
           ('collisions', coalesce((SELECT max(id) FROM collisions), 0)),
           ('events', max(
              coalesce((SELECT max(seq) FROM events), 0),
              coalesce((SELECT max(seq) FROM archived), 0)));",
    )?;
    Ok(())
}

pub fn current_version() -> i64 {
    MIGRATIONS.len() as i64
}
