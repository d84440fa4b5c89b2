//! An MCP tool's calls held for approval: the agent is told in a tool result it reads, nothing
//! reaches the tool until an operator approves, then idemgate runs it once and the agent's next
//! call (a new JSON-RPC id) gets its result; a rejected call is told why, and never runs.

use super::*;

const APPROVAL_MCP_CONFIG: &str = r#"
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
upstream_auth = { secret_env = "PAYMENTS_TOKEN", header = "Authorization" }
scope.header = "X-Agent-Id"
timeout = "2s"
retry = { attempts = 3, base = "10ms", max = "50ms" }

[routes.tools."refund"]
subject = { amount = "/amount" }

[routes.tools."refund".approval]
when = 'args.amount > 1000'
hold = "100ms"

[routes.tools."charge".approval]
expires = "1s"
hold = "50ms"

[routes.tools."payout".approval]
hold = "30s"
"#;

/// The tool result's text, when idemgate held or refused the call (`isError`).
fn held_text(r: &Resp) -> String {
    let m = last_message(r);
    assert_eq!(m["result"]["isError"], true, "{}", r.text());
    m["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The entry a held call's text names.
fn held_entry(text: &str) -> i64 {
    let at = text.find("entry ").expect("an entry") + "entry ".len();
    text[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no entry in {text:?}"))
}

/// `POST /admin/v1/approvals/{id}/{verdict}` as operator olga, with `reason`.
fn decide(f: &Fx, id: i64, verdict: &str, reason: &str) -> Resp {
    f.proxy.admin_post(
        &format!("/admin/v1/approvals/{id}/{verdict}"),
        &json!({"operator": "olga", "reason": reason}),
    )
}

/// The entry of the first open approval, once one is asked for.
fn first_open(f: &Fx) -> i64 {
    eventually(10, "an approval asked for", || {
        let open = f.proxy.admin_get("/admin/v1/approvals?open=true").json();
        open.as_array()?.first()?["id"].as_i64()
    })
}

#[test]
fn a_tool_call_over_the_threshold_runs_once_an_operator_approves_it() {
    let f = Fx::with_env(
        APPROVAL_MCP_CONFIG,
        &[("PAYMENTS_TOKEN", "Bearer sk_test_1")],
    );
    let big = json!({"order": "o-big", "amount": 5000});
    // The call gave a progress token: while it waits it is told so, on an event stream.
    let first = rpc(&f, &call(1, "refund", big.clone()), &[]);
    assert_eq!(first.header("content-type"), Some("text/event-stream"));
    let progress = first.text();
    assert!(
        progress.contains(r#""method":"notifications/progress""#),
        "{progress}"
    );
    assert!(progress.contains(r#""progressToken":1"#), "{progress}");
    let text = held_text(&first);
    assert!(
        text.starts_with("held for approval by an operator, entry "),
        "{text}"
    );
    assert!(
        text.contains("call again with the same arguments"),
        "{text}"
    );
    let id = held_entry(&text);
    assert_eq!(
        effects(&f, "refund", "o-big"),
        0,
        "nothing reaches the tool"
    );
    // Below the threshold nothing is asked.
    let small = rpc(
        &f,
        &call(2, "refund", json!({"order": "o-small", "amount": 10})),
        &[],
    );
    assert_eq!(
        last_message(&small)["result"]["isError"],
        false,
        "{}",
        small.text()
    );
    assert_eq!(effects(&f, "refund", "o-small"), 1);
    // The same call again (a new id) attaches to the same held entry.
    let again = held_text(&rpc(&f, &call(3, "refund", big.clone()), &[]));
    assert_eq!(held_entry(&again), id);
    let approve = decide(&f, id, "approve", "refund agreed");
    assert_eq!(approve.status, 200, "{}", approve.text());
    // Waits for the outcome, recorded after the upstream counts the call.
    eventually(10, "the approved call's outcome", || {
        let e = f.proxy.admin_get(&format!("/admin/v1/entries/{id}")).json();
        (e["entry"]["state"] == "completed").then_some(())
    });
    let done = rpc(&f, &call(4, "refund", big), &[]);
    let m = last_message(&done);
    assert_eq!(m["id"], 4);
    assert_eq!(
        m["result"]["structuredContent"]["effect"],
        1,
        "{}",
        done.text()
    );
    assert_eq!(effects(&f, "refund", "o-big"), 1, "once");
    // Rejected: the agent is told why, now and on every later call; the tool never hears of it.
    let other = json!({"order": "o-no", "amount": 9000});
    let id = held_entry(&held_text(&rpc(&f, &call(5, "refund", other.clone()), &[])));
    let reject = decide(&f, id, "reject", "not this customer");
    assert_eq!(reject.status, 200, "{}", reject.text());
    let refused = held_text(&rpc(&f, &call(6, "refund", other), &[]));
    assert!(
        refused.contains("rejected") && refused.contains("not this customer"),
        "{refused}"
    );
    assert_eq!(effects(&f, "refund", "o-no"), 0);
}

#[test]
fn a_tool_call_no_one_decides_on_expires_and_never_runs() {
    let f = Fx::with_env(
        APPROVAL_MCP_CONFIG,
        &[("PAYMENTS_TOKEN", "Bearer sk_test_1")],
    );
    let args = json!({"order": "o-late", "amount": 5});
    let id = held_entry(&held_text(&rpc(&f, &call(1, "charge", args.clone()), &[])));
    let text = eventually(10, "the approval to expire", || {
        let t = held_text(&rpc(&f, &call(2, "charge", args.clone()), &[]));
        (!t.starts_with("held for approval")).then_some(t)
    });
    assert!(
        text.contains("no operator decided on this call in time"),
        "{text}"
    );
    let late = decide(&f, id, "approve", "too late");
    assert_eq!(late.status, 409, "{}", late.text());
    assert_eq!(effects(&f, "charge", "o-late"), 0);
}

/// A call approved while it waits gets the tool's result as its own answer; only a later call
/// of the same arguments is a replay.
#[test]
fn a_tool_call_approved_while_it_waits_gets_its_own_answer() {
    let f = Fx::with_env(
        APPROVAL_MCP_CONFIG,
        &[("PAYMENTS_TOKEN", "Bearer sk_test_1")],
    );
    let args = json!({"order": "o-wait", "amount": 5});
    let plain = |id: i64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "payout", "arguments": args.clone()}})
    };
    let (addr, first) = (f.proxy.addr, plain(1));
    let waiting = std::thread::spawn(move || rpc_at(addr, REVISION, &first, &[]));
    let id = first_open(&f);
    let approve = decide(&f, id, "approve", "expected payout");
    assert_eq!(approve.status, 200, "{}", approve.text());
    let replayed = || {
        crate::scraped(
            &f.proxy,
            r#"idemgate_requests_total{route="tools",outcome="replayed"}"#,
        )
    };
    let answered = |n: i64, r: &Resp| {
        let m = last_message(r);
        assert_eq!(m["id"], n, "{}", r.text());
        assert_eq!(m["result"]["isError"], false, "{}", r.text());
    };
    answered(1, &waiting.join().expect("client"));
    assert_eq!(replayed(), Some(0), "its own answer");
    answered(2, &rpc(&f, &plain(2), &[]));
    assert_eq!(replayed(), Some(1), "a retry's");
    assert_eq!(effects(&f, "payout", "o-wait"), 1, "once");
}

#[test]
fn a_tool_call_approved_that_its_server_did_not_run_is_held_again() {
    let f = Fx::with_env(
        APPROVAL_MCP_CONFIG,
        &[("PAYMENTS_TOKEN", "Bearer sk_test_1")],
    );
    // The tool's server answers 503 to this call, whoever sends it: it never runs.
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "payout", "arguments": {"order": "o-503", "amount": 5, "fault": "status:503"}}});
    let addr = f.proxy.addr;
    let waiting = std::thread::spawn(move || rpc_at(addr, REVISION, &call, &[]));
    let id = first_open(&f);
    let approve = decide(&f, id, "approve", "expected payout");
    assert_eq!(approve.status, 200, "{}", approve.text());
    // The approval is spent on the run the server refused: the waiting call is held again.
    let text = held_text(&waiting.join().expect("client"));
    assert!(text.starts_with("held for approval"), "{text}");
    assert_eq!((held_entry(&text), first_open(&f)), (id, id));
    assert_eq!(effects(&f, "payout", "o-503"), 0);
}

/// The policy's webhook hears how an approved tool call ended in the tool's terms: a result
/// that says the tool failed is told as that, not as a success of the transport.
#[test]
fn an_approved_tool_calls_failure_is_told_to_its_webhook() {
    let (hook, hooks) = hook_receiver();
    let template = APPROVAL_MCP_CONFIG.replace(
        "[routes.tools.\"payout\".approval]\nhold = \"30s\"\n",
        &format!("[routes.tools.\"payout\".approval]\nhold = \"30s\"\nnotify = \"{hook}/h\"\n"),
    );
    let f = Fx::with_env(&template, &[("PAYMENTS_TOKEN", "Bearer sk_test_1")]);
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "payout", "arguments": {"order": "o-fail", "amount": 5, "fault": "is-error"}}});
    let addr = f.proxy.addr;
    let waiting = std::thread::spawn(move || rpc_at(addr, REVISION, &call, &[]));
    let id = first_open(&f);
    let approve = decide(&f, id, "approve", "expected payout");
    assert_eq!(approve.status, 200, "{}", approve.text());
    let answer = waiting.join().expect("client");
    assert_eq!(last_message(&answer)["result"]["isError"], true);
    // The held call's own announcement, retried after the receiver's first 500, may come after
    // the approval's: only the decision and the result are in order.
    let told: Vec<(String, String)> = std::iter::from_fn(|| {
        let (_, body) = hooks
            .recv_timeout(std::time::Duration::from_secs(15))
            .expect("hook");
        let v: serde_json::Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(v["entry"]["id"], id, "{v}");
        let text = v["text"].as_str().unwrap_or_default().to_owned();
        Some((v["kind"].as_str().unwrap_or_default().to_owned(), text))
    })
    .filter(|(kind, _)| kind != "approval_requested")
    .take(2)
    .collect();
    let kinds: Vec<&str> = told.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(kinds, ["approved", "result"]);
    let text = &told[1].1;
    assert!(
        text.starts_with(&format!(
            "idemgate: ran once after approval: tools · payout (entry {id}, key "
        )),
        "{text}"
    );
    assert!(
        text.ends_with("; the tool answered that it failed: \"payout o-fail: effect 1\"."),
        "{text}"
    );
    assert_eq!(effects(&f, "payout", "o-fail"), 1);
}
