//! The idemgate ledger.
//!
//! An *entry* per `(route, scope, key)` with a state machine (PENDING → COMPLETED | RELEASED |
//! FAILED; AWAITING_APPROVAL → PENDING | FAILED before that), and an append-only, hash-chained *log* of everything that happened to entries. The
//! [`Storage`] trait is the crate's one door; [`Ledger`] implements it on SQLite (one file, one
//! machine) or PostgreSQL (one database shared by several proxies). Nothing outside this crate
//! writes SQL.

mod ahead;
pub mod archive;
pub mod canon;
pub mod chain;
pub mod checkpoint;
pub mod copy;
pub mod cosignature;
mod db;
pub mod entries_export;
mod entry_row;
pub mod error;
pub mod export;
#[cfg(test)]
mod layout;
mod lead;
mod ledger;
mod model;
mod postgres;
mod prepared;
pub mod proof;
mod read;
mod replays;
mod search;
mod sqlite;
mod store;
mod telemetry;
#[doc(hidden)]
pub mod testing;
pub mod tree;
mod write;
mod writer;

pub use chain::{ChainHasher, VerifyReport};
pub use error::{LedgerError, Result};
pub use lead::{Lead, Leader};
pub use ledger::{Ledger, OpenOptions};
pub use model::{
    check_undecided, is_secret_header, now_millis, operator_identity, operator_name, rfc3339,
    without_secret_params, Action, Approval, ApprovalEnd, ArchivedSegment, ChainHead,
    CollisionRecord, Decider, Effect, EntryDetail, EntryFilter, EntrySummary, Event, EventFilter,
    EventKind, Incident, Millis, Page, RequestRecord, ResponseRecord, Review, SeriesPoint, State,
    Stats, ALWAYS_REDACTED_HEADERS, ALWAYS_REDACTED_QUERY, ANSWER_HEADERS, MAX_RESPONSE_BODY,
    OS_USER_MARK,
};
pub use sqlite::schema_version;
pub use store::{
    Actor, Announced, ApprovalAsk, ClaimOutcome, ClaimRequest, CompleteOutcome, CompleteRequest,
    DecideRequest, EventRange, LoopNote, OwnerReport, Progress, PurgeRequest, ReconcileNote,
    Redrive, RedriveRequest, Resolution, ResolveRequest, ReviewRequest, Storage, SweepReport,
    Ticket, ToolsListed, WriterHealth,
};
pub use telemetry::register_metrics;
pub use write::RETENTION_OPERATOR;
pub use writer::{WriterCounters, MAX_BATCH};

use std::sync::Arc;

/// Whether `location` names a PostgreSQL ledger (a `postgres://` or `postgresql://` URL).
pub fn is_postgres(location: &str) -> bool {
    location.starts_with("postgres://") || location.starts_with("postgresql://")
}

/// Opens the ledger named by `location`: a `postgres://` URL, else a SQLite path.
pub fn open(location: &str, opts: OpenOptions) -> Result<Arc<dyn Storage>> {
    if is_postgres(location) {
        return Ok(Ledger::postgres(location, opts)?);
    }
    Ok(Ledger::sqlite(location, opts)?)
}
