use serde::Deserialize;

use crate::proofs::EventProof;

/// One event of the log, by its sequence number.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventRef {
    /// The event's sequence number.
    pub seq: i64,
}

operation! {
    /// The proof, for an auditor, that one event is in the log.
    ///
    /// A C2SP tlog-proof: the event, its Merkle inclusion path, and a checkpoint of the log's
    /// tree signed with the server's key. `idemgate verify --proof FILE --public-key KEY`
    /// checks it with nothing else.
    Op {
        name: prove,
        role: Viewer,
        kind: Ledger,
        http: GET "/admin/v1/events/{seq}/proof",
        example: r#"{"seq": 42}"#,
    }
    fn run(ops, req: EventRef, _) -> EventProof {
        ops.prove(req.seq)
    }
}
