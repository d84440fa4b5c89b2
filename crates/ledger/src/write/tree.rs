//! Appends an integration step's leaves and hashes to the log's Merkle tree ([`crate::tree`]).

use crate::db::{vals, Db, Val};
use crate::error::{LedgerError, Result};
use crate::model::TreeBatch;
use crate::read;
use crate::writer::Ctx;

/// Rows one statement inserts.
const ROWS: usize = 64;

/// Appends `batch` in the writer's batch (SQLite: the file's one writer).
pub(crate) fn extend_tree(ctx: &mut Ctx<'_>, batch: &TreeBatch) -> Result<()> {
    append(ctx.db, batch)
}

/// Appends `batch` in a transaction of its own on `db` (PostgreSQL), holding the tree's lock
/// instead of the log's write lock: the integrators take turns at the tree, and the log's write
/// batches, which need nothing of it, do not wait for a step's inserts.
pub(crate) fn extend_tree_alone(db: &mut dyn Db, batch: &TreeBatch) -> Result<()> {
    db.defer(&crate::postgres::locks::begin_locked(
        crate::postgres::locks::TREE_LOCK,
    ))?;
    let appended = append(db, batch).and_then(|()| db.batch("COMMIT"));
    if appended.is_err() {
        let _ = db.batch("ROLLBACK");
    }
    appended
}

/// Appends `batch` unless the tree has grown past the size it was computed from (another
/// integrator added those leaves): then nothing is written.
fn append(db: &mut dyn Db, batch: &TreeBatch) -> Result<()> {
    let now = read::tree_state(db)?.size;
    if now != batch.size {
        return Err(LedgerError::TreeMoved {
            expected: batch.size,
            found: now,
        });
    }
    let first_leaf = batch.size as i64;
    for (k, seqs) in batch.seqs.chunks(ROWS).enumerate() {
        let base = first_leaf + (k * ROWS) as i64;
        let leaves: Vec<i64> = (0..seqs.len() as i64).map(|i| base + i).collect();
        insert_pairs(db, "tree_leaves (leaf, seq)", &leaves, |i| {
            Val::Int(seqs[i])
        })?;
    }
    let first_idx = tlog_tiles::tlog::stored_hash_index(0, batch.size) as i64;
    for (k, hashes) in batch.hashes.chunks(ROWS).enumerate() {
        let base = first_idx + (k * ROWS) as i64;
        let idx: Vec<i64> = (0..hashes.len() as i64).map(|i| base + i).collect();
        insert_pairs(db, "tree_hashes (idx, hash)", &idx, |i| {
            Val::Blob(&hashes[i][..])
        })?;
    }
    Ok(())
}

/// One multi-row `INSERT INTO table (key, value)` of `keys[i]` with `value(i)`, held back to ride
/// with the next statement: a step's inserts cost the server's work on them, not a round trip
/// each.
fn insert_pairs<'a>(
    db: &mut dyn Db,
    table: &str,
    keys: &'a [i64],
    value: impl Fn(usize) -> Val<'a>,
) -> Result<()> {
    let rows: Vec<String> = (0..keys.len())
        .map(|i| format!("(?{}, ?{})", 2 * i + 1, 2 * i + 2))
        .collect();
    let sql = format!("INSERT INTO {table} VALUES {}", rows.join(", "));
    let mut params = Vec::with_capacity(keys.len() * 2);
    for (i, k) in keys.iter().enumerate() {
        params.push(Val::Int(*k));
        params.push(value(i));
    }
    db.defer_exec(&sql, &params)
}

/// Keeps a signed checkpoint of the tree of `size` leaves, unless one of that size or a larger
/// one is kept already (another instance signed it): then nothing is written.
pub(crate) fn note_tree_checkpoint(
    ctx: &mut Ctx<'_>,
    size: u64,
    note: &str,
    at: crate::model::Millis,
) -> Result<()> {
    super::intake::lock_books(ctx.db)?;
    let signed = ctx
        .db
        .opt("SELECT MAX(size) FROM tree_checkpoints", &[], |r| {
            r.opt_int(0)
        })?
        .flatten();
    let size = i64::try_from(size).unwrap_or(i64::MAX);
    if let Some(signed) = signed.filter(|s| size <= *s) {
        return Err(LedgerError::AlreadySigned { seq: size, signed });
    }
    ctx.db.exec(
        "INSERT INTO tree_checkpoints (size, note, at) VALUES (?1, ?2, ?3)",
        vals![size, note, at],
    )?;
    Ok(())
}

/// Adds a witness's cosignature line to the kept checkpoint of the tree of `size` leaves, unless
/// it carries one of that witness already: the note only gains signature lines.
pub(crate) fn cosign_tree_checkpoint(ctx: &mut Ctx<'_>, size: u64, line: &str) -> Result<bool> {
    super::intake::lock_books(ctx.db)?;
    let size = i64::try_from(size).unwrap_or(i64::MAX);
    let Some(note) = ctx.db.opt(
        "SELECT note FROM tree_checkpoints WHERE size = ?1",
        vals![size],
        |r| r.text(0),
    )?
    else {
        return Err(LedgerError::Corrupt(format!(
            "no kept checkpoint of the tree of {size} to add a cosignature to"
        )));
    };
    let signer = line.split(' ').take(2).collect::<Vec<_>>().join(" ");
    if !line.starts_with('\u{2014}') || note.lines().any(|l| l.starts_with(&format!("{signer} "))) {
        return Ok(false);
    }
    let line = format!("{}\n", line.trim_end());
    ctx.db.exec(
        "UPDATE tree_checkpoints SET note = note || ?2 WHERE size = ?1",
        vals![size, line.as_str()],
    )?;
    Ok(true)
}
