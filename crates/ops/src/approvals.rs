//! Approvals: the inbox of calls held for operators, and their decisions. Who may decide is
//! checked where the decision is written (the ledger), so every door applies the same rule: an
//! approver the policy names, once per call, before its window passes, for the request shown.

use idemgate_ledger::{now_millis, Approval, ApprovalEnd, DecideRequest, EntryDetail, Page};
use serde::{Deserialize, Serialize};

use crate::{validate_actor, Ops, OpsResult};

/// An operator's approval or rejection of a held call.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecideCmd {
    /// The held call's entry.
    pub entry_id: i64,
    /// Who decides, as the log records it.
    #[cfg_attr(feature = "ts", schemars(length(max = 200), pattern(r"\S")))]
    pub operator: String,
    /// Why, as the log records it.
    #[cfg_attr(feature = "ts", schemars(length(max = 4000), pattern(r"\S")))]
    pub reason: String,
    /// The fingerprint of the request decided on, as shown: refused if the entry holds another.
    #[serde(default)]
    #[cfg_attr(feature = "ts", ts(optional = nullable))]
    pub fingerprint: Option<String>,
}

/// Which held calls to list.
#[cfg_attr(
    feature = "ts",
    derive(ts_rs::TS, schemars::JsonSchema),
    ts(optional_fields = nullable)
)]
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalsRequest {
    /// Only those still waiting for a decision.
    pub open: Option<bool>,
    /// Older than this entry.
    pub before: Option<i64>,
    /// At most this many (50 when left out; at most 1,000).
    pub limit: Option<usize>,
}

impl Ops {
    /// The calls held for approval, newest first, each with its request and its approval.
    pub fn approvals(&self, req: &ApprovalsRequest) -> OpsResult<Vec<EntryDetail>> {
        let page = Page {
            before: req.before,
            limit: req.limit.unwrap_or(50).clamp(1, 1_000),
            ..Page::default()
        };
        Ok(self
            .store
            .approvals(req.open.unwrap_or(false), page, now_millis())?)
    }

    /// Approves (`approve`) or rejects a held call, logged with the operator and the reason.
    /// The last approval a policy needs releases the call: a running server forwards it.
    pub fn decide(&self, cmd: &DecideCmd, approve: bool) -> OpsResult<Approval> {
        let actor = validate_actor(&cmd.operator, &cmd.reason)?;
        let at = now_millis();
        let approval = self
            .store
            .decide(DecideRequest {
                entry_id: cmd.entry_id,
                approve,
                actor,
                fingerprint: cmd.fingerprint.clone(),
                at,
            })
            .wait()?;
        if approval.end == Some(ApprovalEnd::Approved) {
            if let Some(n) = self.store.released() {
                n.notify_one();
            }
        }
        if approval.end.is_some() {
            // From the claim that held it to the decision that ended its wait.
            if let Ok(e) = self.store.entry(cmd.entry_id, at) {
                let waited = (at - e.summary.created_at).max(0) as f64 / 1000.0;
                metrics::histogram!("idemgate_approval_wait_seconds").record(waited);
            }
        }
        Ok(approval)
    }
}
