//! From installed to serving: `init` writes a configuration `serve --check` accepts, with an admin
//! token only its owner reads; it never replaces a file unasked, and a bad route writes nothing;
//! `serve --check` says what each route holds for approval and counts as a loop; `man` and
//! `completions` describe every command; an unreadable configuration says who named it; only a
//! command that forwards reads the secrets a configuration names.

use std::os::unix::fs::PermissionsExt;

use super::*;

#[test]
fn init_writes_a_configuration_serve_check_accepts_and_keeps_what_exists() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("idemgate.toml");
    let at = |args: &[&str]| {
        Command::new(BIN)
            .args(args)
            .current_dir(dir.path())
            .env_remove("IDEMGATE_ADMIN_TOKEN")
            .output()
            .expect("run idemgate")
    };
    // A bad route writes nothing, not even the token.
    let out = at(&["init", "--route", "charges=POST/v1/charges"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("NAME=METHOD:PATH:EFFECT"));
    assert!(!cfg.exists() && !dir.path().join("admin-token").exists());
    let out = at(&[
        "init",
        "--upstream",
        "https://api.example.com",
        "--route",
        "charges=POST:/v1/charges:write",
        "--route",
        "customers=GET:/v1/customers:read",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let token = dir.path().join("admin-token");
    let mode = std::fs::metadata(&token)
        .expect("token")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the admin token is its owner's only");
    let secret = std::fs::read_to_string(&token).expect("read");
    assert!(secret.trim().starts_with("igt_") && secret.trim().len() == 68);
    let text = std::fs::read_to_string(&cfg).expect("config");
    assert!(
        !text.contains(secret.trim()),
        "the token is never in the configuration"
    );
    // Without IDEMGATE_ADMIN_TOKEN: the token file the configuration names is enough.
    let check = at(&["serve", "--config", s(&cfg), "--check"]);
    let said = String::from_utf8_lossy(&check.stdout);
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(said.contains("ok, 2 routes"), "{said}");
    assert!(
        said.contains("charges") && said.contains("-> https://api.example.com"),
        "{said}"
    );
    // A second init keeps the file; --force replaces it, and keeps the token.
    let out = at(&["init"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("error[conflict]"));
    assert_eq!(std::fs::read_to_string(&cfg).expect("config"), text);
    assert!(at(&["init", "--force"]).status.success());
    assert!(std::fs::read_to_string(&cfg)
        .expect("config")
        .contains("name = \"example\""));
    assert_eq!(std::fs::read_to_string(&token).expect("token"), secret);
}

#[test]
fn the_manual_page_and_completions_cover_every_command() {
    let man = ok(&["man"]);
    assert!(
        man.contains(".TH idemgate 1"),
        "{}",
        &man[..200.min(man.len())]
    );
    let bash = ok(&["completions", "bash"]);
    let zsh = ok(&["completions", "zsh"]);
    for cmd in [
        "serve", "entries", "bulk", "resolve", "purge", "export", "verify", "token", "init",
    ] {
        assert!(man.contains(cmd), "man: {cmd}");
        assert!(bash.contains(cmd), "bash: {cmd}");
        assert!(zsh.contains(cmd), "zsh: {cmd}");
    }
    let out = idemgate(&["completions", "cmd.exe"]);
    assert_eq!(out.status.code(), Some(2), "an unknown shell is bad usage");
}

#[test]
fn serve_check_says_what_each_route_holds_for_approval_and_guards_against_loops() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("idemgate.toml");
    let auth = r#"upstream_auth = { secret_env = "PAYMENTS_TOKEN", header = "Authorization" }"#;
    let toml = format!(
        r#"[server]
listen = "127.0.0.1:0"
admin_listen = "off"
ledger = "{ledger}"

[[routes]]
name = "refunds"
method = "POST"
path = "/v1/refunds"
upstream = "http://127.0.0.1:9"
effect = "write"
{auth}
loop_guard = {{ max = 5, window = "1m", action = "reject" }}
[routes.approval]
when = "args.amount > 50000"
approvals = 2
expires = "1h"
approvers = ["olga", "oscar"]

[[routes]]
name = "tools"
path = "/mcp"
upstream = "http://127.0.0.1:9"
protocol = "mcp"
{auth}
[routes.tools."charge"]
effect = "destructive"
[routes.tools."charge".approval]
expires = "30m"
[routes.tools."lookup"]
loop_guard = {{ max = 20, window = "1m" }}
"#,
        ledger = s(&dir.path().join("l.db")),
    );
    std::fs::write(&cfg, toml).expect("write");
    let out = ok_env(
        &["serve", "--config", s(&cfg), "--check"],
        &[("PAYMENTS_TOKEN", "x".into())],
    );
    for line in [
        "\n      held for approval: calls where args.amount > 50000; 2 approvals from olga, oscar, \
         within 1h\n",
        "\n      loop guard: more than 5 calls of one request from one scope within 1m: refused\n",
        "\n      tool charge: destructive\n        held for approval: every call; 1 approval, \
         within 30m\n",
        "\n      tool lookup: as annotated\n        loop guard: more than 20 calls of one request \
         from one scope within 1m: flagged\n",
    ] {
        assert!(out.contains(line), "{line:?} in:\n{out}");
    }
}

/// A configuration that cannot be read names its file; when `IDEMGATE_CONFIG` named it, which the
/// command line does not show, the error says so too.
#[test]
fn an_unreadable_configuration_says_whether_the_environment_named_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("nowhere.toml");
    let missing = missing.to_str().expect("utf8");
    let by_env = idemgate_env(&["show", "1"], &[("IDEMGATE_CONFIG", missing.to_owned())]);
    let err = String::from_utf8_lossy(&by_env.stderr);
    assert_eq!(by_env.status.code(), Some(1), "{err}");
    let named = format!(" (the configuration IDEMGATE_CONFIG names: {missing})");
    assert!(
        err.contains(&format!("cannot read {missing}: ")) && err.trim_end().ends_with(&named),
        "{err}"
    );
    // Named on the command line, or a variable `--config` overrides: the file alone.
    for out in [
        idemgate(&["show", "--config", missing, "1"]),
        idemgate_env(
            &["show", &format!("--config={missing}"), "1"],
            &[("IDEMGATE_CONFIG", "/elsewhere.toml".to_owned())],
        ),
    ] {
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains(&format!("cannot read {missing}: ")) && !err.contains("IDEMGATE_CONFIG"),
            "{err}"
        );
    }
}

/// A write route to an upstream that is not there, with `auth` (a line of TOML) as its credential.
fn route(name: &str, auth: &str) -> String {
    format!(
        "[[routes]]\nname = \"{name}\"\nmethod = \"POST\"\npath = \"/v1/{name}\"\n\
         upstream = \"http://127.0.0.1:9\"\neffect = \"write\"\n{auth}"
    )
}

/// A credential only the service's environment holds.
const SERVICE_ONLY: &str = "upstream_auth = { secret_env = \"IDEMGATE_TEST_SERVICE_ONLY\" }\n";

/// A command that forwards nothing reads none of the secrets a configuration names (they live in
/// the server's environment): `show` judges by its routes and `retention run` runs, on their own
/// commands and by their declarations, while `replay`, which sends the route's credential
/// upstream, says which variable it lacks (unless its request is refused first): only replays
/// through that route need it.
#[test]
fn only_a_command_that_forwards_reads_the_configurations_secrets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = demo(dir.path(), 300);
    let cfg = dir.path().join("idemgate.toml");
    std::fs::write(
        &cfg,
        format!(
            "[server]\nledger = {:?}\nadmin_listen = \"off\"\n[retention]\nentries = \"30d\"\n{}",
            s(&db),
            route("charges", SERVICE_ONLY)
        ),
    )
    .expect("config");
    let charges = json(&[
        "entries",
        "--ledger",
        s(&db),
        "--route",
        "charges",
        "--status",
        "released",
        "--json",
    ]);
    let id = charges[0]["id"].to_string();
    let shown = json(&["show", "--config", s(&cfg), &id, "--json"]);
    assert_eq!(shown["id"].to_string(), id);
    ok(&["retention", "run", "--config", s(&cfg), "--json"]);
    // An operation by its declaration reads them only when it may reach the upstream.
    let entry = format!("entry_id={id}");
    let shown = json(&["call", "show", "--config", s(&cfg), &entry]);
    assert_eq!(shown["entry"]["id"].to_string(), id);
    ok(&["call", "run_retention", "--config", s(&cfg)]);
    // A bulk action by the action it runs: a replay needs the credential of each entry's route,
    // and refuses the entries whose route's it lacks; a resolve sends nothing.
    let stuck = r#"target:={"filter": {"route": "charges", "stuck": true}}"#;
    let bulk = |action: &[&str]| {
        let a = [
            "call",
            "bulk",
            "--config",
            s(&cfg),
            stuck,
            "operator=you",
            "reason=r",
        ];
        let out = idemgate(&[&a[..], action].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("report")
    };
    let unset = "upstream_auth: environment variable IDEMGATE_TEST_SERVICE_ONLY is not set";
    let replayed = bulk(&["action=replay"]);
    assert_eq!(replayed["succeeded"], 0, "{replayed}");
    assert!(replayed["total"].as_u64() > Some(0), "{replayed}");
    assert_eq!(replayed["failed"], replayed["total"], "{replayed}");
    let why = replayed["failures"][0]["message"].to_string();
    assert!(why.contains(unset), "{why}");
    let resolved = bulk(&["action=resolve", "as=failed"]);
    assert_eq!(resolved["succeeded"], replayed["total"], "{resolved}");
    for replay in [
        vec![
            "replay",
            "--config",
            s(&cfg),
            &id,
            "--operator",
            "you",
            "--reason",
            "r",
        ],
        vec![
            "call",
            "replay",
            "--config",
            s(&cfg),
            &entry,
            "operator=you",
            "reason=r",
        ],
    ] {
        let out = idemgate(&replay);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains(unset), "{replay:?}: {err}");
    }
    // A request the operation refuses is refused as such, before any secret is looked for.
    let out = idemgate(&[
        "call",
        "replay",
        "--config",
        s(&cfg),
        "entry_id=seven",
        "operator=you",
        "reason=r",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("entry_id=\"seven\": not a whole number"),
        "{err}"
    );
}

/// An operator's replay reads the credential of the route it goes through, not every route's: a
/// replay through a route that has none runs in a shell without another route's credential, and
/// one through that other route is refused, naming the variable, and changes nothing.
#[test]
fn a_replay_needs_only_the_credential_of_its_own_route() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = demo(dir.path(), 300);
    let cfg = dir.path().join("idemgate.toml");
    std::fs::write(
        &cfg,
        format!(
            "[server]\nledger = {:?}\nadmin_listen = \"off\"\n{}{}",
            s(&db),
            route("charges", SERVICE_ONLY),
            route("emails", "")
        ),
    )
    .expect("config");
    let released = |r: &str| newest(&db, r, &["--status", "released"]);
    let replay = |id: &str| act(&cfg, "replay", id);
    // Sent: the upstream is not there, so the call is released again, not executed.
    let email = released("emails");
    let out = replay(&email);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("report");
    assert_eq!(
        report["problem"]["code"], "upstream-unavailable",
        "{report}"
    );
    // Refused before anything is sent or logged.
    let charge = released("charges");
    let err = refused_unchanged(&db, &charge, || replay(&charge));
    assert!(err.contains("a replay through route charges"), "{err}");
}

/// A reconcile sends its route's credential only when its probe goes to the route's upstream:
/// one whose probe names another host runs without it, and one whose probe asks the upstream
/// itself is refused, naming the variable, and changes nothing.
#[test]
fn a_reconcile_needs_the_credential_only_when_its_probe_asks_the_upstream() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = demo(dir.path(), 300);
    let cfg = dir.path().join("idemgate.toml");
    let probe = |host: &str| {
        format!(
            "{SERVICE_ONLY}reconcile = {{ method = \"GET\", \
             url = \"http://{host}/v1/lookup?key={{key}}\" }}\n"
        )
    };
    std::fs::write(
        &cfg,
        format!(
            "[server]\nledger = {:?}\nadmin_listen = \"off\"\n{}{}",
            s(&db),
            route("charges", &probe("127.0.0.2:9")),
            route("refunds", &probe("127.0.0.1:9"))
        ),
    )
    .expect("config");
    let stuck = |r: &str| newest(&db, r, &["--stuck"]);
    let reconcile = |id: &str| act(&cfg, "reconcile", id);
    // Asked of another host, which never hears the credential: nobody answers, so it is
    // inconclusive, and logged.
    let charge = stuck("charges");
    let out = reconcile(&charge);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("report");
    assert_eq!(report["decision"], "inconclusive", "{report}");
    // Asked of the route's own upstream: refused before anything is sent or logged.
    let refund = stuck("refunds");
    let err = refused_unchanged(&db, &refund, || reconcile(&refund));
    assert!(err.contains("a reconcile through route refunds"), "{err}");
}

/// The newest entry of route `r` that `filter` (the `entries` command's flags) finds in `db`.
fn newest(db: &Path, r: &str, filter: &[&str]) -> String {
    let a = [
        "entries",
        "--ledger",
        s(db),
        "--route",
        r,
        "--limit",
        "1",
        "--json",
    ];
    json(&[&a[..], filter].concat())[0]["id"].to_string()
}

/// `idemgate ACTION ID` through `cfg` as operator `you`, for JSON (a destructive route's
/// entry confirmed).
fn act(cfg: &Path, action: &str, id: &str) -> std::process::Output {
    let a = ["--config", s(cfg), id, "--operator", "you", "--reason", "r"];
    idemgate(&[&[action], &a[..], &["--confirm-destructive", "--json"]].concat())
}

/// What `run` says when it is refused for the credential only the service holds: it exits 1,
/// and entry `id`'s log in `db` is unchanged.
fn refused_unchanged(db: &Path, id: &str, run: impl FnOnce() -> std::process::Output) -> String {
    let events = || json(&["log", "--ledger", s(db), "--entry", id, "--json"]);
    let before = events();
    let out = run();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("environment variable IDEMGATE_TEST_SERVICE_ONLY is not set"),
        "{err}"
    );
    assert_eq!(events(), before);
    err
}
