//! What the operator actions need of the data plane: an entry's stored request sent upstream
//! again through its route (retries, settlement and all), and a route's reconcile probe sent.
//! Who may do this, to which entries, and what an answer means are the operations layer's
//! decisions; this module only speaks HTTP.

use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Uri};
use bytes::Bytes;
use idemgate_ledger::{EntryDetail, Redrive, RequestRecord, ResponseRecord};

use crate::config::{Protocol, Reconcile, Route};
use crate::drive::{drive, ClaimedCall};
use crate::engine::{Engine, UPSTREAM_KEY_HEADER};
use crate::forward::{self, Attempt};
use crate::mcp::attempt::{McpCall, Via};
use crate::problem::Problem;

/// Why a stored request or a probe could not be sent at all.
#[derive(Debug, thiserror::Error)]
pub enum RedriveError {
    /// The stored request's path makes no URI on the route's upstream.
    #[error("the stored request cannot be sent again: {0}")]
    StoredRequest(String),
    /// The route's probe URL, filled in, is not a URI.
    #[error("the route's reconcile probe URL is not a URI: {0}")]
    ProbeUrl(String),
}

/// How a re-driven request ended: the upstream's final status, or the problem the proxy would
/// have answered a client with (not executed, unknown).
pub type Redriven = Result<u16, Problem>;

/// The key `d`'s upstream was sent ([`sent_key`]).
pub fn upstream_key(d: &EntryDetail) -> String {
    sent_key(&d.summary.key, d.request.as_ref())
}

/// The key the upstream of an entry with `key` and stored `request` was sent: kept with its
/// request when it is not the entry's own ([`crate::keys::upstream_key`]), else the entry's key.
fn sent_key(key: &str, request: Option<&RequestRecord>) -> String {
    request
        .and_then(|r| r.headers.iter().find(|(n, _)| n == UPSTREAM_KEY_HEADER))
        .map_or_else(|| key.to_owned(), |(_, v)| v.clone())
}

/// Sends the stored request of `rd`'s entry (already taken back from the ledger for its attempt:
/// an operator's re-drive, or an approved call taken) upstream through `route` as the proxy sends
/// a write: the route's credential, the key the first attempt sent, its retries, and its outcome
/// recorded on the entry.
pub async fn replay(e: &Engine, route: &Route, rd: Redrive) -> Result<Redriven, RedriveError> {
    let Redrive {
        entry: d,
        request,
        attempt,
    } = rd;
    let mut headers = HeaderMap::new();
    for (n, v) in &request.headers {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(n.as_bytes()),
            HeaderValue::from_str(v),
        ) {
            headers.append(n, v);
        }
    }
    if let Ok(v) = HeaderValue::from_str(&route.upstream.authority) {
        headers.insert(axum::http::header::HOST, v);
    }
    if let Some(a) = &route.upstream_auth {
        a.set_in(&mut headers);
    }
    // The key the first attempt sent, as the proxy does: a replay is the same request.
    headers.remove(UPSTREAM_KEY_HEADER);
    crate::keys::send_key(route, &mut headers, &sent_key(&d.key, Some(&request)));
    let method = Method::from_bytes(request.method.as_bytes()).unwrap_or(Method::POST);
    let uri = forward::upstream_uri(&route.upstream, &request.path)
        .map_err(RedriveError::StoredRequest)?;
    // An MCP entry's call is sent as a new `tools/call`, in a session of its own.
    let mcp = (route.protocol == Protocol::Mcp).then(|| McpCall::Replay {
        tool: d.tool.clone().unwrap_or_default(),
    });
    let call = ClaimedCall {
        entry_id: d.id,
        first_attempt: attempt,
        effect: d.effect,
        via: mcp.as_ref().map_or(Via::Http, Via::Mcp),
        method: &method,
        uri,
        headers: &headers,
        body: Bytes::from(request.body),
    };
    let r = drive(e, route, call).await;
    Ok(r.map(|r| r.status))
}

/// What a reconcile probe heard.
#[derive(Debug, Clone)]
pub enum ProbeAnswer {
    /// A final answer (the effect's record, or a permanent refusal such as `404`).
    Executed(ResponseRecord),
    /// A refusal for the probe's credentials (401, 403, 407): says nothing of the effect.
    Refused(u16),
    /// No final answer: not executed, or unknown.
    Silent,
}

fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Sends `probe`, `route`'s reconcile probe, for entry `d`: its `{key}` is the key the upstream
/// was sent, its `{scope}` the entry's scope.
pub async fn probe(
    e: &Engine,
    route: &Route,
    probe: &Reconcile,
    d: &EntryDetail,
) -> Result<ProbeAnswer, RedriveError> {
    let url = probe
        .url
        .replace("{key}", &encode(&upstream_key(d)))
        .replace("{scope}", &encode(&d.summary.scope));
    let uri: Uri = url
        .parse()
        .map_err(|err| RedriveError::ProbeUrl(format!("{err}")))?;
    let mut headers = HeaderMap::new();
    if let Some(a) = uri.authority() {
        if let Ok(v) = HeaderValue::from_str(a.as_str()) {
            headers.insert(axum::http::header::HOST, v);
        }
    }
    // The route's credential goes only to the route's own upstream, never to another host a
    // probe may name.
    let same_upstream = route.upstream.names(&uri);
    if let Some(a) = route.upstream_auth.as_ref().filter(|_| same_upstream) {
        a.set_in(&mut headers);
    }
    let method = Method::from_bytes(probe.method.as_bytes()).unwrap_or(Method::GET);
    let out = forward::Outgoing {
        method: &method,
        uri,
        headers: &headers,
        body: Bytes::new(),
        timeout: route.timeout,
    };
    Ok(match forward::attempt(&e.client, out).await {
        Attempt::Executed(r) => ProbeAnswer::Executed(r.record()),
        Attempt::Refused(r) => ProbeAnswer::Refused(r.status),
        Attempt::NotExecuted { .. } | Attempt::Unknown { .. } => ProbeAnswer::Silent,
    })
}
