//! The approvals an entry was held for, and the inbox of held calls.

use super::entry;
use crate::db::{vals, Db};
use crate::error::{LedgerError, Result};
use crate::model::{Approval, ApprovalEnd, EntryDetail, Millis, Page};

/// Entry `id`'s approval, if it was held for one.
pub(crate) fn approval(db: &mut dyn Db, id: i64) -> Result<Option<Approval>> {
    let found = db.opt(
        "SELECT approval_policy, approval_hash, approvals_needed, approved_by, \
         approval_expires_at, approval_end, approval_ended_at, approvers FROM entries \
         WHERE id = ?1 \
         AND approval_policy IS NOT NULL",
        vals![id],
        |r| {
            let by = r.opt_text(3)?.unwrap_or_default();
            Ok(Approval {
                policy: r.text(0)?,
                policy_hash: r.text(1)?,
                needed: u32::try_from(r.int(2)?).unwrap_or(1),
                approved_by: serde_json::from_str(if by.is_empty() { "[]" } else { &by })
                    .map_err(|e| LedgerError::Corrupt(format!("entry {id}'s approvers: {e}")))?,
                expires_at: r.int(4)?,
                end: r.opt_text(5)?.as_deref().and_then(ApprovalEnd::parse),
                ended_at: r.opt_int(6)?,
                approvers: match r.opt_text(7)? {
                    Some(a) => Some(serde_json::from_str(&a).map_err(|e| {
                        LedgerError::Corrupt(format!("entry {id}'s approvers: {e}"))
                    })?),
                    None => None,
                },
            })
        },
    )?;
    Ok(found)
}

/// Why an operator resolved (or rejected) entry `id`, if one did.
pub(crate) fn resolution_reason(db: &mut dyn Db, id: i64) -> Result<Option<String>> {
    Ok(db
        .opt(
            "SELECT resolution_reason FROM entries WHERE id = ?1",
            vals![id],
            |r| r.opt_text(0),
        )?
        .flatten())
}

/// The calls held for approval, newest first (`open`: only those still undecided), each in
/// full: the inbox shows the request.
pub(crate) fn approvals(
    db: &mut dyn Db,
    open: bool,
    page: Page,
    now: Millis,
) -> Result<Vec<EntryDetail>> {
    let ids = db.all(
        &format!(
            "SELECT id FROM entries WHERE approval_policy IS NOT NULL{} \
             AND (CAST(?1 AS BIGINT) IS NULL OR id < ?1) ORDER BY id DESC LIMIT ?2",
            if open {
                " AND state = 'awaiting_approval' AND approval_end IS NULL"
            } else {
                ""
            }
        ),
        vals![page.before, page.limit as i64],
        |r| r.int(0),
    )?;
    ids.into_iter().map(|id| entry(db, id, now)).collect()
}
