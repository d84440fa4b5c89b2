//! Reads: entries (keyset-paged), one entry with its timeline and the diff of a reused key's
//! requests, the log, incidents and the overview's stats. Nothing here writes.

use idemgate_ledger::{
    canon, now_millis, Action, EntryDetail, EntryFilter, EntrySummary, Event, EventFilter,
    EventKind, Incident, Page, RequestRecord, Stats,
};
use serde::{Deserialize, Serialize};

use crate::{check_range, page, Ops, OpsError, OpsResult, MAX_HOURS, MAX_INCIDENTS, MAX_PAGE};

/// A page of entries; pass `next_before` back as `before` for the next one.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EntryPage {
    /// The entries, newest first (oldest first when asked).
    pub entries: Vec<EntrySummary>,
    /// Where the next page starts, when there is one: newest first, its `before`.
    pub next_before: Option<i64>,
    /// Oldest first, the next page's `after`.
    pub next_after: Option<i64>,
}

/// A page of events, newest first.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventPage {
    /// The events, newest first.
    pub events: Vec<Event>,
    /// Where the next page starts, when there is one.
    pub next_before: Option<i64>,
}

/// One entry with its whole timeline.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EntryView {
    /// The entry: its request, response, state and resolution.
    pub entry: EntryDetail,
    /// Every event of the entry, oldest first.
    pub timeline: Vec<Event>,
    /// For each of `entry.collision_requests`, the fields where it differs from the stored request.
    pub collision_diffs: Vec<Vec<FieldDiff>>,
    /// An MCP entry's call, read from its request and response.
    pub call: Option<ToolCall>,
    /// Every operator action, and whether the entry's state takes it now. A reconcile also
    /// needs its route's probe, which the route configuration has.
    pub actions: Vec<ActionStanding>,
    /// A held call's: whether the one who asks may approve or reject it now.
    pub decision: Option<crate::approvals::Decision>,
}

/// An operator action on one entry, as its state stands.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionStanding {
    /// The action.
    pub action: Action,
    /// Why it would be refused, in words (the entry's state, or what its route lacks for a
    /// replay or a reconcile); `None` when it is taken.
    pub refused: Option<String>,
}

impl ActionStanding {
    /// Every action on `e`, judged by its state and by what `host` has of the routes.
    pub fn all(e: &EntrySummary, host: crate::op::Host<'_>) -> Vec<ActionStanding> {
        Action::ALL
            .into_iter()
            .map(|action| ActionStanding {
                action,
                refused: crate::upstream::refusal(action, e, host),
            })
            .collect()
    }
}

/// An MCP `tools/call` entry as people read it: `route · tool`, its arguments, and what came
/// back — the tool's result (its text content joined), or a JSON-RPC error.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// `route · tool`.
    pub label: String,
    /// The tool's name.
    pub tool: String,
    /// The call's arguments.
    #[cfg_attr(feature = "ts", ts(type = "unknown"))]
    pub arguments: serde_json::Value,
    /// The result's text content, joined by newlines (absent without a result).
    pub result_text: Option<String>,
    /// The result's `structuredContent`, when it has one.
    #[cfg_attr(feature = "ts", ts(type = "unknown"))]
    pub structured: Option<serde_json::Value>,
    /// The result says `isError: true`.
    pub is_error: bool,
    /// The JSON-RPC error the call was answered with, if it was.
    #[cfg_attr(feature = "ts", ts(type = "unknown"))]
    pub error: Option<serde_json::Value>,
}

impl ToolCall {
    /// `d`'s call, when `d` is an MCP entry.
    pub fn of(d: &EntryDetail) -> Option<ToolCall> {
        use serde_json::Value;
        let tool = d.summary.tool.clone()?;
        let body = |b: &[u8]| serde_json::from_slice::<Value>(b).unwrap_or(Value::Null);
        let request = d
            .request
            .as_ref()
            .map(|r| body(&r.body))
            .unwrap_or(Value::Null);
        let response = d
            .response
            .as_ref()
            .map(|r| body(&r.body))
            .unwrap_or(Value::Null);
        let result = response.get("result");
        let result_text = result
            .and_then(|r| r.get("content"))
            .and_then(Value::as_array)
            .map(|c| {
                c.iter()
                    .filter_map(|i| i.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        Some(ToolCall {
            label: format!("{} · {tool}", d.summary.route),
            arguments: request["params"]["arguments"].clone(),
            structured: result.and_then(|r| r.get("structuredContent")).cloned(),
            is_error: result
                .and_then(|r| r.get("isError"))
                .and_then(Value::as_bool)
                == Some(true),
            error: response.get("error").cloned(),
            result_text,
            tool,
        })
    }
}

/// One field that differs between two requests: `field` is `method`, `path`, `header:NAME` or a
/// JSON pointer into the body (`/amount`); values are canonical JSON (or text), absent when missing.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldDiff {
    /// What differs.
    pub field: String,
    /// Its value in the stored request.
    pub stored: Option<String>,
    /// Its value in the rejected one.
    pub rejected: Option<String>,
}

fn flatten(
    v: &serde_json::Value,
    at: String,
    out: &mut std::collections::BTreeMap<String, String>,
) {
    match v {
        serde_json::Value::Object(m) if !m.is_empty() => {
            for (k, x) in m {
                flatten(
                    x,
                    format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        serde_json::Value::Array(a) if !a.is_empty() => {
            for (i, x) in a.iter().enumerate() {
                flatten(x, format!("{at}/{i}"), out);
            }
        }
        leaf => {
            out.insert(
                if at.is_empty() { "/".into() } else { at },
                canon::canonical_string(leaf),
            );
        }
    }
}

fn fields(r: &RequestRecord) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::new();
    out.insert("method".into(), r.method.clone());
    out.insert("path".into(), r.path.clone());
    for (n, v) in &r.headers {
        out.insert(format!("header:{n}"), v.clone());
    }
    match serde_json::from_slice::<serde_json::Value>(&r.body) {
        Ok(v) => flatten(&v, String::new(), &mut out),
        Err(_) if r.body.is_empty() => {}
        Err(_) => {
            out.insert("body".into(), String::from_utf8_lossy(&r.body).into_owned());
        }
    }
    out
}

/// The field-level differences between a stored request and a rejected one (key reuse), ignoring
/// headers that differ on every retry by nature.
pub fn request_diff(stored: &RequestRecord, rejected: &RequestRecord) -> Vec<FieldDiff> {
    let (a, b) = (fields(stored), fields(rejected));
    let mut names: Vec<&String> = a.keys().chain(b.keys()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter(|n| {
            !matches!(
                n.as_str(),
                "header:x-request-id" | "header:traceparent" | "header:user-agent"
            )
        })
        .filter(|n| a.get(*n) != b.get(*n))
        .map(|n| FieldDiff {
            field: n.clone(),
            stored: a.get(n).cloned(),
            rejected: b.get(n).cloned(),
        })
        .collect()
}

/// The event kind named `k`, or why it is none.
pub fn event_kind(k: &str) -> OpsResult<EventKind> {
    EventKind::parse(k).ok_or_else(|| {
        let kinds: Vec<_> = EventKind::ALL.iter().map(|k| k.as_str()).collect();
        OpsError::invalid(
            "kind",
            &format!("{k:?} is not an event kind: one of {}", kinds.join(", ")),
        )
    })
}

impl Ops {
    /// A page of at most `limit` entries matching `filter`, newest first and older than `before`;
    /// or, with `oldest_first`, oldest first and newer than `after`.
    pub fn entries(
        &self,
        filter: &EntryFilter,
        before: Option<i64>,
        limit: usize,
    ) -> OpsResult<EntryPage> {
        self.entries_in_order(filter, Page::newest(before, limit))
    }

    /// [`Ops::entries`] in `page`'s order.
    pub fn entries_in_order(&self, filter: &EntryFilter, page: Page) -> OpsResult<EntryPage> {
        let checked = crate::page(page.before, page.limit, MAX_PAGE)?;
        crate::check_named(&[
            ("route", filter.route.as_deref()),
            ("key", filter.key.as_deref()),
            ("tool", filter.tool.as_deref()),
            ("subject", filter.subject.as_deref()),
            ("search", filter.search.as_deref()),
        ])?;
        if page.oldest_first && page.before.is_some() {
            return Err(OpsError::invalid(
                "before",
                "pages oldest first continue after an entry: use after",
            ));
        }
        if !page.oldest_first && page.after.is_some() {
            return Err(OpsError::invalid(
                "after",
                "pages newest first continue before an entry: use before, or ask oldest_first",
            ));
        }
        let entries = self.store.entries(filter, page, now_millis())?;
        let next = (entries.len() == checked.limit)
            .then(|| entries.last().map(|e| e.id))
            .flatten();
        let (next_before, next_after) = if page.oldest_first {
            (None, next)
        } else {
            (next, None)
        };
        Ok(EntryPage {
            entries,
            next_before,
            next_after,
        })
    }

    /// Every entry matching `filter` (up to `limit` when given), newest first, page by page
    /// through `f`.
    pub fn each_entry(
        &self,
        filter: &EntryFilter,
        limit: Option<usize>,
        f: &mut dyn FnMut(&EntrySummary) -> OpsResult<()>,
    ) -> OpsResult<usize> {
        self.each_entry_in_order(filter, limit, false, f)
    }

    /// [`Ops::each_entry`], oldest first when `oldest_first` (then `limit` takes the oldest).
    pub(crate) fn each_entry_in_order(
        &self,
        filter: &EntryFilter,
        limit: Option<usize>,
        oldest_first: bool,
        f: &mut dyn FnMut(&EntrySummary) -> OpsResult<()>,
    ) -> OpsResult<usize> {
        let req = crate::op::entries::EntriesRequest {
            oldest_first: Some(oldest_first),
            ..crate::op::entries::EntriesRequest::from(filter)
        };
        crate::op::entries::each(self, req, limit, f)
    }

    /// One entry with its whole timeline, the diffs of the requests a reused key was sent, and
    /// its actions as they stand: by its state, and by what `host` has of the routes.
    pub fn show(&self, id: i64, host: crate::op::Host<'_>) -> OpsResult<EntryView> {
        // One instant for the entry's state and for who may decide on it.
        let now = now_millis();
        let entry = self.store.entry(id, now)?;
        let mut timeline = Vec::new();
        let mut before = None;
        loop {
            let evs = self.store.events(
                &EventFilter {
                    entry_id: Some(id),
                    ..Default::default()
                },
                Page::newest(before, 1000),
            )?;
            let done = evs.len() < 1000;
            before = evs.last().map(|e| e.seq);
            timeline.extend(evs);
            if done {
                break;
            }
        }
        timeline.reverse();
        let collision_diffs = match &entry.request {
            Some(stored) => entry
                .collision_requests
                .iter()
                .map(|c| request_diff(stored, &c.request))
                .collect(),
            None => entry
                .collision_requests
                .iter()
                .map(|_| Vec::new())
                .collect(),
        };
        Ok(EntryView {
            call: ToolCall::of(&entry),
            actions: ActionStanding::all(&entry.summary, host),
            decision: crate::approvals::Decision::of(&entry, now, host.caller),
            entry,
            timeline,
            collision_diffs,
        })
    }

    /// A page of at most `limit` events matching `filter`, newest first, older than `before`.
    pub fn log(
        &self,
        filter: &EventFilter,
        before: Option<i64>,
        limit: usize,
    ) -> OpsResult<EventPage> {
        if let Some(k) = &filter.kind {
            event_kind(k)?;
        }
        check_range(filter.since, filter.until)?;
        crate::check_named(&[
            ("route", filter.route.as_deref()),
            ("key", filter.key.as_deref()),
            ("operator", filter.operator.as_deref()),
            ("search", filter.search.as_deref()),
        ])?;
        let events = self.store.events(filter, page(before, limit, MAX_PAGE)?)?;
        let next_before = (events.len() == limit)
            .then(|| events.last().map(|e| e.seq))
            .flatten();
        Ok(EventPage {
            events,
            next_before,
        })
    }

    /// Duplicate suspects grouped, newest first: at most `limit`, older than `before`.
    pub fn incidents(&self, before: Option<i64>, limit: usize) -> OpsResult<Vec<Incident>> {
        Ok(self
            .store
            .incidents(page(before, limit, MAX_INCIDENTS)?, now_millis())?)
    }

    /// The counts, and an hourly series of the last `hours` (0: none, at most [`MAX_HOURS`]).
    pub fn stats(&self, hours: u32) -> OpsResult<Stats> {
        if hours > MAX_HOURS {
            return Err(OpsError::invalid(
                "hours",
                &format!("{hours} is more than {MAX_HOURS} (90 days)"),
            ));
        }
        Ok(self.store.stats(now_millis(), hours)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::Host;
    use crate::{PurgeCmd, PurgeTarget, ResolveAs, ResolveCmd};
    use idemgate_ledger::{
        testing, Actor, ClaimOutcome, RedriveRequest, Resolution, ResolveRequest, State,
    };

    /// A ledger with one entry in `state` (`stuck`: a pending one past its lease); its id.
    fn one_entry(dir: &tempfile::TempDir, state: State, stuck: bool) -> (Ops, i64) {
        let ops =
            Ops::open_or_create(&dir.path().join("l.db").display().to_string()).expect("ledger");
        let at = now_millis()
            - if stuck || state != State::Pending {
                120_000
            } else {
                0
            };
        let c = match state {
            State::AwaitingApproval => testing::held_charge("k", at),
            _ => testing::charge("k", at),
        };
        let id = match ops.store().claim(c).wait().expect("claim") {
            ClaimOutcome::Claimed { entry_id, .. }
            | ClaimOutcome::AwaitingApproval { entry_id, .. } => entry_id,
            o => panic!("{o:?}"),
        };
        let resolution = match state {
            State::Pending | State::AwaitingApproval => None,
            State::Completed => Some(Resolution::Completed {
                response: idemgate_ledger::ResponseRecord {
                    status: 201,
                    headers: vec![],
                    body: b"{}".to_vec(),
                },
                external_ref: None,
            }),
            State::Released => Some(Resolution::Released),
            State::Failed => Some(Resolution::Failed { response: None }),
        };
        if let Some(resolution) = resolution {
            ops.store()
                .resolve(ResolveRequest {
                    entry_id: id,
                    resolution,
                    actor: Actor {
                        operator: "o".into(),
                        reason: "set up".into(),
                    },
                    ttl_ms: 3_600_000,
                    at: now_millis(),
                })
                .wait()
                .expect("resolve");
        }
        (ops, id)
    }

    /// Runs `action` on entry `id` as its host would: through the operations, or, for a replay,
    /// the ledger's claim of it (the upstream is not the question here).
    fn act(ops: &Ops, action: Action, id: i64) -> Result<(), String> {
        let (operator, reason) = ("dana".to_owned(), "checking".to_owned());
        let resolve = |as_| {
            ops.resolve(&ResolveCmd {
                entry_id: id,
                as_,
                response: None,
                external_ref: Some("ch_1".into()),
                operator: operator.clone(),
                reason: reason.clone(),
                confirm_destructive: false,
            })
            .map(drop)
        };
        let done = match action {
            Action::Resolve => resolve(ResolveAs::Completed),
            Action::Release => resolve(ResolveAs::Released),
            Action::Replay => ops
                .store()
                .redrive(RedriveRequest {
                    entry_id: id,
                    owner: "o2".into(),
                    lease_ms: 60_000,
                    actor: Actor {
                        operator: operator.clone(),
                        reason: reason.clone(),
                    },
                    at: now_millis(),
                })
                .wait()
                .map(drop)
                .map_err(crate::OpsError::from),
            Action::Purge => ops
                .purge(
                    &PurgeCmd {
                        target: PurgeTarget::Ids { ids: vec![id] },
                        operator: operator.clone(),
                        reason: reason.clone(),
                        confirm_destructive: false,
                    },
                    &mut |_| true,
                )
                .map(drop),
            // A reconcile needs the route configuration's probe: this is the check it makes of
            // the entry before it asks the probe.
            Action::Reconcile => {
                let e = ops.show(id, Host::none()).expect("show").entry.summary;
                Action::Reconcile
                    .check(id, e.state, e.stuck)
                    .map_err(crate::OpsError::from)
            }
        };
        done.map_err(|e| e.to_string())
    }

    #[test]
    fn an_entry_view_offers_exactly_the_actions_its_state_takes_and_says_why_not() {
        let states = [
            (State::Pending, false),
            (State::Pending, true),
            (State::Completed, false),
            (State::Released, false),
            (State::Failed, false),
            (State::AwaitingApproval, false),
        ];
        let mut offered = Vec::new();
        for (state, stuck) in states {
            for action in Action::ALL {
                let dir = tempfile::tempdir().expect("tempdir");
                let (ops, id) = one_entry(&dir, state, stuck);
                let view = ops.show(id, Host::none()).expect("show");
                assert_eq!(
                    (view.entry.summary.state, view.entry.summary.stuck),
                    (state, stuck)
                );
                let standing = view
                    .actions
                    .iter()
                    .find(|a| a.action == action)
                    .expect("every action is listed");
                // A preview refuses what the action refuses, in the same words.
                let preview = match action {
                    Action::Resolve => Some(ops.preview_resolve(id, None).expect("preview")),
                    Action::Release => Some(
                        ops.preview_resolve(id, Some(ResolveAs::Released))
                            .expect("preview"),
                    ),
                    Action::Purge => Some(
                        ops.preview_purge(&PurgeTarget::Ids { ids: vec![id] })
                            .expect("preview"),
                    ),
                    _ => None,
                };
                if let Some(p) = preview {
                    let skipped = p.skipped.first().map(|(_, why)| why);
                    assert_eq!(skipped, standing.refused.as_ref(), "{action} preview");
                }
                let done = act(&ops, action, id);
                let what = format!("{action} on {}{state}", if stuck { "stuck " } else { "" });
                match (&standing.refused, done) {
                    (None, Ok(())) => offered.push(what),
                    (Some(why), Err(e)) => {
                        let (_, needs) = why.split_once("; ").expect("what it needs");
                        assert!(e.contains(needs), "{what}: {e} is not for {why}");
                    }
                    (why, done) => panic!("{what}: offered as {why:?}, done as {done:?}"),
                }
            }
        }
        assert_eq!(
            offered,
            [
                "resolve on stuck pending",
                "release on stuck pending",
                "replay on stuck pending",
                "reconcile on stuck pending",
                "purge on completed",
                "resolve on released",
                "replay on released",
                "purge on released",
                "resolve on failed",
                "release on failed",
                "replay on failed",
                "purge on failed",
            ]
        );
    }

    #[test]
    fn every_entry_is_walked_either_way_across_pages() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ops =
            Ops::open_or_create(&dir.path().join("l.db").display().to_string()).expect("ledger");
        let mut made = testing::expired_charges(ops.store().as_ref(), 2_300);
        made.sort_unstable();
        let walk = |limit: Option<usize>, oldest_first: bool| {
            let mut ids = Vec::new();
            let all = EntryFilter::default();
            ops.each_entry_in_order(&all, limit, oldest_first, &mut |e| {
                ids.push(e.id);
                Ok(())
            })
            .expect("walk");
            ids
        };
        assert_eq!(walk(None, true), made, "oldest first, across three pages");
        assert_eq!(walk(Some(1_500), true), made[..1_500]);
        let mut newest = made.clone();
        newest.reverse();
        assert_eq!(walk(None, false), newest);
        assert_eq!(walk(Some(1_001), false), newest[..1_001]);
    }

    fn req(body: &str) -> RequestRecord {
        RequestRecord {
            method: "POST".into(),
            path: "/v1/charges".into(),
            headers: vec![
                ("content-type".into(), "application/json".into()),
                ("x-request-id".into(), body.len().to_string()),
            ],
            body: body.as_bytes().to_vec(),
        }
    }

    #[test]
    fn request_diff_names_changed_added_and_removed_fields() {
        let d = request_diff(
            &req(r#"{"amount":100,"customer":"cus_1","meta":{"order":7},"items":[1,2]}"#),
            &req(r#"{"customer":"cus_1","amount":999,"meta":{"order":7,"note":"x"},"items":[1]}"#),
        );
        let got: Vec<(&str, Option<&str>, Option<&str>)> = d
            .iter()
            .map(|f| (f.field.as_str(), f.stored.as_deref(), f.rejected.as_deref()))
            .collect();
        assert_eq!(
            got,
            [
                ("/amount", Some("100"), Some("999")),
                ("/items/1", Some("2"), None),
                ("/meta/note", None, Some("\"x\"")),
            ]
        );
        assert!(
            request_diff(&req(r#"{"a":1,"b":2}"#), &req(r#"{"b":2,"a":1}"#)).is_empty(),
            "key order is not a difference"
        );
        let raw = request_diff(&req("a=1"), &req("a=2"));
        assert_eq!(raw[0].field, "body");
    }
}
