//! The command adapter without a webview: each `Console` method is what a Tauri command runs,
//! and `call` runs the operations by name, as the UI asks for them. Errors must arrive as typed
//! `ErrorBody`s with the operations' stable codes.

use idemgate_console::{Console, LedgerChoice};
use idemgate_ledger::export::Manifest;
use idemgate_ledger::{EntryFilter, EntrySummary, Stats};
use idemgate_ops::*;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tauri::async_runtime::block_on;

/// An operation through `call`, as the UI asks for it, its answer read as `T`.
fn op<T: DeserializeOwned>(c: &Console, name: &str, args: Value) -> Result<T, ErrorBody> {
    job(c, name, args, None, |_| {})
}

/// The same, as the job `id` when one is given, with its progress heard by `progress`.
fn job<T: DeserializeOwned>(
    c: &Console,
    name: &str,
    args: Value,
    id: Option<&str>,
    progress: impl Fn(u64) + Send + 'static,
) -> Result<T, ErrorBody> {
    let v = block_on(c.call(name.into(), args, id.map(str::to_owned), None, progress))?;
    Ok(serde_json::from_value(v).expect("the operation's answer"))
}

fn demo() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("demo.db").display().to_string();
    let ops = Ops::open_or_create(&path).expect("create");
    seed_demo(
        ops.store().as_ref(),
        DemoOptions {
            events: 9_000,
            seed: 3,
        },
    )
    .expect("demo");
    (dir, path)
}

#[test]
fn a_named_ledger_must_exist_and_is_never_created() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("typo.db").display().to_string();
    let c = Console::open(&LedgerChoice::Named(p.clone()));
    let info = c.ledger_info();
    assert_eq!(info.location, None);
    assert_eq!(info.error.expect("error").code, "ledger-not-found");
    assert!(!std::path::Path::new(&p).exists());
    let e = op::<Stats>(&c, "stats", json!({"hours": 24})).expect_err("no ledger");
    assert_eq!(e.code, "ledger-not-found");
}

#[test]
fn lists_resolves_and_logs_with_typed_errors() {
    let (_d, path) = demo();
    let c = Console::open(&LedgerChoice::Named(path.clone()));
    assert_eq!(c.ledger_info().location.as_deref(), Some(path.as_str()));
    let page =
        op::<EntryPage>(&c, "entries", json!({"stuck": true, "limit": 100})).expect("entries");
    assert_eq!(
        page.entries.len(),
        13,
        "twelve HTTP entries and one MCP call"
    );
    let target = page
        .entries
        .iter()
        .find(|e| e.effect != idemgate_ledger::Effect::Destructive)
        .expect("entry");
    let cmd = |reason: &str| ResolveCmd {
        entry_id: target.id,
        as_: ResolveAs::Released,
        response: None,
        external_ref: None,
        operator: "tester".into(),
        reason: reason.into(),
        confirm_destructive: false,
    };
    let resolve = |cmd: ResolveCmd| op::<EntrySummary>(&c, "resolve", json!(cmd));
    let e = resolve(cmd(" ")).expect_err("no reason");
    assert_eq!(e.code, "missing-reason");
    let done = resolve(cmd("upstream has no record")).expect("resolve");
    assert_eq!(done.state, idemgate_ledger::State::Released);
    assert_eq!(
        op::<EntryPage>(&c, "entries", json!({"stuck": true, "limit": 100}))
            .expect("entries")
            .entries
            .len(),
        12
    );
    let log: EventPage = op(&c, "log", json!({"operator": "tester", "limit": 10})).expect("log");
    assert_eq!(log.events[0].entry_id, Some(target.id));
    // The name typed, and beside it the account the console runs as.
    assert_eq!(
        log.events[0].operator.as_deref(),
        Some(format!("tester (OS user {})", idemgate_ops::os_user()).as_str())
    );
    let e = op::<EntryView>(&c, "show", json!({"entry_id": 99_999_999})).expect_err("missing");
    assert_eq!(e.code, "entry-not-found");
    let destructive = op::<EntryPage>(&c, "entries", json!({"stuck": true, "limit": 100}))
        .expect("entries")
        .entries
        .into_iter()
        .find(|e| e.effect == idemgate_ledger::Effect::Destructive)
        .expect("destructive");
    let e = resolve(ResolveCmd {
        entry_id: destructive.id,
        ..cmd("r")
    })
    .expect_err("needs confirmation");
    assert_eq!(e.code, "confirmation-required");
}

#[test]
fn a_postgresql_ledger_opens_by_url_and_takes_operator_actions() {
    let Some(url) = idemgate_ledger::testing::fresh_postgres("console") else {
        eprintln!("skipped: IDEMGATE_TEST_PG=skip");
        return;
    };
    let ops = Ops::open_or_create(&url).expect("create");
    seed_demo(
        ops.store().as_ref(),
        DemoOptions {
            events: 2_000,
            seed: 5,
        },
    )
    .expect("demo");
    drop(ops);
    // By URL at start-up, and by the Open button (the same command) from another ledger.
    let (_d, path) = demo();
    let c = Console::open(&LedgerChoice::Named(path));
    let info = block_on(c.open_ledger(url.clone()));
    assert!(info.error.is_none(), "{:?}", info.error);
    assert_eq!(info.location.as_deref(), Some(url.as_str()));
    let c = Console::open(&LedgerChoice::Named(url.clone()));
    assert_eq!(c.ledger_info().location.as_deref(), Some(url.as_str()));
    let stuck_before = op::<EntryPage>(&c, "entries", json!({"stuck": true, "limit": 100}))
        .expect("entries")
        .entries;
    let target = stuck_before
        .iter()
        .find(|e| e.effect != idemgate_ledger::Effect::Destructive)
        .expect("a stuck entry");
    let cmd = ResolveCmd {
        entry_id: target.id,
        as_: ResolveAs::Released,
        response: None,
        external_ref: None,
        operator: "tester".into(),
        reason: "checked upstream".into(),
        confirm_destructive: false,
    };
    let done: EntrySummary = op(&c, "resolve", json!(cmd)).expect("resolve");
    assert_eq!(done.state, idemgate_ledger::State::Released);
    let after =
        op::<EntryPage>(&c, "entries", json!({"stuck": true, "limit": 100})).expect("entries");
    assert_eq!(after.entries.len(), stuck_before.len() - 1);
    let stats: Stats = op(&c, "stats", json!({"hours": 24})).expect("stats");
    assert!(stats.head.is_some());
}

#[test]
fn export_verifies_and_cancels_cleanly() {
    let (dir, path) = demo();
    let c = Console::open(&LedgerChoice::Named(path));
    let out = dir.path().join("audit.ndjson").display().to_string();
    let cmd = ExportCmd {
        format: idemgate_ledger::export::Format::Ndjson,
        range: Default::default(),
        path: out.clone(),
        overwrite: false,
    };
    let m = job::<Option<Manifest>>(&c, "export", json!(cmd), Some("j1"), |_| {})
        .expect("export")
        .expect("manifest");
    assert!(m.count >= 9_000);
    let r: idemgate_ledger::export::ExportVerifyReport = job(
        &c,
        "verify_export",
        json!({ "path": out }),
        Some("j2"),
        |_| {},
    )
    .expect("verify");
    assert!(r.ok, "{r:?}");
    // The ledger still holds the manifest's heads; a manifest of heads it never had fails.
    let mpath = format!("{out}.manifest.json");
    let against = |path: &str, id: &str| {
        job::<AgainstReport>(
            &c,
            "verify_against",
            json!({ "path": path }),
            Some(id),
            |_| {},
        )
    };
    let a = against(&mpath, "j4").expect("against");
    assert!(a.ok && a.heads.iter().all(|(_, held)| *held), "{a:?}");
    let mut forged = m.clone();
    forged.ledger_head = Some(idemgate_ledger::ChainHead {
        seq: m.count as i64,
        hash: "0".repeat(64),
    });
    let fpath = dir.path().join("forged.manifest.json");
    std::fs::write(&fpath, serde_json::to_vec(&forged).expect("json")).expect("write");
    let a = against(&fpath.display().to_string(), "j5").expect("against");
    assert!(!a.ok, "{a:?}");
    let e = against("/no/such.manifest.json", "j6").expect_err("no manifest");
    assert_eq!(e.code, "invalid-argument");
    // Cancelled on its first progress report: nothing is left behind.
    let out2 = dir.path().join("cancelled.ndjson").display().to_string();
    let c = std::sync::Arc::new(c);
    let c2 = c.clone();
    let cmd = ExportCmd {
        path: out2.clone(),
        ..cmd
    };
    let got: Option<Manifest> = job(&c, "export", json!(cmd), Some("j3"), move |_| {
        c2.cancel_job("j3");
    })
    .expect("export");
    assert!(got.is_none());
    assert!(!std::path::Path::new(&out2).exists());
    assert!(!c.cancel_job("no-such-job"));
}

/// A bulk purge is a job: its progress is heard after each chunk, and `cancel_job` stops it
/// between two, with the report saying so.
#[test]
fn a_purge_is_a_job_that_reports_progress_and_stops_when_cancelled() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("l.db").display().to_string();
    let ops = Ops::open_or_create(&path).expect("ledger");
    idemgate_ledger::testing::expired_charges(ops.store().as_ref(), PURGE_CHUNK + 10);
    drop(ops);
    let c = std::sync::Arc::new(Console::open(&LedgerChoice::Named(path)));
    let cmd = PurgeCmd {
        target: PurgeTarget::Expired {
            filter: EntryFilter::default(),
        },
        operator: "o".into(),
        reason: "r".into(),
        confirm_destructive: false,
    };
    let heard = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (c2, h2) = (c.clone(), heard.clone());
    let r: PurgeReport = job(&c, "purge", json!(cmd), Some("p1"), move |n| {
        h2.lock().expect("lock").push(n);
        assert!(c2.cancel_job("p1"));
    })
    .expect("purge");
    assert!(r.cancelled, "{r:?}");
    assert_eq!(r.purged.len(), PURGE_CHUNK);
    assert_eq!(*heard.lock().expect("lock"), [PURGE_CHUNK as u64]);
    assert!(!c.cancel_job("p1"), "the job ended with its purge");
    let r: PurgeReport = job(&c, "purge", json!(cmd), Some("p2"), |_| {}).expect("purge");
    assert!(!r.cancelled);
    assert_eq!(r.purged.len(), 10);
}

#[test]
fn the_embedded_proxy_starts_stops_and_reports_bad_configs() {
    let (dir, path) = demo();
    let c = Console::open(&LedgerChoice::Named(path.clone()));
    let act = json!({"entry_id": 1, "operator": "o", "reason": "r", "confirm_destructive": false});
    let e = op::<ReplayReport>(&c, "replay", act).expect_err("no config");
    assert_eq!(e.code, "no-config");
    // An entry's view says so before anyone tries, in the words the replay is refused in; once
    // the proxy runs, it judges by the proxy's routes.
    let page = op::<EntryPage>(&c, "entries", json!({"stuck": true, "limit": 1})).expect("entries");
    let stuck = json!({"entry_id": page.entries[0].id});
    let replay_refused = || {
        let v = op::<EntryView>(&c, "show", stuck.clone()).expect("show");
        let a = v
            .actions
            .into_iter()
            .find(|a| a.action.as_str() == "replay");
        a.expect("listed").refused.unwrap_or_default()
    };
    assert_eq!(replay_refused(), e.message);
    // A name the command table does not have is refused by name.
    let e = op::<Value>(&c, "drop_everything", json!({})).expect_err("unknown");
    assert_eq!(e.code, "invalid-argument");
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[server]\nledger = \"x.db\"\nlisten = \"nowhere\"\n").expect("write");
    let e = block_on(c.proxy_start(bad.display().to_string())).expect_err("bad config");
    assert_eq!(e.code, "bad-config");
    assert!(e.message.contains("server.listen"));
    let good = dir.path().join("good.toml");
    std::fs::write(
        &good,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"off\"\nledger = \"{path}\"\n"
        ),
    )
    .expect("write");
    let st = block_on(c.proxy_start(good.display().to_string())).expect("start");
    assert!(st.running);
    let routeless = replay_refused();
    assert!(
        routeless.contains("which this configuration does not have"),
        "{routeless}"
    );
    let addr: std::net::SocketAddr = st.proxy_addr.expect("addr").parse().expect("addr");
    assert!(std::net::TcpStream::connect(addr).is_ok());
    assert!(block_on(c.proxy_status()).running);
    let stopped = block_on(c.proxy_stop());
    assert!(!stopped.running);
    assert!(std::net::TcpStream::connect(addr).is_err());
}

/// With no ledger named, the console opens the installed server's when this user may write it,
/// else the default one; a ledger named on the command line wins.
#[test]
fn the_default_ledger_is_the_installed_servers_when_it_can_be_opened() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("idemgate.toml");
    let ledger = dir.path().join("server.db");
    let args = |a: &[&str]| -> Vec<String> { a.iter().map(|s| (*s).to_owned()).collect() };
    let none = args(&["idemgate-console"]);
    let is_default = |c: &LedgerChoice| matches!(c, LedgerChoice::Default(_));
    if std::env::var_os("IDEMGATE_LEDGER").is_some() {
        eprintln!("skipped: IDEMGATE_LEDGER names the ledger");
        return;
    }
    assert!(
        is_default(&LedgerChoice::choose(&none, &cfg)),
        "no server configuration"
    );
    std::fs::write(
        &cfg,
        format!(
            "[server]\nledger = \"{}\"\nadmin_listen = \"off\"\n",
            ledger.display()
        ),
    )
    .expect("write");
    assert!(
        is_default(&LedgerChoice::choose(&none, &cfg)),
        "its ledger does not exist yet"
    );
    Ops::open_or_create(&ledger.display().to_string()).expect("ledger");
    assert_eq!(
        LedgerChoice::choose(&none, &cfg),
        LedgerChoice::Named(ledger.display().to_string())
    );
    assert_eq!(
        LedgerChoice::choose(&args(&["idemgate-console", "--ledger", "/x.db"]), &cfg),
        LedgerChoice::Named("/x.db".into())
    );
    // The server's secrets live in its service's environment, not the desktop session's.
    std::fs::write(
        &cfg,
        format!(
            "[server]\nledger = \"{}\"\nadmin_listen = \"off\"\n[[routes]]\nname = \"r\"\n\
             method = \"POST\"\npath = \"/r\"\nupstream = \"http://127.0.0.1:9\"\neffect = \"write\"\n\
             upstream_auth = {{ secret_env = \"IDEMGATE_TEST_SERVICE_ONLY\" }}\n",
            ledger.display()
        ),
    )
    .expect("write");
    assert_eq!(
        LedgerChoice::choose(&none, &cfg),
        LedgerChoice::Named(ledger.display().to_string()),
        "a secret the session lacks"
    );
    std::fs::write(&cfg, "not toml").expect("write");
    assert!(
        is_default(&LedgerChoice::choose(&none, &cfg)),
        "an unreadable configuration"
    );
}

/// A held call whose policy names its approvers: the inbox and the entry's view judge the name
/// typed in the header as the ledger judges the decision made under it, and with no name typed
/// they judge the OS account alone.
#[test]
fn a_held_calls_approvers_are_judged_by_the_name_typed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ledger.db").display().to_string();
    let ops = Ops::open_or_create(&path).expect("create");
    let mut claim = idemgate_ledger::testing::held_charge("k-held", idemgate_ledger::now_millis());
    if let Some(ask) = claim.approval.as_mut() {
        ask.approvers = Some(vec!["alice".into()]);
    }
    let idemgate_ledger::ClaimOutcome::AwaitingApproval { entry_id: id, .. } =
        ops.store().claim(claim).wait().expect("claim")
    else {
        panic!("not held");
    };
    drop(ops);
    let c = Console::open(&LedgerChoice::Named(path));
    let as_typed = |name: Option<&str>, op: &str, args: Value| {
        block_on(c.call(op.into(), args, None, name.map(str::to_owned), |_| {})).expect(op)
    };
    let carol =
        format!("carol may not decide on entry {id} under policy charges (its approvers: alice)");
    for name in [Some("carol"), Some("alice"), None] {
        let want = match name {
            Some("carol") => json!({"approve": carol, "reject": carol}),
            _ => json!({"approve": null, "reject": null}),
        };
        let view = as_typed(name, "show", json!({"entry_id": id}));
        assert_eq!(view["decision"], want, "{name:?}");
        let inbox = as_typed(name, "approvals", json!({"open": true}));
        assert_eq!(inbox[0]["decision"], want, "{name:?}");
    }
    // Under that name, the ledger refuses carol's approval in the same words.
    let refused = block_on(c.call(
        "approve".into(),
        json!({"entry_id": id, "operator": "carol", "reason": "looks fine"}),
        None,
        Some("carol".into()),
        |_| {},
    ))
    .expect_err("carol is not an approver");
    assert_eq!(refused.message, carol);
}
