//! A held call's approval as the ledger keeps it, and who an approver is.

use serde::{Deserialize, Serialize};

use super::Millis;

/// A held call's approval: the policy it matched, who approved it so far, and how it ended.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    /// The policy's name: the route's, or `route/tool` for an MCP tool's.
    pub policy: String,
    /// The policy's hash when the call matched it; approvals are bound to it.
    pub policy_hash: String,
    /// How many distinct operators must approve.
    pub needed: u32,
    /// Who may decide, by name; `None`: any operator.
    pub approvers: Option<Vec<String>>,
    /// Who approved it, in order.
    pub approved_by: Vec<String>,
    /// When an undecided request expires (it then never runs).
    pub expires_at: Millis,
    /// How it ended: `None` while it waits for a decision.
    pub end: Option<ApprovalEnd>,
    pub ended_at: Option<Millis>,
}

/// How the desktop console and the CLI record who acts: the name typed, then the account the
/// process runs as, which the system vouches for (`alice (OS user ada)`).
pub const OS_USER_MARK: &str = " (OS user ";

/// Who an operator is, for telling two approvers apart: the OS account of a name recorded with
/// one ([`OS_USER_MARK`]; one account cannot be two approvers), else the name.
pub fn operator_identity(operator: &str) -> &str {
    match operator.split_once(OS_USER_MARK) {
        Some((_, user)) => user.strip_suffix(')').unwrap_or(user),
        None => operator,
    }
}

/// The name an operator gave, without the OS account recorded beside it.
pub fn operator_name(operator: &str) -> &str {
    operator
        .split_once(OS_USER_MARK)
        .map_or(operator, |(name, _)| name)
}

/// How a held call's approval ended.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalEnd {
    /// Enough operators approved: it is (or is about to be) forwarded.
    Approved,
    Rejected,
    Expired,
}

impl ApprovalEnd {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalEnd::Approved => "approved",
            ApprovalEnd::Rejected => "rejected",
            ApprovalEnd::Expired => "expired",
        }
    }

    pub fn parse(s: &str) -> Option<ApprovalEnd> {
        [
            ApprovalEnd::Approved,
            ApprovalEnd::Rejected,
            ApprovalEnd::Expired,
        ]
        .into_iter()
        .find(|e| e.as_str() == s)
    }
}
