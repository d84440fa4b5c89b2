//! Copying a whole ledger into a new one — SQLite to PostgreSQL when one machine is no longer
//! enough, or back. Entries keep their ids, states, leases, stored requests and responses (so a key
//! completed before the move still replays after it, instead of running again); the log is copied
//! verbatim (same sequence numbers, same hashes: the chain verifies and old export manifests still
//! match); collisions and the hourly counters come along; the entry counts by state are rebuilt.
//!
//! The source's write lock is held for the whole copy (its proxies' writes wait, or fail after
//! their busy timeout), so the copy is one consistent cut; a PostgreSQL source's intake is
//! numbered into its log first (`write/intake.rs`). The destination is written in one
//! transaction: it has the whole ledger or nothing.

use serde::Serialize;

use crate::chain::{self, ChainHasher};
use crate::db::{Db, Dialect, Row, Val};
use crate::error::{LedgerError, Result};
use crate::ledger::{Ledger, OpenOptions};
use crate::model::ChainHead;
use crate::read;
use crate::store::{Progress, Storage};
use crate::writer::WriteConn;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CopyReport {
    pub entries: u64,
    pub collisions: u64,
    pub events: u64,
    pub head: Option<ChainHead>,
}

/// A column's type: every table is integers, text and bytes.
#[derive(Clone, Copy)]
enum Kind {
    Int,
    Text,
    Blob,
}

use Kind::{Blob as B, Int as I, Text as T};

/// A copied table: its name, its key column and its columns.
type Table = (&'static str, &'static str, &'static [(&'static str, Kind)]);

/// The copied tables, in an order that satisfies references.
const TABLES: &[Table] = &[
    (
        "entries",
        "id",
        &[
            ("id", I),
            ("route", T),
            ("scope", T),
            ("key", T),
            ("fingerprint", T),
            ("effect", T),
            ("state", T),
            ("attempts", I),
            ("lease_owner", T),
            ("lease_expires_at", I),
            ("outcome_unknown", I),
            ("last_error", T),
            ("req_method", T),
            ("req_path", T),
            ("req_headers", T),
            ("req_body", B),
            ("resp_status", I),
            ("resp_headers", T),
            ("resp_body", B),
            ("replays", I),
            ("last_replay_at", I),
            ("collisions", I),
            ("duplicate_of", I),
            ("created_at", I),
            ("updated_at", I),
            ("completed_at", I),
            ("expires_at", I),
            ("resolved_by", T),
            ("resolution_reason", T),
            ("external_ref", T),
            ("stuck_logged", I),
            ("expiry_logged", I),
            ("tool", T),
            ("subjects", T),
            ("dup_fp", T),
        ],
    ),
    (
        "collisions",
        "id",
        &[
            ("id", I),
            ("entry_id", I),
            ("at", I),
            ("fingerprint", T),
            ("req_method", T),
            ("req_path", T),
            ("req_headers", T),
            ("req_body", B),
        ],
    ),
    (
        "events",
        "seq",
        &[
            ("seq", I),
            ("at", I),
            ("kind", T),
            ("entry_id", I),
            ("route", T),
            ("scope", T),
            ("key", T),
            ("operator", T),
            ("reason", T),
            ("detail", T),
            ("payload_digest", T),
            ("prev_hash", T),
            ("hash", T),
        ],
    ),
    // After the log: a record of archived events the live log still holds names them.
    (
        "archived",
        "seq",
        &[
            ("seq", I),
            ("first_seq", I),
            ("hash", T),
            ("count", I),
            ("file", T),
            ("sha256", T),
            ("bytes", I),
            ("at", I),
        ],
    ),
    // The log's Merkle tree as it stands: its leaves may begin before the live log (archived
    // events), so it is copied, not recomputed.
    ("tree_leaves", "leaf", &[("leaf", I), ("seq", I)]),
    ("tree_hashes", "idx", &[("idx", I), ("hash", B)]),
    (
        "tree_checkpoints",
        "size",
        &[("size", I), ("note", T), ("at", I)],
    ),
];

/// An owned column value.
enum Owned {
    Null,
    Int(i64),
    Text(String),
    Blob(Vec<u8>),
}

impl Owned {
    fn val(&self) -> Val<'_> {
        match self {
            Owned::Null => Val::Null,
            Owned::Int(i) => Val::Int(*i),
            Owned::Text(s) => Val::Text(s),
            Owned::Blob(b) => Val::Blob(b),
        }
    }
}

fn read_row(r: &dyn Row, cols: &[(&str, Kind)]) -> Result<Vec<Owned>> {
    cols.iter()
        .enumerate()
        .map(|(i, (_, k))| {
            Ok(match k {
                Kind::Int => r.opt_int(i)?.map_or(Owned::Null, Owned::Int),
                Kind::Text => r.opt_text(i)?.map_or(Owned::Null, Owned::Text),
                Kind::Blob => r.opt_blob(i)?.map_or(Owned::Null, Owned::Blob),
            })
        })
        .collect()
}

/// A write connection on `location`, of either backend.
fn write_conn(location: &str) -> Result<Box<dyn WriteConn>> {
    if crate::is_postgres(location) {
        Ok(Box::new(crate::postgres::write_conn(location)?))
    } else {
        Ok(Box::new(crate::sqlite::write_conn(location)?))
    }
}

fn open(location: &str, create: bool, hasher: &ChainHasher) -> Result<std::sync::Arc<Ledger>> {
    let opts = OpenOptions {
        create,
        hasher: hasher.clone(),
    };
    if crate::is_postgres(location) {
        Ledger::postgres(location, opts)
    } else {
        Ledger::sqlite(location, opts)
    }
}

/// Copies the ledger at `from` into the empty (or not yet existing) ledger at `to`. `progress` is
/// told the rows copied so far and may cancel (nothing is then written).
pub fn copy(
    from: &str,
    to: &str,
    hasher: &ChainHasher,
    progress: Progress<'_>,
) -> Result<CopyReport> {
    // Both ledgers at the current schema; the source's chain algorithm is the one the hasher has.
    let source = open(from, false, hasher)?;
    chain::check_alg(hasher, &source.chain_alg()?)?;
    source.close();
    drop(source);
    let dest = open(to, true, hasher)?;
    let empty = dest.head()?.is_none()
        && dest
            .entries(&Default::default(), Default::default(), 0)?
            .is_empty();
    dest.close();
    drop(dest);
    if !empty {
        return Err(LedgerError::NotEmpty(to.to_owned()));
    }

    let mut src = write_conn(from)?;
    let mut dst = write_conn(to)?;
    src.begin()?;
    // A PostgreSQL source's intake is taken into its log first, under its write lock: the copy
    // has every event numbered, and the source numbers them as the copy does (it commits that
    // before the copy commits).
    let sequenced = match src.db().dialect() {
        // Batches hold the write lock shared: taken alone, no batch runs until the copy ends.
        Dialect::Postgres => src
            .db()
            .batch(&format!(
                "SELECT pg_advisory_xact_lock({})",
                crate::postgres::locks::WRITE_LOCK
            ))
            .and_then(|()| crate::write::intake::take_all(src.db(), hasher).map(|_| ())),
        Dialect::Sqlite => Ok(()),
    };
    let r = sequenced
        .and_then(|()| dst.begin())
        .and_then(|()| copy_rows(src.db(), dst.db(), progress))
        .and_then(|report| src.db().batch("COMMIT").map(|()| report));
    match r {
        Ok(report) => {
            dst.db().batch("COMMIT")?;
            Ok(report)
        }
        Err(e) => {
            let _ = src.db().batch("ROLLBACK");
            let _ = dst.db().batch("ROLLBACK");
            Err(e)
        }
    }
}

/// What the MCP routes' upstreams last listed of their tools: a few rows a route.
fn copy_tool_effects(src: &mut dyn Db, dst: &mut dyn Db) -> Result<()> {
    let rows = src.all(
        "SELECT route, upstream, tool, effect, at FROM tool_effects",
        &[],
        |r| Ok((r.text(0)?, r.text(1)?, r.text(2)?, r.text(3)?, r.int(4)?)),
    )?;
    for (route, upstream, tool, effect, at) in &rows {
        dst.exec(
            "INSERT INTO tool_effects (route, upstream, tool, effect, at) \
             VALUES (?1, ?2, ?3, ?4, ?5)",
            &[
                Val::Text(route),
                Val::Text(upstream),
                Val::Text(tool),
                Val::Text(effect),
                Val::Int(*at),
            ],
        )?;
    }
    Ok(())
}

/// The tables keyed by an entry (its subjects, its incident's review), copied in ranges of entry
/// ids: their own keys are not one column to page by.
fn copy_by_entry(src: &mut dyn Db, dst: &mut dyn Db) -> Result<()> {
    const STEP: i64 = 5_000;
    let last = src
        .opt("SELECT MAX(id) FROM entries", &[], |r| r.opt_int(0))?
        .flatten()
        .unwrap_or(0);
    let mut lo = 0;
    while lo <= last {
        let range = [Val::Int(lo), Val::Int(lo + STEP)];
        let subjects = src.all(
            "SELECT value, name, entry_id FROM subjects WHERE entry_id >= ?1 AND entry_id < ?2",
            &range,
            |r| Ok((r.text(0)?, r.text(1)?, r.int(2)?)),
        )?;
        for (value, name, id) in &subjects {
            dst.exec(
                "INSERT INTO subjects (value, name, entry_id) VALUES (?1, ?2, ?3)",
                &[Val::Text(value), Val::Text(name), Val::Int(*id)],
            )?;
        }
        let reviews = src.all(
            "SELECT entry_id, through, operator, reason, at FROM reviews \
             WHERE entry_id >= ?1 AND entry_id < ?2",
            &range,
            |r| Ok((r.int(0)?, r.int(1)?, r.text(2)?, r.text(3)?, r.int(4)?)),
        )?;
        for (id, through, operator, reason, at) in &reviews {
            dst.exec(
                "INSERT INTO reviews (entry_id, through, operator, reason, at) \
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                &[
                    Val::Int(*id),
                    Val::Int(*through),
                    Val::Text(operator),
                    Val::Text(reason),
                    Val::Int(*at),
                ],
            )?;
        }
        lo += STEP;
    }
    Ok(())
}

fn copy_rows(src: &mut dyn Db, dst: &mut dyn Db, progress: Progress<'_>) -> Result<CopyReport> {
    let mut counts = vec![0u64; TABLES.len()];
    let mut total = 0u64;
    for (n, (table, key, cols)) in TABLES.iter().enumerate() {
        let names: Vec<&str> = cols.iter().map(|(c, _)| *c).collect();
        let select = format!(
            "SELECT {} FROM {table} WHERE {key} > ?1 ORDER BY {key} LIMIT 2000",
            names.join(", ")
        );
        let marks: Vec<String> = (1..=cols.len()).map(|i| format!("?{i}")).collect();
        let insert = format!(
            "INSERT INTO {table} ({}) VALUES ({})",
            names.join(", "),
            marks.join(", ")
        );
        let mut after = i64::MIN;
        loop {
            let rows = src.all(&select, &[Val::Int(after)], |r| read_row(r, cols))?;
            for row in &rows {
                let vals: Vec<Val<'_>> = row.iter().map(Owned::val).collect();
                dst.exec(&insert, &vals)?;
            }
            counts[n] += rows.len() as u64;
            total += rows.len() as u64;
            if !progress(total) {
                return Err(LedgerError::Unavailable("copy cancelled".into()));
            }
            match rows.last().map(|r| &r[0]) {
                Some(Owned::Int(last)) if rows.len() == 2000 => after = *last,
                _ => break,
            }
        }
    }
    copy_by_entry(src, dst)?;
    copy_tool_effects(src, dst)?;
    let hourly = src.all(
        "SELECT hour, kind, CAST(SUM(n) AS BIGINT) FROM event_counts GROUP BY hour, kind",
        &[],
        |r| Ok((r.int(0)?, r.text(1)?, r.int(2)?)),
    )?;
    for (hour, kind, n) in &hourly {
        dst.exec(
            "INSERT INTO event_counts (hour, kind, n) VALUES (?1, ?2, ?3)",
            &[Val::Int(*hour), Val::Text(kind), Val::Int(*n)],
        )?;
    }
    // The entry counts and the logged expiries, rebuilt from what was copied (the one count of
    // the table, at copy time: an insert is not counted by the triggers).
    dst.batch(
        "UPDATE entry_counts SET n = (SELECT COUNT(*) FROM entries WHERE entries.state = entry_counts.state); \
         UPDATE expired_counts SET n = (SELECT COUNT(*) FROM entries \
         WHERE expiry_logged = 1 AND state <> 'pending')",
    )?;
    // New ids go past the copied ones, and past a purged entry's that its events still name.
    let named = dst.one("SELECT COALESCE(MAX(entry_id), 0) FROM events", &[], |r| {
        r.int(0)
    })?;
    match dst.dialect() {
        // Explicit ids do not advance an identity column: move it past them. Set as called, so
        // that the sequence's last value (which the writer reads) is the highest id.
        Dialect::Postgres => {
            for (table, past) in [("entries", named), ("collisions", 0)] {
                dst.exec(
                    &format!(
                        "SELECT setval(pg_get_serial_sequence('{table}', 'id'), \
                         GREATEST(m, ?1, 1), GREATEST(m, ?1) > 0) \
                         FROM (SELECT COALESCE(MAX(id), 0) AS m FROM {table}) AS t"
                    ),
                    &[Val::Int(past)],
                )?;
            }
        }
        // Explicit ids move `sqlite_sequence` past themselves (schema migration 11).
        Dialect::Sqlite => {
            dst.exec(
                "UPDATE sqlite_sequence SET seq = MAX(seq, ?1) WHERE name = 'entries'",
                &[Val::Int(named)],
            )?;
        }
    }
    Ok(CopyReport {
        entries: counts[0],
        collisions: counts[1],
        events: counts[2],
        head: read::head(dst)?,
    })
}
