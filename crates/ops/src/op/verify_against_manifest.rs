use idemgate_ledger::export::Manifest;

use crate::AgainstReport;

operation! {
    /// Verifies the chain, and that the ledger still holds the heads a manifest recorded.
    ///
    /// The request is the manifest as an export wrote it (the CLI's or the admin API's). A
    /// cut-off tail of the log or a rewritten history shows as a missing head.
    Op {
        name: verify_against_manifest,
        role: Admin,
        kind: Job,
        http: POST "/admin/v1/verify/against",
    }
    fn run(ops, req: Manifest, cx) -> AgainstReport {
        let r = ops.verify_against_manifest(&req, cx.progress)?;
        super::verify_ledger::stopped(&r.chain);
        Ok(r)
    }
}
