//! How each request for approval ended, told to the webhook its policy names: approved (by whom,
//! how many of how many), rejected (by whom, why) or expired undecided. The instance that leads
//! the books follows the log's decisions from the last one announced, which the ledger keeps, so
//! each decision is told once, in the log's order, whichever instance, CLI or console made it, and
//! none is lost to a restart or a new leader (one may be told twice when a leader dies between
//! its delivery and the record of it).

use idemgate_ledger::{
    now_millis, rfc3339, EntryDetail, Event, EventFilter, LedgerError, Page, Storage,
};
use serde_json::json;

use crate::config::{Approval, Config};
use crate::engine::Engine;

/// The log's events that end, or advance, a request for approval.
const DECISIONS: [&str; 3] = ["approved", "rejected", "approval_expired"];

/// The most decisions one round tells; the rest wait for the next.
const ROUND: usize = 256;

impl Engine {
    /// Tells each policy's webhook of the decisions logged since the last one told, oldest
    /// first, recording how far it went (each told one at once); how many it told. The
    /// first round on a ledger starts at the log's end: what was decided before is not news.
    pub async fn announce_decisions(&self) -> Result<usize, LedgerError> {
        let store = self.store.clone();
        let news = tokio::task::spawn_blocking(move || news(&*store))
            .await
            .map_err(|e| LedgerError::Unavailable(e.to_string()))??;
        let (mut told, mut recorded, mut last) = (0, None, None);
        for ev in news {
            last = Some(ev.seq);
            // Recorded at once when told, so that a restart does not tell it again; the
            // decisions no webhook hears are recorded together at the round's end.
            if self.tell(&ev).await {
                told += 1;
                self.store.note_announced(ev.seq).recv().await?;
                recorded = last;
            }
        }
        if let Some(seq) = last.filter(|_| last != recorded) {
            self.store.note_announced(seq).recv().await?;
        }
        Ok(told)
    }

    /// Tells `ev`'s decision to its policy's webhook, when the policy names one.
    async fn tell(&self, ev: &Event) -> bool {
        let Some(id) = ev.entry_id else { return false };
        let store = self.store.clone();
        let read = tokio::task::spawn_blocking(move || store.entry(id, now_millis())).await;
        let Ok(Ok(entry)) = read else {
            tracing::warn!(
                entry = id,
                "a decision was not announced: its entry could not be read"
            );
            return false;
        };
        let Some(hook) = policy(&self.cfg, &entry).and_then(|a| a.notify.as_ref()) else {
            return false;
        };
        let body = json!({
            "text": text(ev, &entry),
            "kind": ev.kind,
            "operator": ev.operator,
            "reason": ev.reason,
            "entry": entry,
        });
        super::deliver(&self.client, hook, &body, id).await
    }
}

/// The decisions after the last one told, oldest first, at most [`ROUND`] of them; on a ledger
/// where none was told yet, none, and the log's end recorded as told.
fn news(store: &dyn Storage) -> Result<Vec<Event>, LedgerError> {
    let Some(from) = store.announced()? else {
        let end = store.head()?.map_or(0, |h| h.seq);
        store.note_announced(end).wait()?;
        return Ok(Vec::new());
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
            news.extend(events.into_iter().filter(|e| e.seq > from));
            match oldest {
                Some(seq) if full && seq > from => page.before = Some(seq),
                _ => break,
            }
        }
    }
    news.sort_by_key(|e| e.seq);
    news.truncate(ROUND);
    Ok(news)
}

/// The policy that held `e`: its route's, or its MCP tool's.
fn policy<'c>(cfg: &'c Config, e: &EntryDetail) -> Option<&'c Approval> {
    let route = cfg.route(&e.summary.route)?;
    match &e.summary.tool {
        Some(tool) => route.tools.get(tool)?.approval.as_ref(),
        None => route.approval.as_ref(),
    }
}

/// The webhook's text (Slack's `text`): what was decided, by whom, and what happens now.
fn text(ev: &Event, e: &EntryDetail) -> String {
    let call = format!(
        "{} (entry {}, key {})",
        e.headline, e.summary.id, e.summary.key
    );
    let by = ev.operator.as_deref().unwrap_or("an operator");
    let why = ev
        .reason
        .as_deref()
        .map(|r| format!(" Why: {r}"))
        .unwrap_or_default();
    let detail: serde_json::Value = serde_json::from_str(&ev.detail).unwrap_or_default();
    let count = |k: &str| detail[k].as_u64().unwrap_or(1);
    match ev.kind.as_str() {
        "approved" if count("approvals") < count("needed") => format!(
            "idemgate: approved by {by} ({} of {}): {call}; it waits for {} more.{why}",
            count("approvals"),
            count("needed"),
            count("needed") - count("approvals"),
        ),
        "approved" => format!(
            "idemgate: approved by {by} ({} of {}): {call}; it runs once now, and its client \
             gets the result.{why}",
            count("approvals"),
            count("needed"),
        ),
        "rejected" => format!("idemgate: rejected by {by}: {call}; it never runs.{why}"),
        _ => format!(
            "idemgate: expired undecided at {}: {call}; it never runs.",
            rfc3339(ev.at)
        ),
    }
}
