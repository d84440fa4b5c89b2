//! How each request for approval ended, told to the webhook its policy names: approved (by whom,
//! how many of how many), rejected (by whom, why) or expired undecided; and, for a call approved
//! in full, how its run ended (the upstream's status, not sent, outcome unknown). The instance
//! that leads the books follows the log's decisions from the last one announced, and the approved
//! calls whose result is still to be told, both of which the ledger keeps, so each is told once,
//! in order, whichever instance, CLI or console decided, and none is lost to a restart or a new
//! leader (one may be told twice when a leader dies between its delivery and the record of it).

use idemgate_ledger::{
    now_millis, rfc3339, Announced, ApprovalEnd, EntryDetail, Event, EventFilter, LedgerError,
    Page, State, Storage,
};
use serde_json::json;

use crate::config::{Approval, Config, Notify};
use crate::engine::Engine;
use crate::mcp::jsonrpc::{tool_answer, ToolAnswer};

/// The log's events that end, or advance, a request for approval.
const DECISIONS: [&str; 3] = ["approved", "rejected", "approval_expired"];

/// The most decisions one round tells; the rest wait for the next.
const ROUND: usize = 256;

impl Engine {
    /// Tells each policy's webhook of the decisions logged since the last one told, oldest
    /// first, then of the results of the calls approved in full that have ended since, recording
    /// how far it went (each told one at once); how many it told. The first round on a ledger
    /// starts at the log's end: what was decided before is not news.
    pub async fn announce_decisions(&self) -> Result<usize, LedgerError> {
        let store = self.store.clone();
        let (news, mut book) = tokio::task::spawn_blocking(move || news(&*store))
            .await
            .map_err(|e| LedgerError::Unavailable(e.to_string()))??;
        // Recorded at once when told, so that a restart does not tell it again; what no webhook
        // hears is recorded with the next one told, or at the round's end.
        let (mut told, mut unrecorded) = (0, false);
        for ev in news {
            // A ledger that cannot answer now is asked again next round, from this decision.
            let Some(heard) = self.heard(ev.entry_id).await else {
                break;
            };
            book.seq = ev.seq;
            unrecorded = true;
            let Some((entry, hook)) = heard else { continue };
            let id = entry.summary.id;
            if ev.kind == "approved" && !waits_for_more(&ev) && !book.running.contains(&id) {
                book.running.push(id);
            }
            let body = json!({
                "text": text(&ev, &entry),
                "kind": ev.kind,
                "operator": ev.operator,
                "reason": ev.reason,
                "entry": entry,
            });
            if super::deliver(&self.client, hook, &body, id).await {
                told += 1;
                self.store.note_announced(book.clone()).recv().await?;
                unrecorded = false;
            }
        }
        for id in book.running.clone() {
            let Some(heard) = self.heard(Some(id)).await else {
                continue;
            };
            let delivered = match heard {
                Some((entry, hook)) => match result(&entry) {
                    Run::Ended(body) => super::deliver(&self.client, hook, &body, id).await,
                    Run::Running => continue,
                    Run::Superseded => false,
                },
                None => false,
            };
            book.running.retain(|&r| r != id);
            unrecorded = true;
            if delivered {
                told += 1;
                self.store.note_announced(book.clone()).recv().await?;
                unrecorded = false;
            }
        }
        if unrecorded {
            self.store.note_announced(book).recv().await?;
        }
        Ok(told)
    }

    /// Entry `id` and its policy's webhook: `Some(None)` when there is nothing to tell (no
    /// entry, no webhook, or the entry is gone); `None` when the ledger cannot say now.
    async fn heard(&self, id: Option<i64>) -> Option<Option<(EntryDetail, &Notify)>> {
        let Some(id) = id else { return Some(None) };
        let store = self.store.clone();
        let read = tokio::task::spawn_blocking(move || store.entry(id, now_millis())).await;
        let entry = match read {
            Ok(Ok(entry)) => entry,
            Ok(Err(LedgerError::EntryNotFound(_))) => return Some(None),
            _ => {
                tracing::warn!(
                    entry = id,
                    "an approval's news waits: its entry could not be read"
                );
                return None;
            }
        };
        let hook = policy(&self.cfg, &entry).and_then(|a| a.notify.as_ref());
        Some(hook.map(|hook| (entry, hook)))
    }
}

/// The decisions after the last one told, oldest first, at most [`ROUND`] of them, and what
/// was told so far; on a ledger where none was told yet, none, and the log's end recorded as
/// told.
fn news(store: &dyn Storage) -> Result<(Vec<Event>, Announced), LedgerError> {
    let Some(book) = store.announced()? else {
        let book = Announced {
            seq: store.head()?.map_or(0, |h| h.seq),
            running: Vec::new(),
        };
        store.note_announced(book.clone()).wait()?;
        return Ok((Vec::new(), book));
    };
    let mut news = Vec::new();
    for kind in DECISIONS {
        let filter = EventFilter {
            kind: Some(kind.to_owned()),
            ..EventFilter::default()
        };
        // Newest first, down to the last one told.
        let mut page = Page {
            limit: ROUND,
            ..Page::default()
        };
        loop {
            let events = store.events(&filter, page)?;
            let oldest = events.last().map(|e| e.seq);
            let full = events.len() == ROUND;
            news.extend(events.into_iter().filter(|e| e.seq > book.seq));
            match oldest {
                Some(seq) if full && seq > book.seq => page.before = Some(seq),
                _ => break,
            }
        }
    }
    news.sort_by_key(|e| e.seq);
    news.truncate(ROUND);
    Ok((news, book))
}

/// The policy that held `e`: its route's, or its MCP tool's.
fn policy<'c>(cfg: &'c Config, e: &EntryDetail) -> Option<&'c Approval> {
    let route = cfg.route(&e.summary.route)?;
    match &e.summary.tool {
        Some(tool) => route.tools.get(tool)?.approval.as_ref(),
        None => route.approval.as_ref(),
    }
}

/// A decision's approvals so far and those its policy needs.
fn counts(ev: &Event) -> (u64, u64) {
    let detail: serde_json::Value = serde_json::from_str(&ev.detail).unwrap_or_default();
    let count = |k: &str| detail[k].as_u64().unwrap_or(1);
    (count("approvals"), count("needed"))
}

/// Whether approval `ev` leaves its call waiting for more.
fn waits_for_more(ev: &Event) -> bool {
    let (approvals, needed) = counts(ev);
    approvals < needed
}

/// The call as every announcement names it.
fn call(e: &EntryDetail) -> String {
    format!(
        "{} (entry {}, key {})",
        e.headline, e.summary.id, e.summary.key
    )
}

/// An operator's reason, as the texts end with it.
fn why(reason: Option<&str>) -> String {
    reason.map(|r| format!(" Why: {r}")).unwrap_or_default()
}

/// The webhook's text (Slack's `text`): what was decided, by whom, and what happens now.
fn text(ev: &Event, e: &EntryDetail) -> String {
    let call = call(e);
    let by = ev.operator.as_deref().unwrap_or("an operator");
    let why = why(ev.reason.as_deref());
    let (approvals, needed) = counts(ev);
    match ev.kind.as_str() {
        "approved" if approvals < needed => format!(
            "idemgate: approved by {by} ({approvals} of {needed}): {call}; it waits for {} \
             more.{why}",
            needed - approvals,
        ),
        "approved" => format!(
            "idemgate: approved by {by} ({approvals} of {needed}): {call}; it runs once now, \
             and its client gets the result.{why}"
        ),
        "rejected" => format!("idemgate: rejected by {by}: {call}; it never runs.{why}"),
        _ => format!(
            "idemgate: expired undecided at {}: {call}; it never runs.",
            rfc3339(ev.at)
        ),
    }
}

/// What a completed call was answered: the upstream's status, or an MCP tool's result or error.
fn answered(e: &EntryDetail) -> String {
    let status = e.summary.response_status.unwrap_or_default();
    let Some(r) = e.response.as_ref().filter(|_| e.summary.tool.is_some()) else {
        return format!("the upstream answered {status}");
    };
    match tool_answer(&r.body) {
        ToolAnswer::Result { failed: false, .. } => "the tool answered".into(),
        ToolAnswer::Result { failed: true, text } => {
            let text: String = text.unwrap_or_default().chars().take(200).collect();
            format!("the tool answered that it failed: {text:?}")
        }
        ToolAnswer::Error { code, message } => {
            format!("its server answered JSON-RPC error {code}: {message:?}")
        }
        ToolAnswer::Unreadable => format!("the upstream answered {status}"),
    }
}

/// Where an approved call's run stands, for its webhook.
enum Run {
    /// It waits to run, or runs.
    Running,
    /// It ended: the announcement of how.
    Ended(serde_json::Value),
    /// Its approval no longer stands (not sent, it was held again for a new one): the new
    /// request, and its decision, are told as such.
    Superseded,
}

/// How approved call `e` ended: it ran (the upstream's status), it was not sent, its outcome is
/// unknown, or an operator settled it.
fn result(e: &EntryDetail) -> Run {
    let (s, call) = (&e.summary, call(e));
    let approved = e.approval.as_ref().and_then(|a| a.end) == Some(ApprovalEnd::Approved);
    let error = s
        .last_error
        .as_deref()
        .map(|why| format!(" ({why})"))
        .unwrap_or_default();
    let by = e.resolved_by.as_deref().unwrap_or("an operator");
    let why = why(e.resolution_reason.as_deref());
    let text = match s.state {
        _ if !approved => return Run::Superseded,
        State::AwaitingApproval => return Run::Running,
        State::Pending if !s.stuck => return Run::Running,
        State::Completed if e.resolved_by.is_some() => {
            format!("idemgate: resolved as completed by {by} after approval: {call}.{why}")
        }
        State::Completed => format!(
            "idemgate: ran once after approval: {call}; {}.",
            answered(e)
        ),
        State::Pending => format!(
            "idemgate: outcome unknown after approval: {call}{error}; it may have run: \
             reconcile or resolve it."
        ),
        State::Released => format!(
            "idemgate: not sent after approval: {call}{error}; it did not run, and a retry of \
             it asks for approval again."
        ),
        State::Failed => format!("idemgate: failed after approval: {call}; resolved by {by}.{why}"),
    };
    Run::Ended(json!({
        "text": text,
        "kind": "result",
        "operator": e.resolved_by,
        "reason": e.resolution_reason,
        "entry": e,
    }))
}
