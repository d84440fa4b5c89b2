use serde::Deserialize;

use crate::proofs::TreeExtension;

/// An older checkpoint of the log's tree.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointArg {
    /// A checkpoint this log's key signed (a signed note), or a proof file or an export's
    /// manifest that carries one.
    pub checkpoint: String,
}

operation! {
    /// The proof, for an auditor, that the log's tree now extends an older signed one.
    ///
    /// A C2SP consistency proof from the older checkpoint's size to a checkpoint of the tree
    /// now, signed with the server's key, as a tlog-witness `add-checkpoint` body. `idemgate
    /// verify --consistency OLD --to NEW --public-key KEY` checks it with nothing else. Refused
    /// when the log's tree of the older size is not the one signed.
    Op {
        name: prove_consistency,
        role: Viewer,
        kind: Ledger,
        http: POST "/admin/v1/proofs/consistency",
        example: r#"{"checkpoint": "log.example/idemgate\n1000\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n\n— log.example/idemgate AAAA\n"}"#,
    }
    fn run(ops, req: CheckpointArg, _) -> TreeExtension {
        ops.prove_extension(&req.checkpoint)
    }
}
