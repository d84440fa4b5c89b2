//! The writes of archival, signing and retention: recording a sealed segment, removing the events
//! it holds from the live log, and logging a signed checkpoint or a retention run.

use serde_json::json;

use super::log::{append_numbered, NewEvent};
use crate::canon::canonical_string;
use crate::db::vals;
use crate::error::{LedgerError, Result};
use crate::model::SignedCheckpoint;
use crate::model::{ArchivedSegment, EventKind, Millis};
use crate::store::Actor;
use crate::writer::Ctx;

/// Who the log names for what the server does on its own by policy.
pub const RETENTION_OPERATOR: &str = "idemgate-retention";

/// Records `seg` (the database refuses it unless the log holds its last event with that hash, past
/// the last segment) and logs it. From this commit on, its events may be deleted.
pub(crate) fn mark_archived(ctx: &mut Ctx<'_>, seg: &ArchivedSegment) -> Result<i64> {
    super::intake::lock_books(ctx.db)?;
    let through = crate::read::archived_through(ctx.db)?.map_or(0, |h| h.seq);
    if seg.first_seq != through + 1 || seg.seq < seg.first_seq {
        return Err(LedgerError::Corrupt(format!(
            "an archive segment must start at seq {} (it starts at {} and ends at {})",
            through + 1,
            seg.first_seq,
            seg.seq
        )));
    }
    ctx.db.exec(
        "INSERT INTO archived (seq, first_seq, hash, count, file, sha256, bytes, at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        vals![
            seg.seq,
            seg.first_seq,
            &seg.hash,
            seg.count,
            &seg.file,
            &seg.sha256,
            seg.bytes,
            seg.at
        ],
    )?;
    log(
        ctx,
        seg.at,
        EventKind::Archive,
        None,
        &json!({
            "first_seq": seg.first_seq,
            "seq": seg.seq,
            "hash": seg.hash,
            "count": seg.count,
            "file": seg.file,
            "sha256": seg.sha256,
        }),
    )
}

/// Deletes up to `limit` of the oldest events at or below the last recorded segment: the only
/// DELETE the log's triggers allow. Returns how many went.
pub(crate) fn drop_archived(ctx: &mut Ctx<'_>, limit: u64) -> Result<u64> {
    let Some(through) = crate::read::archived_through(ctx.db)? else {
        return Ok(0);
    };
    let lowest = ctx
        .db
        .one("SELECT MIN(seq) FROM events", &[], |r| r.opt_int(0))?;
    let Some(lowest) = lowest.filter(|l| *l <= through.seq) else {
        return Ok(0);
    };
    let upto = through
        .seq
        .min(lowest.saturating_add(i64::try_from(limit).unwrap_or(i64::MAX) - 1));
    ctx.db.exec(
        "DELETE FROM events WHERE seq BETWEEN ?1 AND ?2",
        vals![lowest, upto],
    )
}

/// Logs a signed checkpoint of the chain; a periodic one (`of_head`) says so in its detail, so
/// that it is told from the checkpoint of an export or a segment, which may sign the same head.
pub(crate) fn note_checkpoint(
    ctx: &mut Ctx<'_>,
    cp: &SignedCheckpoint,
    at: Millis,
    of_head: bool,
) -> Result<i64> {
    super::intake::lock_books(ctx.db)?;
    if of_head {
        // The newest periodic checkpoint's seq, kept beside the log so that two signers of one
        // head (two instances that both took themselves for the leader) leave one checkpoint.
        let signed = ctx
            .db
            .opt(
                "SELECT value FROM meta WHERE name = 'head_checkpointed'",
                &[],
                |r| r.text(0),
            )?
            .and_then(|v| v.parse::<i64>().ok());
        if let Some(signed) = signed.filter(|s| cp.seq <= *s) {
            return Err(LedgerError::AlreadySigned {
                seq: cp.seq,
                signed,
            });
        }
        let seq = cp.seq.to_string();
        ctx.db.exec(
            "INSERT INTO meta (name, value) VALUES ('head_checkpointed', ?1) \
             ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            vals![seq.as_str()],
        )?;
    }
    let mut detail = json!({
        "origin": cp.origin,
        "seq": cp.seq,
        "hash": cp.hash,
        "time": cp.time,
        "key": cp.key,
        "note": cp.note,
    });
    if of_head {
        detail["periodic"] = json!(true);
    }
    log(ctx, at, EventKind::Checkpoint, None, &detail)
}

/// Logs a run of the retention policy (`detail`: the policy and what it did).
pub(crate) fn note_retention(
    ctx: &mut Ctx<'_>,
    detail: &serde_json::Value,
    policy: &str,
    at: Millis,
) -> Result<i64> {
    let actor = Actor {
        operator: RETENTION_OPERATOR.to_owned(),
        reason: policy.to_owned(),
    };
    log(ctx, at, EventKind::Retention, Some(&actor), detail)
}

/// Appends an event about the ledger itself, not about an entry or a key.
fn log(
    ctx: &mut Ctx<'_>,
    at: Millis,
    kind: EventKind,
    actor: Option<&Actor>,
    detail: &serde_json::Value,
) -> Result<i64> {
    append_numbered(
        ctx,
        NewEvent {
            at,
            kind,
            entry_id: None,
            route: "",
            scope: "",
            key: "",
            actor,
            detail: canonical_string(detail),
            payload_digest: None,
            tail: None,
        },
    )
}
