use idemgate_ledger::ChainHead;

use crate::op::common::NoArgs;

operation! {
    /// The log's head: its last event's sequence number and chain hash.
    ///
    /// What an auditor notes to check later that the log still holds it and has only grown
    /// from it (`verify --against` a manifest that recorded it). `null` while the log is
    /// empty.
    Op {
        name: head,
        role: Viewer,
        kind: Ledger,
        http: GET "/admin/v1/head",
        example: r#"{}"#,
    }
    fn run(ops, _req: NoArgs, _) -> Option<ChainHead> {
        Ok(ops.store().head()?)
    }
}

#[cfg(test)]
mod tests {
    use crate::dispatch::{run, Args, Host};
    use crate::{seed_demo, DemoOptions, Ops};

    #[test]
    fn the_head_is_the_last_event_of_the_log() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ops = Ops::open_or_create(&dir.path().join("l.db").display().to_string())
            .expect("ledger");
        let head = || run(&ops, Host::none(), "head", Args::default(), &mut |_| true).expect("head");
        assert_eq!(head(), serde_json::Value::Null, "an empty log has no head");
        seed_demo(ops.store().as_ref(), DemoOptions { events: 200, seed: 7 }).expect("demo");
        let last = ops
            .log(&idemgate_ledger::EventFilter::default(), None, 1)
            .expect("log")
            .events[0]
            .clone();
        assert_eq!(head(), serde_json::json!({ "seq": last.seq, "hash": last.hash }));
    }
}
