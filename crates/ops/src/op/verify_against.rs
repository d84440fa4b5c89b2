use crate::op::common::{public_key, KeyedPathArg};
use crate::AgainstReport;

operation! {
    /// Verifies the chain, and that the ledger still holds the heads an export's manifest (a
    /// file of this host) recorded.
    ///
    /// A cut-off tail of the log or a rewritten history shows as a missing head; with a public
    /// key, the manifest's signed checkpoint must verify and name a head the ledger holds.
    Op {
        name: verify_against,
        role: Admin,
        kind: Job,
        example: r#"{"path": "/srv/audit/2027-01.ndjson.manifest.json"}"#,
    }
    fn run(ops, req: KeyedPathArg, cx) -> AgainstReport {
        let path = std::path::Path::new(&req.path);
        let r = match public_key(req.public_key.as_deref())? {
            Some(key) => ops.verify_extends(path, &key, cx.progress)?,
            None => ops.verify_against(path, cx.progress)?,
        };
        super::verify_ledger::stopped(&r.chain);
        Ok(r)
    }
}
