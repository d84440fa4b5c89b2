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
        example: concat!(
            r#"{"manifest_version": 1, "format": "ndjson", "alg": "sha256", "#,
            r#""file": "idemgate-export-2027-01.ndjson", "#,
            r#""sha256": "9f2c4d8e3b1a7f6e5d4c3b2a1f0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e", "#,
            r#""bytes": 3061980, "count": 5822, "first_seq": 1, "last_seq": 5822, "#,
            r#""first_prev_hash": "0000000000000000000000000000000000000000000000000000000000000000", "#,
            r#""chain_head": {"seq": 5822, "#,
            r#""hash": "1a04f4cb7608e28b721ffa86b199d04b1f18f2bce09e617eebbf80f75c4cbcd7"}, "#,
            r#""ledger_head": {"seq": 5822, "#,
            r#""hash": "1a04f4cb7608e28b721ffa86b199d04b1f18f2bce09e617eebbf80f75c4cbcd7"}, "#,
            r#""since": null, "until": null, "created_at": "2027-02-01T00:00:00Z", "#,
            r#""ledger": "/var/lib/idemgate/ledger.db"}"#
        ),
    }
    fn run(ops, req: Manifest, cx) -> AgainstReport {
        let r = ops.verify_against_manifest(&req, cx.progress)?;
        super::verify_ledger::stopped(&r.chain);
        Ok(r)
    }
}
