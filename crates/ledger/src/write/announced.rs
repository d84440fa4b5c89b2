//! How far the approval webhooks have been told: the seq of the last `approved`, `rejected` or
//! `approval_expired` event announced, and the entries approved in full whose result is still to
//! be told, kept beside the log so that whichever instance leads next goes on from there.

use crate::db::{vals, Db};
use crate::error::Result;
use crate::store::Announced;
use crate::writer::Ctx;

/// What was told so far; `None` until the first announcer starts.
pub(crate) fn announced(db: &mut dyn Db) -> Result<Option<Announced>> {
    let mut value = |name: &str| {
        db.opt("SELECT value FROM meta WHERE name = ?1", vals![name], |r| {
            r.text(0)
        })
    };
    let Some(seq) = value("approvals_announced")?.and_then(|v| v.parse().ok()) else {
        return Ok(None);
    };
    let running = value("approvals_running")?.unwrap_or_default();
    let running = running
        .split(',')
        .filter_map(|id| id.parse().ok())
        .collect();
    Ok(Some(Announced { seq, running }))
}

/// Records `book`, unless a later decision is recorded as told already: the seq never moves
/// back, and a round behind it (a former leader's) does not undo what a later one recorded.
pub(crate) fn note_announced(ctx: &mut Ctx<'_>, book: &Announced) -> Result<()> {
    if announced(ctx.db)?.is_some_and(|told| told.seq > book.seq) {
        return Ok(());
    }
    let running: Vec<String> = book.running.iter().map(i64::to_string).collect();
    for (name, value) in [
        ("approvals_announced", book.seq.to_string()),
        ("approvals_running", running.join(",")),
    ] {
        ctx.db.exec(
            "INSERT INTO meta (name, value) VALUES (?1, ?2) \
             ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            vals![name, value.as_str()],
        )?;
    }
    Ok(())
}
