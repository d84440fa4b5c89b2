use idemgate_ledger::{EntryFilter, EntrySummary, State};
use serde::Deserialize;

use crate::{EntryPage, Ops, OpsResult};

/// Which entries, and which page of them: every filter narrows.
#[cfg_attr(
    feature = "ts",
    derive(ts_rs::TS, schemars::JsonSchema),
    ts(optional_fields = nullable)
)]
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntriesRequest {
    /// Entries in this state.
    pub state: Option<State>,
    /// Pending past their lease: the proxy will not answer them.
    pub stuck: Option<bool>,
    /// Keys reused with a different request.
    pub collisions: Option<bool>,
    /// Past their retention, awaiting purge.
    pub expired: Option<bool>,
    /// Expiring within this many milliseconds from now (and not yet expired).
    pub expiring_within_ms: Option<i64>,
    /// Suspected duplicates of an earlier call.
    pub duplicates: Option<bool>,
    /// Of this route.
    pub route: Option<String>,
    /// Of this scope (a tenant, an agent).
    pub scope: Option<String>,
    /// With this idempotency key.
    pub key: Option<String>,
    /// Of this MCP tool.
    pub tool: Option<String>,
    /// With this subject: `name=value`, or a value under any name.
    pub subject: Option<String>,
    /// Whose key, or a subject's value, is this.
    pub search: Option<String>,
    /// Older than this entry id (the previous page's `next_before`).
    pub before: Option<i64>,
    /// Oldest first (by id, the order they came in) instead of newest first.
    pub oldest_first: Option<bool>,
    /// Oldest first: newer than this entry id (the previous page's `next_after`).
    pub after: Option<i64>,
    /// At most this many (100 when left out; at most 10,000).
    pub limit: Option<usize>,
}

impl From<&EntryFilter> for EntriesRequest {
    /// The first page, newest first, of the entries `f` selects.
    fn from(f: &EntryFilter) -> EntriesRequest {
        EntriesRequest {
            state: f.state,
            stuck: Some(f.stuck),
            collisions: Some(f.collisions),
            expired: Some(f.expired),
            expiring_within_ms: f.expiring_within,
            duplicates: Some(f.duplicates),
            route: f.route.clone(),
            scope: f.scope.clone(),
            key: f.key.clone(),
            tool: f.tool.clone(),
            subject: f.subject.clone(),
            search: f.search.clone(),
            ..EntriesRequest::default()
        }
    }
}

impl EntriesRequest {
    /// The ledger's filter this request names.
    pub fn filter(&self) -> EntryFilter {
        EntryFilter {
            state: self.state,
            stuck: self.stuck.unwrap_or(false),
            collisions: self.collisions.unwrap_or(false),
            expired: self.expired.unwrap_or(false),
            expiring_within: self.expiring_within_ms,
            duplicates: self.duplicates.unwrap_or(false),
            route: self.route.clone(),
            scope: self.scope.clone(),
            key: self.key.clone(),
            tool: self.tool.clone(),
            subject: self.subject.clone(),
            search: self.search.clone(),
        }
    }
}

operation! {
    /// A page of entries, newest first (or oldest first).
    ///
    /// Each entry as the lists show it: its key, state, route, subjects and times. The next
    /// page starts below the answer's `next_before` (oldest first: above its `next_after`).
    Op {
        name: entries,
        role: Viewer,
        kind: Ledger,
        http: GET "/admin/v1/entries",
        example: r#"{"stuck": true, "route": "charges", "limit": 50}"#,
    }
    fn run(ops, req: EntriesRequest, _) -> EntryPage {
        let page = idemgate_ledger::Page {
            before: req.before,
            limit: req.limit.unwrap_or(100),
            after: req.after,
            oldest_first: req.oldest_first.unwrap_or(false),
        };
        ops.entries_in_order(&req.filter(), page)
    }
}

/// Every entry `req` selects (up to `limit`), in the order it asks, through this operation a
/// page at a time: for work over all of them (a purge, a bulk action, a listing).
pub fn each(
    ops: &Ops,
    mut req: EntriesRequest,
    limit: Option<usize>,
    f: &mut dyn FnMut(&EntrySummary) -> OpsResult<()>,
) -> OpsResult<usize> {
    let mut n = 0usize;
    loop {
        let size = limit.map_or(1000, |l| (l - n).min(1000));
        if size == 0 {
            return Ok(n);
        }
        req.limit = Some(size);
        let page = super::run::<Op>(ops, req.clone(), super::Host::none(), &mut |_| true)?;
        for e in &page.entries {
            f(e)?;
        }
        n += page.entries.len();
        match (page.next_before, page.next_after) {
            (Some(b), _) => req.before = Some(b),
            (_, Some(a)) => req.after = Some(a),
            (None, None) => return Ok(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::dispatch::{run, Args, Host};
    use crate::{seed_demo, Code, DemoOptions, Ops};

    /// Entries page newest first below `before`, or oldest first above `after`; a cursor of the
    /// other order is refused rather than read as this one's.
    #[test]
    fn entries_page_either_way_and_a_mixed_cursor_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ops = Ops::open_or_create(&dir.path().join("l.db").display().to_string())
            .expect("ledger");
        seed_demo(ops.store().as_ref(), DemoOptions { events: 300, seed: 3 }).expect("demo");
        let call = |req: serde_json::Value| {
            run(&ops, Host::none(), "entries", Args::json("entries", req).expect("args"), &mut |_| true)
        };
        let ids = |page: &serde_json::Value| -> Vec<i64> {
            page["entries"]
                .as_array()
                .expect("entries")
                .iter()
                .map(|e| e["id"].as_i64().expect("id"))
                .collect()
        };
        let first = call(json!({"oldest_first": true, "limit": 5})).expect("page");
        let a = ids(&first);
        assert!(a.is_sorted() && a.len() == 5, "{a:?}");
        assert_eq!(first["next_after"], json!(a[4]));
        assert_eq!(first["next_before"], json!(null));
        let second = call(json!({"oldest_first": true, "after": a[4], "limit": 5})).expect("page");
        let b = ids(&second);
        assert!(b.is_sorted() && b[0] > a[4], "{a:?} then {b:?}");
        let newest = ids(&call(json!({"limit": 5})).expect("page"));
        assert!(newest.is_sorted_by(|x, y| x > y) && newest[0] > b[4], "{newest:?}");
        for mixed in [
            json!({"oldest_first": true, "before": a[4]}),
            json!({"after": a[4]}),
        ] {
            let e = call(mixed.clone()).expect_err("a mixed cursor");
            assert_eq!(e.code(), Code::InvalidArgument, "{mixed}: {e}");
        }
    }
}
