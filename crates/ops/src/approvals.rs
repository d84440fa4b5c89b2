//! Approvals: the inbox of calls held for operators, and their decisions. Who may decide is
//! checked where the decision is written (the ledger), so every door applies the same rule: an
//! approver the policy names, once per call, before its window passes, for the request shown.

use idemgate_ledger::{
    check_undecided, now_millis, Approval, ApprovalEnd, DecideRequest, Decider, EntryDetail,
    Millis, Page,
};
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

/// Whether the one who asks may decide on a held call now, and why not, by the rule the ledger
/// refuses a decision by: the call still waits, its window has not passed, its policy names
/// them, and they have not approved it yet. What the host cannot tell of them is not judged.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// Why their approval would be refused; `None`: they may approve.
    pub approve: Option<String>,
    /// Why their rejection would be refused; `None`: they may reject.
    pub reject: Option<String>,
}

impl Decision {
    /// `caller`'s standing on `e` at `at`; `None` when `e` was never held.
    pub fn of(e: &EntryDetail, at: Millis, caller: Decider<'_>) -> Option<Decision> {
        let a = e.approval.as_ref()?;
        let why = |approve: bool| {
            check_undecided(e.summary.id, e.summary.state, a.end, approve)
                .err()
                .map(|err| err.to_string())
                .or_else(|| a.refusal(e.summary.id, at, approve, caller))
        };
        Some(Decision {
            approve: why(true),
            reject: why(false),
        })
    }
}

/// A held call as the inbox lists it: the entry, and whether the one who asks may decide on it.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeldCall {
    /// The entry, with its request and its approval.
    #[serde(flatten)]
    pub entry: EntryDetail,
    /// Whether the one who asks may approve or reject it now.
    pub decision: Decision,
}

impl Ops {
    /// The calls held for approval, newest first, each with its request, its approval and
    /// whether `caller` may decide on it.
    pub fn approvals(
        &self,
        req: &ApprovalsRequest,
        caller: Decider<'_>,
    ) -> OpsResult<Vec<HeldCall>> {
        let page = Page {
            before: req.before,
            limit: req.limit.unwrap_or(50).clamp(1, 1_000),
            ..Page::default()
        };
        let at = now_millis();
        let held = self.store.approvals(req.open.unwrap_or(false), page, at)?;
        Ok(held
            .into_iter()
            .filter_map(|entry| {
                let decision = Decision::of(&entry, at, caller)?;
                Some(HeldCall { entry, decision })
            })
            .collect())
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
