//! The ledger's errors. Each has a stable code used at the boundaries (CLI, admin API, console).

pub use idemgate_code::Code;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum LedgerError {
    #[error("no ledger at {0} (create one with `idemgate demo` or `idemgate serve`)")]
    NotFound(String),
    #[error("the ledger's schema version {found} is newer than this binary supports ({supported}); upgrade idemgate")]
    TooNew { found: i64, supported: i64 },
    #[error("the ledger's log is keyed (HMAC-SHA256); set IDEMGATE_CHAIN_KEY or IDEMGATE_CHAIN_KEY_FILE to write to it")]
    ChainKeyRequired,
    #[error("the ledger's log is not keyed, but a chain key was given; unset IDEMGATE_CHAIN_KEY to use it")]
    ChainKeyUnexpected,
    #[error("entry {0} not found")]
    EntryNotFound(i64),
    #[error("entry {id} is {state}; {action} needs {needed}")]
    InvalidTransition {
        id: i64,
        state: String,
        action: &'static str,
        needed: &'static str,
    },
    /// An approval or rejection the held entry cannot take (given twice, too late, for another
    /// request).
    #[error("{0}")]
    ApprovalRefused(String),
    /// A periodic checkpoint of a head at or before the last one's (another instance signed it
    /// meanwhile).
    #[error("the log already holds a checkpoint of its head at seq {signed}; one of seq {seq} signs nothing new")]
    AlreadySigned { seq: i64, signed: i64 },
    /// A tree step computed from a size the tree no longer has (another integrator added
    /// those leaves meanwhile).
    #[error("the log's tree has {found} leaves, not the {expected} this step was computed from")]
    TreeMoved { expected: u64, found: u64 },
    #[error("event {0} is not in the log's tree (not logged, archived before the tree began, or not yet integrated)")]
    NotInTree(i64),
    #[error("entry {0}'s lease is held by another owner")]
    LeaseLost(i64),
    #[error("{0} already holds a ledger; copy into a new, empty one")]
    NotEmpty(String),
    #[error("unsupported: {0}")]
    Unsupported(String),
    #[error("operator actions need a non-empty operator name and reason")]
    MissingActor,
    #[error("the ledger is unavailable right now: {0}")]
    Unavailable(String),
    #[error("the ledger is closed")]
    Closed,
    #[error("database error: {0}")]
    Db(#[from] rusqlite::Error),
    #[error("database error: {}", pg_message(.0))]
    Pg(#[from] tokio_postgres::Error),
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    #[error("corrupt data in the ledger: {0}")]
    Corrupt(String),
    #[error("bad export: {0}")]
    BadExport(String),
    /// A bug: a write panicked. Its job was rolled back alone, and the writer goes on.
    #[error("internal error in the ledger: {0}")]
    Internal(String),
}

impl LedgerError {
    /// Whether the database server itself refused a statement (so the transaction it was in did
    /// not commit), rather than the connection failing on the way (which may leave a commit
    /// unknown).
    pub(crate) fn refused_by_server(&self) -> bool {
        match self {
            LedgerError::Pg(e) => e.as_db_error().is_some(),
            _ => false,
        }
    }

    /// Whether PostgreSQL refused a statement to break a deadlock or a serialization conflict
    /// between transactions: the other went on, and the same work run again can succeed.
    pub(crate) fn transient(&self) -> bool {
        use tokio_postgres::error::SqlState;
        match self {
            LedgerError::Pg(e) => matches!(
                e.code(),
                Some(c) if *c == SqlState::T_R_DEADLOCK_DETECTED
                    || *c == SqlState::T_R_SERIALIZATION_FAILURE
            ),
            _ => false,
        }
    }

    /// Its code: the CLI's `error[code]`, the admin API's problem code and status.
    pub fn code(&self) -> Code {
        match self {
            LedgerError::NotFound(_) => Code::LedgerNotFound,
            LedgerError::TooNew { .. } => Code::LedgerTooNew,
            LedgerError::ChainKeyRequired => Code::ChainKeyRequired,
            LedgerError::ChainKeyUnexpected => Code::ChainKeyUnexpected,
            LedgerError::EntryNotFound(_) => Code::EntryNotFound,
            LedgerError::InvalidTransition { .. } => Code::InvalidTransition,
            LedgerError::LeaseLost(_) => Code::LeaseLost,
            LedgerError::ApprovalRefused(_) => Code::ApprovalRefused,
            LedgerError::AlreadySigned { .. } | LedgerError::TreeMoved { .. } => Code::Conflict,
            LedgerError::NotInTree(_) => Code::NotFound,
            LedgerError::NotEmpty(_) => Code::LedgerNotEmpty,
            LedgerError::Unsupported(_) => Code::Unsupported,
            LedgerError::MissingActor => Code::MissingActor,
            LedgerError::Unavailable(_) => Code::LedgerUnavailable,
            LedgerError::Closed => Code::LedgerClosed,
            LedgerError::Db(_) | LedgerError::Pg(_) => Code::Database,
            LedgerError::Io(_) => Code::Io,
            LedgerError::Corrupt(_) => Code::Corrupt,
            LedgerError::BadExport(_) => Code::BadExport,
            LedgerError::Internal(_) => Code::Internal,
        }
    }

    /// Whether the write that failed with this may succeed if tried again later: the ledger could
    /// not take it (a failed commit, a lost connection, a full disk, a busy database), as opposed to
    /// a decision on the write itself (the entry is in another state, its lease is another's), bad
    /// input, or a bug.
    pub fn is_transient(&self) -> bool {
        match self {
            LedgerError::Unavailable(_) | LedgerError::Io(_) => true,
            LedgerError::Db(rusqlite::Error::SqliteFailure(f, _)) => matches!(
                f.code,
                rusqlite::ErrorCode::DiskFull
                    | rusqlite::ErrorCode::SystemIoFailure
                    | rusqlite::ErrorCode::DatabaseBusy
                    | rusqlite::ErrorCode::DatabaseLocked
                    | rusqlite::ErrorCode::CannotOpen
            ),
            // No connection, or the server ended it (shutdown, restart: class 57P), could not
            // make one (08), or ran out of resources (53).
            LedgerError::Pg(p) => {
                p.is_closed()
                    || p.as_db_error().is_none_or(|d| {
                        let code = d.code().code();
                        ["08", "53", "57P"].iter().any(|c| code.starts_with(c))
                    })
            }
            _ => false,
        }
    }
}

/// A PostgreSQL error with the server's message, when there is one (the driver's own `Display`
/// says only "db error").
/// What PostgreSQL said, or what failed on the way to it, with its cause ("error connecting to
/// server: Connection refused (os error 111)", not only "error connecting to server").
pub(crate) fn pg_message(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{}: {}", db.severity(), db.message());
    }
    let mut said = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        said.push_str(": ");
        said.push_str(&c.to_string());
        cause = c.source();
    }
    said
}

pub type Result<T, E = LedgerError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    fn sqlite(code: std::ffi::c_int) -> LedgerError {
        LedgerError::Db(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(code),
            None,
        ))
    }

    #[test]
    fn an_outage_is_transient_and_a_decision_or_a_bug_is_not() {
        for e in [
            LedgerError::Unavailable("commit failed: database or disk is full".into()),
            LedgerError::Io(std::io::Error::other("EFBIG")),
            sqlite(rusqlite::ffi::SQLITE_FULL),
            sqlite(rusqlite::ffi::SQLITE_IOERR_WRITE),
            sqlite(rusqlite::ffi::SQLITE_BUSY),
        ] {
            assert!(e.is_transient(), "{e}");
        }
        for e in [
            LedgerError::LeaseLost(1),
            LedgerError::InvalidTransition {
                id: 1,
                state: "completed".into(),
                action: "release",
                needed: "pending",
            },
            LedgerError::EntryNotFound(1),
            LedgerError::Closed,
            LedgerError::Internal("a write panicked".into()),
            LedgerError::Corrupt("bad row".into()),
            sqlite(rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE),
        ] {
            assert!(!e.is_transient(), "{e}");
        }
    }
}
