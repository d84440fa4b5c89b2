//! The test upstream's MCP server (Streamable HTTP at `/mcp`), on the same raw sockets, so that it
//! can do what a well-behaved MCP server will not: run a tool and then drop the connection, stream
//! progress and then end the stream without the result.
//!
//! `initialize` opens a session (`mcp-session-id: s-N`; a request naming an unknown one gets 404);
//! `notifications/initialized` gets 202; `DELETE` ends a session; `tools/list` lists `charge` (no
//! annotations: destructive), `lookup` (`readOnlyHint`), `set_limit` (`idempotentHint`) and
//! `note` (`destructiveHint: false`). Each call of a tool other than `lookup` is one effect,
//! counted under `TOOL:ORDER` (its `order` argument). The call's `fault` argument (or the
//! `x-fault` header) picks a fault:
//! - `drop` — the effect, then the connection closes without an answer;
//! - `status:NNN` — as for HTTP writes (500/502/504 after the effect, 429/503 before it);
//! - `sse` — answers as an event stream: a progress notification, then the result;
//! - `sse-drop` — a progress notification, the effect, then the stream ends without the result;
//! - `slow:MS` — the effect, then the answer after MS milliseconds (as a stream with `sse`:
//!   `sse-slow:MS`, progress first);
//! - `rpc-error:CODE` — a JSON-RPC error CODE (after the effect, except for -32602);
//! - `is-error` — the effect, then a result with `isError: true`.

use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::upstream::{Counts, Req};

/// Answers an MCP request; `Ok(false)` when the connection must close.
pub(crate) async fn answer<S: AsyncWrite + Unpin>(
    s: &mut S,
    c: &Counts,
    req: &Req,
) -> std::io::Result<bool> {
    match req.method.as_str() {
        "DELETE" => {
            c.mcp_sessions_ended.fetch_add(1, Ordering::SeqCst);
            write(s, 200, &[], "").await?;
            return Ok(true);
        }
        "GET" => {
            write(s, 405, &[], "").await?;
            return Ok(true);
        }
        _ => {}
    }
    let msg: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
    let id = msg.get("id").cloned().unwrap_or(Value::Null);
    let method = msg["method"].as_str().unwrap_or("");
    if let Ok(mut m) = c.mcp_methods.lock() {
        m.push(method.to_owned());
    }
    let session = req.header("mcp-session-id");
    if method != "initialize" && session.is_some_and(|s| !c.has_session(s)) {
        write(s, 404, &[], r#"{"error":"no such session"}"#).await?;
        return Ok(true);
    }
    match method {
        "initialize" => {
            let n = c.mcp_sessions.fetch_add(1, Ordering::SeqCst) + 1;
            let version = msg["params"]["protocolVersion"]
                .as_str()
                .unwrap_or("2025-11-25");
            let result = json!({"protocolVersion": version, "capabilities": {"tools": {}},
                "serverInfo": {"name": "test-upstream", "version": "1"}});
            let sid = format!("s-{n}");
            write_json(
                s,
                &[("mcp-session-id", sid)],
                &json!({"jsonrpc": "2.0", "id": id, "result": result}),
            )
            .await?;
        }
        "tools/list" => {
            let tools = json!([
                {"name": "charge", "inputSchema": {"type": "object"}},
                {"name": "lookup", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}},
                {"name": "set_limit", "inputSchema": {"type": "object"}, "annotations": {"idempotentHint": true}},
                {"name": "note", "inputSchema": {"type": "object"}, "annotations": {"destructiveHint": false}},
            ]);
            write_json(
                s,
                &[],
                &json!({"jsonrpc": "2.0", "id": id, "result": {"tools": tools}}),
            )
            .await?;
        }
        "tools/call" => return call(s, c, req, &msg, id).await,
        _ if id.is_null() => write(s, 202, &[], "").await?,
        _ => write_json(s, &[], &json!({"jsonrpc": "2.0", "id": id, "result": {}})).await?,
    }
    Ok(true)
}

#[allow(
    clippy::too_many_lines,
    reason = "one fault per arm: the fake upstream's behaviour read in one place"
)]
async fn call<S: AsyncWrite + Unpin>(
    s: &mut S,
    c: &Counts,
    req: &Req,
    msg: &Value,
    id: Value,
) -> std::io::Result<bool> {
    let tool = msg["params"]["name"].as_str().unwrap_or("").to_owned();
    let args = &msg["params"]["arguments"];
    if let Ok(mut m) = c.mcp_calls.lock() {
        m.push((tool.clone(), args.clone(), req.headers.clone()));
    }
    let order = match &args["order"] {
        Value::String(o) => o.clone(),
        other => other.to_string(),
    };
    let fault = args["fault"]
        .as_str()
        .map(str::to_owned)
        .or_else(|| req.header("x-fault").map(str::to_owned))
        .unwrap_or_default();
    let effect_key = format!("{tool}:{order}");
    // Counted under the key it was sent too, for the reconcile probe
    // (`GET /v1/charges?idempotency_key=K`).
    let sent_key = req.header("idempotency-key").map(str::to_owned);
    let effect = |c: &Counts| {
        if let Some(k) = &sent_key {
            c.note_effect_of(k);
        }
        c.effect(&effect_key)
    };
    if tool == "lookup" {
        let n = c.reads.fetch_add(1, Ordering::SeqCst) + 1;
        let result = json!({"content": [{"type": "text", "text": format!("read {n}")}]});
        write_json(
            s,
            &[],
            &json!({"jsonrpc": "2.0", "id": id, "result": result}),
        )
        .await?;
        return Ok(true);
    }
    let mut parts = fault.split(':');
    match (parts.next().unwrap_or(""), parts.next()) {
        ("status", Some(code)) => {
            let code: u16 = code.parse().unwrap_or(500);
            if matches!(code, 500 | 502 | 504) {
                effect(c);
            }
            let extra = if matches!(code, 429 | 503) {
                vec![("retry-after", "1".to_owned())]
            } else {
                vec![]
            };
            write(s, code, &extra, &format!(r#"{{"error":{code}}}"#)).await?;
            return Ok(true);
        }
        ("rpc-error", Some(code)) => {
            let code: i64 = code.parse().unwrap_or(-32603);
            if code != -32602 {
                effect(c);
            }
            let m = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": "the tool's own words"}});
            write_json(s, &[], &m).await?;
            return Ok(true);
        }
        _ => {}
    }
    let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress",
        "params": {"progressToken": 1, "progress": 1, "total": 2}});
    let sse = fault.starts_with("sse");
    if sse {
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n";
        s.write_all(head.as_bytes()).await?;
        s.write_all(format!("event: message\ndata: {progress}\n\n").as_bytes())
            .await?;
        s.flush().await?;
    }
    let n = effect(c);
    if fault == "drop" || fault == "sse-drop" {
        return Ok(false);
    }
    if let Some(ms) = fault
        .strip_prefix("slow:")
        .or_else(|| fault.strip_prefix("sse-slow:"))
    {
        tokio::time::sleep(Duration::from_millis(ms.parse().unwrap_or(1000))).await;
    }
    let result = json!({
        "content": [{"type": "text", "text": format!("{tool} {order}: effect {n}")}],
        "structuredContent": {"effect": n, "order": order},
        "isError": fault == "is-error",
    });
    let m = json!({"jsonrpc": "2.0", "id": id, "result": result});
    if sse {
        s.write_all(format!("event: message\ndata: {m}\n\n").as_bytes())
            .await?;
        return Ok(false);
    }
    write_json(s, &[], &m).await?;
    Ok(true)
}

async fn write_json<S: AsyncWrite + Unpin>(
    s: &mut S,
    extra: &[(&str, String)],
    v: &Value,
) -> std::io::Result<()> {
    write(s, 200, extra, &v.to_string()).await
}

async fn write<S: AsyncWrite + Unpin>(
    s: &mut S,
    status: u16,
    extra: &[(&str, String)],
    body: &str,
) -> std::io::Result<()> {
    let mut out = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (n, v) in extra {
        out.push_str(&format!("{n}: {v}\r\n"));
    }
    out.push_str("\r\n");
    out.push_str(body);
    s.write_all(out.as_bytes()).await
}
