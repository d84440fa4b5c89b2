use serde::Deserialize;

use crate::{BulkKind, BulkTarget, Preview, ResolveAs};

/// A bulk action to preview.
#[cfg_attr(
    feature = "ts",
    derive(ts_rs::TS, schemars::JsonSchema),
    ts(optional_fields = nullable)
)]
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BulkPreviewRequest {
    /// What would run on each entry.
    pub action: BulkKind,
    /// A resolve's outcome, when it is known: a release takes fewer entries than a resolve.
    #[serde(rename = "as", default)]
    pub as_: Option<ResolveAs>,
    /// Which entries.
    pub target: BulkTarget,
}

operation! {
    /// What a bulk action would touch.
    ///
    /// The exact count and keys, the entries the action would refuse as they stand (and why),
    /// and whether any is on a destructive route. The action itself takes the entries that match
    /// when it runs.
    Op {
        name: preview_bulk,
        role: Operator,
        kind: Ledger,
        http: POST "/admin/v1/bulk/preview",
        example: r#"{"action": "replay", "target": {"filter": {"stuck": true}, "ids": null}}"#,
    }
    fn run(ops, req: BulkPreviewRequest, cx) -> Preview {
        ops.preview_bulk(req.action, req.as_, &req.target, cx.host)
    }
}
