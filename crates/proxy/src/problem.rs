//! RFC 9457 problem+json answers. Every error the proxy and the admin API give is one of these,
//! with a stable `code` (also the last part of `type`).

use axum::body::Body;
use axum::http::{header, HeaderName, HeaderValue, Response, StatusCode};
use serde_json::{json, Value};

/// Declares [`ProblemCode`]: each variant with its code, its usual status and its title.
macro_rules! problem_codes {
    ($($variant:ident = ($code:literal, $status:literal, $title:literal),)*) => {
        /// Every `code` an idemgate problem+json answer carries (also the last part of its `type`):
        /// the proxy's, the admin API's, and the operations' and the ledger's errors as the admin
        /// API answers them. A public contract: the admin API's OpenAPI document lists them, and a
        /// test holds the two together.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ProblemCode {
            $($variant,)*
        }

        impl ProblemCode {
            /// Every code, in the order they are declared.
            pub const ALL: &'static [ProblemCode] = &[$(ProblemCode::$variant,)*];

            /// The code as it appears in an answer.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(ProblemCode::$variant => $code,)*
                }
            }

            /// The status it is answered with, unless the problem says another
            /// ([`Problem::with_status`]).
            pub fn status(self) -> u16 {
                match self {
                    $(ProblemCode::$variant => $status,)*
                }
            }

            /// The problem's short, human title.
            pub fn title(self) -> &'static str {
                match self {
                    $(ProblemCode::$variant => $title,)*
                }
            }
        }
    };
}

problem_codes! {
    MissingKey = ("missing-key", 400, "Idempotency key required"),
    InvalidKey = ("invalid-key", 400, "Invalid idempotency key"),
    DuplicateHeader = ("duplicate-header", 400, "Repeated header"),
    MissingScope = ("missing-scope", 400, "Scope required"),
    InvalidScope = ("invalid-scope", 400, "Invalid scope"),
    InvalidPath = ("invalid-path", 400, "Invalid path"),
    InvalidBody = ("invalid-body", 400, "Invalid JSON body"),
    BadBody = ("bad-body", 400, "Unreadable body"),
    BadSignature = ("bad-signature", 401, "Invalid request signature"),
    UnknownRoute = ("unknown-route", 404, "No route"),
    MethodNotAllowed = ("method-not-allowed", 405, "Method not allowed"),
    BodyTimeout = ("body-timeout", 408, "Request body too slow"),
    BodyTooLarge = ("body-too-large", 413, "Request body too large"),
    UnsupportedEncoding = ("unsupported-encoding", 415, "Unsupported content encoding"),
    UnsupportedMediaType = ("unsupported-media-type", 415, "Unsupported media type"),
    HeadersTooLarge = ("headers-too-large", 431, "Request headers too large"),
    KeyReuse = ("key-reuse", 422, "Idempotency key reused"),
    InFlight = ("in-flight", 409, "Request in flight"),
    ProbableDuplicate = ("probable-duplicate", 409, "Probable duplicate"),
    LoopSuspect = ("loop-suspect", 429, "Loop suspected"),
    OutcomeUnknown = ("outcome-unknown", 502, "Outcome unknown"),
    OutcomeUnrecorded = ("outcome-unrecorded", 502, "Outcome not recorded"),
    EntryFailed = ("entry-failed", 409, "Marked failed"),
    ResolvedMeanwhile = ("resolved-meanwhile", 409, "Resolved by an operator"),
    UpstreamError = ("upstream-error", 502, "Upstream error"),
    UpstreamUnavailable = ("upstream-unavailable", 503, "Upstream unavailable"),
    ShuttingDown = ("shutting-down", 503, "Shutting down"),
    Unauthorized = ("unauthorized", 401, "Unauthorized"),
    Forbidden = ("forbidden", 403, "Role too low"),
    TooManyAttempts = ("too-many-attempts", 429, "Too many bad tokens"),
    OperatorMismatch = ("operator-mismatch", 400, "Operator is not the token's"),
    NotFound = ("not-found", 404, "Not found"),
    BadRequest = ("bad-request", 400, "Bad request"),
    InvalidRequest = ("invalid-request", 422, "Invalid request"),
    InvalidArgument = ("invalid-argument", 400, "Invalid argument"),
    MissingOperator = ("missing-operator", 400, "Operator required"),
    MissingReason = ("missing-reason", 400, "Reason required"),
    Conflict = ("conflict", 409, "Conflict"),
    ConfirmationRequired = ("confirmation-required", 409, "Confirmation required"),
    NoProbe = ("no-probe", 409, "No reconcile probe"),
    NoConfig = ("no-config", 409, "No route configuration"),
    BadConfig = ("bad-config", 500, "Bad configuration"),
    ExportNotFound = ("export-not-found", 404, "No such export"),
    ExportRunning = ("export-running", 409, "Export still running"),
    ExportFailed = ("export-failed", 500, "Export failed"),
    TooManyExports = ("too-many-exports", 429, "Too many exports"),
    LedgerNotFound = ("ledger-not-found", 404, "Ledger not found"),
    LedgerTooNew = ("ledger-too-new", 500, "Ledger too new"),
    ChainKeyRequired = ("chain-key-required", 500, "Chain key required"),
    ChainKeyUnexpected = ("chain-key-unexpected", 500, "Chain key unexpected"),
    EntryNotFound = ("entry-not-found", 404, "Entry not found"),
    InvalidTransition = ("invalid-transition", 409, "Invalid transition"),
    LeaseLost = ("lease-lost", 409, "Lease lost"),
    LedgerNotEmpty = ("ledger-not-empty", 500, "Ledger not empty"),
    Unsupported = ("unsupported", 500, "Unsupported"),
    MissingActor = ("missing-actor", 400, "Operator and reason required"),
    LedgerUnavailable = ("ledger-unavailable", 503, "Ledger unavailable"),
    LedgerWriterStopped = ("ledger-writer-stopped", 503, "Ledger writer stopped"),
    LedgerClosed = ("ledger-closed", 503, "Ledger closed"),
    Database = ("database", 500, "Database error"),
    Io = ("io", 500, "I/O error"),
    Corrupt = ("corrupt", 500, "Ledger corrupt"),
    BadExport = ("bad-export", 400, "Bad export"),
    Internal = ("internal", 500, "Internal error"),
}

impl ProblemCode {
    /// The code named `s`, if it is one.
    pub fn parse(s: &str) -> Option<ProblemCode> {
        ProblemCode::ALL.iter().copied().find(|c| c.as_str() == s)
    }
}

impl std::fmt::Display for ProblemCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for ProblemCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

#[derive(Debug, Clone)]
pub struct Problem {
    pub status: u16,
    pub code: ProblemCode,
    pub detail: String,
    pub retry_after: Option<u64>,
    /// One more header field the answer needs, such as `Allow` on a `405` or `Accept-Encoding`
    /// on a `415` (boxed: problems travel in `Result`s, which stay small).
    pub header: Option<Box<(HeaderName, HeaderValue)>>,
    pub extra: Value,
    /// Already counted in `idemgate_requests_total` under an outcome of its own (`not_executed`,
    /// `unknown`), so the proxy does not count it again under its code.
    pub counted: bool,
}

impl Problem {
    /// A problem with `code`'s usual status.
    pub fn new(code: ProblemCode, detail: impl Into<String>) -> Problem {
        Problem {
            status: code.status(),
            code,
            detail: detail.into(),
            retry_after: None,
            header: None,
            extra: Value::Null,
            counted: false,
        }
    }

    /// Answers with `status` in place of the code's usual one (an unknown outcome is a `504`
    /// after a timeout, a `409` for a later try).
    pub fn with_status(mut self, status: u16) -> Problem {
        self.status = status;
        self
    }

    /// Marks the problem as counted in `idemgate_requests_total` already.
    pub fn counted(mut self) -> Problem {
        self.counted = true;
        self
    }

    pub fn retry_after(mut self, secs: u64) -> Problem {
        self.retry_after = Some(secs.max(1));
        self
    }

    pub fn header(mut self, name: HeaderName, value: HeaderValue) -> Problem {
        self.header = Some(Box::new((name, value)));
        self
    }

    pub fn with(mut self, k: &str, v: impl Into<Value>) -> Problem {
        if !self.extra.is_object() {
            self.extra = json!({});
        }
        self.extra[k] = v.into();
        self
    }

    pub fn body(&self) -> Value {
        let mut v = json!({
            "type": format!("urn:idemgate:problem:{}", self.code),
            "title": self.code.title(),
            "status": self.status,
            "detail": self.detail,
            "code": self.code.as_str(),
        });
        if let Value::Object(extra) = &self.extra {
            for (k, x) in extra {
                v[k] = x.clone();
            }
        }
        v
    }

    pub fn into_response(self) -> Response<Body> {
        self.into_response_with()
    }

    /// The problem as a response with a body of type `B` (the proxy's, or axum's).
    pub fn into_response_with<B: From<bytes::Bytes>>(self) -> Response<B> {
        let body = serde_json::to_vec(&self.body()).unwrap_or_default();
        let mut r = Response::new(B::from(bytes::Bytes::from(body)));
        *r.status_mut() =
            StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Some(s) = self.retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        if let Some(h) = self.header {
            let (name, value) = *h;
            r.headers_mut().insert(name, value);
        }
        r
    }
}

impl axum::response::IntoResponse for Problem {
    fn into_response(self) -> axum::response::Response {
        Problem::into_response(self)
    }
}

/// The HTTP status for a ledger error, wherever one is answered (the proxy, the admin API).
pub fn ledger_status(e: &idemgate_ledger::LedgerError) -> u16 {
    use idemgate_ledger::LedgerError;
    match e {
        LedgerError::EntryNotFound(_) | LedgerError::NotFound(_) => 404,
        LedgerError::InvalidTransition { .. } | LedgerError::LeaseLost(_) => 409,
        LedgerError::MissingActor | LedgerError::BadExport(_) => 400,
        LedgerError::Unavailable(_) | LedgerError::Closed => 503,
        _ => 500,
    }
}

impl From<idemgate_ledger::LedgerError> for Problem {
    fn from(e: idemgate_ledger::LedgerError) -> Problem {
        Problem::new(ledger_code(&e), e.to_string()).with_status(ledger_status(&e))
    }
}

/// The problem code of a ledger error: its own code, which is one of [`ProblemCode::ALL`].
pub fn ledger_code(e: &idemgate_ledger::LedgerError) -> ProblemCode {
    ProblemCode::parse(e.code()).unwrap_or(ProblemCode::Internal)
}
