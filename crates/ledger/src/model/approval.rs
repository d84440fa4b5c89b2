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

/// Who decides on a held call, as far as it is known: the name they act under (what a policy's
/// approvers list) and who they are ([`operator_identity`]). A part not known is not judged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Decider<'a> {
    pub name: Option<&'a str>,
    pub identity: Option<&'a str>,
}

impl<'a> Decider<'a> {
    /// The operator recorded as `operator`: both parts known.
    pub fn of(operator: &'a str) -> Decider<'a> {
        Decider {
            name: Some(operator_name(operator)),
            identity: Some(operator_identity(operator)),
        }
    }

    /// One acting as OS account `account` (the CLI, the desktop console): one approver,
    /// whatever name they type, which is not known before they act.
    pub fn account(account: &'a str) -> Decider<'a> {
        Decider {
            name: None,
            identity: Some(account),
        }
    }

    /// The same one, acting under `name` too: the name the CLI or the desktop console will record
    /// beside the account, by which a policy's approvers are judged. No name, or an empty one,
    /// leaves it unjudged.
    #[must_use]
    pub fn named(self, name: Option<&'a str>) -> Decider<'a> {
        match name.map(str::trim).filter(|n| !n.is_empty()) {
            Some(name) => Decider {
                name: Some(name),
                ..self
            },
            None => self,
        }
    }

    /// An authenticated operator, whose name is who they are (a named admin token).
    pub fn operator(name: &'a str) -> Decider<'a> {
        Decider {
            name: Some(name),
            identity: Some(name),
        }
    }
}

/// Refuses a decision (`approve`, or a rejection) on entry `id` in `state`, its approval ended
/// as `end`, unless the entry waits for one.
pub fn check_undecided(
    id: i64,
    state: super::State,
    end: Option<ApprovalEnd>,
    approve: bool,
) -> crate::Result<()> {
    if state == super::State::AwaitingApproval && end.is_none() {
        return Ok(());
    }
    Err(crate::LedgerError::InvalidTransition {
        id,
        state: match end {
            Some(end) => format!("{state} ({} already)", end.as_str()),
            None => state.to_string(),
        },
        action: if approve { "approve" } else { "reject" },
        needed: "awaiting_approval, undecided",
    })
}

impl Approval {
    /// Why `who` may not approve (`approve`) or reject entry `id`'s undecided call at `at`, in
    /// words, or `None`: its window passed, the policy does not name them, or (an approval)
    /// they approved it already. The ledger refuses a decision by it; an entry's view says it.
    pub fn refusal(&self, id: i64, at: Millis, approve: bool, who: Decider<'_>) -> Option<String> {
        if at >= self.expires_at {
            return Some(format!(
                "entry {id}'s approval expired at {}",
                super::rfc3339(self.expires_at)
            ));
        }
        if let (Some(name), Some(may)) = (who.name, &self.approvers) {
            if !may.iter().any(|n| n == name) {
                return Some(format!(
                    "{name} may not decide on entry {id} under policy {} (its approvers: {})",
                    self.policy,
                    may.join(", ")
                ));
            }
        }
        let twice = |me: &str| self.approved_by.iter().any(|a| operator_identity(a) == me);
        match who.identity {
            Some(me) if approve && twice(me) => Some(format!(
                "{me} already approved entry {id}; another operator must"
            )),
            _ => None,
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decision_is_judged_by_what_is_known_of_who_decides() {
        let a = Approval {
            policy: "refunds".into(),
            policy_hash: "h".into(),
            needed: 2,
            approvers: Some(vec!["alice".into(), "bob".into()]),
            approved_by: vec!["alice (OS user ada)".into()],
            expires_at: 1_000,
            end: None,
            ended_at: None,
        };
        let refused = |approve, who| a.refusal(7, 10, approve, who);
        // Ada's account approved (under the name alice); another name does not make her another.
        let ada = Decider::account("ada");
        let twice = "ada already approved entry 7; another operator must";
        assert_eq!(refused(true, ada).as_deref(), Some(twice));
        assert_eq!(refused(false, ada), None, "she may still reject it");
        assert_eq!(refused(true, Decider::of("bob (OS user bo)")), None);
        let carol =
            "carol may not decide on entry 7 under policy refunds (its approvers: alice, bob)";
        assert_eq!(refused(false, Decider::of("carol")).as_deref(), Some(carol));
        // An account that will act under a name is judged by both, as its decision would be.
        let typed = |name| refused(false, Decider::account("cy").named(name));
        assert_eq!(typed(Some(" carol ")).as_deref(), Some(carol));
        assert_eq!(typed(Some("bob")), None);
        let ada_as_bob = Decider::account("ada").named(Some("bob"));
        assert_eq!(refused(true, ada_as_bob).as_deref(), Some(twice));
        assert_eq!((typed(None), typed(Some(" "))), (None, None));
        // What is not known is not judged: a name without an account, or no one.
        let named = Decider {
            name: Some("alice"),
            identity: None,
        };
        assert_eq!(refused(true, named), None);
        assert_eq!(refused(true, Decider::default()), None);
        let late = a.refusal(7, 1_000, false, Decider::default());
        assert!(late.is_some_and(|w| w.starts_with("entry 7's approval expired at ")));
    }

    #[test]
    fn only_a_call_that_waits_takes_a_decision() {
        use super::super::State;
        assert!(check_undecided(7, State::AwaitingApproval, None, true).is_ok());
        let done = check_undecided(7, State::Completed, Some(ApprovalEnd::Approved), false);
        assert_eq!(
            done.map_err(|e| e.to_string()),
            Err(
                "entry 7 is completed (approved already); reject needs awaiting_approval, \
                 undecided"
                    .to_owned()
            )
        );
        assert!(check_undecided(7, State::Pending, None, true).is_err());
    }
}
