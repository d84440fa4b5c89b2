use idemgate_ledger::{now_millis, Review, ReviewRequest};
use serde::Deserialize;

use crate::validate_actor;

/// An incident to open again (its first entry's id), by whom and why.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReopenCmd {
    /// The incident: its first entry, which the others duplicate.
    pub entry_id: i64,
    /// Who opens it again.
    #[cfg_attr(feature = "ts", schemars(length(max = 200), pattern(r"\S")))]
    pub operator: String,
    /// Why the review no longer holds.
    #[cfg_attr(feature = "ts", schemars(length(max = 4000), pattern(r"\S")))]
    pub reason: String,
}

operation! {
    /// Opens a reviewed incident again.
    ///
    /// Withdraws its review, which the answer gives back; logged with the operator and the
    /// reason beside the review it withdrew. Refused for an incident no one reviewed.
    Op {
        name: reopen_incident,
        role: Operator,
        kind: Ledger,
        http: POST "/admin/v1/incidents/{entry_id}/reopen",
        acts: true,
        example: r#"{"entry_id": 42, "reason": "the refund was never sent"}"#,
    }
    fn run(ops, req: ReopenCmd, _) -> Review {
        let actor = validate_actor(&req.operator, &req.reason)?;
        let req = ReviewRequest { entry_id: req.entry_id, actor, at: now_millis() };
        Ok(ops.store().reopen(req).wait()?)
    }
}
