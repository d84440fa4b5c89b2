use crate::op::common::EntryRef;
use crate::Preview;

operation! {
    /// What resolving an entry would touch.
    ///
    /// The entry, whether it may be resolved, and whether its route is destructive (a resolve
    /// then needs `confirm_destructive`).
    Op {
        name: preview_resolve,
        role: Operator,
        kind: Ledger,
        http: GET "/admin/v1/entries/{entry_id}/resolve/preview",
        example: r#"{"entry_id": 42}"#,
    }
    fn run(ops, req: EntryRef, _) -> Preview {
        ops.preview_resolve(req.entry_id)
    }
}
