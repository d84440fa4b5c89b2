//! Calls held for approval, end to end: a real upstream counts what reaches it while operators
//! decide through the admin API and the CLI; the server forwards approved calls itself, once,
//! across a SIGKILL; rejected and lapsed calls never run.

use std::path::Path;
use std::time::Duration;

use super::*;

mod news;
mod spent;

const APPROVAL_CONFIG: &str = r#"
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
ledger = "{ledger}"

[defaults]
lease = "3s"
ttl = "1h"

[[routes]]
name = "refunds"
method = "POST"
path = "/v1/refunds"
upstream = "{upstream}"
upstream_auth = { secret_env = "PAYMENTS_TOKEN", header = "Authorization" }
effect = "destructive"
timeout = "1s"
subject = { customer = "/customer", amount = "/amount" }
money = { minor_units = true, currency = "USD" }   # amounts in cents
[routes.approval]
when = 'args.amount > 50000 || subject.customer.startsWith("vip_")'
approvals = {approvals}
expires = "1h"
hold = "300ms"
notify = "{hook}/hooks/approvals"
notify_secret_env = "APPROVALS_HOOK_SECRET"

[[routes]]
name = "payouts"
method = "POST"
path = "/v1/payouts"
upstream = "{upstream}"
upstream_auth = { secret_env = "PAYMENTS_TOKEN", header = "Authorization" }
effect = "write"
timeout = "1s"
retry = { attempts = 2, base = "10ms", max = "50ms" }
[routes.approval]
expires = "{expires}"
hold = "{hold}"
"#;

struct Fx {
    dir: tempfile::TempDir,
    upstream: Upstream,
    proxy: Proxy,
    /// What the approval webhook was sent: its signature header and its JSON body.
    hooks: std::sync::mpsc::Receiver<(String, Vec<u8>)>,
    /// Operators' tokens: olga and oscar (operator), vic (viewer).
    tokens: std::collections::HashMap<&'static str, String>,
}

fn serve(expires: &str, hold: &str) -> Fx {
    serve_needing(2, expires, hold)
}

/// A server whose `refunds` route needs `approvals` operators' approvals.
fn serve_needing(approvals: u32, expires: &str, hold: &str) -> Fx {
    serve_from(APPROVAL_CONFIG, approvals, expires, hold)
}

/// The same, its configuration made from `template`.
fn serve_from(template: &str, approvals: u32, expires: &str, hold: &str) -> Fx {
    let dir = tempfile::tempdir().expect("tempdir");
    let upstream = Upstream::start();
    let ledger = dir.path().join("ledger.db");
    let (hook, hooks) = hook_receiver();
    let mut toml = config(template, &upstream.url(), &ledger)
        .replace("{expires}", expires)
        .replace("{hold}", hold)
        .replace("{approvals}", &approvals.to_string())
        .replace("{hook}", &hook);
    let mut tokens = std::collections::HashMap::new();
    for (name, role) in [
        ("olga", "operator"),
        ("oscar", "operator"),
        ("vic", "viewer"),
    ] {
        let v = idemgate_json(&["token", "new", "--name", name, "--role", role, "--json"]);
        tokens.insert(name, v["token"].as_str().expect("token").to_owned());
        toml.push_str(&format!(
            "\n[[operators]]\nname = \"{name}\"\nrole = \"{role}\"\ntoken_hash = \"{}\"\n",
            v["token_hash"].as_str().expect("hash")
        ));
    }
    let proxy = start(dir.path(), &toml, &ledger);
    Fx {
        dir,
        upstream,
        proxy,
        hooks,
        tokens,
    }
}

const HOOK_SECRET: &str = "whsec_approvals";

fn start(dir: &Path, toml: &str, ledger: &Path) -> Proxy {
    let env = [
        ("PAYMENTS_TOKEN", "Bearer sk_test_1"),
        ("APPROVALS_HOOK_SECRET", HOOK_SECRET),
    ];
    Proxy::start_with_env(dir, toml, ledger, &env)
}

fn post(f: &Fx, path: &str, key: &str, body: &serde_json::Value) -> Resp {
    f.proxy.send(
        "POST",
        path,
        &[
            ("idempotency-key", key),
            ("content-type", "application/json"),
        ],
        &serde_json::to_vec(body).expect("json"),
    )
}

/// `POST /admin/v1/approvals/{id}/{verdict}` as operator `who`.
fn decide(f: &Fx, who: &str, id: i64, verdict: &str, reason: &str) -> Resp {
    let auth = format!("Bearer {}", f.tokens[who]);
    request(
        f.proxy.admin.expect("admin"),
        "POST",
        &format!("/admin/v1/approvals/{id}/{verdict}"),
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
        serde_json::to_string(&json!({ "reason": reason }))
            .expect("json")
            .as_bytes(),
    )
}

/// A `202` for a held call: its entry.
fn held(r: &Resp) -> i64 {
    assert_eq!(r.status, 202, "{}", r.text());
    assert_eq!(r.code(), "approval-pending");
    let id = r.json()["entry_id"].as_i64().expect("entry id");
    assert_eq!(
        r.header("location"),
        Some(format!("/admin/v1/entries/{id}").as_str())
    );
    assert!(r.header("retry-after").is_some());
    id
}

/// Sends a payout of 5 with `key` on a thread of its own: a request that waits.
fn payout(f: &Fx, key: &'static str) -> std::thread::JoinHandle<Resp> {
    let addr = f.proxy.addr;
    std::thread::spawn(move || {
        request(
            addr,
            "POST",
            "/v1/payouts",
            &[
                ("idempotency-key", key),
                ("content-type", "application/json"),
            ],
            br#"{"amount": 5}"#,
        )
    })
}

/// The entry of the call with `key`, once an approval of it is asked for and open.
fn asked(f: &Fx, key: &str) -> i64 {
    eventually(10, "the call to be held", || {
        let list = f.proxy.admin_get("/admin/v1/approvals?open=true").json();
        list.as_array()?.iter().find(|e| e["key"] == key)?["id"].as_i64()
    })
}

fn timeline(f: &Fx, id: i64) -> Vec<(String, Option<String>)> {
    let log = f.proxy.admin_get(&format!("/admin/v1/entries/{id}")).json();
    log["timeline"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| {
            (
                e["kind"].as_str().unwrap_or_default().to_owned(),
                e["operator"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

#[test]
fn a_call_over_the_threshold_runs_once_two_operators_approved_it() {
    let f = serve("1h", "300ms");
    let big = json!({"customer": "c_1", "amount": 60000});
    let id = held(&post(&f, "/v1/refunds", "r-big", &big));
    assert_eq!(
        f.upstream.counts.effects("r-big"),
        0,
        "nothing is forwarded"
    );
    // The webhook hears of it, signed, and is tried again when it fails.
    for _ in 0..2 {
        let (signature, body) = f.hooks.recv_timeout(Duration::from_secs(10)).expect("hook");
        let (t, v1) = signature.split_once(",v1=").expect("t=…,v1=…");
        let t = t.trim_start_matches("t=").parse().expect("t");
        assert_eq!(
            v1,
            idemgate_proxy::signature::sign(HOOK_SECRET.as_bytes(), t, &body)
        );
        let hook: serde_json::Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(hook["entry"]["id"], id);
        // Titled as the console and the CLI title it, its amount in dollars, not cents.
        let text = hook["text"].as_str().unwrap_or_default();
        let head = "idemgate: held for approval: c_1 · refunds · 600.00 USD, asked by a client \
                    with no scope";
        assert!(
            text.starts_with(&format!("{head} (entry {id}, key r-big); expires at ")),
            "{text}"
        );
        assert_eq!(hook["entry"]["headline"], "c_1 · refunds · 600.00 USD");
    }
    // Below the threshold nothing is asked; a VIP customer's small refund is held too.
    let small = post(
        &f,
        "/v1/refunds",
        "r-small",
        &json!({"customer": "c_1", "amount": 100}),
    );
    assert_eq!(small.status, 201, "{}", small.text());
    assert_eq!(f.upstream.counts.effects("r-small"), 1);
    held(&post(
        &f,
        "/v1/refunds",
        "r-vip",
        &json!({"customer": "vip_2", "amount": 10}),
    ));
    // A viewer may not decide; one operator twice is one approval.
    assert_eq!(decide(&f, "vic", id, "approve", "fine").status, 403);
    let first = decide(&f, "olga", id, "approve", "agreed on the phone");
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!(first.json()["approved_by"], json!(["olga"]));
    let again = decide(&f, "olga", id, "approve", "really agreed");
    assert_eq!(
        (again.status, again.code()),
        (409, "approval-refused".into())
    );
    // Still held: a retry waits, then is told so again.
    held(&post(&f, "/v1/refunds", "r-big", &big));
    assert_eq!(f.upstream.counts.effects("r-big"), 0);
    let second = decide(&f, "oscar", id, "approve", "amount checked");
    assert_eq!(second.json()["end"], "approved");
    // The server forwards it itself, with the route's credential; once it has recorded the
    // outcome (the upstream counts the call before that), the retry gets its result.
    eventually(10, "the approved call's outcome", || {
        let e = f.proxy.admin_get(&format!("/admin/v1/entries/{id}")).json();
        (e["entry"]["state"] == "completed").then_some(())
    });
    let r = post(&f, "/v1/refunds", "r-big", &big);
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.json()["saw_authorization"], true);
    assert_eq!(f.upstream.counts.effects("r-big"), 1, "once");
    // The ledger's decisions and what still waits (r-vip), as /metrics says them.
    eventually(15, "the approval metrics", || {
        let m = f.proxy.admin_get("/metrics").text();
        (m.contains("idemgate_approval_decisions_total{decision=\"approved\"} 2")
            && m.contains("idemgate_approvals_pending 1")
            && m.contains("idemgate_approval_wait_seconds_count 1"))
        .then_some(())
    });
    let open = f.proxy.admin_get("/admin/v1/approvals?open=true").json();
    let open: Vec<i64> = open
        .as_array()
        .expect("list")
        .iter()
        .map(|e| e["id"].as_i64().unwrap_or(0))
        .collect();
    assert!(!open.contains(&id) && open.len() == 1, "{open:?}");
    // One announcement a held call: r-vip's; none for the retry that attached to r-big's. Then
    // the two approvals, in the log's order, and how the approved call ended.
    let told: Vec<(String, bool)> = (0..4)
        .map(|_| {
            let (_, body) = f.hooks.recv_timeout(Duration::from_secs(10)).expect("hook");
            let v: serde_json::Value = serde_json::from_slice(&body).expect("json");
            (
                v["kind"].as_str().unwrap_or_default().into(),
                v["entry"]["id"] == id,
            )
        })
        .collect();
    let approved = ("approved".to_owned(), true);
    let asked = ("approval_requested".to_owned(), false);
    let ran = ("result".to_owned(), true);
    assert_eq!(told, [asked, approved.clone(), approved, ran]);
    assert!(
        f.hooks.try_iter().next().is_none(),
        "one announcement a call"
    );
    assert_eq!(
        timeline(&f, id),
        [
            ("claim".into(), None),
            ("approval_requested".into(), None),
            ("approved".into(), Some("olga".into())),
            ("approved".into(), Some("oscar".into())),
            ("claim".into(), None),
            ("complete".into(), None),
        ]
    );
}

/// Approves held entry `id` as olga through the CLI, which writes the ledger file itself.
fn approve_by_cli(ledger: &Path, id: i64, reason: &str) {
    let (ledger, id) = (ledger.to_str().expect("utf-8"), id.to_string());
    let args = [
        "--ledger",
        ledger,
        &id,
        "--operator",
        "olga",
        "--reason",
        reason,
    ];
    let out = idemgate(&[&["approve"], &args[..]].concat());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
}

/// `GET path` on the admin API as operator `who`.
fn get_as(f: &Fx, who: &str, path: &str) -> serde_json::Value {
    let auth = format!("Bearer {}", f.tokens[who]);
    let r = request(
        f.proxy.admin.expect("admin"),
        "GET",
        path,
        &[("authorization", &auth)],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

#[test]
fn one_who_approved_a_call_is_told_so_rather_than_offered_it_again() {
    let f = serve_needing(3, "1h", "100ms");
    let big = json!({"customer": "c_1", "amount": 60000});
    let id = held(&post(&f, "/v1/refunds", "r-three", &big));
    let entry = format!("/admin/v1/entries/{id}");
    let open = json!({"approve": null, "reject": null});
    let decision = |who: &str| get_as(&f, who, &entry)["decision"].clone();
    let inbox = |who: &str| {
        let list = get_as(&f, who, "/admin/v1/approvals?open=true");
        let held = list
            .as_array()
            .expect("list")
            .iter()
            .find(|e| e["id"] == id);
        held.expect("the held call")["decision"].clone()
    };
    assert_eq!(decision("olga"), open);
    assert_eq!(decide(&f, "olga", id, "approve", "agreed").status, 200);
    // Her view says why she may not approve again, in the words the ledger refuses it with.
    let why = format!("olga already approved entry {id}; another operator must");
    assert_eq!(decision("olga"), json!({"approve": why, "reject": null}));
    assert_eq!(inbox("olga"), decision("olga"));
    let again = decide(&f, "olga", id, "approve", "again");
    assert_eq!(again.json()["detail"], why.as_str(), "{}", again.text());
    assert_eq!(
        (decision("oscar"), inbox("oscar")),
        (open.clone(), open.clone())
    );
    // The shared admin token names no one, so its view does not judge who asks.
    let shared = f.proxy.admin_get(&entry).json();
    assert_eq!(shared["decision"], open);
    // The CLI's operator is its OS account: one approval, then told so by name.
    let ledger = f.dir.path().join("ledger.db");
    let ledger = ledger.to_str().expect("utf-8");
    let cli = |args: &[&str]| {
        let out = idemgate(args);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{args:?}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    };
    let id_arg = id.to_string();
    cli(&[
        "approve",
        "--ledger",
        ledger,
        &id_arg,
        "--operator",
        "ada",
        "--reason",
        "ok",
    ]);
    let mine = format!(" already approved entry {id}; another operator must");
    let list = cli(&["approvals", "--open", "--ledger", ledger]);
    assert!(
        list.contains(&format!("{id:>6}  c_1 · refunds · 600.00 USD "))
            && list.contains("; not for you to approve: ")
            && list.contains(&mine),
        "{list}"
    );
    let show = cli(&["show", "--ledger", ledger, &id_arg]);
    let actions = format!("\n  actions      reject it (idemgate reject {id}); not approve: ");
    assert!(show.contains(&actions) && show.contains(&mine), "{show}");
    assert_eq!(decision("oscar"), open);
    assert_eq!(decide(&f, "oscar", id, "approve", "checked").status, 200);
    eventually(10, "the approved call's effect", || {
        (f.upstream.counts.effects("r-three") == 1).then_some(())
    });
    // Decided, it is no one's to decide on.
    let ended = decision("oscar");
    for verb in ["approve", "reject"] {
        let why = ended[verb].as_str().unwrap_or_default();
        assert!(why.contains("(approved already)"), "{ended}");
    }
}

/// A policy that names its approvers: the CLI judges the name it acts under (`--operator`, or
/// `IDEMGATE_OPERATOR`) as the ledger judges a decision made under it; the server its token's.
#[test]
fn a_policys_approvers_are_judged_by_the_name_the_cli_acts_under() {
    let named = APPROVAL_CONFIG.replace(
        "approvals = {approvals}\n",
        "approvals = {approvals}\napprovers = [\"olga\", \"ada\"]\n",
    );
    let f = serve_from(&named, 1, "1h", "100ms");
    let big = json!({"customer": "c_2", "amount": 70000});
    let id = held(&post(&f, "/v1/refunds", "r-named", &big));
    let not = |who: &str| {
        format!(
            "{who} may not decide on entry {id} under policy refunds (its approvers: olga, ada)"
        )
    };
    let entry = format!("/admin/v1/entries/{id}");
    let oscar = json!({"approve": not("oscar"), "reject": not("oscar")});
    assert_eq!(get_as(&f, "oscar", &entry)["decision"], oscar);
    let ledger = f.dir.path().join("ledger.db");
    let ledger = ledger.to_str().expect("utf-8");
    let (id_arg, carol) = (id.to_string(), not("carol"));
    let run = |args: &[&str], operator: Option<&str>| {
        let mut cmd = std::process::Command::new(idemgate_bin());
        cmd.args(args).args(["--ledger", ledger]);
        cmd.env_remove("IDEMGATE_LEDGER")
            .env_remove("IDEMGATE_OPERATOR");
        if let Some(name) = operator {
            cmd.env("IDEMGATE_OPERATOR", name);
        }
        cmd.output().expect("run idemgate")
    };
    let text = |out: std::process::Output| String::from_utf8_lossy(&out.stdout).into_owned();
    for asked in [
        run(&["approvals", "--open", "--operator", "carol"], None),
        run(&["approvals", "--open"], Some("carol")),
    ] {
        let list = text(asked);
        assert!(
            list.contains(&format!("; not for you to approve: {carol}")),
            "{list}"
        );
    }
    let show = text(run(&["show", &id_arg, "--operator", "carol"], None));
    assert!(
        show.contains(&format!("\n  actions      none: {carol}\n")),
        "{show}"
    );
    // The operations' own door judges by the same name.
    let refused = json!({"approve": carol, "reject": carol});
    let json = |out: std::process::Output| -> serde_json::Value {
        serde_json::from_slice(&out.stdout).expect("the operation's JSON")
    };
    let entry_id = format!("entry_id={id}");
    let shown = json(run(&["call", "show", &entry_id], Some("carol")));
    assert_eq!(shown["decision"], refused);
    let inbox = json(run(&["call", "approvals", "--operator", "carol"], None));
    assert_eq!(inbox[0]["decision"], refused);
    // Ada is named: offered both; with no name given, the account alone is judged.
    for operator in [Some("ada"), None] {
        let list = text(run(&["approvals", "--open"], operator));
        assert!(
            list.contains(&format!("{id:>6}  c_2 · refunds · 700.00 USD ")),
            "{list}"
        );
        assert!(!list.contains("not for you"), "{operator:?}: {list}");
    }
    // The ledger refuses carol's approval in the words her view gave, and takes ada's.
    let refused = run(&["approve", &id_arg, "--reason", "ok"], Some("carol"));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && err.contains(&carol), "{err}");
    assert!(run(&["approve", &id_arg, "--reason", "ok"], Some("ada"))
        .status
        .success());
    eventually(10, "the approved call's effect", || {
        (f.upstream.counts.effects("r-named") == 1).then_some(())
    });
}

#[test]
fn a_decision_made_while_the_call_waits_is_its_answer() {
    let f = serve("1h", "30s");
    let approved = payout(&f, "p-1");
    let id = asked(&f, "p-1");
    assert_eq!(
        decide(&f, "olga", id, "approve", "expected payout").status,
        200
    );
    let r = approved.join().expect("client");
    assert_eq!(r.status, 201, "the call's own answer: {}", r.text());
    assert_eq!(f.upstream.counts.effects("p-1"), 1);
    // Its own answer is no replay; a retry's is.
    let replayed = || {
        scraped(
            &f.proxy,
            r#"idemgate_requests_total{route="payouts",outcome="replayed"}"#,
        )
    };
    assert_eq!(
        (r.header("idempotent-replayed"), replayed()),
        (None, Some(0))
    );
    let again = post(&f, "/v1/payouts", "p-1", &json!({"amount": 5}));
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!((replayed(), f.upstream.counts.effects("p-1")), (Some(1), 1));
    let rejected = payout(&f, "p-2");
    let id = asked(&f, "p-2");
    assert_eq!(
        decide(&f, "oscar", id, "reject", "not this account").status,
        200
    );
    let r = rejected.join().expect("client");
    assert_eq!((r.status, r.code()), (403, "approval-rejected".into()));
    assert!(r.json()["detail"]
        .as_str()
        .unwrap_or_default()
        .contains("not this account"));
    // Final: a retry is refused the same way, and nothing ever ran.
    let again = post(&f, "/v1/payouts", "p-2", &json!({"amount": 5}));
    assert_eq!(
        (again.status, again.code()),
        (403, "approval-rejected".into())
    );
    assert_eq!(
        decide(&f, "olga", id, "approve", "changed my mind").status,
        409
    );
    assert_eq!(f.upstream.counts.effects("p-2"), 0);
}

#[test]
fn an_undecided_call_expires_and_never_runs() {
    let f = serve("1s", "100ms");
    let id = held(&post(&f, "/v1/payouts", "p-late", &json!({"amount": 5})));
    let r = eventually(10, "the approval to expire", || {
        let r = post(&f, "/v1/payouts", "p-late", &json!({"amount": 5}));
        (r.status != 202).then_some(r)
    });
    assert_eq!((r.status, r.code()), (410, "approval-expired".into()));
    let late = decide(&f, "olga", id, "approve", "too late");
    assert_eq!(late.status, 409, "{}", late.text());
    assert_eq!(f.upstream.counts.effects("p-late"), 0);
    assert!(timeline(&f, id)
        .iter()
        .any(|(k, _)| k == "approval_expired"));
    eventually(15, "the expiry in /metrics", || {
        let m = f.proxy.admin_get("/metrics").text();
        m.contains("idemgate_approval_decisions_total{decision=\"expired\"} 1")
            .then_some(())
    });
}

#[test]
fn an_approval_given_while_no_server_runs_releases_the_call_once_after_a_sigkill() {
    let mut f = serve("1h", "100ms");
    let id = held(&post(&f, "/v1/payouts", "p-kill", &json!({"amount": 5})));
    f.proxy.kill();
    // The CLI writes the decision into the ledger file; the next server to start forwards it.
    let ledger = f.dir.path().join("ledger.db");
    let show = |json: bool| {
        let id = id.to_string();
        let mut args = vec!["show", "--ledger", ledger.to_str().expect("utf-8"), &id];
        if json {
            args.push("--json");
        }
        String::from_utf8_lossy(&idemgate(&args).stdout).into_owned()
    };
    let before = show(false);
    assert!(
        before.contains("\n  approval     waiting: 0 of 1 approvals (policy payouts), expires "),
        "{before}"
    );
    // Held, it is its approvers' alone: no other operator action takes it.
    let decide = format!("\n  actions      approve or reject it (idemgate approve|reject {id})\n");
    assert!(before.contains(&decide), "{before}");
    approve_by_cli(&ledger, id, "approved while the server was down");
    assert_eq!(f.upstream.counts.effects("p-kill"), 0);
    let after: serde_json::Value = serde_json::from_str(&show(true)).expect("show --json");
    assert_eq!(after["approval"]["end"], "approved", "{after}");
    assert_eq!(
        after["headline"], "payouts",
        "a route that names no subjects"
    );
    assert!(
        show(false).contains("  approval     approved: 1 of 1 approvals, by olga (OS user "),
        "{after}"
    );
    let toml = std::fs::read_to_string(&f.proxy.config).expect("config");
    f.proxy = start(f.dir.path(), &toml, &ledger);
    eventually(10, "the restarted server to forward it", || {
        (f.upstream.counts.effects("p-kill") == 1).then_some(())
    });
    let r = post(&f, "/v1/payouts", "p-kill", &json!({"amount": 5}));
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(f.upstream.counts.effects("p-kill"), 1, "once");
    let by = &timeline(&f, id)[2..];
    assert!(
        matches!(&by[0], (k, Some(op)) if k == "approved" && op.starts_with("olga (OS user ")),
        "{by:?}"
    );
}

#[test]
fn a_condition_that_cannot_be_evaluated_holds_the_call_and_says_why() {
    let f = serve("1h", "100ms");
    // No customer: the condition's second half has nothing to read, so the call is held.
    let id = held(&post(
        &f,
        "/v1/refunds",
        "r-unknown",
        &json!({"amount": 10}),
    ));
    assert_eq!(f.upstream.counts.effects("r-unknown"), 0);
    let log = f.proxy.admin_get(&format!("/admin/v1/entries/{id}")).json();
    let requested = log["timeline"]
        .as_array()
        .expect("timeline")
        .iter()
        .find(|e| e["kind"] == "approval_requested")
        .cloned()
        .expect("the request is logged");
    let detail: serde_json::Value =
        serde_json::from_str(requested["detail"].as_str().unwrap_or("{}")).expect("detail");
    assert!(
        detail["unevaluated"]
            .as_str()
            .is_some_and(|w| w.contains("customer")),
        "{detail}"
    );
}
