//! One attempt of a claimed `tools/call` upstream, and what it means: the upstream's JSON-RPC
//! response for the call (a result, `isError` or not, is an outcome; an error that says the call
//! was never run releases the key; an internal error may have run it), or what the transport
//! says when no response came. A client's own call streams the upstream's events to it as they
//! come, all but the final response, which is given out once recorded. An operator's replay
//! opens a session of its own.

use std::sync::Mutex;
use std::time::Duration;

use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, Response};
use bytes::Bytes;
use http_body_util::Either;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use super::jsonrpc;
use super::sse::{self, EventBody};
use crate::forward::{self, Attempt, Deadline, HttpClient, Outgoing, UpstreamResponse};
use crate::respond::ProxyBody;

/// How each attempt of a claimed call reaches its upstream.
pub(crate) enum Via<'a> {
    /// An HTTP route's request, sent as it is.
    Http,
    /// An MCP route's `tools/call`.
    Mcp(&'a McpCall<'a>),
}

/// A `tools/call` sent upstream: a client's, streamed back to it through `sink`, or an operator's
/// replay, in a session it opens itself.
pub(crate) enum McpCall<'a> {
    Client { id: Value, sink: &'a Sink },
    Replay { tool: String },
}

impl McpCall<'_> {
    pub(crate) async fn attempt(&self, client: &HttpClient, out: Outgoing<'_>) -> Attempt {
        match self {
            McpCall::Client { id, sink } => call(client, out, id, Some(sink)).await,
            McpCall::Replay { tool } => replay(client, out, tool).await,
        }
    }
}

/// JSON-RPC errors that say the call never reached the tool: the message or its parameters were
/// refused (`-32700`, `-32600`, `-32601`, `-32602`), or its headers or protocol version
/// (`-32020`, `-32021`, `-32022`).
const NOT_RUN: &[i64] = &[-32700, -32600, -32601, -32602, -32020, -32021, -32022];
/// JSON-RPC errors after which the tool may or may not have run: an internal error, a closed
/// connection, a timeout.
const MAY_HAVE_RUN: &[i64] = &[-32603, -32000, -32001];

/// What the upstream's `message` (the response for the call, `raw` as it came) means.
fn outcome(message: &Value, raw: Bytes) -> Attempt {
    let resp = UpstreamResponse {
        status: 200,
        headers: vec![("content-type".into(), "application/json".into())],
        body: raw,
    };
    let Some(err) = message.get("error") else {
        return Attempt::Executed(resp);
    };
    let code = err.get("code").and_then(Value::as_i64).unwrap_or(0);
    let what = err.get("message").and_then(Value::as_str).unwrap_or("");
    if NOT_RUN.contains(&code) {
        Attempt::Refused(resp)
    } else if MAY_HAVE_RUN.contains(&code) {
        Attempt::Unknown {
            why: format!("the upstream answered the call with JSON-RPC error {code} ({what})"),
            timed_out: code == -32001,
        }
    } else {
        Attempt::Executed(resp)
    }
}

/// The response to request `id` among `messages` (a JSON body, or one event's data), with its text.
fn response_for(text: &str, id: &Value) -> Option<Value> {
    let v: Value = serde_json::from_str(text).ok()?;
    let is_it = |m: &Value| {
        m.get("id") == Some(id) && (m.get("result").is_some() || m.get("error").is_some())
    };
    match v {
        Value::Array(ms) => ms.into_iter().find(is_it),
        m if is_it(&m) => Some(m),
        _ => None,
    }
}

/// Sends the call and reads its answer, within the request's timeout.
async fn call(client: &HttpClient, out: Outgoing<'_>, id: &Value, sink: Option<&Sink>) -> Attempt {
    let deadline = Deadline::after(out.timeout);
    let resp = match forward::send(client, out, deadline).await {
        Ok(r) => r,
        Err(e) => return forward::classify(Err(e)),
    };
    let status = resp.status().as_u16();
    let stream = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
    if status == 200 && stream {
        return events(resp, id, sink, deadline).await;
    }
    let whole = match forward::collect(resp, deadline).await {
        Ok(r) => r,
        Err(e) => return forward::classify(Err(e)),
    };
    if forward::not_executed(status) || forward::outcome_unknown(status) {
        return forward::classify(Ok(whole));
    }
    if (400..500).contains(&status) {
        // The transport refused the call (a 404 for an ended session, a 400, a 401): the tool
        // did not run. The client is told as the upstream told it, and the key is released.
        return Attempt::Refused(whole);
    }
    if status != 200 {
        // A 202, or another status with no response in it: the call was taken, and what became
        // of it is not known.
        return Attempt::Unknown {
            why: format!("the upstream answered the call {status} with no response"),
            timed_out: false,
        };
    }
    let text = String::from_utf8_lossy(&whole.body);
    match response_for(&text, id) {
        Some(m) => outcome(&m, whole.body.clone()),
        None => Attempt::Unknown {
            why: "the upstream's answer to the call is not its JSON-RPC response".into(),
            timed_out: false,
        },
    }
}

/// An answer streamed as events: each passed on to the client as it comes (through `sink`), but
/// the call's own response, which is the attempt's outcome.
async fn events(
    resp: Response<hyper::body::Incoming>,
    id: &Value,
    sink: Option<&Sink>,
    deadline: Deadline,
) -> Attempt {
    let (parts, mut body) = resp.into_parts();
    if let Some(s) = sink {
        s.open(&forward::kept_headers(&parts.headers));
    }
    let mut parser = sse::Parser::default();
    let read = async {
        while let Some(frame) = http_body_util::BodyExt::frame(&mut body).await {
            let frame = match frame {
                Ok(f) => f,
                Err(e) => {
                    return Attempt::Unknown {
                        why: format!("the upstream's event stream failed: {e}"),
                        timed_out: false,
                    }
                }
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            let Ok(evs) = parser.push(&data) else {
                return Attempt::Unknown {
                    why: format!(
                        "the upstream sent an event over the {} MiB idemgate reads",
                        sse::MAX_EVENT >> 20
                    ),
                    timed_out: false,
                };
            };
            for ev in evs {
                if let Some(m) = ev.data.as_deref().and_then(|d| response_for(d, id)) {
                    let raw = Bytes::from(serde_json::to_vec(&m).unwrap_or_default());
                    return outcome(&m, raw);
                }
                if let Some(s) = sink {
                    s.event(ev.raw);
                }
            }
        }
        Attempt::Unknown {
            why: "the upstream's event stream ended without the call's response".into(),
            timed_out: false,
        }
    };
    match tokio::time::timeout_at(deadline.at, read).await {
        Ok(a) => a,
        Err(_) => Attempt::Unknown {
            why: format!("{:?}", deadline.passed()),
            timed_out: true,
        },
    }
}

/// The client's side of a call in flight: answered once, whole (a replay, an error, a JSON
/// response), or as a stream opened by the upstream's first event and ended by the response.
/// The call runs to its end whether or not the client is still there.
pub(crate) struct Sink {
    head: Mutex<Option<oneshot::Sender<Response<ProxyBody>>>>,
    tx: mpsc::Sender<Bytes>,
    rx: Mutex<Option<mpsc::Receiver<Bytes>>>,
}

/// Events a client may fall behind by before progress events are dropped for it (the response
/// itself is always sent).
const BEHIND: usize = 256;
/// How long the response waits for a client that does not read.
const LAST_WAIT: Duration = Duration::from_secs(30);

impl Sink {
    pub(crate) fn new() -> (Sink, oneshot::Receiver<Response<ProxyBody>>) {
        let (head, answer) = oneshot::channel();
        let (tx, rx) = mpsc::channel(BEHIND);
        let s = Sink {
            head: Mutex::new(Some(head)),
            tx,
            rx: Mutex::new(Some(rx)),
        };
        (s, answer)
    }

    fn take_head(&self) -> Option<oneshot::Sender<Response<ProxyBody>>> {
        self.head.lock().ok().and_then(|mut h| h.take())
    }

    /// Begins the stream, with the upstream's `headers`, unless begun.
    fn open(&self, headers: &[(String, String)]) {
        let Some(head) = self.take_head() else { return };
        let Some(rx) = self.rx.lock().ok().and_then(|mut r| r.take()) else {
            return;
        };
        let body = Either::Right(Either::Right(EventBody::new(rx)));
        let _ = head.send(crate::respond::response(
            200, headers, body, None, false, None,
        ));
    }

    fn event(&self, raw: Bytes) {
        // Dropped for a client that reads too slowly: its call must not wait for it.
        let _ = self.tx.try_send(raw);
    }

    /// Sends `message` (a notification) as an event, opening the stream if it is not open.
    pub(crate) fn notify(&self, message: &[u8]) {
        self.open(&[("content-type".into(), "text/event-stream".into())]);
        self.event(jsonrpc::event(message));
    }

    /// Answers whole, before anything was streamed.
    pub(crate) fn finish_now(&self, whole: Response<ProxyBody>) {
        if let Some(head) = self.take_head() {
            let _ = head.send(whole);
        }
    }

    /// Ends the answer with `message`: the last event of a stream, or the whole answer.
    pub(crate) async fn finish(&self, whole: Response<ProxyBody>, message: &[u8]) {
        match self.take_head() {
            Some(head) => {
                let _ = head.send(whole);
            }
            None => {
                let last = jsonrpc::event(message);
                let _ = tokio::time::timeout(LAST_WAIT, self.tx.send(last)).await;
            }
        }
    }
}

pub(crate) static POST: Method = Method::POST;

/// A POST of `body` to `uri`.
fn post<'h>(
    uri: &axum::http::Uri,
    headers: &'h HeaderMap,
    body: &Value,
    timeout: Duration,
) -> Outgoing<'h> {
    Outgoing {
        method: &POST,
        uri: uri.clone(),
        headers,
        body: Bytes::from(serde_json::to_vec(body).unwrap_or_default()),
        timeout,
    }
}
static DELETE: Method = Method::DELETE;

/// The protocol revision an operator's replay opens a session with, and the stateless one it
/// falls back to for a server that only speaks that.
const SESSION_VERSION: &str = "2025-11-25";
const STATELESS_VERSION: &str = "2026-07-28";

/// The stored request's headers as a replay's session sends them: without the first session's
/// own, taking JSON and event streams.
fn replay_headers(stored: &HeaderMap) -> HeaderMap {
    let mut headers = stored.clone();
    for h in [
        "mcp-session-id",
        "mcp-protocol-version",
        "mcp-method",
        "mcp-name",
    ] {
        headers.remove(h);
    }
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        header::ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    headers
}

/// The response to a replay's `initialize`, as JSON or in an event stream.
fn initialize_answer(hello: &UpstreamResponse, text: &str) -> Option<Value> {
    let id = json!("idemgate-initialize");
    let stream = hello
        .headers
        .iter()
        .any(|(n, v)| n == "content-type" && v.starts_with("text/event-stream"));
    if !stream {
        return response_for(text, &id);
    }
    sse::events(hello.body.as_ref())
        .into_iter()
        .find_map(|e| e.data.as_deref().and_then(|d| response_for(d, &id)))
}

/// The protocol revision a replay speaks, from the server's answer to `initialize` (none when it
/// refused it): a server of the stateless revision only gets the call in its own envelope.
fn negotiated(answer: Option<&Value>, body: &mut Value, info: &Value) -> Option<String> {
    match answer {
        Some(a) if a.get("result").is_some() => Some(
            a["result"]["protocolVersion"]
                .as_str()
                .unwrap_or(SESSION_VERSION)
                .to_owned(),
        ),
        Some(a) if a["error"]["code"].as_i64() == Some(-32022) => {
            body["params"]["_meta"] = json!({
                "io.modelcontextprotocol/protocolVersion": STATELESS_VERSION,
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": info,
            });
            Some(STATELESS_VERSION.to_owned())
        }
        _ => None,
    }
}

/// An operator's replay of a stored call: a session of its own (initialize, initialized, the
/// call, then the session ended), or, for a server that only takes the stateless revision, the
/// call alone with its envelope. A failed handshake did not run the tool.
async fn replay(client: &HttpClient, out: Outgoing<'_>, tool: &str) -> Attempt {
    let mut headers = replay_headers(out.headers);
    let info = json!({"name": "idemgate", "version": env!("CARGO_PKG_VERSION")});
    let init = json!({"jsonrpc": "2.0", "id": "idemgate-initialize", "method": "initialize",
        "params": {"protocolVersion": SESSION_VERSION, "capabilities": {}, "clientInfo": info}});
    let (uri, timeout) = (out.uri.clone(), out.timeout);
    let not_run = |why: String| Attempt::NotExecuted {
        why: format!("the upstream did not open an MCP session: {why}"),
        retry_after: None,
        class: "connect",
    };
    let hello = match forward::exchange(client, post(&uri, &headers, &init, timeout)).await {
        Ok(r) => r,
        Err(e) => return not_run(format!("{e:?}")),
    };
    let text = String::from_utf8_lossy(&hello.body).into_owned();
    let answer = initialize_answer(&hello, &text);
    let mut body: Value = serde_json::from_slice(&out.body).unwrap_or(Value::Null);
    body["id"] = json!("idemgate-replay");
    let session = hello
        .headers
        .iter()
        .find(|(n, _)| n == "mcp-session-id")
        .and_then(|(_, v)| HeaderValue::from_str(v).ok());
    let Some(version) = negotiated(answer.as_ref(), &mut body, &info) else {
        return not_run(format!(
            "initialize answered {}: {}",
            hello.status,
            text.chars().take(200).collect::<String>()
        ));
    };
    if let Some(s) = &session {
        headers.insert(HeaderName::from_static("mcp-session-id"), s.clone());
    }
    if let Ok(v) = HeaderValue::from_str(&version) {
        headers.insert(HeaderName::from_static("mcp-protocol-version"), v);
    }
    if version != STATELESS_VERSION {
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        if let Err(e) = forward::exchange(client, post(&uri, &headers, &initialized, timeout)).await
        {
            return not_run(format!("{e:?}"));
        }
    }
    headers.insert(
        HeaderName::from_static("mcp-method"),
        HeaderValue::from_static("tools/call"),
    );
    if let Ok(v) = HeaderValue::from_str(tool) {
        headers.insert(HeaderName::from_static("mcp-name"), v);
    }
    let a = call(
        client,
        post(&uri, &headers, &body, timeout),
        &json!("idemgate-replay"),
        None,
    )
    .await;
    if session.is_some() {
        let end = Outgoing {
            method: &DELETE,
            uri: uri.clone(),
            headers: &headers,
            body: Bytes::new(),
            timeout: out.timeout,
        };
        let _ = forward::exchange(client, end).await;
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_is_an_outcome_unless_it_says_the_tool_never_ran_or_may_have() {
        let a = |m: Value| outcome(&m, Bytes::new());
        assert!(matches!(
            a(json!({"id": 1, "result": {"content": [], "isError": true}})),
            Attempt::Executed(_)
        ));
        assert!(matches!(
            a(json!({"id": 1, "error": {"code": -32602, "message": "bad"}})),
            Attempt::Refused(_)
        ));
        assert!(matches!(
            a(json!({"id": 1, "error": {"code": -32603, "message": "boom"}})),
            Attempt::Unknown { .. }
        ));
        assert!(matches!(
            a(json!({"id": 1, "error": {"code": 4001, "message": "card declined"}})),
            Attempt::Executed(_)
        ));
    }

    #[test]
    fn the_call_s_response_is_found_by_its_id() {
        let id = json!("a");
        assert!(response_for(r#"{"jsonrpc":"2.0","id":"a","result":{}}"#, &id).is_some());
        assert!(response_for(r#"{"jsonrpc":"2.0","id":"b","result":{}}"#, &id).is_none());
        assert!(response_for(
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#,
            &id
        )
        .is_none());
        // A request of the server's that happens to reuse the id is not the response.
        assert!(response_for(
            r#"{"jsonrpc":"2.0","id":"a","method":"sampling/createMessage"}"#,
            &id
        )
        .is_none());
    }
}
