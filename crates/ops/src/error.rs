use idemgate_ledger::LedgerError;
use thiserror::Error;

/// Errors of the operations API. [`OpsError::code`] is stable: the CLI prints it, the admin API puts
/// it in problem+json `type`, the console switches on it.
#[derive(Debug, Error)]
pub enum OpsError {
    #[error("invalid {field}: {message}")]
    Invalid { field: String, message: String },
    #[error("an operator name is required (--operator, or set it in the console's settings)")]
    MissingOperator,
    #[error("a reason is required (--reason): every operator action is logged with one")]
    MissingReason,
    #[error("{0}")]
    Conflict(String),
    #[error("this touches {} (keys: {}); confirm it explicitly", touched(.0.len()), first_keys(.0))]
    ConfirmationRequired(Vec<String>),
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
    pub fn invalid(field: &str, message: &str) -> OpsError {
        OpsError::Invalid {
            field: field.to_owned(),
            message: message.to_owned(),
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            OpsError::Invalid { .. } => "invalid-argument",
            OpsError::MissingOperator => "missing-operator",
            OpsError::MissingReason => "missing-reason",
            OpsError::Conflict(_) => "conflict",
            OpsError::ConfirmationRequired(_) => "confirmation-required",
            OpsError::Ledger(e) => e.code(),
        }
    }

    /// The HTTP status the admin API answers with.
    pub fn http_status(&self) -> u16 {
        match self {
            OpsError::Invalid { .. } | OpsError::MissingOperator | OpsError::MissingReason => 400,
            OpsError::Conflict(_) | OpsError::ConfirmationRequired(_) => 409,
            OpsError::Ledger(e) => match e {
                LedgerError::EntryNotFound(_) | LedgerError::NotFound(_) => 404,
                LedgerError::InvalidTransition { .. } | LedgerError::LeaseLost(_) => 409,
                LedgerError::MissingActor | LedgerError::BadExport(_) => 400,
                LedgerError::Unavailable(_) | LedgerError::Closed => 503,
                _ => 500,
            },
        }
    }
}

/// An error as the console and other clients receive it: the stable code and the message.
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ErrorBody {
    pub code: String,
    pub message: String,
}

impl From<&OpsError> for ErrorBody {
    fn from(e: &OpsError) -> ErrorBody {
        ErrorBody {
            code: e.code().to_owned(),
            message: e.to_string(),
        }
    }
}

impl From<std::io::Error> for OpsError {
    fn from(e: std::io::Error) -> Self {
        OpsError::Ledger(LedgerError::Io(e))
    }
}
