//! Calls held for approval: whether a call matches its route's policy, how its request waits
//! for the decision (and what it is answered when none comes in time), the forwarding of
//! approved calls, which this process does for every instance's, once each, and what the
//! policy's webhook is told (a held call here, how each request ended in [`news`]).

use std::time::{Duration, Instant};

use axum::http::{header, HeaderMap, HeaderValue, Method, Response};
use idemgate_ledger::{
    now_millis, rfc3339, ApprovalAsk, ClaimOutcome, ClaimRequest, Millis, Redrive, ResponseRecord,
    State,
};
use serde_json::json;

use crate::claim::Claimed;
use crate::config::Route;
use crate::config::{Approval, Notify};
use crate::engine::Engine;
use crate::engine::ProxyBody;
use crate::problem::Problem;
use crate::settle::Outcome;

mod news;

/// A write's key as [`Engine::claim`] takes it: its route, scope, key and fingerprint.
pub(crate) type Keyed<'a> = (&'a Route, &'a str, &'a str, &'a str);

impl Engine {
    /// Claims a write as [`Engine::claim`] does. A call `policy` holds (a new request for
    /// approval is announced to its webhook) waits for its decision (`wait`, given the
    /// policy's `hold`). Approved and run meanwhile, the request that asked gets the recorded
    /// answer as its own ([`Claimed::Approved`]); any other is claimed again for its answer:
    /// the result as a replay, or why it will not run. Still undecided when the wait ends, the
    /// answer is the claim's `AwaitingApproval`.
    pub(crate) async fn claim_approved<'e, F>(
        &'e self,
        (route, scope, key, fingerprint): Keyed<'_>,
        make: &impl Fn(Millis) -> ClaimRequest,
        policy: Option<&Approval>,
        wait: impl FnOnce(i64, Duration) -> F,
    ) -> Result<Claimed<'e>, Problem>
    where
        F: std::future::Future<Output = Waited>,
    {
        let first = self.claim(route, scope, key, fingerprint, make).await?;
        let Some(entry_id) = self.held(&first, policy) else {
            return Ok(first);
        };
        let asked = matches!(
            first,
            Claimed::Settled(ClaimOutcome::AwaitingApproval {
                requested: true,
                ..
            })
        );
        match wait(entry_id, policy.map(|a| a.hold).unwrap_or_default()).await {
            Waited::Held => return Ok(first),
            Waited::Ran(response) if asked => return Ok(Claimed::Approved(response)),
            Waited::Ran(_) | Waited::Decided => {}
        }
        let again = self.claim(route, scope, key, fingerprint, make).await?;
        self.held(&again, policy);
        Ok(again)
    }

    /// The entry `claimed` holds for approval, if it does; a request this claim made is
    /// announced.
    fn held(&self, claimed: &Claimed<'_>, policy: Option<&Approval>) -> Option<i64> {
        let Claimed::Settled(ClaimOutcome::AwaitingApproval {
            entry_id,
            requested,
            ..
        }) = claimed
        else {
            return None;
        };
        if *requested {
            self.notify_approvers(policy, *entry_id);
        }
        Some(*entry_id)
    }
}

/// How often a held request looks at its entry again.
const LOOK_AGAIN: Duration = Duration::from_millis(100);

/// How many approved calls one round takes to forward.
const TAKE: u32 = 16;

/// The approval a call must wait for, if `policy` (its route's, or its MCP tool's) matches it
/// ([`Approval::ask`]); a condition that could not be evaluated is said in the server's log too.
pub(crate) fn ask(
    policy: Option<&Approval>,
    args: Option<&serde_json::Value>,
    subjects: &[(String, String)],
) -> Option<ApprovalAsk> {
    let policy = policy?;
    let ask = policy.ask(args, subjects)?;
    if let (Some(why), Some(c)) = (&ask.unevaluated, &policy.when) {
        tracing::warn!(
            policy = %policy.name,
            condition = %c.source,
            error = %why,
            "the approval condition could not be evaluated: the call is held"
        );
    }
    Some(ask)
}

/// How a held call's wait ended.
pub(crate) enum Waited {
    /// Approved and run: the answer recorded for it.
    Ran(ResponseRecord),
    /// It left the approval's hands otherwise (rejected, expired, resolved by an operator):
    /// claim it again for its answer.
    Decided,
    /// Still undecided (or approved and running) when the wait ran out.
    Held,
}

impl Engine {
    /// Waits up to `hold` for held entry `entry_id` to be settled (approved and run, rejected,
    /// expired), looking at the ledger, where every instance's and the CLI's decisions land.
    pub(crate) async fn wait_for_decision(&self, entry_id: i64, hold: Duration) -> Waited {
        let deadline = Instant::now() + hold;
        while Instant::now() < deadline {
            tokio::time::sleep(LOOK_AGAIN.min(deadline - Instant::now())).await;
            let store = self.store.clone();
            let read = tokio::task::spawn_blocking(move || store.entry(entry_id, now_millis()));
            match read.await {
                Ok(Ok(d)) if d.summary.state == State::Completed => {
                    return d.response.map_or(Waited::Decided, Waited::Ran)
                }
                Ok(Ok(d))
                    if !matches!(d.summary.state, State::AwaitingApproval | State::Pending) =>
                {
                    return Waited::Decided
                }
                // A ledger that cannot answer now may answer next time; the wait is bounded.
                _ => {}
            }
        }
        Waited::Held
    }

    /// Takes the approved calls of this ledger (any instance's) and forwards each once, on a
    /// task of its own, as an operator's replay is; how many it took.
    pub async fn release_approved(self: &std::sync::Arc<Self>) -> usize {
        let lease = self
            .cfg
            .routes
            .iter()
            .filter(|r| r.approval.is_some() || r.tools.values().any(|t| t.approval.is_some()))
            .map(|r| r.lease)
            .max();
        let Some(lease) = lease else { return 0 };
        let taken = self
            .store
            .take_approved(
                self.owner.clone(),
                lease.as_millis() as i64,
                now_millis(),
                TAKE,
            )
            .recv()
            .await;
        let taken = match taken {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %e, "approved calls could not be taken");
                return 0;
            }
        };
        let n = taken.len();
        for rd in taken {
            let e = self.clone();
            self.requests
                .spawn(async move { e.forward_approved(rd).await });
        }
        n
    }

    async fn forward_approved(&self, rd: Redrive) {
        let id = rd.entry.id;
        let Some(route) = self.cfg.routes.iter().find(|r| r.name == rd.entry.route) else {
            let rep = self.report(
                id,
                format!("route {} is no longer configured", rd.entry.route),
            );
            let _ = self.settle(Outcome::Release(rep)).await;
            return;
        };
        match crate::redrive::replay(self, route, rd).await {
            Ok(Ok(status)) => tracing::info!(entry = id, status, "approved call forwarded"),
            Ok(Err(p)) => {
                tracing::warn!(entry = id, code = %p.code, detail = %p.detail, "approved call not completed")
            }
            Err(e) => tracing::warn!(entry = id, error = %e, "approved call could not be sent"),
        }
    }
}

/// The answer to a call still held when its request's wait ran out: `202 Accepted`, where to
/// see it, and when to ask again (with the same key, which attaches to the same entry).
pub(crate) fn pending(entry_id: i64, expires_at: Millis, key: &str) -> Response<ProxyBody> {
    let left = ((expires_at - now_millis()).max(0) as u64).div_ceil(1000);
    let body = json!({
        "type": "urn:idemgate:problem:approval-pending",
        "title": "Held for approval",
        "status": 202,
        "detail": format!(
            "held for approval by an operator, entry {entry_id}, expires at {}; send the same \
             request with the same key for its result",
            rfc3339(expires_at)
        ),
        "code": "approval-pending",
        "entry_id": entry_id,
        "expires": rfc3339(expires_at),
    });
    let headers = vec![
        (
            "content-type".to_owned(),
            "application/problem+json".to_owned(),
        ),
        ("retry-after".to_owned(), left.clamp(1, 5).to_string()),
        (
            "location".to_owned(),
            format!("/admin/v1/entries/{entry_id}"),
        ),
    ];
    let r = ResponseRecord {
        status: 202,
        headers,
        body: serde_json::to_vec(&body).unwrap_or_default(),
    };
    crate::respond::respond(r, Some(key), false, None)
}

/// How many times a webhook is tried, and the wait before the first retry (doubled each time).
const NOTIFY_TRIES: u32 = 5;
const NOTIFY_BACKOFF: Duration = Duration::from_secs(1);

impl Engine {
    /// Tells `policy`'s `notify` webhook of held entry `entry_id`, on a task of its own: retried
    /// with backoff, a failure logged, never in the way of a request.
    pub(crate) fn notify_approvers(&self, policy: Option<&Approval>, entry_id: i64) {
        let Some(hook) = policy.and_then(|a| a.notify.clone()) else {
            return;
        };
        let (store, client) = (self.store.clone(), self.client.clone());
        tokio::spawn(async move {
            let read = tokio::task::spawn_blocking(move || store.entry(entry_id, now_millis()));
            let Ok(Ok(entry)) = read.await else {
                tracing::warn!(
                    entry = entry_id,
                    "the approval webhook was not sent: the entry could not be read"
                );
                return;
            };
            let body = json!({
                "text": announce(&entry),
                "kind": "approval_requested",
                "entry": entry,
            });
            deliver(&client, &hook, &body, entry_id).await;
        });
    }
}

/// Posts `body` to `hook` about entry `entry_id`: tried [`NOTIFY_TRIES`] times with backoff, a
/// failure logged; whether it was delivered.
async fn deliver(
    client: &crate::forward::HttpClient,
    hook: &Notify,
    body: &serde_json::Value,
    entry_id: i64,
) -> bool {
    let body = serde_json::to_vec(body).unwrap_or_default();
    let mut wait = NOTIFY_BACKOFF;
    for attempt in 1..=NOTIFY_TRIES {
        match post(client, hook, &body).await {
            Ok(()) => return true,
            Err(why) if attempt == NOTIFY_TRIES => tracing::warn!(
                entry = entry_id, url = %hook.url, error = %why,
                "the approval webhook failed; the Approvals view and the log have it"
            ),
            Err(_) => {
                tokio::time::sleep(wait).await;
                wait *= 2;
            }
        }
    }
    false
}

/// The webhook's text (Slack's `text`): what waits, who asked, for how long, and where to decide.
fn announce(e: &idemgate_ledger::EntryDetail) -> String {
    let expires = e.approval.as_ref().map_or(0, |a| a.expires_at);
    let asked = match e.summary.scope.as_str() {
        "" => "a client with no scope",
        scope => scope,
    };
    format!(
        "idemgate: held for approval: {}, asked by {asked} (entry {}, key {}); expires at {}. \
         Approve or reject it in the console's Approvals view or with `idemgate approve`.",
        e.headline,
        e.summary.id,
        e.summary.key,
        rfc3339(expires)
    )
}

/// One POST of `body` to the webhook, signed as a route's requests are checked
/// (`t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`); a 2xx is delivered.
async fn post(
    client: &crate::forward::HttpClient,
    hook: &Notify,
    body: &[u8],
) -> Result<(), String> {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(a) = hook.url.authority() {
        if let Ok(v) = HeaderValue::from_str(a.as_str()) {
            headers.insert(header::HOST, v);
        }
    }
    if let Some(secret) = &hook.secret {
        let t = now_millis() / 1000;
        let sig = format!("t={t},v1={}", crate::signature::sign(&secret.0, t, body));
        if let Ok(v) = HeaderValue::from_str(&sig) {
            headers.insert(SIGNATURE_HEADER, v);
        }
    }
    let out = crate::forward::Outgoing {
        method: &Method::POST,
        uri: hook.url.clone(),
        headers: &headers,
        body: bytes::Bytes::copy_from_slice(body),
        timeout: Duration::from_secs(5),
    };
    match crate::forward::attempt(client, out).await {
        crate::forward::Attempt::Executed(r) if (200..300).contains(&r.status) => Ok(()),
        crate::forward::Attempt::Executed(r) | crate::forward::Attempt::Refused(r) => {
            Err(format!("answered {}", r.status))
        }
        crate::forward::Attempt::NotExecuted { why, .. }
        | crate::forward::Attempt::Unknown { why, .. } => Err(why),
    }
}

/// The header a webhook's signature travels in.
pub const SIGNATURE_HEADER: &str = "x-idemgate-signature";

/// An MCP call's answer while it is held: a tool result an agent reads (`isError`, so it is not
/// taken for the tool's own), which idemgate gives and never records as the call's outcome.
pub(crate) fn held_result(
    id: &serde_json::Value,
    entry_id: i64,
    expires_at: Millis,
    tagged: bool,
) -> Vec<u8> {
    tool_error(
        id,
        tagged,
        &format!(
            "held for approval by an operator, entry {entry_id}, expires at {}; call again with \
             the same arguments for the result",
            rfc3339(expires_at)
        ),
    )
}

/// A tool result with `isError` and one text: idemgate's own answer to an MCP call. `tagged`:
/// the client speaks a revision whose results name their type (2026-07-28 and later require
/// `resultType`; earlier clients may refuse a member they do not know).
pub(crate) fn tool_error(id: &serde_json::Value, tagged: bool, text: &str) -> Vec<u8> {
    let mut result = json!({"content": [{"type": "text", "text": text}], "isError": true});
    if tagged {
        result["resultType"] = json!("complete");
    }
    serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "result": result})).unwrap_or_default()
}
