use serde::Deserialize;

use crate::{Preview, ResolveAs};

/// A resolve of one entry to preview.
#[cfg_attr(
    feature = "ts",
    derive(ts_rs::TS, schemars::JsonSchema),
    ts(optional_fields = nullable)
)]
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResolvePreviewRequest {
    /// The entry's id.
    pub entry_id: i64,
    /// The resolve's outcome, when it is known: an entry released already is not released again.
    #[serde(rename = "as", default)]
    pub as_: Option<ResolveAs>,
}

operation! {
    /// What resolving an entry would touch.
    ///
    /// The entry, whether it may be resolved (as `as` says, when given), and whether its route
    /// is destructive (a resolve then needs `confirm_destructive`).
    Op {
        name: preview_resolve,
        role: Operator,
        kind: Ledger,
        http: GET "/admin/v1/entries/{entry_id}/resolve/preview",
        example: r#"{"entry_id": 42, "as": "released"}"#,
    }
    fn run(ops, req: ResolvePreviewRequest, _) -> Preview {
        ops.preview_resolve(req.entry_id, req.as_)
    }
}
