use idemgate_ledger::entries_export::EntriesManifest;

use crate::ExportCmd;

operation! {
    /// Exports the entries created in a range, with their outcomes, to a file of this host.
    ///
    /// Each entry's state, subjects, status, the stored response's digest and its resolution;
    /// `null` when cancelled.
    Op {
        name: export_entries,
        role: Admin,
        kind: Job,
        example: concat!(
            r#"{"format": "csv", "range": {"since": 1798761600000, "until": null}, "#,
            r#""path": "/srv/audit/entries-2027-01.csv", "overwrite": false}"#
        ),
    }
    fn run(ops, req: ExportCmd, cx) -> Option<EntriesManifest> {
        ops.export_entries(&req, cx.progress)
    }
}
