//! What went wrong, as every surface says it: the one [`Code`] enum at the bottom of the crate
//! graph. Each error type of every crate maps each of its variants to a `Code`; the HTTP status of
//! a problem+json answer, the JSON-RPC error of an MCP route, the CLI's `error[code]` and the
//! console's `ErrorBody.code` all derive from it. The admin API's OpenAPI document lists exactly
//! [`Code::ALL`], and the console's TypeScript type is generated from this enum.

use std::borrow::Cow;

/// Declares [`Code`]: each variant with its code, its HTTP status and its title.
macro_rules! codes {
    ($($(#[$doc:meta])* $variant:ident = ($code:literal, $status:literal, $title:literal),)*) => {
        /// Every code an idemgate error carries: a problem+json answer's `code` (also the last
        /// part of its `type`), the CLI's `error[code]`, the console's `ErrorBody.code`. A public
        /// contract: codes are added, never renamed.
        #[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        pub enum Code {
            $($(#[$doc])* #[serde(rename = $code)] $variant,)*
        }

        impl Code {
            /// Every code, in the order they are declared.
            pub const ALL: &'static [Code] = &[$(Code::$variant,)*];

            /// The code as it appears in an answer.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Code::$variant => $code,)*
                }
            }

            /// The HTTP status it is answered with. The data plane answers a few of its codes
            /// with another status that its documents name (a gateway timeout is a 504 upstream
            /// error; a key held for an operator is a 409 of unknown outcome).
            pub fn status(self) -> u16 {
                match self {
                    $(Code::$variant => $status,)*
                }
            }

            /// The problem's short, human title.
            pub fn title(self) -> &'static str {
                match self {
                    $(Code::$variant => $title,)*
                }
            }
        }
    };
}

codes! {
    // The data plane: a request the proxy will not take, or cannot finish.
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
    /// A call held for approval that an operator rejected: it never runs.
    ApprovalRejected = ("approval-rejected", 403, "Approval rejected"),
    /// A call held for approval that no one decided in time: it never runs.
    ApprovalExpired = ("approval-expired", 410, "Approval expired"),
    ResolvedMeanwhile = ("resolved-meanwhile", 409, "Resolved by an operator"),
    UpstreamError = ("upstream-error", 502, "Upstream error"),
    UpstreamUnavailable = ("upstream-unavailable", 503, "Upstream unavailable"),
    /// An MCP upstream's transport refused a call with a status of its own (its answer is passed
    /// on; the JSON-RPC error the client reads carries this code).
    UpstreamRefused = ("upstream-refused", 502, "Upstream refused the call"),
    ShuttingDown = ("shutting-down", 503, "Shutting down"),
    // Who may do what on the admin surfaces.
    Unauthorized = ("unauthorized", 401, "Unauthorized"),
    Forbidden = ("forbidden", 403, "Role too low"),
    TooManyAttempts = ("too-many-attempts", 429, "Too many bad tokens"),
    OperatorMismatch = ("operator-mismatch", 400, "Operator is not the token's"),
    NotFound = ("not-found", 404, "Not found"),
    BadRequest = ("bad-request", 400, "Bad request"),
    InvalidRequest = ("invalid-request", 422, "Invalid request"),
    // The operations.
    InvalidArgument = ("invalid-argument", 400, "Invalid argument"),
    MissingOperator = ("missing-operator", 400, "Operator required"),
    MissingReason = ("missing-reason", 400, "Reason required"),
    Conflict = ("conflict", 409, "Conflict"),
    ConfirmationRequired = ("confirmation-required", 409, "Confirmation required"),
    /// An entry's route is no longer in the configuration, so its stored request has nowhere to go.
    RouteNotConfigured = ("route-not-configured", 409, "Route not configured"),
    /// An entry's stored request cannot be sent again as it is.
    StoredRequestUnusable = ("stored-request-unusable", 409, "Stored request unusable"),
    NoProbe = ("no-probe", 409, "No reconcile probe"),
    NoConfig = ("no-config", 409, "No route configuration"),
    /// The server keeps no archive: its `[retention]` sets no `archive_dir`.
    NoArchive = ("no-archive", 409, "No archive configured"),
    BadConfig = ("bad-config", 500, "Bad configuration"),
    ExportNotFound = ("export-not-found", 404, "No such export"),
    ExportRunning = ("export-running", 409, "Export still running"),
    ExportFailed = ("export-failed", 500, "Export failed"),
    TooManyExports = ("too-many-exports", 429, "Too many exports"),
    /// Long work stopped by its operator before it ended.
    Cancelled = ("cancelled", 409, "Cancelled"),
    // The ledger.
    LedgerNotFound = ("ledger-not-found", 404, "Ledger not found"),
    LedgerTooNew = ("ledger-too-new", 500, "Ledger too new"),
    ChainKeyRequired = ("chain-key-required", 500, "Chain key required"),
    ChainKeyUnexpected = ("chain-key-unexpected", 500, "Chain key unexpected"),
    EntryNotFound = ("entry-not-found", 404, "Entry not found"),
    InvalidTransition = ("invalid-transition", 409, "Invalid transition"),
    LeaseLost = ("lease-lost", 409, "Lease lost"),
    /// An approval or rejection the held call cannot take: given twice by one operator, after
    /// its window, or for another request.
    ApprovalRefused = ("approval-refused", 409, "Approval refused"),
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
    // The server and the hosts, before or around any request.
    /// The admin listener is on, and neither operators nor an admin token are configured.
    NoAdminToken = ("no-admin-token", 500, "No admin credentials"),
    /// A listener's address cannot be bound.
    Bind = ("bind", 500, "Cannot listen"),
    /// The process could not start its async runtime or its signal handlers.
    Runtime = ("runtime", 500, "Runtime failure"),
    /// The desktop console's embedded proxy could not start.
    ProxyStart = ("proxy-start", 500, "Proxy did not start"),
    /// The console in a browser could not reach the admin API, or had no problem+json back.
    Network = ("network", 502, "Admin API unreachable"),
    Internal = ("internal", 500, "Internal error"),
}

/// An MCP route's JSON-RPC `error.code` (docs/mcp.md): a call whose key is in flight.
pub const JSONRPC_IN_PROGRESS: i64 = -32080;
/// A key used before with another tool or other arguments.
pub const JSONRPC_KEY_REUSE: i64 = -32081;
/// A call whose earlier attempt may have run, held for an operator, or that ran and is not yet
/// recorded.
pub const JSONRPC_OUTCOME_UNKNOWN: i64 = -32082;
/// The ledger cannot take the claim: nothing was forwarded, the same call may be retried.
pub const JSONRPC_LEDGER_UNAVAILABLE: i64 = -32083;
/// Every other refusal: `data.type` names it.
pub const JSONRPC_REFUSED: i64 = -32084;
/// A call refused by the route's loop guard.
pub const JSONRPC_LOOP_SUSPECT: i64 = -32085;

impl Code {
    /// The code of an MCP route's JSON-RPC error for this code, and its `error.data.type`: the
    /// published numbers -32080 to -32085 (docs/mcp.md), every other refusal -32084 with the code
    /// in snake case.
    pub fn jsonrpc(self) -> (i64, Cow<'static, str>) {
        match self {
            Code::InFlight => (JSONRPC_IN_PROGRESS, "idempotency_key_in_progress".into()),
            Code::KeyReuse => (JSONRPC_KEY_REUSE, "idempotency_key_reuse".into()),
            Code::OutcomeUnknown => (JSONRPC_OUTCOME_UNKNOWN, "outcome_unknown".into()),
            Code::OutcomeUnrecorded => (JSONRPC_OUTCOME_UNKNOWN, "outcome_unrecorded".into()),
            Code::LedgerUnavailable | Code::LedgerWriterStopped | Code::LedgerClosed => {
                (JSONRPC_LEDGER_UNAVAILABLE, "ledger_unavailable".into())
            }
            Code::LoopSuspect => (JSONRPC_LOOP_SUSPECT, "loop_suspect".into()),
            other => (JSONRPC_REFUSED, other.as_str().replace('-', "_").into()),
        }
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for Code {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_code_is_one_string_an_error_status_and_its_own_json() {
        let mut seen = std::collections::BTreeSet::new();
        for &c in Code::ALL {
            assert!(seen.insert(c.as_str()), "{c} twice");
            assert!((400..600).contains(&c.status()), "{c}: {}", c.status());
            assert!(!c.title().is_empty());
            let json = serde_json::to_string(&c).expect("serialize");
            assert_eq!(json, format!("\"{c}\""));
            assert_eq!(serde_json::from_str::<Code>(&json).expect("read back"), c);
        }
    }

    #[test]
    fn the_published_json_rpc_codes_stay_where_docs_mcp_md_puts_them() {
        assert_eq!(
            Code::InFlight.jsonrpc(),
            (-32080, "idempotency_key_in_progress".into())
        );
        assert_eq!(Code::KeyReuse.jsonrpc().0, -32081);
        assert_eq!(Code::OutcomeUnknown.jsonrpc().0, -32082);
        assert_eq!(Code::OutcomeUnrecorded.jsonrpc().0, -32082);
        assert_eq!(Code::LedgerWriterStopped.jsonrpc().0, -32083);
        assert_eq!(
            Code::UpstreamUnavailable.jsonrpc(),
            (-32084, "upstream_unavailable".into())
        );
        assert_eq!(Code::LoopSuspect.jsonrpc().0, -32085);
    }
}
