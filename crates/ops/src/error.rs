pub use idemgate_ledger::error::Code;
use idemgate_ledger::LedgerError;
use thiserror::Error;

/// Errors of the operations API. [`OpsError::code`] is stable: the CLI prints it, the admin API puts
/// it in problem+json `type`, the console switches on it.
#[derive(Debug, Error)]
pub enum OpsError {
    /// An argument is not valid; nothing was read or written.
    #[error("invalid {field}: {message}")]
    Invalid {
        /// The argument, as the caller names it.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// No operator name was given.
    #[error("an operator name is required (--operator, or set it in the console's settings)")]
    MissingOperator,
    /// No reason was given.
    #[error("a reason is required (--reason): every operator action is logged with one")]
    MissingReason,
    /// The entry's state does not allow the action.
    #[error("{0}")]
    Conflict(String),
    /// The action touches entries on a destructive route and was not confirmed.
    #[error("this touches {} (keys: {}); confirm it explicitly", touched(.0.len()), first_keys(.0))]
    ConfirmationRequired(Vec<String>),
    /// The entry's route is not in the configuration the action was given.
    #[error("entry {entry} belongs to route {route:?}, which this configuration does not have")]
    UnknownRoute {
        /// The entry.
        entry: i64,
        /// Its route.
        route: String,
    },
    /// A reconcile of an entry whose route has no probe.
    #[error("route {0} has no reconcile probe configured")]
    NoProbe(String),
    /// A stored request that makes no request to the route's upstream.
    #[error("{0}")]
    StoredRequest(String),
    /// The configuration is wrong for the action (a probe URL that is not a URI), or its route's
    /// credential is not where this host can read it.
    #[error("{0}")]
    BadConfig(String),
    /// A bug, or a task that could not finish.
    #[error("{0}")]
    Internal(String),
    /// Replay or reconcile without the route configuration.
    #[error("replay and reconcile send requests upstream: they need the route configuration (--config or IDEMGATE_CONFIG, or the console's embedded proxy)")]
    NoConfig,
    /// The archive of the host's own configuration was asked for, and it has none.
    #[error("no archive is configured here: `[retention] archive_dir` is not set")]
    NoArchive,
    /// A job could not be started, found or downloaded.
    #[error(transparent)]
    Job(#[from] crate::jobs::JobError),
    /// The ledger refused or failed.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

fn touched(n: usize) -> String {
    if n == 1 {
        "1 entry, on a destructive route".into()
    } else {
        format!("{n} entries, some on a destructive route")
    }
}

fn first_keys(keys: &[String]) -> String {
    let mut s = keys.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
    if keys.len() > 5 {
        s.push_str(&format!(" and {} more", keys.len() - 5));
    }
    s
}

impl OpsError {
    /// An [`OpsError::Invalid`] for `field`.
    pub fn invalid(field: &str, message: &str) -> OpsError {
        OpsError::Invalid {
            field: field.to_owned(),
            message: message.to_owned(),
        }
    }

    /// Its code: `error[code]` in the CLI, the problem's `code` and status over HTTP,
    /// `ErrorBody.code` in the console.
    pub fn code(&self) -> Code {
        match self {
            OpsError::Invalid { .. } => Code::InvalidArgument,
            OpsError::MissingOperator => Code::MissingOperator,
            OpsError::MissingReason => Code::MissingReason,
            OpsError::Conflict(_) => Code::Conflict,
            OpsError::ConfirmationRequired(_) => Code::ConfirmationRequired,
            OpsError::UnknownRoute { .. } => Code::RouteNotConfigured,
            OpsError::NoProbe(_) => Code::NoProbe,
            OpsError::StoredRequest(_) => Code::StoredRequestUnusable,
            OpsError::BadConfig(_) => Code::BadConfig,
            OpsError::Internal(_) => Code::Internal,
            OpsError::NoConfig => Code::NoConfig,
            OpsError::NoArchive => Code::NoArchive,
            OpsError::Job(e) => e.code(),
            OpsError::Ledger(e) => e.code(),
        }
    }
}

/// An error as the console and other clients receive it: the stable code and the message.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ErrorBody {
    /// The stable code.
    pub code: Code,
    /// The error, in words.
    pub message: String,
}

impl From<&OpsError> for ErrorBody {
    fn from(e: &OpsError) -> ErrorBody {
        ErrorBody {
            code: e.code(),
            message: e.to_string(),
        }
    }
}

impl From<idemgate_proxy::redrive::RedriveError> for OpsError {
    fn from(e: idemgate_proxy::redrive::RedriveError) -> Self {
        use idemgate_proxy::redrive::RedriveError;
        match e {
            RedriveError::StoredRequest(_) => OpsError::StoredRequest(e.to_string()),
            RedriveError::ProbeUrl(_) => OpsError::BadConfig(e.to_string()),
        }
    }
}

/// The admin API answers an operation's error as problem+json with its stable code (and, for a
/// job, when to ask again).
impl From<OpsError> for idemgate_proxy::problem::Problem {
    fn from(e: OpsError) -> Self {
        let p = idemgate_proxy::problem::Problem::new(e.code(), e.to_string());
        match &e {
            OpsError::Job(j) => {
                let p = p.with_status(j.status());
                match j.retry_after() {
                    Some(s) => p.retry_after(s),
                    None => p,
                }
            }
            _ => p,
        }
    }
}

impl From<std::io::Error> for OpsError {
    fn from(e: std::io::Error) -> Self {
        OpsError::Ledger(LedgerError::Io(e))
    }
}
