//! The effects of an MCP route's tools as their upstream listed them: shared by every instance
//! on the ledger, and kept over a restart.

use crate::db::vals;
use crate::error::Result;
use crate::store::ToolsListed;
use crate::writer::Ctx;

/// Stores each listed tool's effect over what an earlier list said. No event: a list changes no
/// entry, and which tools were reads shows in the entries a call makes (or does not).
pub(crate) fn note_tools(ctx: &mut Ctx<'_>, listed: &ToolsListed) -> Result<()> {
    for (tool, effect) in &listed.tools {
        ctx.db.exec(
            "INSERT INTO tool_effects (route, upstream, tool, effect, at) \
             VALUES (?1, ?2, ?3, ?4, ?5) \
             ON CONFLICT (route, upstream, tool) \
             DO UPDATE SET effect = excluded.effect, at = excluded.at",
            vals![
                &listed.route,
                &listed.upstream,
                tool,
                effect.as_str(),
                listed.at
            ],
        )?;
    }
    Ok(())
}
