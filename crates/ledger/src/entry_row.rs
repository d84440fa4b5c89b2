//! An entry as the state machine reads it: the columns its decisions need, and the reads of one
//! entry by id or by its key. Shared by the writer's state machine and the replay cache's reads.

use std::sync::LazyLock;

use crate::db::{vals, Db};
use crate::error::{LedgerError, Result};
use crate::model::{ApprovalEnd, Millis, ResponseRecord, State};
use crate::read;
use crate::store::ClaimRequest;

/// The columns of an entry the state machine needs.
pub(crate) struct Row {
    pub(crate) id: i64,
    pub(crate) route: String,
    pub(crate) scope: String,
    pub(crate) key: String,
    pub(crate) fingerprint: String,
    pub(crate) state: State,
    pub(crate) attempts: i64,
    pub(crate) lease_owner: Option<String>,
    pub(crate) lease_expires_at: Option<Millis>,
    pub(crate) outcome_unknown: bool,
    pub(crate) expires_at: Option<Millis>,
    pub(crate) expiry_logged: bool,
    /// See [`ClaimRequest::dup_fp`].
    pub(crate) dup_fp: Option<String>,
    /// When an approval the entry waits for expires.
    pub(crate) approval_expires_at: Option<Millis>,
    pub(crate) approval_end: Option<ApprovalEnd>,
}

impl Row {
    /// What a duplicate of this entry shares with it besides the route: its duplicate values if
    /// the route declares them, else its fingerprint.
    pub(crate) fn effect(&self) -> &str {
        self.dup_fp.as_deref().unwrap_or(&self.fingerprint)
    }

    pub(crate) fn stuck(&self, now: Millis) -> bool {
        self.state == State::Pending
            && (self.outcome_unknown || self.lease_expires_at.is_some_and(|l| l <= now))
    }

    pub(crate) fn expired(&self, now: Millis) -> bool {
        !matches!(self.state, State::Pending | State::AwaitingApproval)
            && self.expires_at.is_some_and(|e| e <= now)
    }

    /// Whether it waits for a decision that can no longer come in time.
    pub(crate) fn approval_lapsed(&self, now: Millis) -> bool {
        self.state == State::AwaitingApproval
            && self.approval_end.is_none()
            && self.approval_expires_at.is_some_and(|e| e <= now)
    }
}

pub(crate) const ROW_COLS: &str =
    "id, route, scope, key, fingerprint, state, attempts, lease_owner, \
                        lease_expires_at, outcome_unknown, expires_at, expiry_logged, dup_fp, \
                        approval_expires_at, approval_end";

/// The column after [`ROW_COLS`].
pub(crate) const AFTER_ROW: usize = 15;

pub(crate) fn map_row(r: &dyn crate::db::Row) -> Result<Row> {
    Ok(Row {
        id: r.int(0)?,
        route: r.text(1)?,
        scope: r.text(2)?,
        key: r.text(3)?,
        fingerprint: r.text(4)?,
        state: State::parse(&r.text(5)?).unwrap_or(State::Pending),
        attempts: r.int(6)?,
        lease_owner: r.opt_text(7)?,
        lease_expires_at: r.opt_int(8)?,
        outcome_unknown: r.flag(9)?,
        expires_at: r.opt_int(10)?,
        expiry_logged: r.flag(11)?,
        dup_fp: r.opt_text(12)?,
        approval_expires_at: r.opt_int(13)?,
        approval_end: r.opt_text(14)?.as_deref().and_then(ApprovalEnd::parse),
    })
}

pub(crate) fn row_by_id(db: &mut dyn Db, id: i64) -> Result<Row> {
    let lock = db.dialect().for_update();
    db.opt(
        &format!("SELECT {ROW_COLS} FROM entries WHERE id = ?1{lock}"),
        vals![id],
        map_row,
    )?
    .ok_or(LedgerError::EntryNotFound(id))
}

/// The read of a claim's key (route ?1, scope ?2, key ?3): its row and stored response.
pub(crate) static LOOKUP: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {ROW_COLS}, resp_status, resp_headers, resp_body FROM entries \
         WHERE route = ?1 AND scope = ?2 AND key = ?3"
    )
});

/// A claim's key, with its stored response: a replay needs no second read.
pub(crate) fn lookup(
    db: &mut dyn Db,
    req: &ClaimRequest,
) -> Result<Option<(Row, Option<ResponseRecord>)>> {
    let lock = db.dialect().for_update();
    db.opt(
        &format!("{}{lock}", *LOOKUP),
        vals![&req.route, &req.scope, &req.key],
        |r| Ok((map_row(r)?, read::response_cols(r, AFTER_ROW)?)),
    )
}
