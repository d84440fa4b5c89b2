use idemgate_ledger::export::Format;
use idemgate_ledger::EventRange;
use serde::Deserialize;

use super::common::Time;
use super::Answers;
use crate::jobs::exports::{ExportJob, Exported};

/// An export job to start: what, in which range, in which format.
#[cfg_attr(
    feature = "ts",
    derive(ts_rs::TS, schemars::JsonSchema),
    ts(optional_fields = nullable)
)]
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartExport {
    /// The log's events in the range (the default), or the entries created in it with their
    /// outcomes.
    #[serde(default)]
    pub what: Exported,
    /// NDJSON or CSV.
    pub format: Format,
    /// The range's start, if it has one.
    pub since: Option<Time>,
    /// The range's end, if it has one.
    pub until: Option<Time>,
}

operation! {
    /// Starts an export of the log (a time range of it) as a job.
    ///
    /// The file and its manifest are written on the server, in a private spool under
    /// `server.export_dir`; follow the job, then download them. The client never names a path on
    /// the server. At most two run at once (`429` with `Retry-After` past that).
    Op {
        name: start_export,
        role: Admin,
        kind: Ledger,
        http: POST "/admin/v1/exports",
        also: [503],
        example: r#"{"what": "events", "format": "ndjson", "since": "2026-11-01", "until": "1h"}"#,
        answers: Answers::Accepted("/admin/v1/exports/{id}"),
        server_only: true,
    }
    fn run(ops, req: StartExport, _) -> ExportJob {
        let range = EventRange {
            since: req.since.map(|t| t.0),
            until: req.until.map(|t| t.0),
        };
        ops.exports()?.start(ops, req.what, req.format, range)
    }
}
