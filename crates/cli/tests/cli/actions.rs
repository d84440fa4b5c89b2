//! Operator actions: resolve and purge, logged; refused ones change nothing.

use super::*;

#[test]
fn resolving_a_stuck_entry_is_logged_with_operator_and_reason() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = demo(dir.path(), 600);
    let stuck = json(&[
        "entries",
        "--ledger",
        s(&db),
        "--stuck",
        "--route",
        "charges",
        "--json",
    ]);
    let id = stuck[0]["id"].to_string();
    let body = dir.path().join("resp.json");
    std::fs::write(&body, br#"{"id":"ch_found_upstream","status":"succeeded"}"#).expect("write");
    let e = json(&[
        "resolve",
        "--ledger",
        s(&db),
        &id,
        "--as",
        "completed",
        "--response-file",
        s(&body),
        "--status",
        "201",
        "--external-ref",
        "ch_found_upstream",
        "--reason",
        "found in processor dashboard",
        "--operator",
        "erin",
        "--json",
    ]);
    assert_eq!(e["state"], "completed");
    assert_eq!(e["stuck"], false);
    let log = json(&["log", "--ledger", s(&db), "--entry", &id, "--json"]);
    assert_eq!(log[0]["kind"], "resolve");
    assert_eq!(log[0]["operator"], "erin");
    assert_eq!(log[0]["reason"], "found in processor dashboard");
    // In text, a log cut off by --limit says so on stderr (only then), as does an empty one.
    let said = |args: &[&str]| {
        let out = idemgate(args);
        assert!(out.status.success(), "{args:?}");
        let lines = String::from_utf8_lossy(&out.stdout).lines().count();
        (
            lines,
            String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        )
    };
    let timeline = log.as_array().expect("array").len();
    assert!(timeline >= 2, "{log}");
    let n = timeline.to_string();
    let one_less = (timeline - 1).to_string();
    let cut =
        format!("(the newest {one_less} events; older ones with a larger --limit, or --until)");
    assert_eq!(
        said(&[
            "log",
            "--ledger",
            s(&db),
            "--entry",
            &id,
            "--limit",
            &one_less
        ]),
        (timeline - 1, cut)
    );
    assert_eq!(
        said(&["log", "--ledger", s(&db), "--entry", &id, "--limit", &n]),
        (timeline, String::new())
    );
    assert_eq!(
        said(&["log", "--ledger", s(&db), "--key", "no-such-key"]),
        (0, "(no events)".to_owned())
    );
    // --limit 0 is refused (it had said "(no events)" of a log that has them).
    for cmd in ["log", "entries"] {
        let out = idemgate(&[cmd, "--ledger", s(&db), "--limit", "0"]);
        assert_eq!(out.status.code(), Some(2), "{cmd} --limit 0");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("must be at least 1"),
            "{cmd}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let shown = json(&["show", "--ledger", s(&db), &id, "--json"]);
    assert_eq!(shown["response"]["status"], 201);
    assert_eq!(shown["external_ref"], "ch_found_upstream");
    let still = json(&["entries", "--ledger", s(&db), "--stuck", "--json"]);
    assert!(still
        .as_array()
        .expect("array")
        .iter()
        .all(|e| e["id"].as_i64() != id.parse::<i64>().ok()));
    assert_eq!(verify_json(&["--ledger", s(&db)]).0, 0);
}

#[test]
fn purging_expired_entries_previews_then_purges_and_logs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = demo(dir.path(), 2_000);
    let expired = json(&[
        "entries",
        "--ledger",
        s(&db),
        "--expired",
        "--route",
        "emails",
        "--json",
    ]);
    let n = expired.as_array().expect("array").len();
    assert!(n > 0);
    let preview = json(&[
        "purge",
        "--ledger",
        s(&db),
        "--expired",
        "--route",
        "emails",
        "--dry-run",
        "--reason",
        "r",
        "--operator",
        "o",
        "--json",
    ]);
    assert_eq!(preview["count"].as_u64(), Some(n as u64));
    assert_eq!(
        json(&[
            "entries",
            "--ledger",
            s(&db),
            "--expired",
            "--route",
            "emails",
            "--json"
        ])
        .as_array()
        .expect("array")
        .len(),
        n,
        "dry run changes nothing"
    );
    let done = json(&[
        "purge",
        "--ledger",
        s(&db),
        "--expired",
        "--route",
        "emails",
        "--reason",
        "retention: 24h",
        "--operator",
        "dana",
        "--json",
    ]);
    assert_eq!(done["purged"].as_array().expect("array").len(), n);
    assert_eq!(
        json(&[
            "entries",
            "--ledger",
            s(&db),
            "--expired",
            "--route",
            "emails",
            "--json"
        ])
        .as_array()
        .expect("array")
        .len(),
        0
    );
    let purges = json(&[
        "log",
        "--ledger",
        s(&db),
        "--kind",
        "purge",
        "--operator",
        "dana",
        "--limit",
        "100000",
        "--json",
    ]);
    assert_eq!(purges.as_array().expect("array").len(), n);
    // Entries named by id: one named twice is purged once (it was refused as not found).
    let done = json(&[
        "entries",
        "--ledger",
        s(&db),
        "--status",
        "completed",
        "--json",
    ]);
    let id = done[0]["id"].to_string();
    let args = |dry: bool| {
        let mut a = vec![
            "purge",
            "--ledger",
            s(&db),
            &id,
            &id,
            "--reason",
            "r",
            "--operator",
            "o",
            "--json",
        ];
        if dry {
            a.push("--dry-run");
        }
        a
    };
    assert_eq!(json(&args(true))["count"].as_u64(), Some(1));
    assert_eq!(
        json(&args(false))["purged"],
        serde_json::json!([done[0]["id"]])
    );
    assert_eq!(
        verify_json(&["--ledger", s(&db)]).0,
        0,
        "purge keeps the chain valid"
    );
}

/// A demo ledger, and the entries the refused actions name.
struct Refusing {
    dir: tempfile::TempDir,
    db: PathBuf,
    stuck: String,
    destructive: String,
    completed: String,
}

/// One refused command: its arguments, its exit code (2: the parser's), and what its error says.
type Refusal = (Vec<String>, i32, &'static str);

fn a_demo_ledger_with_entries_to_refuse() -> Refusing {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = demo(dir.path(), 600);
    let stuck = json(&["entries", "--ledger", s(&db), "--stuck", "--json"]);
    let stuck = stuck.as_array().expect("array");
    let on = |destructive: bool| {
        stuck
            .iter()
            .find(|e| (e["route"] == "subscriptions-cancel") == destructive)
            .expect("a stuck entry")["id"]
            .to_string()
    };
    let (plain, destructive) = (on(false), on(true));
    let completed = json(&[
        "entries",
        "--ledger",
        s(&db),
        "--status",
        "completed",
        "--limit",
        "1",
        "--json",
    ]);
    let completed = completed[0]["id"].to_string();
    std::fs::write(
        dir.path().join("declined.json"),
        br#"{"error":"card_declined"}"#,
    )
    .expect("write");
    Refusing {
        dir,
        db,
        stuck: plain,
        destructive,
        completed,
    }
}

/// `words` split at spaces, each `_` an empty argument and each `~` one of two spaces.
fn args(words: &str) -> Vec<String> {
    words
        .split(' ')
        .map(|w| match w {
            "_" => String::new(),
            "~" => "  ".into(),
            w => w.into(),
        })
        .collect()
}

fn refused_resolves(r: &Refusing) -> Vec<Refusal> {
    let l = s(&r.db);
    let missing = r.dir.path().join("nope.json");
    let declined = r.dir.path().join("declined.json");
    let resolve = |id: &str, rest: &str| args(&format!("resolve --ledger {l} {id} {rest}"));
    let stuck = r.stuck.as_str();
    let ok = "--reason r --operator o";
    vec![
        (
            resolve("99999999", &format!("--as released {ok}")),
            1,
            "entry-not-found",
        ),
        (
            resolve(stuck, "--as released --reason ~ --operator o"),
            1,
            "missing-reason",
        ),
        (
            resolve(stuck, "--as released --reason r --operator _"),
            1,
            "missing-operator",
        ),
        (resolve(stuck, "--as released --operator o"), 2, "--reason"),
        (resolve(stuck, &format!("--as maybe {ok}")), 2, "maybe"),
        (
            resolve(stuck, &format!("--as released {ok} --bogus")),
            2,
            "--bogus",
        ),
        (
            resolve(&r.completed, &format!("--as released {ok}")),
            1,
            "conflict",
        ),
        (
            resolve(stuck, &format!("--as completed {ok}")),
            1,
            "invalid-argument",
        ),
        (
            resolve(
                stuck,
                &format!("--as completed --response-file {} {ok}", s(&missing)),
            ),
            1,
            "invalid-argument",
        ),
        // A failed entry's response has the upstream's error status, which is not guessed (the
        // default, 200, is refused for it).
        (
            resolve(
                stuck,
                &format!("--as failed --response-file {} {ok}", s(&declined)),
            ),
            1,
            "needs --status",
        ),
        // --status and --content-type describe the response file's response; alone, they would
        // be ignored.
        (
            resolve(stuck, &format!("--as failed --status 402 {ok}")),
            2,
            "--response-file",
        ),
        (
            resolve(&r.destructive, &format!("--as released {ok}")),
            1,
            "confirmation-required",
        ),
    ]
}

fn other_refused_commands(r: &Refusing) -> Vec<Refusal> {
    let l = s(&r.db);
    let same_db = r.dir.path().join(".").join(r.db.file_name().expect("name"));
    let mut since = args(&format!("log --ledger {l} --since"));
    since.push("last tuesday".into());
    vec![
        (
            args(&format!("copy --ledger {l} --to {}", s(&same_db))),
            1,
            "is the source ledger itself",
        ),
        (
            args(&format!(
                "purge --ledger {l} {} --reason r --operator o",
                r.stuck
            )),
            1,
            "conflict",
        ),
        (
            args(&format!(
                "purge --ledger {l} {} 99999999 --reason r --operator o",
                r.completed
            )),
            1,
            "entry-not-found",
        ),
        (
            args(&format!("purge --ledger {l} --reason r --operator o")),
            2,
            "required",
        ),
        (
            args(&format!("entries --ledger {l} --status stuckish")),
            2,
            "stuckish",
        ),
        (
            args(&format!("log --ledger {l} --kind nonsense")),
            2,
            "[possible values: claim,",
        ),
        (since, 2, "not a time"),
        (
            args(&format!(
                "log --ledger {l} --since 2026-11-20 --until 2026-11-19"
            )),
            1,
            "before until",
        ),
        (
            args(&format!(
                "export --ledger {l} --format csv --since 1795168800 -o x"
            )),
            2,
            "milliseconds",
        ),
        (
            args(&format!(
                "export --ledger {l} --format ndjson -o /nonexistent/dir/x.ndjson"
            )),
            1,
            "invalid-argument",
        ),
    ]
}

fn each_is_refused_and_changes_nothing(db: &Path, refusals: Vec<Refusal>) {
    let before = ledger_fingerprint(db);
    assert!(!before.1, "the WAL is checkpointed when the CLI exits");
    for (args, code, needle) in refusals {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = idemgate(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert!(
            err.contains(needle),
            "{args:?}: stderr {err:?} should mention {needle:?}"
        );
        assert_eq!(
            ledger_fingerprint(db),
            before,
            "{args:?} changed the ledger"
        );
    }
}

/// The check can see a change: an accepted action does change the file.
fn an_accepted_action_changes_the_file(r: &Refusing) {
    let before = ledger_fingerprint(&r.db);
    let l = s(&r.db);
    let args = args(&format!(
        "resolve --ledger {l} {} --as released --reason checked --operator o --confirm-destructive",
        r.destructive
    ));
    ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_ne!(ledger_fingerprint(&r.db), before);
}

#[test]
fn refused_operator_actions_leave_the_ledger_byte_for_byte_unchanged() {
    let r = a_demo_ledger_with_entries_to_refuse();
    each_is_refused_and_changes_nothing(&r.db, refused_resolves(&r));
    each_is_refused_and_changes_nothing(&r.db, other_refused_commands(&r));
    an_accepted_action_changes_the_file(&r);
}
