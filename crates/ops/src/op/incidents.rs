use idemgate_ledger::Incident;
use serde::Deserialize;


/// Which page of incidents.
#[cfg_attr(
    feature = "ts",
    derive(ts_rs::TS, schemars::JsonSchema),
    ts(optional_fields = nullable)
)]
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IncidentsRequest {
    /// Older than this incident (its first entry's id).
    pub before: Option<i64>,
    /// At most this many (50 when left out; at most 1,000).
    pub limit: Option<usize>,
}

operation! {
    /// Duplicate suspects grouped by the call they repeat, newest first.
    ///
    /// Each incident is its first entry (or, when it was purged, its oldest suspect's
    /// subjects), the suspects that repeat it, and an operator's review if it had one.
    Op {
        name: incidents,
        role: Viewer,
        kind: Ledger,
        http: GET "/admin/v1/incidents",
        example: r#"{"limit": 20}"#,
    }
    fn run(ops, req: IncidentsRequest, _) -> Vec<Incident> {
        ops.incidents(req.before, req.limit.unwrap_or(50))
    }
}
