//! The idemgate ledger.
//!
//! An *entry* per `(route, scope, key)` with a state machine (PENDING → COMPLETED | RELEASED |
//! FAILED), and an append-only, hash-chained *log* of everything that happened to entries. The
//! [`Storage`] trait is the crate's one door; [`SqliteLedger`] implements it (PostgreSQL is next).
//! Nothing outside this crate writes SQL.

pub mod canon;
pub mod chain;
pub mod error;
pub mod export;
pub mod model;
mod sqlite;
pub mod store;

pub use chain::{ChainHasher, VerifyReport};
pub use error::{LedgerError, Result};
pub use model::*;
pub use sqlite::{schema_version, OpenOptions, SqliteLedger, WriterCounters, MAX_BATCH};
pub use store::*;

use std::sync::Arc;

/// Opens the ledger named by `location` (a SQLite path; `postgres://` URLs are not supported yet).
pub fn open(location: &str, opts: OpenOptions) -> Result<Arc<dyn Storage>> {
    if location.starts_with("postgres://") || location.starts_with("postgresql://") {
        return Err(LedgerError::Unsupported(
            "PostgreSQL ledgers are not implemented yet".into(),
        ));
    }
    Ok(SqliteLedger::open(location, opts)?)
}
