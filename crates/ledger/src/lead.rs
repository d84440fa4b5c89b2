//! Who keeps the books: on a ledger several instances share, one of them at a time applies the
//! retention policy, archives and signs checkpoints. On PostgreSQL the lead is a session advisory
//! lock (`postgres/lead.rs`), so it ends with its holder's session: a leader that dies, or loses
//! its connection, frees it, and another instance takes it at its next try. A ledger one process
//! writes (SQLite) is led by that process.
//!
//! The lead spares the fleet doing the same work twice; it is not what keeps the books right.
//! The ledger itself refuses a second record of an archive segment and a second periodic
//! checkpoint of a signed head, so two instances that both believe they lead (one whose session
//! ended while it was at work) cannot archive or sign anything twice.

use serde::{Deserialize, Serialize};

use crate::model::Millis;

/// The instance that leads, and since when.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leader {
    /// Its instance id: host, process id and a random suffix, as its leases name it.
    pub instance: String,
    /// When it took the lead.
    pub since: Millis,
}

/// The lead, held while this value lives.
pub trait Lead: Send {
    /// Whether it is still held. On PostgreSQL a round trip: the session holding the lock answers.
    /// Once it says no, the lead is gone for good; take a new one.
    fn holds(&mut self) -> bool;
}

/// The lead of a ledger one process writes: always held.
pub(crate) struct Sole;

impl Lead for Sole {
    fn holds(&mut self) -> bool {
        true
    }
}
