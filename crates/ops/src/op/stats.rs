use serde::Deserialize;


/// How long an hourly series the counts come with.
#[cfg_attr(
    feature = "ts",
    derive(ts_rs::TS, schemars::JsonSchema),
    ts(optional_fields = nullable)
)]
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatsRequest {
    /// The hourly series' length, in hours (0: none; at most 90 days). 24 when left out.
    pub hours: Option<u32>,
}

operation! {
    /// The ledger's counts.
    ///
    /// Entries by state, stuck and expired entries, collisions and duplicate suspects, and an
    /// hourly series of the last `hours`.
    Op {
        name: stats,
        role: Viewer,
        kind: Ledger,
        http: GET "/admin/v1/stats",
        example: r#"{"hours": 72}"#,
    }
    fn run(ops, req: StatsRequest, _) -> idemgate_ledger::Stats {
        ops.stats(req.hours.unwrap_or(24))
    }
}
