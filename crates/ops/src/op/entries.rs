use idemgate_ledger::{EntryFilter, State};
use serde::Deserialize;

use crate::EntryPage;

/// Which entries, and which page of them: every filter narrows.
#[cfg_attr(
    feature = "ts",
    derive(ts_rs::TS, schemars::JsonSchema),
    ts(optional_fields = nullable)
)]
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntriesRequest {
    /// Entries in this state.
    pub state: Option<State>,
    /// Pending past their lease: the proxy will not answer them.
    pub stuck: Option<bool>,
    /// Keys reused with a different request.
    pub collisions: Option<bool>,
    /// Past their retention, awaiting purge.
    pub expired: Option<bool>,
    /// Expiring within this many milliseconds from now (and not yet expired).
    pub expiring_within_ms: Option<i64>,
    /// Suspected duplicates of an earlier call.
    pub duplicates: Option<bool>,
    /// Of this route.
    pub route: Option<String>,
    /// Of this scope (a tenant, an agent).
    pub scope: Option<String>,
    /// With this idempotency key.
    pub key: Option<String>,
    /// Of this MCP tool.
    pub tool: Option<String>,
    /// With this subject: `name=value`, or a value under any name.
    pub subject: Option<String>,
    /// Whose key, or a subject's value, is this.
    pub search: Option<String>,
    /// Older than this entry id (the previous page's `next_before`).
    pub before: Option<i64>,
    /// At most this many (100 when left out; at most 10,000).
    pub limit: Option<usize>,
}

impl EntriesRequest {
    /// The ledger's filter this request names.
    pub fn filter(&self) -> EntryFilter {
        EntryFilter {
            state: self.state,
            stuck: self.stuck.unwrap_or(false),
            collisions: self.collisions.unwrap_or(false),
            expired: self.expired.unwrap_or(false),
            expiring_within: self.expiring_within_ms,
            duplicates: self.duplicates.unwrap_or(false),
            route: self.route.clone(),
            scope: self.scope.clone(),
            key: self.key.clone(),
            tool: self.tool.clone(),
            subject: self.subject.clone(),
            search: self.search.clone(),
        }
    }
}

operation! {
    /// A page of entries, newest first.
    ///
    /// Each entry as the lists show it: its key, state, route, subjects and times. The next
    /// page starts below the answer's `next_before`.
    Op {
        name: entries,
        role: Viewer,
        kind: Ledger,
        http: GET "/admin/v1/entries",
    }
    fn run(ops, req: EntriesRequest, _) -> EntryPage {
        ops.entries(&req.filter(), req.before, req.limit.unwrap_or(100))
    }
}
