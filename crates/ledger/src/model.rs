//! The ledger's vocabulary: entries, their states, events, filters and pages.
//!
//! Times are milliseconds since the Unix epoch (UTC) everywhere inside the ledger; the edges (CLI,
//! admin API, console) render them as RFC 3339.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

mod action;
mod approval;
mod audit;
pub mod headline;
pub use action::Action;
pub use approval::{
    check_undecided, operator_identity, operator_name, Approval, ApprovalEnd, Decider, OS_USER_MARK,
};
pub use audit::{EntryRow, SignedCheckpoint, TreeBatch, TreeState};

/// Milliseconds since the Unix epoch, UTC.
pub type Millis = i64;

/// The current wall-clock time in milliseconds.
pub fn now_millis() -> Millis {
    chrono::Utc::now().timestamp_millis()
}

/// Renders a millisecond timestamp as RFC 3339 (UTC, millisecond precision).
pub fn rfc3339(ms: Millis) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| ms.to_string())
}

/// The state of an entry. See docs/design.md, "Ledger model".
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Claimed; the upstream call is in flight or its outcome is unknown.
    Pending,
    /// An upstream (or operator-supplied) response is stored and is replayed.
    Completed,
    /// Definitely not executed; the key may run again.
    Released,
    /// Permanent failure decided by an operator (or an approval rejected or expired).
    Failed,
    /// Claimed under an approval policy: nothing is forwarded until operators approve it.
    #[serde(rename = "awaiting_approval")]
    AwaitingApproval,
}

impl State {
    pub const ALL: [State; 5] = [
        State::Pending,
        State::Completed,
        State::Released,
        State::Failed,
        State::AwaitingApproval,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Completed => "completed",
            State::Released => "released",
            State::Failed => "failed",
            State::AwaitingApproval => "awaiting_approval",
        }
    }

    pub fn parse(s: &str) -> Option<State> {
        State::ALL
            .into_iter()
            .find(|st| st.as_str().eq_ignore_ascii_case(s))
    }

    /// This state as a refusal names it: a pending entry that is not stuck is in flight.
    pub fn described(self, stuck: bool) -> String {
        if self == State::Pending && !stuck {
            "pending and in flight".into()
        } else {
            self.to_string()
        }
    }
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The side-effect tag of a route; picks retry and replay defaults.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Effect {
    Read,
    #[default]
    Write,
    Idempotent,
    Destructive,
}

impl Effect {
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::Read => "read",
            Effect::Write => "write",
            Effect::Idempotent => "idempotent",
            Effect::Destructive => "destructive",
        }
    }

    pub fn parse(s: &str) -> Option<Effect> {
        [
            Effect::Read,
            Effect::Write,
            Effect::Idempotent,
            Effect::Destructive,
        ]
        .into_iter()
        .find(|e| e.as_str() == s)
    }
}

/// A canonical request as stored: secrets are redacted before it reaches the database.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct RequestRecord {
    pub method: String,
    pub path: String,
    /// Selected headers, lower-case names, in the order received.
    pub headers: Vec<(String, String)>,
    #[serde(with = "body_serde")]
    #[cfg_attr(feature = "ts", ts(type = "string | { hex: string }"))]
    #[cfg_attr(feature = "ts", schemars(schema_with = "body_schema"))]
    pub body: Vec<u8>,
}

/// A stored response, replayed verbatim (status, selected headers, body).
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ResponseRecord {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    #[serde(with = "body_serde")]
    #[cfg_attr(feature = "ts", ts(type = "string | { hex: string }"))]
    #[cfg_attr(feature = "ts", schemars(schema_with = "body_schema"))]
    pub body: Vec<u8>,
}

/// A body's schema: as [`body_serde`] writes it.
#[cfg(feature = "ts")]
fn body_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "anyOf": [
            { "type": "string" },
            {
                "type": "object",
                "properties": { "hex": { "type": "string", "pattern": "^([0-9a-f]{2})*$" } },
                "required": ["hex"],
                "additionalProperties": false
            }
        ]
    })
}

/// Bodies serialise as a UTF-8 string when they are valid UTF-8, else as
/// `{"hex": "..."}`, so JSON output stays readable for the common case.
mod body_serde {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Text(String),
        Hex { hex: String },
    }

    pub fn serialize<S: Serializer>(body: &[u8], s: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(body) {
            Ok(t) => Repr::Text(t.to_owned()).serialize(s),
            Err(_) => Repr::Hex {
                hex: hex::encode(body),
            }
            .serialize(s),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        match Repr::deserialize(d)? {
            Repr::Text(t) => Ok(t.into_bytes()),
            Repr::Hex { hex } => hex::decode(hex).map_err(serde::de::Error::custom),
        }
    }
}

/// The largest response body the ledger keeps, an upstream's or an operator's: what a replay
/// must be able to send whole.
pub const MAX_RESPONSE_BODY: usize = 16 << 20;

/// Response headers the proxy sets itself whenever it answers, replays included: the message's
/// framing and connection handling (hop-by-hop), and idemgate's own. A stored response never
/// carries them: the proxy leaves an upstream's out, and an operator's response is refused with
/// one (replayed, a `content-length` that does not match the body breaks the answer).
pub const ANSWER_HEADERS: &[&str] = &[
    "connection",
    "content-length",
    "keep-alive",
    "proxy-authenticate",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "idempotency-key",
    "idempotent-replayed",
];

/// Header names that are never stored, whatever a caller passes in (defence in depth: the proxy
/// already drops them and any configured secret headers).
pub const ALWAYS_REDACTED_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
    "x-api-key",
    "x-idemgate-signature",
];

/// Whether a header named `name` is one of [`ALWAYS_REDACTED_HEADERS`].
pub fn is_secret_header(name: &str) -> bool {
    ALWAYS_REDACTED_HEADERS
        .iter()
        .any(|r| r.eq_ignore_ascii_case(name))
}

fn drop_secret_headers(headers: &mut Vec<(String, String)>) {
    headers.retain(|(n, _)| !is_secret_header(n));
}

/// Query parameters that are never stored, whatever a caller passes in (their names compared
/// without regard to ASCII case): credentials that some APIs take in the query. A route names
/// more with `secret_query`.
pub const ALWAYS_REDACTED_QUERY: &[&str] = &[
    "access_token",
    "api_key",
    "apikey",
    "client_secret",
    "password",
    "token",
];

/// `path_and_query` without the query parameters named in [`ALWAYS_REDACTED_QUERY`] or in `also`
/// (lower case): a request target as it may be stored, fingerprinted and logged. Borrowed when
/// nothing is left out (the common case costs no copy).
pub fn without_secret_params<'a>(path_and_query: &'a str, also: &[String]) -> Cow<'a, str> {
    let Some((path, query)) = path_and_query.split_once('?') else {
        return Cow::Borrowed(path_and_query);
    };
    let secret = |param: &&str| {
        let name = param.split_once('=').map_or(*param, |(n, _)| n);
        ALWAYS_REDACTED_QUERY
            .iter()
            .copied()
            .chain(also.iter().map(String::as_str))
            .any(|s| s.eq_ignore_ascii_case(name))
    };
    if !query.split('&').any(|p| secret(&p)) {
        return Cow::Borrowed(path_and_query);
    }
    let kept: Vec<&str> = query.split('&').filter(|p| !secret(p)).collect();
    let kept = kept.join("&");
    Cow::Owned(if kept.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{kept}")
    })
}

impl RequestRecord {
    /// Drops secret headers and query parameters; see [`ALWAYS_REDACTED_HEADERS`] and
    /// [`ALWAYS_REDACTED_QUERY`].
    pub fn redacted(mut self) -> Self {
        drop_secret_headers(&mut self.headers);
        if let Cow::Owned(path) = without_secret_params(&self.path, &[]) {
            self.path = path;
        }
        self
    }
}

/// One row of an entry list, with the stable field names of the CLI's `--json`.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EntrySummary {
    pub id: i64,
    pub route: String,
    pub scope: String,
    pub key: String,
    pub state: State,
    pub stuck: bool,
    pub fingerprint: String,
    pub attempts: i64,
    pub replays: i64,
    pub created_at: Millis,
    pub updated_at: Millis,
    pub expires_at: Option<Millis>,
    pub effect: Effect,
    pub lease_expires_at: Option<Millis>,
    pub outcome_unknown: bool,
    pub last_error: Option<String>,
    pub collisions: i64,
    /// The earlier entry this one probably duplicates (same route, scope and fingerprint).
    pub duplicate_of: Option<i64>,
    pub response_status: Option<u16>,
    /// The MCP tool of a `tools/call` entry (shown as `route · tool`); `None` on HTTP routes.
    pub tool: Option<String>,
    /// The request's subjects: the route's names (`customer`, `amount`) and their values.
    pub subjects: Vec<(String, String)>,
}

/// Everything the ledger knows about one entry.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EntryDetail {
    #[serde(flatten)]
    pub summary: EntrySummary,
    pub lease_owner: Option<String>,
    pub request: Option<RequestRecord>,
    pub response: Option<ResponseRecord>,
    pub last_replay_at: Option<Millis>,
    pub completed_at: Option<Millis>,
    pub resolved_by: Option<String>,
    pub resolution_reason: Option<String>,
    pub external_ref: Option<String>,
    pub collision_requests: Vec<CollisionRecord>,
    /// The approval the call was held for, if it matched a policy.
    pub approval: Option<Approval>,
    /// The call in the business's terms, as every surface titles it: who it is about, its route
    /// and its amount ("cus_123 · refunds · 600.00 USD").
    pub headline: String,
}

/// A request rejected because its key was already bound to another fingerprint.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollisionRecord {
    pub id: i64,
    pub entry_id: i64,
    pub at: Millis,
    pub fingerprint: String,
    pub request: RequestRecord,
}

/// Kinds of log events. Stored as their snake-case names.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    Claim,
    Attempt,
    Complete,
    OutcomeUnknown,
    Release,
    Collision,
    DuplicateSuspect,
    LeaseExpired,
    Expired,
    Resolve,
    Replay,
    Reconcile,
    Purge,
    /// An operator marked an incident reviewed.
    Review,
    /// An operator withdrew an incident's review: it is open again.
    Reopen,
    /// The proxy's loop guard counted more calls of one request than it allows.
    LoopSuspect,
    /// A range of the log was sealed in an archive segment; the events up to it may leave the
    /// live ledger.
    Archive,
    /// The chain's head was signed (a signed checkpoint).
    Checkpoint,
    /// The retention policy ran: what it purged and archived.
    Retention,
    /// A call matched an approval policy: it is held, unforwarded, until operators decide.
    ApprovalRequested,
    /// An operator approved a held call (the last approval needed releases it).
    Approved,
    /// An operator rejected a held call: it never runs.
    Rejected,
    /// A held call's approval window passed without a decision: it never runs.
    ApprovalExpired,
}

impl EventKind {
    pub const ALL: [EventKind; 23] = [
        EventKind::Claim,
        EventKind::Attempt,
        EventKind::Complete,
        EventKind::OutcomeUnknown,
        EventKind::Release,
        EventKind::Collision,
        EventKind::DuplicateSuspect,
        EventKind::LeaseExpired,
        EventKind::Expired,
        EventKind::Resolve,
        EventKind::Replay,
        EventKind::Reconcile,
        EventKind::Purge,
        EventKind::Review,
        EventKind::Reopen,
        EventKind::LoopSuspect,
        EventKind::Archive,
        EventKind::Checkpoint,
        EventKind::Retention,
        EventKind::ApprovalRequested,
        EventKind::Approved,
        EventKind::Rejected,
        EventKind::ApprovalExpired,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Claim => "claim",
            EventKind::Attempt => "attempt",
            EventKind::Complete => "complete",
            EventKind::OutcomeUnknown => "outcome_unknown",
            EventKind::Release => "release",
            EventKind::Collision => "collision",
            EventKind::DuplicateSuspect => "duplicate_suspect",
            EventKind::LeaseExpired => "lease_expired",
            EventKind::Expired => "expired",
            EventKind::Resolve => "resolve",
            EventKind::Replay => "replay",
            EventKind::Reconcile => "reconcile",
            EventKind::Purge => "purge",
            EventKind::Review => "review",
            EventKind::Reopen => "reopen",
            EventKind::LoopSuspect => "loop_suspect",
            EventKind::Archive => "archive",
            EventKind::Checkpoint => "checkpoint",
            EventKind::Retention => "retention",
            EventKind::ApprovalRequested => "approval_requested",
            EventKind::Approved => "approved",
            EventKind::Rejected => "rejected",
            EventKind::ApprovalExpired => "approval_expired",
        }
    }

    pub fn parse(s: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// A sealed archive segment the ledger recorded: events `first_seq..=seq` may leave the live log
/// once this row is written, and `seq` with `hash` is where the live log's chain resumes.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchivedSegment {
    pub first_seq: i64,
    /// The segment's last event.
    pub seq: i64,
    /// The hash of its last event.
    pub hash: String,
    pub count: i64,
    /// The segment's file name in the archive directory.
    pub file: String,
    /// The file's sha256, hex.
    pub sha256: String,
    pub bytes: i64,
    /// When it was recorded.
    pub at: Millis,
}

/// One event of the append-only log. `hash` chains it to the event before it.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub seq: i64,
    pub at: Millis,
    pub kind: String,
    pub entry_id: Option<i64>,
    pub route: String,
    pub scope: String,
    pub key: String,
    pub operator: Option<String>,
    pub reason: Option<String>,
    /// A small JSON object, stored and hashed as the exact string.
    pub detail: String,
    /// sha256 of the payload (request or response body) this event is about, if any. The payload
    /// itself lives in the entry and may be purged; the digest keeps the chain verifiable.
    pub payload_digest: Option<String>,
    pub prev_hash: String,
    pub hash: String,
}

/// Filters for entry lists; all conditions must hold.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntryFilter {
    pub state: Option<State>,
    #[serde(default)]
    pub stuck: bool,
    #[serde(default)]
    pub collisions: bool,
    #[serde(default)]
    pub expired: bool,
    /// Expiring within this many milliseconds from now (and not yet expired).
    pub expiring_within: Option<i64>,
    #[serde(default)]
    pub duplicates: bool,
    pub route: Option<String>,
    pub scope: Option<String>,
    pub key: Option<String>,
    /// Entries of this MCP tool.
    pub tool: Option<String>,
    /// Entries with this subject: `name=value`, or a value under any name.
    pub subject: Option<String>,
    /// Entries whose key, or a subject's value, is this (the console's search box).
    pub search: Option<String>,
}

/// Filters for the log.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventFilter {
    pub entry_id: Option<i64>,
    pub route: Option<String>,
    pub scope: Option<String>,
    pub key: Option<String>,
    pub kind: Option<String>,
    pub operator: Option<String>,
    pub since: Option<Millis>,
    pub until: Option<Millis>,
    /// Substring search over key, route, scope, reason and detail.
    pub search: Option<String>,
}

/// Keyset paging: newest first, continuing strictly below `before` when given; or, for entries,
/// oldest first (`oldest_first`), continuing strictly above `after`. The log and incidents are
/// read newest first only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page {
    pub before: Option<i64>,
    pub limit: usize,
    #[serde(default)]
    pub after: Option<i64>,
    #[serde(default)]
    pub oldest_first: bool,
}

impl Default for Page {
    fn default() -> Self {
        Page {
            before: None,
            limit: 100,
            after: None,
            oldest_first: false,
        }
    }
}

impl Page {
    /// Newest first, below `before`.
    pub fn newest(before: Option<i64>, limit: usize) -> Page {
        Page {
            before,
            limit,
            ..Page::default()
        }
    }
}

/// The chain head: the last sequence number and its hash.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainHead {
    pub seq: i64,
    pub hash: String,
}

/// Counts for the overview. Cheap to compute: each is an indexed lookup or a maintained counter.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub entries_by_state: Vec<(State, i64)>,
    pub stuck: i64,
    pub collisions: i64,
    pub expired: i64,
    pub duplicate_suspects: i64,
    pub events_by_kind: Vec<(String, i64)>,
    pub head: Option<ChainHead>,
    /// Hourly buckets (start of hour in ms) → counts by event kind.
    pub series: Vec<SeriesPoint>,
}

#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeriesPoint {
    pub hour: Millis,
    pub kind: String,
    pub count: i64,
}

/// A group of entries that probably performed the same customer-facing effect under several keys.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Incident {
    /// The incident's first entry: the one the others duplicate.
    pub id: i64,
    pub route: String,
    pub scope: String,
    pub fingerprint: String,
    /// The first entry's subjects (its oldest suspect's, when it was purged).
    pub subjects: Vec<(String, String)>,
    /// The first entry was purged: `entries` holds its suspects only, which still happened.
    pub first_purged: bool,
    /// The first entry and its duplicate suspects, oldest first.
    pub entries: Vec<EntrySummary>,
    /// An operator's review, if the incident had one.
    pub review: Option<Review>,
    /// Not reviewed, or a suspect came after the review.
    pub open: bool,
    /// The incident in the business's terms, as every surface titles it ("cus_123 · charges ·
    /// 2 × 49.99 USD · agents billing-01, billing-02 · 14 s apart").
    pub title: String,
}

/// An operator's review of an incident.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Review {
    pub operator: String,
    pub reason: String,
    pub at: Millis,
    /// The newest entry the incident had when reviewed.
    pub through: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_query_parameters_are_left_out_and_the_rest_kept_in_order() {
        let kept = |t: &str, also: &[&str]| {
            let also: Vec<String> = also.iter().map(|s| (*s).to_owned()).collect();
            without_secret_params(t, &also).into_owned()
        };
        assert_eq!(
            kept("/v1/x?b=2&API_KEY=sk_live&a=1&token&sig=s1", &["sig"]),
            "/v1/x?b=2&a=1"
        );
        assert_eq!(kept("/v1/x?access_token=t", &[]), "/v1/x");
        assert_eq!(
            kept("/v1/x?tokens=1&my_api_key=2", &[]),
            "/v1/x?tokens=1&my_api_key=2"
        );
        assert!(matches!(
            without_secret_params("/v1/x?a=1&b=2", &[]),
            Cow::Borrowed("/v1/x?a=1&b=2")
        ));
        assert!(matches!(
            without_secret_params("/v1/token", &[]),
            Cow::Borrowed(_)
        ));
        let r = RequestRecord {
            method: "POST".into(),
            path: "/v1/x?password=hunter2&a=1".into(),
            headers: vec![("authorization".into(), "Bearer t".into())],
            body: vec![],
        }
        .redacted();
        assert_eq!((r.path.as_str(), r.headers.len()), ("/v1/x?a=1", 0));
    }
}
