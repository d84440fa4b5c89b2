use idemgate_ledger::export::Manifest;

use crate::ExportCmd;

operation! {
    /// Exports a range of the log to a file of this host, with its manifest beside it.
    ///
    /// The manifest records the ledger's chain head and, with a signing key, a signed
    /// checkpoint; `null` when cancelled. (Over the admin API an export is a job of the server,
    /// downloaded when done: `/admin/v1/exports`.)
    Op {
        name: export,
        role: Admin,
        kind: Job,
        example: concat!(
            r#"{"format": "ndjson", "range": {"since": 1798761600000, "until": null}, "#,
            r#""path": "/srv/audit/2027-01.ndjson", "overwrite": false}"#
        ),
    }
    fn run(ops, req: ExportCmd, cx) -> Option<Manifest> {
        ops.export(&req, cx.progress)
    }
}
