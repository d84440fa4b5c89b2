//! MCP calls refused before they reach the tool: the ledger cannot claim, or the agent loops.

use super::*;

#[test]
fn a_call_the_ledger_cannot_claim_is_not_forwarded_and_may_be_retried() {
    let f = fx();
    let done = rpc(&f, &call(1, "charge", json!({"order": "o-before"})), &[]);
    assert!(done.json()["result"].is_object(), "{}", done.text());
    // The disk fills: the file-size limit refuses every write the process makes.
    limit_file_size(f.proxy.pid(), Some(1));
    let r = rpc(&f, &call(2, "charge", json!({"order": "o-full"})), &[]);
    assert_eq!(error_type(&r), "ledger_unavailable");
    assert_eq!(r.json()["error"]["code"], -32083);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(effects(&f, "charge", "o-full"), 0, "forwarded unclaimed");
    // What was recorded still replays.
    let again = rpc(&f, &call(3, "charge", json!({"order": "o-before"})), &[]);
    assert_eq!(again.json()["result"], done.json()["result"]);
    limit_file_size(f.proxy.pid(), None);
    let r = eventually(10, "the ledger takes writes again", || {
        let r = rpc(&f, &call(4, "charge", json!({"order": "o-full"})), &[]);
        r.json()["result"].is_object().then_some(r)
    });
    assert_eq!(r.json()["result"]["structuredContent"]["effect"], 1);
    assert_eq!(effects(&f, "charge", "o-full"), 1);
}

#[test]
fn a_looping_agent_s_calls_are_refused_as_a_json_rpc_loop_suspect_and_not_forwarded() {
    let config = MCP_CONFIG.replace(
        r#"subject = { customer = "/customer", amount = "/amount" }"#,
        r#"subject = { customer = "/customer", amount = "/amount" }
duplicate_on = ["/customer"]
loop_guard = { max = 2, window = "1m", action = "reject" }"#,
    );
    let f = Fx::with(&config);
    let charge = |id: i64, order: &str| {
        rpc(
            &f,
            &call(
                id,
                "charge",
                json!({"order": order, "customer": "cus_loop", "amount": 5}),
            ),
            &[],
        )
    };
    for (id, order) in [(1, "o-loop-1"), (2, "o-loop-2")] {
        let r = charge(id, order);
        assert!(
            last_message(&r)["result"].is_object(),
            "{order}: {}",
            r.text()
        );
        assert_eq!(effects(&f, "charge", order), 1, "{order}");
    }
    // The third call for the customer within the window: a loop suspect, refused as MCP clients
    // read refusals (HTTP 200, a JSON-RPC error with the published code), and never forwarded.
    let r = charge(3, "o-loop-3");
    assert_eq!(error_type(&r), "loop_suspect");
    let m = last_message(&r);
    assert_eq!(m["error"]["code"], -32085, "{m}");
    assert_eq!(m["id"], 3);
    assert_eq!(effects(&f, "charge", "o-loop-3"), 0);
    // Another customer's call is not part of the loop.
    let r = rpc(
        &f,
        &call(
            4,
            "charge",
            json!({"order": "o-other", "customer": "cus_other", "amount": 5}),
        ),
        &[],
    );
    assert!(last_message(&r)["result"].is_object(), "{}", r.text());
}
