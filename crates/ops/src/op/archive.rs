use idemgate_ledger::archive::ArchiveReport;

use crate::ArchiveCmd;

operation! {
    /// Seals the log's events before a time into archive segments in a directory of this host.
    ///
    /// Each segment is written, recorded by the ledger and signed when a signing key is
    /// configured, and only then are its events removed from the live log. Stopped part-way,
    /// every segment written so far is recorded and its events removed.
    Op {
        name: archive,
        role: Admin,
        kind: Job,
        example: r#"{"before": "2027-01-01", "dir": "/var/lib/idemgate/archive"}"#,
    }
    fn run(ops, req: ArchiveCmd, cx) -> ArchiveReport {
        ops.archive(&req, cx.progress)
    }
}
