//! The operator actions on one entry, and which state each takes.

use serde::{Deserialize, Serialize};

use super::State;

/// An operator's action on one entry. Which state each takes is stated here once: the ledger
/// refuses by it, and an entry's view lists by it what its operators may do.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Record the outcome (completed or failed) of an entry whose call did not settle.
    Resolve,
    /// Record that the effect did not happen, so the key may run again.
    Release,
    /// Send the stored request upstream again.
    Replay,
    /// Ask the route's probe whether the effect happened.
    Reconcile,
    /// Remove the entry's stored request and response (the log keeps its events).
    Purge,
}

impl Action {
    pub const ALL: [Action; 5] = [
        Action::Resolve,
        Action::Release,
        Action::Replay,
        Action::Reconcile,
        Action::Purge,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Action::Resolve => "resolve",
            Action::Release => "release",
            Action::Replay => "replay",
            Action::Reconcile => "reconcile",
            Action::Purge => "purge",
        }
    }

    /// What the action needs of an entry in `state` (`stuck`: pending past its lease, or of
    /// unknown outcome) that it lacks, or `None` when the entry may take it. A call in flight
    /// is its owner's and one held for an approval its approvers'; a completed one is settled.
    pub fn needs(self, state: State, stuck: bool) -> Option<&'static str> {
        // Stuck, released or failed: not in flight, completed, or held for an approval.
        let unsettled = match state {
            State::Pending => stuck,
            State::Released | State::Failed => true,
            State::Completed | State::AwaitingApproval => false,
        };
        let (takes, needed) = match self {
            Action::Resolve | Action::Replay => (unsettled, "a stuck, released or failed entry"),
            Action::Release => (
                unsettled && state != State::Released,
                "a stuck or failed entry",
            ),
            Action::Reconcile => (stuck, "a stuck entry"),
            Action::Purge => (
                !matches!(state, State::Pending | State::AwaitingApproval),
                "a completed, released or failed entry (resolve a pending one, decide a held \
                 one first)",
            ),
        };
        (!takes).then_some(needed)
    }

    /// Refuses the action on entry `id` in `state` unless the state takes it.
    pub fn check(self, id: i64, state: State, stuck: bool) -> crate::Result<()> {
        match self.needs(state, stuck) {
            None => Ok(()),
            Some(needed) => Err(crate::LedgerError::InvalidTransition {
                id,
                state: state.described(stuck),
                action: self.as_str(),
                needed,
            }),
        }
    }

    /// Why the action is refused on an entry in `state`, in words, or `None` when it is not.
    pub fn refusal(self, state: State, stuck: bool) -> Option<String> {
        self.needs(state, stuck).map(|needed| {
            format!(
                "entry is {}; {} needs {needed}",
                state.described(stuck),
                self.as_str()
            )
        })
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
