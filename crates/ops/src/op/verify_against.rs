use crate::op::common::PathArg;
use crate::AgainstReport;

operation! {
    /// Verifies the chain, and that the ledger still holds the heads an export's manifest (a
    /// file of this host) recorded.
    ///
    /// A cut-off tail of the log or a rewritten history shows as a missing head.
    Op {
        name: verify_against,
        role: Admin,
        kind: Job,
        example: r#"{"path": "/srv/audit/2027-01.ndjson.manifest.json"}"#,
    }
    fn run(ops, req: PathArg, cx) -> AgainstReport {
        let r = ops.verify_against(std::path::Path::new(&req.path), cx.progress)?;
        super::verify_ledger::stopped(&r.chain);
        Ok(r)
    }
}
