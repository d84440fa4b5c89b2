//! How far the approval webhooks have been told of decisions: the seq of the last `approved`,
//! `rejected` or `approval_expired` event announced, kept beside the log so that whichever
//! instance leads next goes on from there.

use crate::db::{vals, Db};
use crate::error::Result;
use crate::writer::Ctx;

/// The last decision's seq announced; `None` until the first announcer starts.
pub(crate) fn announced(db: &mut dyn Db) -> Result<Option<i64>> {
    Ok(db
        .opt(
            "SELECT value FROM meta WHERE name = 'approvals_announced'",
            &[],
            |r| r.text(0),
        )?
        .and_then(|v| v.parse().ok()))
}

/// Records that the decisions through `seq` have been announced; never moves back.
pub(crate) fn note_announced(ctx: &mut Ctx<'_>, seq: i64) -> Result<()> {
    if announced(ctx.db)?.is_some_and(|s| s >= seq) {
        return Ok(());
    }
    let seq = seq.to_string();
    ctx.db.exec(
        "INSERT INTO meta (name, value) VALUES ('approvals_announced', ?1) \
         ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        vals![seq.as_str()],
    )?;
    Ok(())
}
