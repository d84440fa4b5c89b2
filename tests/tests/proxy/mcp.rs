//! An MCP route in front of the test upstream's MCP server: a retried `tools/call` under a new
//! JSON-RPC id runs once and gets its own id back; reads and everything else pass through; event
//! streams are passed on and their result recorded; lost answers are held, refusals release the
//! key; the operator's replay opens a session of its own.

use std::io::{Read, Write};

use super::*;

mod approvals;
mod refusals;
mod sessions;

const MCP_CONFIG: &str = r#"
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
ledger = "{ledger}"

[defaults]
lease = "4s"
ttl = "1h"

[[routes]]
name = "tools"
path = "/mcp"
upstream = "{upstream}"
protocol = "mcp"
scope.header = "X-Agent-Id"
timeout = "2s"
retry = { attempts = 3, base = "10ms", max = "50ms" }
reconcile = { url = "{upstream}/v1/charges?idempotency_key={key}" }

[routes.tools."set_limit"]
key.arg = "/request_id"

[routes.tools."refund"]
effect = "idempotent"

[routes.tools."charge"]
subject = { customer = "/customer", amount = "/amount" }
money = { minor_units = true, currency = "USD" }
"#;

fn fx() -> Fx {
    Fx::with(MCP_CONFIG)
}

const ACCEPT: &str = "application/json, text/event-stream";

/// The protocol revision the tests speak unless they say otherwise.
const REVISION: &str = "2025-11-25";

/// A JSON-RPC message POSTed to the MCP route, as agent-7.
fn rpc(f: &Fx, msg: &serde_json::Value, extra: &[(&str, &str)]) -> Resp {
    rpc_at(f.proxy.addr, REVISION, msg, extra)
}

/// A JSON-RPC message POSTed to the MCP route at `addr` under the protocol `revision`, as
/// agent-7, with `extra` headers (a session, a stateless revision's method and name).
fn rpc_at(
    addr: std::net::SocketAddr,
    revision: &str,
    msg: &serde_json::Value,
    extra: &[(&str, &str)],
) -> Resp {
    let mut h = vec![
        ("content-type", "application/json"),
        ("accept", ACCEPT),
        ("x-agent-id", "agent-7"),
        ("mcp-protocol-version", revision),
    ];
    h.extend_from_slice(extra);
    request(
        addr,
        "POST",
        "/mcp",
        &h,
        &serde_json::to_vec(msg).expect("json"),
    )
}

fn call(id: i64, tool: &str, args: serde_json::Value) -> serde_json::Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": tool, "arguments": args, "_meta": {"progressToken": id}}})
}

fn list(f: &Fx) {
    let r = rpc(
        f,
        &json!({"jsonrpc": "2.0", "id": 0, "method": "tools/list"}),
        &[],
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["result"]["tools"][0]["name"], "charge");
}

fn effects(f: &Fx, tool: &str, order: &str) -> u64 {
    f.up.counts.effects(&format!("{tool}:{order}"))
}

/// The JSON-RPC message that ends an answer: the JSON body, or a stream's last event.
fn last_message(r: &Resp) -> serde_json::Value {
    if r.header("content-type") != Some("text/event-stream") {
        return r.json();
    }
    let text = r.text();
    let data = text
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("data: "))
        .unwrap_or_else(|| panic!("no event: {text}"));
    serde_json::from_str(data).expect("an event's JSON")
}

/// The JSON-RPC error's `data.type` of an answer (which is HTTP 200, as MCP clients read errors).
fn error_type(r: &Resp) -> String {
    assert_eq!(r.status, 200, "{}", r.text());
    last_message(r)["error"]["data"]["type"]
        .as_str()
        .unwrap_or_else(|| panic!("not an error: {}", r.text()))
        .to_owned()
}

#[test]
fn a_call_retried_under_a_new_id_runs_once_and_is_answered_with_the_retry_s_id() {
    let f = fx();
    // The session's handshake passes through, its header intact.
    let init = json!({"jsonrpc": "2.0", "id": "i", "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let r = rpc(&f, &init, &[]);
    assert_eq!(r.status, 200, "{}", r.text());
    let session = r.header("mcp-session-id").expect("session id").to_owned();
    assert_eq!(r.json()["id"], "i");
    let r = rpc(
        &f,
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        &[("mcp-session-id", &session)],
    );
    assert_eq!(r.status, 202);
    let args = json!({"order": "o-1", "amount": 4999, "customer": "cus_1"});
    let first = rpc(
        &f,
        &call(1, "charge", args.clone()),
        &[("mcp-session-id", &session)],
    );
    assert_eq!(first.status, 200, "{}", first.text());
    let v = first.json();
    assert_eq!(
        (
            v["id"].clone(),
            v["result"]["structuredContent"]["effect"].clone()
        ),
        (json!(1), json!(1))
    );
    // The agent lost the answer and calls again: a new id, a new session, its arguments spelt
    // in another order.
    let again = json!({"jsonrpc": "2.0", "id": "retry-2", "method": "tools/call",
        "params": {"name": "charge", "arguments": {"customer": "cus_1", "amount": 4999, "order": "o-1"}}});
    let r = rpc(&f, &again, &[]);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("idempotent-replayed"), Some("true"));
    let v2 = r.json();
    assert_eq!(v2["id"], "retry-2", "the retry's own id");
    assert_eq!(v2["result"], v["result"], "the first call's result");
    assert_eq!(effects(&f, "charge", "o-1"), 1, "charged once");
    // Other arguments are another call.
    let r = rpc(
        &f,
        &call(3, "charge", json!({"order": "o-2", "amount": 1})),
        &[],
    );
    assert_eq!(r.json()["result"]["structuredContent"]["effect"], 1);
    assert_eq!(effects(&f, "charge", "o-2"), 1);
    // The ledger keeps the tool and its arguments, never the id or _meta; listed by tool.
    let entries = f.entries(&["--tool", "charge"]);
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert!(entries
        .iter()
        .all(|e| e["route"] == "tools" && e["tool"] == "charge"));
    assert!(f.entries(&["--tool", "refund"]).is_empty());
    // The tool's subjects come from its arguments, its amount in cents read as money.
    let by_customer = f.entries(&["--subject", "customer=cus_1"]);
    assert_eq!(by_customer.len(), 1, "{by_customer:?}");
    assert_eq!(
        by_customer[0]["subjects"],
        json!({"amount": "49.99", "currency": "USD", "customer": "cus_1"})
    );
    let id = entries[1]["id"].to_string();
    let shown = idemgate_json(&["show", "--ledger", &f.ledger(), &id, "--json"]);
    let body: serde_json::Value =
        serde_json::from_slice(&body_bytes(&shown["request"]["body"])).expect("json body");
    assert_eq!(body["params"]["name"], "charge");
    assert_eq!(body["params"]["arguments"], args);
    assert!(body["params"].get("_meta").is_none(), "{body}");
    let by_api = f.proxy.admin_get("/admin/v1/entries?tool=charge").json();
    assert_eq!(
        by_api["entries"].as_array().map(Vec::len),
        Some(2),
        "{by_api}"
    );
    // The upstream was sent the client's session and a key it can dedupe by: the derived one.
    let calls = f.up.counts.mcp_calls.lock().expect("calls").clone();
    let h = |n: &str| {
        calls[0]
            .2
            .iter()
            .find(|(k, _)| k == n)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(h("mcp-session-id"), Some(session));
    assert!(
        h("idempotency-key").is_some_and(|k| k.starts_with("mcp:")),
        "{:?}",
        h("idempotency-key")
    );
}

/// The stored body as the CLI's JSON gives it (text, when it is UTF-8).
fn body_bytes(v: &serde_json::Value) -> Vec<u8> {
    v.as_str()
        .map(|s| s.as_bytes().to_vec())
        .unwrap_or_else(|| panic!("a body: {v}"))
}

#[test]
fn the_call_s_own_key_wins_and_a_key_reused_with_other_arguments_is_refused() {
    let f = fx();
    // params.idempotencyKey (SEP-3182's shape).
    let with_key = |id, amount| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "charge", "arguments": {"order": "o-k", "amount": amount}, "idempotencyKey": "key-1"}})
    };
    assert_eq!(
        rpc(&f, &with_key(1, 5), &[]).json()["result"]["structuredContent"]["effect"],
        1
    );
    let r = rpc(&f, &with_key(2, 6), &[]);
    assert_eq!(error_type(&r), "idempotency_key_reuse");
    assert_eq!(r.json()["error"]["code"], -32081);
    assert_eq!(r.json()["id"], 2);
    assert_eq!(effects(&f, "charge", "o-k"), 1);
    // The Idempotency-Key header, and the key in _meta.
    let r = rpc(
        &f,
        &call(3, "charge", json!({"order": "o-h", "amount": 1})),
        &[("idempotency-key", "key-2")],
    );
    assert!(r.json()["result"].is_object(), "{}", r.text());
    let r = rpc(
        &f,
        &call(4, "charge", json!({"order": "o-h", "amount": 2})),
        &[("idempotency-key", "key-2")],
    );
    assert_eq!(error_type(&r), "idempotency_key_reuse");
    let meta = |id, amount| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "charge",
            "arguments": {"order": "o-m", "amount": amount}, "_meta": {"io.idemgate/idempotency-key": "key-3"}}})
    };
    assert!(rpc(&f, &meta(5, 1), &[]).json()["result"].is_object());
    assert_eq!(
        error_type(&rpc(&f, &meta(6, 2), &[])),
        "idempotency_key_reuse"
    );
    // The configured argument: a retry with a fresh timestamp is the same call's key, and so a
    // reuse; another request_id is another call.
    let limit = |id, rid: &str, at| {
        call(
            id,
            "set_limit",
            json!({"order": "o-l", "request_id": rid, "at": at}),
        )
    };
    assert!(rpc(&f, &limit(7, "r-1", 1), &[]).json()["result"].is_object());
    assert_eq!(
        error_type(&rpc(&f, &limit(8, "r-1", 2), &[])),
        "idempotency_key_reuse"
    );
    assert!(rpc(&f, &limit(9, "r-2", 3), &[]).json()["result"].is_object());
    assert_eq!(effects(&f, "set_limit", "o-l"), 2);
    // A bad key is refused before anything is claimed.
    let r = rpc(
        &f,
        &call(10, "charge", json!({"order": "o-x"})),
        &[("idempotency-key", "")],
    );
    assert_eq!(error_type(&r), "invalid_key");
    assert_eq!(effects(&f, "charge", "o-x"), 0);
}

#[test]
fn reads_and_every_other_message_pass_through_and_unlisted_tools_are_destructive() {
    let f = fx();
    // Before tools/list idemgate cannot know lookup is a read: it is held to once.
    for id in [1, 2] {
        let r = rpc(&f, &call(id, "lookup", json!({"q": "a"})), &[]);
        assert_eq!(r.json()["id"], id);
    }
    assert_eq!(
        f.up.counts.reads.load(std::sync::atomic::Ordering::SeqCst),
        1
    );
    list(&f);
    for id in [3, 4] {
        let r = rpc(&f, &call(id, "lookup", json!({"q": "b"})), &[]);
        assert_eq!(r.status, 200);
        assert_eq!(r.header("idempotent-replayed"), None);
    }
    assert_eq!(
        f.up.counts.reads.load(std::sync::atomic::Ordering::SeqCst),
        3,
        "reads run every time"
    );
    assert_eq!(
        f.entries(&["--tool", "lookup"]).len(),
        1,
        "only the call before the list"
    );
    // Pings, DELETE and GET pass; the server's answers (a 405 for GET) come back as they are.
    let r = rpc(
        &f,
        &json!({"jsonrpc": "2.0", "id": 9, "method": "ping"}),
        &[],
    );
    assert_eq!(r.json()["id"], 9);
    let r = f
        .proxy
        .send("GET", "/mcp", &[("accept", "text/event-stream")], b"");
    assert_eq!(r.status, 405);
    let r = f
        .proxy
        .send("DELETE", "/mcp", &[("mcp-session-id", "s-1")], b"");
    assert_eq!(r.status, 200);
    assert_eq!(
        f.up.counts
            .mcp_sessions_ended
            .load(std::sync::atomic::Ordering::SeqCst),
        1
    );
    // What idemgate cannot read is not forwarded.
    let before = f.up.counts.mcp_methods.lock().expect("methods").len();
    let r = f.proxy.send(
        "POST",
        "/mcp",
        &[("content-type", "application/json")],
        b"{\"jsonrpc\":",
    );
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["code"], -32700);
    let batch = json!([call(1, "charge", json!({"order": "b"}))]);
    let r = rpc(&f, &batch, &[]);
    assert_eq!(
        (r.status, r.json()["error"]["code"].clone()),
        (400, json!(-32600))
    );
    assert_eq!(
        f.up.counts.mcp_methods.lock().expect("methods").len(),
        before
    );
}

/// What a `tools/list` taught idemgate is kept in the ledger: after a SIGKILL and a restart, a
/// listed read still passes through unclaimed.
#[test]
fn a_listed_read_is_still_known_after_a_sigkill_and_a_restart() {
    let mut f = fx();
    list(&f);
    f.proxy.kill();
    f.restart();
    for id in [1, 2] {
        let r = rpc(&f, &call(id, "lookup", json!({"q": "a"})), &[]);
        assert_eq!(r.json()["id"], id, "{}", r.text());
    }
    let reads = f.up.counts.reads.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(reads, 2, "a read runs every time");
    assert!(
        f.entries(&["--tool", "lookup"]).is_empty(),
        "and is never claimed"
    );
}

#[test]
fn an_event_stream_is_passed_on_as_it_comes_and_its_result_recorded() {
    let f = fx();
    let r = rpc(
        &f,
        &call(1, "charge", json!({"order": "o-s", "fault": "sse"})),
        &[],
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let text = r.text();
    let progress = text.find("notifications/progress").expect(&text);
    let result = text.find("\"result\"").expect(&text);
    assert!(progress < result, "progress first: {text}");
    // A retry that takes only JSON gets the recorded result as JSON; one that takes only a
    // stream gets it as one event.
    let again = call(2, "charge", json!({"order": "o-s", "fault": "sse"}));
    let r = rpc(&f, &again, &[("accept", "application/json")]);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.json()["id"], 2);
    assert_eq!(r.json()["result"]["structuredContent"]["effect"], 1);
    let h = [
        ("content-type", "application/json"),
        ("accept", "text/event-stream"),
        ("x-agent-id", "agent-7"),
    ];
    let again = call(3, "charge", json!({"order": "o-s", "fault": "sse"}));
    let r = f.proxy.send(
        "POST",
        "/mcp",
        &h,
        &serde_json::to_vec(&again).expect("json"),
    );
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    assert!(
        r.text().starts_with("event: message\ndata: {"),
        "{}",
        r.text()
    );
    assert!(r.text().contains("\"id\":3"), "{}", r.text());
    assert_eq!(effects(&f, "charge", "o-s"), 1);
}

#[test]
fn a_call_whose_answer_was_lost_is_held_and_refusals_release_the_key() {
    let f = fx();
    // The tool ran and the connection dropped: held for an operator, never run again.
    for fault in ["drop", "sse-drop", "status:500", "rpc-error:-32603"] {
        let order = format!("o-{fault}");
        let r = rpc(
            &f,
            &call(1, "charge", json!({"order": order, "fault": fault})),
            &[],
        );
        assert_eq!(error_type(&r), "outcome_unknown", "{fault}");
        let m = last_message(&r);
        assert_eq!(m["error"]["code"], -32082);
        assert_eq!(m["id"], 1);
        assert!(m["error"]["data"]["entryId"].is_i64(), "{}", r.text());
        let r = rpc(
            &f,
            &call(2, "charge", json!({"order": order, "fault": fault})),
            &[],
        );
        assert_eq!(error_type(&r), "outcome_unknown", "{fault}: a retry");
        assert_eq!(effects(&f, "charge", &order), 1, "{fault}");
    }
    // A result with isError is the call's outcome: replayed.
    let r = rpc(
        &f,
        &call(1, "charge", json!({"order": "o-e", "fault": "is-error"})),
        &[],
    );
    assert_eq!(r.json()["result"]["isError"], true);
    let r = rpc(
        &f,
        &call(2, "charge", json!({"order": "o-e", "fault": "is-error"})),
        &[],
    );
    assert_eq!(
        (
            r.json()["result"]["isError"].clone(),
            r.json()["id"].clone()
        ),
        (json!(true), json!(2))
    );
    assert_eq!(effects(&f, "charge", "o-e"), 1);
    // Answers that say the tool never ran are passed on, and the same call may run later.
    let args = json!({"order": "o-r"});
    let r = rpc(
        &f,
        &call(1, "charge", args.clone()),
        &[("x-fault", "rpc-error:-32602")],
    );
    assert_eq!(
        r.json()["error"]["code"],
        -32602,
        "the upstream's own error"
    );
    let r = rpc(
        &f,
        &call(2, "charge", args.clone()),
        &[("x-fault", "status:503")],
    );
    assert_eq!(error_type(&r), "upstream_unavailable");
    let r = rpc(
        &f,
        &call(3, "charge", args.clone()),
        &[("mcp-session-id", "s-99")],
    );
    assert_eq!(r.status, 404, "an ended session's 404 comes back as it is");
    let r = rpc(&f, &call(4, "charge", args), &[]);
    assert_eq!(
        r.json()["result"]["structuredContent"]["effect"],
        1,
        "{}",
        r.text()
    );
    assert_eq!(effects(&f, "charge", "o-r"), 1);
}

#[test]
fn a_duplicate_in_flight_is_told_to_wait_and_a_client_that_leaves_does_not_cancel() {
    let f = fx();
    let slow = call(1, "charge", json!({"order": "o-f", "fault": "slow:1200"}));
    let addr = f.proxy.addr;
    let first = std::thread::spawn(move || {
        request(
            addr,
            "POST",
            "/mcp",
            &[
                ("content-type", "application/json"),
                ("accept", ACCEPT),
                ("x-agent-id", "agent-7"),
            ],
            &serde_json::to_vec(&slow).expect("json"),
        )
    });
    eventually(5, "the call upstream", || {
        (effects(&f, "charge", "o-f") == 1).then_some(())
    });
    let r = rpc(
        &f,
        &call(2, "charge", json!({"order": "o-f", "fault": "slow:1200"})),
        &[],
    );
    assert_eq!(error_type(&r), "idempotency_key_in_progress");
    assert_eq!(r.json()["error"]["code"], -32080);
    assert!(r.json()["error"]["data"]["retryAfter"].as_u64() >= Some(1));
    assert!(r.header("retry-after").is_some());
    // The client's cancel of the call idemgate runs is held back; another request's passes.
    let cancel = |id| json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id}});
    assert_eq!(rpc(&f, &cancel(1), &[]).status, 202);
    assert_eq!(rpc(&f, &cancel(77), &[]).status, 202);
    let cancels = |f: &Fx| {
        let m = f.up.counts.mcp_methods.lock().expect("methods");
        m.iter().filter(|m| *m == "notifications/cancelled").count()
    };
    assert_eq!(
        cancels(&f),
        1,
        "only the cancel of a call idemgate does not run reaches the tool"
    );
    let held = f.proxy.admin_get("/metrics").text();
    assert!(
        held.contains("idemgate_mcp_cancels_held_total{route=\"tools\"} 1\n"),
        "the held cancel is counted:\n{held}"
    );
    assert_eq!(
        first.join().expect("first").json()["result"]["structuredContent"]["effect"],
        1
    );
    // A client reads the first event of a stream, then goes away (in the stateless revision,
    // a cancel): the call runs to its end and its result is recorded.
    let msg = serde_json::to_vec(&call(
        3,
        "charge",
        json!({"order": "o-g", "fault": "sse-slow:600"}),
    ))
    .expect("json");
    let mut s = std::net::TcpStream::connect(f.proxy.addr).expect("connect");
    write!(
        s,
        "POST /mcp HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\naccept: {ACCEPT}\r\nx-agent-id: agent-7\r\ncontent-length: {}\r\n\r\n",
        msg.len()
    )
    .expect("write");
    s.write_all(&msg).expect("write body");
    let mut buf = [0u8; 512];
    let n = s.read(&mut buf).expect("read");
    assert!(
        String::from_utf8_lossy(&buf[..n]).contains("200"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
    drop(s);
    let e = eventually(5, "the call recorded", || {
        f.entries(&["--tool", "charge", "--status", "completed"])
            .into_iter()
            .find(|e| e["id"].as_i64().is_some())
            .filter(|_| effects(&f, "charge", "o-g") == 1)
            .and_then(|_| {
                let done = f.entries(&["--tool", "charge", "--status", "completed"]);
                (done.len() == 2).then_some(done)
            })
    });
    assert_eq!(e.len(), 2);
    let r = rpc(
        &f,
        &call(
            4,
            "charge",
            json!({"order": "o-g", "fault": "sse-slow:600"}),
        ),
        &[("accept", "application/json")],
    );
    assert_eq!(
        r.header("idempotent-replayed"),
        Some("true"),
        "{}",
        r.text()
    );
    assert_eq!(r.json()["result"]["structuredContent"]["effect"], 1);
    assert_eq!(effects(&f, "charge", "o-g"), 1);
}

#[test]
fn an_operator_replays_resolves_or_reconciles_a_held_call() {
    let f = fx();
    let args = json!({"order": "o-op"});
    let r = rpc(&f, &call(1, "charge", args.clone()), &[("x-fault", "drop")]);
    let id = r.json()["error"]["data"]["entryId"]
        .as_i64()
        .expect("entry id");
    let r = f.proxy.admin_post(
        &format!("/admin/v1/entries/{id}/replay"),
        &json!({"operator": "o", "reason": "the processor says it never arrived", "confirm_destructive": true}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(effects(&f, "charge", "o-op"), 2);
    let methods = f.up.counts.mcp_methods.lock().expect("methods").clone();
    assert_eq!(
        methods[methods.len() - 3..],
        ["initialize", "notifications/initialized", "tools/call"],
        "{methods:?}"
    );
    assert_eq!(
        f.up.counts
            .mcp_sessions_ended
            .load(std::sync::atomic::Ordering::SeqCst),
        1
    );
    let r = rpc(&f, &call(2, "charge", args), &[]);
    assert_eq!(r.json()["id"], 2);
    assert_eq!(
        r.json()["result"]["structuredContent"]["effect"],
        2,
        "the replay's result"
    );
    // Resolved by hand with the tool's result: retries get it as the call's response.
    let args = json!({"order": "o-res"});
    let r = rpc(
        &f,
        &call(3, "charge", args.clone()),
        &[("x-fault", "status:502")],
    );
    let id = r.json()["error"]["data"]["entryId"]
        .as_i64()
        .expect("entry id");
    let result = json!({"content": [{"type": "text", "text": "charged by hand"}]});
    let r = f.proxy.admin_post(
        &format!("/admin/v1/entries/{id}/resolve"),
        &json!({"as": "completed", "operator": "o", "reason": "seen in the processor",
            "confirm_destructive": true,
            "response": {"status": 200, "headers": [["content-type", "application/json"]],
                "body": result.to_string()}}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let r = rpc(&f, &call(4, "charge", args), &[]);
    assert_eq!(r.json()["id"], 4);
    assert_eq!(r.json()["result"], result);
    assert_eq!(effects(&f, "charge", "o-res"), 1);
    // Reconciled: the probe finds the effect under the key the upstream was sent, and its answer
    // is the call's result from then on.
    let args = json!({"order": "o-rec"});
    let r = rpc(&f, &call(5, "charge", args.clone()), &[("x-fault", "drop")]);
    let id = r.json()["error"]["data"]["entryId"]
        .as_i64()
        .expect("entry id");
    let r = f.proxy.admin_post(
        &format!("/admin/v1/entries/{id}/reconcile"),
        &json!({"operator": "o", "reason": "ask the processor", "confirm_destructive": true}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["decision"], "completed", "{}", r.text());
    let r = rpc(&f, &call(6, "charge", args), &[]);
    assert_eq!(r.json()["id"], 6);
    let text = r.json()["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    assert!(text.contains("\"found\":true"), "{}", r.text());
    assert_eq!(effects(&f, "charge", "o-rec"), 1);
}
