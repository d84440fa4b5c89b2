use idemgate_ledger::{EventFilter, EventKind};
use serde::Deserialize;

use crate::op::common::Time;
use crate::EventPage;

/// Which events, and which page of them: every filter narrows.
#[cfg_attr(
    feature = "ts",
    derive(ts_rs::TS, schemars::JsonSchema),
    ts(optional_fields = nullable)
)]
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogRequest {
    /// Of this entry.
    pub entry_id: Option<i64>,
    /// Of this route.
    pub route: Option<String>,
    /// Of this scope.
    pub scope: Option<String>,
    /// Of this key.
    pub key: Option<String>,
    /// Of this kind.
    pub kind: Option<EventKind>,
    /// Logged under this operator.
    pub operator: Option<String>,
    /// At or after this time.
    pub since: Option<Time>,
    /// Before this time.
    pub until: Option<Time>,
    /// Whose key, route, scope, reason or detail holds this text.
    pub search: Option<String>,
    /// Older than this sequence number (the previous page's `next_before`).
    pub before: Option<i64>,
    /// At most this many (100 when left out; at most 10,000).
    pub limit: Option<usize>,
}

operation! {
    /// A page of the log, newest first.
    ///
    /// Every claim, outcome, replay and operator action, each with its sequence number, its
    /// time and its chain hash.
    Op {
        name: log,
        role: Viewer,
        kind: Ledger,
        http: GET "/admin/v1/events",
        example: r#"{"kind": "resolve", "operator": "alice", "since": "7d", "limit": 100}"#,
    }
    fn run(ops, req: LogRequest, _) -> EventPage {
        let filter = EventFilter {
            entry_id: req.entry_id,
            route: req.route,
            scope: req.scope,
            key: req.key,
            kind: req.kind.map(|k| k.as_str().to_owned()),
            operator: req.operator,
            since: req.since.map(|t| t.0),
            until: req.until.map(|t| t.0),
            search: req.search,
        };
        ops.log(&filter, req.before, req.limit.unwrap_or(100))
    }
}
