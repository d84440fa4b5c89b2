//! Duplicate suspects: the same effect completed under another key within a route's window,
//! refused at the claim (`reject`) or flagged at the completion (`flag`), in one incident.

use std::sync::LazyLock;

use serde_json::json;

use super::log::{append, NewEvent};
use crate::canon::canonical_string;
use crate::db::{vals, Db};
use crate::entry_row::Row;
use crate::error::Result;
use crate::model::{EventKind, Millis};
use crate::prepared::Claim;
use crate::store::ClaimOutcome;
use crate::writer::Ctx;

/// With the reject policy: refuses a claim whose effect completed under another key in the window.
pub(super) fn reject_duplicate(ctx: &mut Ctx<'_>, c: &Claim) -> Result<Option<ClaimOutcome>> {
    let req = &c.req;
    let Some(window) = req.reject_duplicates_within_ms else {
        return Ok(None);
    };
    let found = find_duplicate(
        ctx.db,
        &req.route,
        &req.scope,
        &req.fingerprint,
        req.dup_fp.as_deref(),
        &req.key,
        req.at - window,
        None,
    )?;
    let Some((id, key, _)) = found else {
        return Ok(None);
    };
    append(
        ctx,
        NewEvent {
            at: req.at,
            kind: EventKind::DuplicateSuspect,
            entry_id: Some(id),
            route: &req.route,
            scope: &req.scope,
            key: &req.key,
            actor: None,
            detail: canonical_string(&json!({"rejected": true, "duplicate_of": id,
                           "duplicate_of_key": key, "fingerprint": req.fingerprint})),
            payload_digest: Some(c.digest.clone()),
            tail: None,
        },
    )?;
    Ok(Some(ClaimOutcome::ProbableDuplicate { entry_id: id, key }))
}

/// What makes two entries of a route the same effect: their fingerprint in one scope, or their
/// `duplicate_on` values ([`ClaimRequest::dup_fp`]) in one scope or in any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Same {
    Fingerprint,
    Values,
    ValuesAnyScope,
}

impl Same {
    /// How an entry whose duplicate values are `dup_fp` is compared.
    pub(super) fn of(dup_fp: Option<&str>) -> Same {
        match dup_fp {
            None => Same::Fingerprint,
            Some(d) if d.starts_with("any:") => Same::ValuesAnyScope,
            Some(_) => Same::Values,
        }
    }

    pub(super) const ALL: [Same; 3] = [Same::Fingerprint, Same::Values, Same::ValuesAnyScope];
}

/// The condition "an entry under route ?1 (and scope ?2) completed the effect `what` since
/// `since`, under another key than `key`" (each argument a placeholder): the duplicate check's,
/// shared by [`find_duplicate`] and the claim's first statement, which must agree. `?2` is named
/// in every form, so that each statement takes the same parameters.
pub(super) fn same_effect_elsewhere(same: Same, what: &str, since: &str, key: &str) -> String {
    let (scope, column) = match same {
        Same::Fingerprint => ("scope = ?2", "fingerprint"),
        Same::Values => ("scope = ?2", "dup_fp"),
        Same::ValuesAnyScope => ("(scope = ?2 OR 1 = 1)", "dup_fp"),
    };
    format!(
        "route = ?1 AND {scope} AND {column} = {what} AND state = 'completed' \
         AND completed_at >= {since} AND key <> {key}"
    )
}

pub(crate) static FIND_DUPLICATE: LazyLock<[String; 3]> = LazyLock::new(|| {
    Same::ALL.map(|same| {
        format!(
            "SELECT id, key, duplicate_of FROM entries WHERE {} AND id <> ?6 \
             ORDER BY completed_at LIMIT 1",
            same_effect_elsewhere(same, "?3", "?4", "?5")
        )
    })
});

/// The earliest entry (other than `exclude`) that completed the same effect — route, scope and
/// fingerprint, or the `duplicate_on` values `dup_fp` — under another key since `since`: its id,
/// its key, and the first entry of its incident when it is itself a suspect.
#[allow(
    clippy::too_many_arguments,
    reason = "the statement's parameters, named"
)]
fn find_duplicate(
    db: &mut dyn Db,
    route: &str,
    scope: &str,
    fingerprint: &str,
    dup_fp: Option<&str>,
    key: &str,
    since: Millis,
    exclude: Option<i64>,
) -> Result<Option<(i64, String, Option<i64>)>> {
    let same = Same::of(dup_fp);
    let what = dup_fp.unwrap_or(fingerprint);
    db.opt(
        &FIND_DUPLICATE[same as usize],
        vals![route, scope, what, since, key, exclude.unwrap_or(-1)],
        |r| Ok((r.int(0)?, r.text(1)?, r.opt_int(2)?)),
    )
}

/// Marks `row` a duplicate suspect when its effect completed under another key within `window`,
/// in that entry's incident: when the earliest such entry is a suspect itself (its incident's first
/// entry was purged, or completed before the window), `row` joins its incident rather than opening
/// a second one for the same repeated effect.
pub(super) fn flag_duplicate(
    ctx: &mut Ctx<'_>,
    row: &Row,
    window: i64,
    at: Millis,
) -> Result<Option<i64>> {
    let found = find_duplicate(
        ctx.db,
        &row.route,
        &row.scope,
        &row.fingerprint,
        row.dup_fp.as_deref(),
        &row.key,
        at - window,
        Some(row.id),
    )?;
    let Some((like, like_key, incident)) = found else {
        return Ok(None);
    };
    let first = incident.unwrap_or(like);
    ctx.db.exec(
        "UPDATE entries SET duplicate_of = ?2 WHERE id = ?1",
        vals![row.id, first],
    )?;
    let detail = if first == like {
        json!({"duplicate_of": first, "duplicate_of_key": like_key, "fingerprint": row.fingerprint})
    } else {
        json!({"duplicate_of": first, "like": like, "like_key": like_key, "fingerprint": row.fingerprint})
    };
    append(ctx, row.event(at, EventKind::DuplicateSuspect, detail))?;
    Ok(Some(first))
}
