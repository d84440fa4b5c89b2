use crate::op::common::EntryRef;
use crate::EntryView;

operation! {
    /// One entry with its whole history.
    ///
    /// Its request and response as the ledger keeps them, its events in order, the
    /// differences between the requests that reused its key, and each operator action with
    /// why it would be refused: the entry's state, or what its route lacks for a replay or a
    /// reconcile.
    Op {
        name: show,
        role: Viewer,
        kind: Ledger,
        http: GET "/admin/v1/entries/{entry_id}",
        example: r#"{"entry_id": 42}"#,
    }
    fn run(ops, req: EntryRef, cx) -> EntryView {
        ops.show(req.entry_id, cx.host)
    }
}
