use serde::Deserialize;

use crate::jobs::exports::ExportJob;

/// One export job, by its id.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportRef {
    /// The export's id, as `start_export` gave it.
    pub id: String,
}

operation! {
    /// An export job: its state, progress, and when done its manifest and where to download it.
    Op {
        name: export_job,
        role: Viewer,
        kind: Ledger,
        http: GET "/admin/v1/exports/{id}",
        also: [404],
        example: r#"{"id": "3f9c2a7e5b1d4c60"}"#,
        server_only: true,
    }
    fn run(ops, req: ExportRef, _) -> ExportJob {
        ops.exports()?.get(&req.id)
    }
}
