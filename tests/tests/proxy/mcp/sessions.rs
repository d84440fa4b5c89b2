//! Sessions and revisions: the stateless 2026-07-28 revision, and a session ended while its call
//! runs.

use super::*;

#[test]
fn a_stateless_call_of_the_2026_07_28_revision_retried_under_a_new_id_runs_once() {
    let f = fx();
    // No session: each message names its protocol revision, method and tool in headers.
    let stateless = |id: i64| {
        let msg = call(id, "charge", json!({"order": "o-stateless", "amount": 5}));
        rpc_at(
            f.proxy.addr,
            "2026-07-28",
            &msg,
            &[("mcp-method", "tools/call"), ("mcp-name", "charge")],
        )
    };
    let first = stateless(1);
    assert!(
        last_message(&first)["result"].is_object(),
        "{}",
        first.text()
    );
    // The revision requires a new id on every re-issue: the retry's answer carries its own.
    let again = stateless(2);
    let m = last_message(&again);
    assert_eq!(m["id"], 2, "{m}");
    // The recorded result, typed as the revision requires (this test server leaves it out).
    let mut recorded = last_message(&first)["result"].clone();
    recorded["resultType"] = json!("complete");
    assert_eq!(m["result"], recorded);
    assert_eq!(
        effects(&f, "charge", "o-stateless"),
        1,
        "the retry was replayed"
    );
    // The call went upstream once, with the revision's headers as the client sent them.
    let calls = f.up.counts.mcp_calls.lock().expect("lock").clone();
    let sent: Vec<_> = calls
        .iter()
        .filter(|(tool, args, _)| tool == "charge" && args["order"] == "o-stateless")
        .collect();
    assert_eq!(sent.len(), 1);
    let header = |n: &str| {
        sent[0]
            .2
            .iter()
            .find(|(k, _)| k == n)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(
        header("mcp-protocol-version").as_deref(),
        Some("2026-07-28")
    );
    assert_eq!(header("mcp-method").as_deref(), Some("tools/call"));
    assert_eq!(header("mcp-name").as_deref(), Some("charge"));
    assert_eq!(header("mcp-session-id"), None);
}

#[test]
fn a_session_ended_while_its_call_runs_is_ended_upstream_after_the_call() {
    use std::sync::atomic::Ordering;
    let f = fx();
    let hello = rpc(
        &f,
        &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": REVISION, "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"}}}),
        &[],
    );
    let session = hello
        .header("mcp-session-id")
        .unwrap_or_else(|| panic!("no session: {}", hello.text()))
        .to_owned();
    let (addr, sid) = (f.proxy.addr, session.clone());
    let running = std::thread::spawn(move || {
        let msg = call(1, "charge", json!({"order": "o-end", "fault": "slow:1500"}));
        rpc_at(addr, REVISION, &msg, &[("mcp-session-id", &sid)])
    });
    eventually(5, "the call upstream", || {
        (effects(&f, "charge", "o-end") == 1).then_some(())
    });
    // The client ends its session while the call runs: answered at once, passed on after it.
    let end = f.proxy.send(
        "DELETE",
        "/mcp",
        &[
            ("mcp-session-id", &session),
            ("mcp-protocol-version", REVISION),
        ],
        b"",
    );
    assert_eq!(end.status, 200, "{}", end.text());
    let ended = || f.up.counts.mcp_sessions_ended.load(Ordering::SeqCst);
    assert_eq!(ended(), 0, "not while its call runs");
    let metrics = f.proxy.admin_get("/metrics").text();
    assert!(
        metrics.contains("idemgate_mcp_session_ends_deferred_total{route=\"tools\"} 1\n"),
        "{metrics}"
    );
    let r = running.join().expect("the call");
    assert!(last_message(&r)["result"].is_object(), "{}", r.text());
    eventually(5, "the session ended upstream", || {
        (ended() == 1).then_some(())
    });
}
