//! What the instances on one ledger share besides entries and the log: the MCP tools' listed
//! effects and the loop guards' counts.

use crate::db::{vals, Db};
use crate::error::Result;
use crate::model::{Effect, Millis};

/// Counts one call in `name`'s loop-guard window (a new one when the last ended by `at`): the
/// window's end and its calls. The one statement that writes outside the writer: the counts are
/// not part of the log and need no order but the row's own lock.
pub(crate) fn count_call(
    db: &mut dyn Db,
    name: &str,
    window_ms: i64,
    at: Millis,
) -> Result<(Millis, u64)> {
    db.one(
        "INSERT INTO loop_windows (name, ends, calls) \
         VALUES (?1, CAST(?2 AS BIGINT) + CAST(?3 AS BIGINT), 1) \
         ON CONFLICT (name) DO UPDATE SET \
           calls = CASE WHEN loop_windows.ends <= ?2 THEN 1 ELSE loop_windows.calls + 1 END, \
           ends = CASE WHEN loop_windows.ends <= ?2 THEN excluded.ends ELSE loop_windows.ends END \
         RETURNING ends, calls",
        vals![name, at, window_ms],
        |r| Ok((r.int(0)?, r.int(1)?.max(0) as u64)),
    )
}

/// A tool's effect as its route's upstream last listed it.
pub(crate) fn tool_effect(
    db: &mut dyn Db,
    route: &str,
    upstream: &str,
    tool: &str,
) -> Result<Option<Effect>> {
    let effect = db.opt(
        "SELECT effect FROM tool_effects WHERE route = ?1 AND upstream = ?2 AND tool = ?3",
        vals![route, upstream, tool],
        |r| r.text(0),
    )?;
    Ok(effect.as_deref().and_then(Effect::parse))
}
