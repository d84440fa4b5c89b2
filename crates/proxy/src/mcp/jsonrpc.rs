//! The JSON-RPC side of an MCP route: which message a POST carries, idemgate's own errors as
//! JSON-RPC errors, and a stored result given to a retry under the retry's own `id`, as JSON or as
//! a one-event stream.

use axum::http::{header, HeaderMap, HeaderValue, Response, StatusCode};
use bytes::Bytes;
use http_body_util::{Either, Full};
use idemgate_ledger::canon;
use serde_json::{json, Map, Value};

use crate::problem::{Code, Problem};
use crate::respond::ProxyBody;
pub use crate::telemetry::TraceMeta;

/// JSON-RPC's own codes for a message idemgate will not take.
pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const INVALID_PARAMS: i64 = -32602;

/// Where a call may carry its key in its `_meta`.
pub const META_KEY: &str = "io.idemgate/idempotency-key";

/// A `tools/call` request.
#[derive(Debug, Clone)]
pub struct Call {
    pub id: Value,
    pub name: String,
    /// An object (`{}` when the call sent none).
    pub arguments: Value,
    /// `params.idempotencyKey` (SEP-3182's shape).
    pub params_key: Option<Value>,
    /// `params._meta["io.idemgate/idempotency-key"]`.
    pub meta_key: Option<Value>,
    /// The caller's trace context, from `params._meta`.
    pub trace: TraceMeta,
    /// `params._meta.progressToken`: the client takes progress notifications for this call.
    pub progress_token: Option<Value>,
}

/// The W3C trace context in `params._meta`, when the message carries one.
fn trace_meta(params: Option<&Map<String, Value>>) -> TraceMeta {
    let meta = params.and_then(|p| p.get("_meta"));
    let text = |k: &str| {
        meta.and_then(|m| m.get(k))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    TraceMeta {
        traceparent: text("traceparent"),
        tracestate: text("tracestate"),
    }
}

impl Call {
    /// What the ledger keeps as the entry's request: the call without its `id` (each retry has its
    /// own) and without `_meta` (progress tokens and envelopes differ per attempt).
    pub fn stored_body(&self) -> Vec<u8> {
        let mut params = Map::new();
        params.insert("name".into(), Value::String(self.name.clone()));
        params.insert("arguments".into(), self.arguments.clone());
        if let Some(k) = &self.params_key {
            params.insert("idempotencyKey".into(), k.clone());
        }
        let v = json!({"jsonrpc": "2.0", "id": self.id, "method": "tools/call", "params": params});
        serde_json::to_vec(&v).unwrap_or_default()
    }
}

/// What a POST to an MCP route carries.
#[derive(Debug)]
pub enum Message {
    /// A `tools/call` request: the operation idemgate makes happen once.
    ToolsCall(Call),
    /// A `tools/list` request: its answer says each tool's effect.
    ToolsList(TraceMeta),
    /// `notifications/cancelled` for the client's request `request_id`.
    Cancelled { request_id: Value },
    /// Anything else (initialize, notifications, responses, resources, prompts, pings, a batch
    /// without a `tools/call`): passed through.
    Other,
    /// Not taken: a JSON-RPC error (`code`, `message`) for `id`, answered with `status`.
    Refused {
        id: Value,
        code: i64,
        message: String,
        status: u16,
    },
}

/// What `body`, a POST to an MCP route, carries. A body that is not one JSON value (or repeats a
/// member name, which parsers read differently) is refused rather than forwarded: a `tools/call`
/// idemgate could not read must not reach the tool unclaimed.
pub fn classify(body: &[u8]) -> Message {
    let v = match canon::parse_json(body) {
        Ok(v) => v,
        Err(e) => {
            return Message::Refused {
                id: Value::Null,
                code: PARSE_ERROR,
                message: format!("idemgate reads MCP messages as JSON: {e}"),
                status: 400,
            }
        }
    };
    match v {
        Value::Array(batch) => {
            if batch.iter().any(|m| method(m) == Some("tools/call")) {
                Message::Refused {
                    id: Value::Null,
                    code: INVALID_REQUEST,
                    message: "idemgate takes a tools/call alone, not in a JSON-RPC batch".into(),
                    status: 400,
                }
            } else {
                Message::Other
            }
        }
        Value::Object(ref m) => match method(&v) {
            Some("tools/call") => tools_call(m),
            Some("tools/list") => {
                Message::ToolsList(trace_meta(m.get("params").and_then(Value::as_object)))
            }
            Some("notifications/cancelled") => match v.pointer("/params/requestId") {
                Some(id) => Message::Cancelled {
                    request_id: id.clone(),
                },
                None => Message::Other,
            },
            _ => Message::Other,
        },
        _ => Message::Refused {
            id: Value::Null,
            code: INVALID_REQUEST,
            message: "an MCP message is a JSON object".into(),
            status: 400,
        },
    }
}

fn method(m: &Value) -> Option<&str> {
    m.get("method").and_then(Value::as_str)
}

fn tools_call(m: &Map<String, Value>) -> Message {
    let id = m.get("id").cloned().unwrap_or(Value::Null);
    let refuse = |code, message: &str| Message::Refused {
        id: id.clone(),
        code,
        message: message.into(),
        status: 400,
    };
    if !matches!(id, Value::String(_) | Value::Number(_)) {
        return refuse(
            INVALID_REQUEST,
            "a tools/call is a request: its id is a string or a number",
        );
    }
    let params = m.get("params").and_then(Value::as_object);
    let Some(name) = params.and_then(|p| p.get("name")).and_then(Value::as_str) else {
        return refuse(INVALID_PARAMS, "a tools/call names its tool: params.name");
    };
    let arguments = match params.and_then(|p| p.get("arguments")) {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(a @ Value::Object(_)) => a.clone(),
        Some(_) => return refuse(INVALID_PARAMS, "params.arguments is an object"),
    };
    Message::ToolsCall(Call {
        id: id.clone(),
        name: name.to_owned(),
        arguments,
        params_key: params.and_then(|p| p.get("idempotencyKey")).cloned(),
        meta_key: params
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get(META_KEY))
            .cloned(),
        trace: trace_meta(params),
        progress_token: params
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get("progressToken"))
            .cloned(),
    })
}

/// How a client takes a complete answer: JSON unless its `Accept` leaves JSON out and takes an
/// event stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accept {
    Json,
    EventStream,
}

impl Accept {
    pub fn of(headers: &HeaderMap) -> Accept {
        let accept: Vec<&str> = headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|t| t.split(';').next().unwrap_or("").trim())
            .collect();
        let takes = |t: &str| accept.iter().any(|a| a.eq_ignore_ascii_case(t));
        if accept.is_empty() || takes("application/json") || takes("*/*") || takes("application/*")
        {
            Accept::Json
        } else if takes("text/event-stream") {
            Accept::EventStream
        } else {
            Accept::Json
        }
    }
}

/// One message as an event of a stream.
pub fn event(message: &[u8]) -> Bytes {
    let mut b = Vec::with_capacity(message.len() + 24);
    b.extend_from_slice(b"event: message\ndata: ");
    // A JSON text has no raw line breaks outside strings only when compact: re-encoded if needed.
    if message.contains(&b'\n') || message.contains(&b'\r') {
        let v: Value = serde_json::from_slice(message).unwrap_or(Value::Null);
        b.extend_from_slice(&serde_json::to_vec(&v).unwrap_or_default());
    } else {
        b.extend_from_slice(message);
    }
    b.extend_from_slice(b"\n\n");
    Bytes::from(b)
}

/// A complete answer: one JSON-RPC message, as `accept` takes it, with `status`.
pub fn answer(message: Vec<u8>, accept: Accept, status: u16) -> Response<ProxyBody> {
    let (ct, body) = match accept {
        Accept::Json => ("application/json", Bytes::from(message)),
        Accept::EventStream => ("text/event-stream", event(&message)),
    };
    let mut r = Response::new(Either::Left(Full::new(body)));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
    r
}

/// `message`, a stored JSON-RPC response, under `id`: the retry's own, which the client matches
/// answers by. `None` when it is not a JSON object.
pub fn with_id(message: &[u8], id: &Value) -> Option<Vec<u8>> {
    for_client(message, id, None)
}

/// [`with_id`], its result in the shape of the client's revision when `tagged` says which: a
/// result recorded under another revision (an operator's replay opens a session of its own)
/// gets `resultType` for a client whose revision requires it (2026-07-28 and later), and loses
/// it for an earlier one.
pub fn for_client(message: &[u8], id: &Value, tagged: Option<bool>) -> Option<Vec<u8>> {
    let mut v: Value = serde_json::from_slice(message).ok()?;
    let o = v.as_object_mut()?;
    o.insert("id".into(), id.clone());
    if let (Some(tagged), Some(Value::Object(result))) = (tagged, o.get_mut("result")) {
        if tagged {
            result
                .entry("resultType")
                .or_insert_with(|| Value::from("complete"));
        } else if result.get("resultType") == Some(&Value::from("complete")) {
            result.remove("resultType");
        }
    }
    serde_json::to_vec(&v).ok()
}

/// How a `tools/call` was answered, as its span and its approval's webhook tell it.
#[derive(Debug, PartialEq, Eq)]
pub enum ToolAnswer {
    /// The tool's result: `failed` when it says `isError: true`, the tool's own failure, with
    /// the result's first text.
    Result { failed: bool, text: Option<String> },
    /// A JSON-RPC error: its code and message.
    Error { code: i64, message: String },
    /// Not a JSON-RPC response.
    Unreadable,
}

/// How `message`, a `tools/call`'s JSON-RPC response, answered it.
pub fn tool_answer(message: &[u8]) -> ToolAnswer {
    let Ok(m) = serde_json::from_slice::<Value>(message) else {
        return ToolAnswer::Unreadable;
    };
    if let Some(r) = m.get("result") {
        return ToolAnswer::Result {
            failed: r["isError"] == Value::Bool(true),
            text: r["content"][0]["text"].as_str().map(str::to_owned),
        };
    }
    match m.get("error") {
        Some(e) => ToolAnswer::Error {
            code: e["code"].as_i64().unwrap_or_default(),
            message: e["message"].as_str().unwrap_or_default().to_owned(),
        },
        None => ToolAnswer::Unreadable,
    }
}

/// Whether a client whose `MCP-Protocol-Version` is `version` reads results that name their
/// type (`resultType`, 2026-07-28 and later: revisions are dates, so they compare as text).
pub fn tagged_results(version: Option<&str>) -> bool {
    version.is_some_and(|v| v >= "2026-07-28")
}

/// A JSON-RPC error response.
pub fn error_message(id: &Value, code: i64, message: &str, data: Option<Value>) -> Vec<u8> {
    let mut error = json!({"code": code, "message": message});
    if let Some(d) = data {
        error["data"] = d;
    }
    serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "error": error})).unwrap_or_default()
}

/// The JSON-RPC error answering request `id` when the upstream's transport refused the call with
/// `status` (its answer itself is passed on as it came).
pub fn upstream_refused(id: &Value, status: u16) -> Vec<u8> {
    let (code, ty) = Code::UpstreamRefused.jsonrpc();
    let data = json!({"type": ty, "status": status});
    error_message(
        id,
        code,
        &format!("the upstream refused the call ({status})"),
        Some(data),
    )
}

/// An idemgate problem as the JSON-RPC error answering request `id`: `data` has its `type`, its
/// `detail`, the `status` an HTTP route would have answered, `retryAfter` (seconds) and the
/// entry's id (`entryId`, `duplicateOf`) when it has them.
pub fn problem_message(id: &Value, p: &Problem) -> Vec<u8> {
    let (code, ty) = p.code.jsonrpc();
    let mut data = json!({"type": ty, "detail": p.detail, "status": p.status});
    if let Some(s) = p.retry_after {
        data["retryAfter"] = json!(s);
    }
    for (from, to) in [
        ("entry_id", "entryId"),
        ("duplicate_of", "duplicateOf"),
        ("upstream_status", "upstreamStatus"),
    ] {
        if let Some(v) = p.extra.get(from) {
            data[to] = v.clone();
        }
    }
    error_message(id, code, p.code.title(), Some(data))
}

/// An idemgate problem as a complete answer to request `id`: HTTP 200 with the JSON-RPC error,
/// which is where MCP clients read a request's failure (some treat any other status as a broken
/// transport), and `Retry-After` when the problem has one. The request's span records the problem.
pub fn problem_answer(id: &Value, p: &Problem, accept: Accept) -> Response<ProxyBody> {
    crate::telemetry::failed(p.code.as_str(), p.status >= 500);
    let mut r = answer(problem_message(id, p), accept, 200);
    if let Some(s) = p.retry_after {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(s));
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tools_call_is_read_with_its_keys_and_anything_else_passes() {
        let m = classify(br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"charge","arguments":{"amount":5},"idempotencyKey":"k1","_meta":{"io.idemgate/idempotency-key":"k2","progressToken":3}}}"#);
        let Message::ToolsCall(c) = m else {
            panic!("{m:?}")
        };
        assert_eq!((c.id, c.name.as_str()), (json!(7), "charge"));
        assert_eq!(c.arguments, json!({"amount": 5}));
        assert_eq!(c.params_key, Some(json!("k1")));
        assert_eq!(c.meta_key, Some(json!("k2")));
        assert_eq!(c.trace, TraceMeta::default());
        assert!(matches!(
            classify(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#),
            Message::ToolsList(t) if t == TraceMeta::default()
        ));
        let traced = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"traceparent":"00-a-b-01","tracestate":"x=1"}}}"#;
        let Message::ToolsList(t) = classify(traced) else {
            panic!("a list")
        };
        assert_eq!(
            (t.traceparent.as_deref(), t.tracestate.as_deref()),
            (Some("00-a-b-01"), Some("x=1"))
        );
        for other in [
            &br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#[..],
            br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
        ] {
            assert!(matches!(classify(other), Message::Other));
        }
    }

    #[test]
    fn what_idemgate_cannot_read_safely_is_refused_not_forwarded() {
        let code = |b: &[u8]| match classify(b) {
            Message::Refused { code, .. } => code,
            m => panic!("{m:?}"),
        };
        assert_eq!(code(b"{not json"), PARSE_ERROR);
        // Parsers disagree about a repeated member: the tool could run a call idemgate misread.
        assert_eq!(
            code(br#"{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/call"}"#),
            PARSE_ERROR
        );
        assert_eq!(
            code(br#"[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}]"#),
            INVALID_REQUEST
        );
        assert_eq!(
            code(br#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"x"}}"#),
            INVALID_REQUEST
        );
        assert_eq!(
            code(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}"#),
            INVALID_PARAMS
        );
        assert_eq!(
            code(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":[1]}}"#),
            INVALID_PARAMS
        );
    }

    #[test]
    fn a_stored_answer_takes_the_retry_s_id() {
        let stored = br#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#;
        let again = with_id(stored, &json!("retry-2")).expect("object");
        let v: Value = serde_json::from_slice(&again).expect("json");
        assert_eq!(v["id"], json!("retry-2"));
        assert_eq!(v["result"], json!({"content": []}));
    }

    #[test]
    fn accept_prefers_json_and_takes_a_stream_when_json_is_left_out() {
        let h = |v: &'static str| {
            let mut m = HeaderMap::new();
            m.insert(header::ACCEPT, HeaderValue::from_static(v));
            Accept::of(&m)
        };
        assert_eq!(h("application/json, text/event-stream"), Accept::Json);
        assert_eq!(h("text/event-stream"), Accept::EventStream);
        assert_eq!(h("text/event-stream;q=1"), Accept::EventStream);
        assert_eq!(Accept::of(&HeaderMap::new()), Accept::Json);
        assert_eq!(
            &event(b"{\"a\":1}")[..],
            b"event: message\ndata: {\"a\":1}\n\n"
        );
    }

    #[test]
    fn problems_become_the_documented_codes() {
        let p = Problem::new(Code::InFlight, "busy")
            .retry_after(2)
            .with("entry_id", 9);
        let v: Value = serde_json::from_slice(&problem_message(&json!(3), &p)).expect("json");
        assert_eq!(v["id"], json!(3));
        assert_eq!(v["error"]["code"], json!(-32080));
        assert_eq!(
            v["error"]["data"]["type"],
            json!("idempotency_key_in_progress")
        );
        assert_eq!(v["error"]["data"]["retryAfter"], json!(2));
        assert_eq!(v["error"]["data"]["entryId"], json!(9));
    }

    #[test]
    fn a_replayed_result_takes_the_shape_of_the_client_s_revision() {
        let stored = br#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":false}}"#;
        let as_for = |m: &[u8], tagged| {
            let v: Value =
                serde_json::from_slice(&for_client(m, &json!(9), tagged).expect("object"))
                    .expect("json");
            (v["id"].clone(), v["result"]["resultType"].clone())
        };
        assert_eq!(as_for(stored, Some(true)), (json!(9), json!("complete")));
        assert_eq!(as_for(stored, Some(false)), (json!(9), Value::Null));
        let typed = br#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"resultType":"complete"}}"#;
        assert_eq!(as_for(typed, Some(false)), (json!(9), Value::Null));
        assert_eq!(as_for(typed, None), (json!(9), json!("complete")));
        assert!(tagged_results(Some("2026-07-28")) && !tagged_results(Some("2025-11-25")));
        assert!(!tagged_results(None));
    }

    #[test]
    fn a_tool_s_answer_is_its_result_its_failure_or_an_error() {
        let ok = br#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"ok"}]}}"#;
        let failed = br#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":true}}"#;
        let error = br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"no"}}"#;
        let result = |failed, text: Option<&str>| ToolAnswer::Result {
            failed,
            text: text.map(str::to_owned),
        };
        assert_eq!(tool_answer(ok), result(false, Some("ok")));
        assert_eq!(tool_answer(failed), result(true, None));
        let no = ToolAnswer::Error {
            code: -32000,
            message: "no".into(),
        };
        assert_eq!(tool_answer(error), no);
        assert_eq!(tool_answer(b"<html>"), ToolAnswer::Unreadable);
        assert_eq!(tool_answer(br#"{"jsonrpc":"2.0"}"#), ToolAnswer::Unreadable);
    }
}
