use crate::op::common::EntryRef;
use crate::EntryView;

operation! {
    /// One entry with its whole history.
    ///
    /// Its request and response as the ledger keeps them, its events in order, and the
    /// differences between the requests that reused its key.
    Op {
        name: show,
        role: Viewer,
        kind: Ledger,
        http: GET "/admin/v1/entries/{entry_id}",
        example: r#"{"entry_id": 42}"#,
    }
    fn run(ops, req: EntryRef, _) -> EntryView {
        ops.show(req.entry_id)
    }
}
