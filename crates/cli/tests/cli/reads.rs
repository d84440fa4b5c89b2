//! Reading commands: the demo ledger, entries, missing ledgers, closed pipes, relative paths.

use super::*;

#[test]
fn the_default_demo_is_realistic() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("demo.db");
    let out = ok(&["demo", "--ledger", s(&db)]);
    assert!(out.contains("seeded"), "{out}");
    let head = json(&["log", "--ledger", s(&db), "--limit", "1", "--json"]);
    assert!(
        head[0]["seq"].as_i64().expect("seq") >= 10_000,
        "at least 10k events by default"
    );
    let count = |flag: &str| {
        json(&["entries", "--ledger", s(&db), flag, "--json"])
            .as_array()
            .map_or(0, Vec::len)
    };
    assert!(count("--stuck") >= 10);
    assert!(count("--collisions") >= 5);
    assert!(count("--expired") >= 100);
    assert!(count("--duplicates") >= 4);
    let routes: std::collections::BTreeSet<String> =
        json(&["entries", "--ledger", s(&db), "--limit", "3000", "--json"])
            .as_array()
            .expect("array")
            .iter()
            .map(|e| e["route"].as_str().unwrap_or_default().to_owned())
            .collect();
    for r in ["charges", "refunds", "emails", "tickets", "webhooks"] {
        assert!(routes.contains(r), "route {r} missing from {routes:?}");
    }
    let resolutions = json(&["log", "--ledger", s(&db), "--kind", "resolve", "--json"]);
    let resolutions = resolutions.as_array().expect("array");
    assert!(resolutions.len() >= 3);
    assert!(resolutions
        .iter()
        .all(|e| e["operator"].is_string() && e["reason"].is_string()));
    assert_eq!(verify_json(&["--ledger", s(&db)]).0, 0);
    // The demo never writes into an existing ledger.
    let again = idemgate(&["demo", "--ledger", s(&db)]);
    assert_eq!(again.status.code(), Some(1));
}

#[test]
fn entries_json_has_the_stable_fields_and_respects_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = demo(dir.path(), 600);
    let all = json(&["entries", "--ledger", s(&db), "--stuck", "--json"]);
    let all = all.as_array().expect("array");
    // Twelve from the HTTP routes' traffic, one MCP tool call.
    assert_eq!(all.len(), 13);
    for e in all {
        for f in [
            "id",
            "route",
            "scope",
            "key",
            "state",
            "stuck",
            "fingerprint",
            "attempts",
            "replays",
            "created_at",
            "updated_at",
            "expires_at",
            "tool",
            "subjects",
        ] {
            assert!(e.get(f).is_some(), "field {f} missing in {e}");
        }
        assert_eq!(e["state"], "pending");
        assert_eq!(e["stuck"], true);
        assert!(e["created_at"].as_str().expect("time").ends_with('Z'));
    }
    let three = json(&[
        "entries",
        "--ledger",
        s(&db),
        "--stuck",
        "--limit",
        "3",
        "--json",
    ]);
    assert_eq!(three.as_array().expect("array").len(), 3);
    let one = &all[0];
    let shown = json(&["show", "--ledger", s(&db), &one["id"].to_string(), "--json"]);
    assert_eq!(shown["key"], one["key"]);
    assert_eq!(shown["timeline"][0]["kind"], "claim");
    // Stuck: every action but a purge takes it, and the purge says why not.
    let refused: Vec<_> = shown["actions"]
        .as_array()
        .expect("actions")
        .iter()
        .map(|a| (a["action"].as_str().expect("name"), !a["refused"].is_null()))
        .collect();
    assert_eq!(
        refused,
        [
            ("resolve", false),
            ("release", false),
            ("replay", false),
            ("reconcile", false),
            ("purge", true)
        ]
    );
    let text = ok(&["show", "--ledger", s(&db), &one["id"].to_string()]);
    assert!(
        text.contains("\n  actions      resolve, release, replay, reconcile\n"),
        "{text}"
    );
    // What the call is about, as the console's Entry view says it.
    let about = one["subjects"].as_object().expect("subjects");
    let line = text.lines().find(|l| l.starts_with("  subjects     "));
    let line = line.unwrap_or_else(|| panic!("no subjects line: {text}"));
    assert!(!about.is_empty(), "{one}");
    for (name, value) in about {
        let said = format!("{name}={}", value.as_str().expect("text"));
        assert!(line.split(' ').any(|w| w == said), "{said}: {line}");
    }
    // Filters by route and key.
    let by_key = json(&[
        "entries",
        "--ledger",
        s(&db),
        "--key",
        one["key"].as_str().expect("key"),
        "--json",
    ]);
    assert_eq!(by_key.as_array().expect("array").len(), 1);
    let text = ok(&[
        "entries",
        "--ledger",
        s(&db),
        "--key",
        one["key"].as_str().expect("key"),
    ]);
    assert!(text.trim_end().ends_with("(1 entry)"), "{text}");
}

#[test]
fn entries_list_oldest_first_on_request() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = demo(dir.path(), 600);
    let ids = |args: &[&str]| -> Vec<i64> {
        let mut a = vec!["entries", "--ledger", s(&db), "--json"];
        a.extend_from_slice(args);
        json(&a)
            .as_array()
            .expect("array")
            .iter()
            .map(|e| e["id"].as_i64().expect("id"))
            .collect()
    };
    let newest = ids(&[]);
    assert!(newest.len() > 3, "{newest:?}");
    assert!(newest.windows(2).all(|w| w[0] > w[1]), "{newest:?}");
    let mut oldest = ids(&["--oldest-first"]);
    assert!(oldest.windows(2).all(|w| w[0] < w[1]), "{oldest:?}");
    assert_eq!(ids(&["--oldest-first", "--limit", "3"]), oldest[..3]);
    oldest.reverse();
    assert_eq!(oldest, newest);
    let text = ok(&[
        "entries",
        "--ledger",
        s(&db),
        "--oldest-first",
        "--limit",
        "2",
    ]);
    let first_id = |line: &str| line.split_whitespace().next().map(str::to_owned);
    let rows: Vec<String> = text.lines().skip(1).filter_map(first_id).take(2).collect();
    assert_eq!(
        rows,
        [
            newest[newest.len() - 1].to_string(),
            newest[newest.len() - 2].to_string()
        ]
    );
}

#[test]
fn reading_a_missing_ledger_is_an_error_and_creates_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("absent.db");
    let out = idemgate(&["entries", "--ledger", s(&p)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("ledger-not-found"));
    assert!(!p.exists());
    // A PostgreSQL ledger that cannot be reached says why (it said only "error connecting to
    // server"), and that the ledger is unavailable (it said it "cannot take writes" of a read).
    let out = idemgate(&[
        "entries",
        "--ledger",
        "postgres://nobody@127.0.0.1:1/absent",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("ledger-unavailable")
            && err.contains("the ledger is unavailable right now")
            && err.contains("error connecting to server: ")
            && err.to_lowercase().contains("refused"),
        "{err}"
    );
}

#[test]
fn a_reader_that_stops_early_ends_no_command_in_error() {
    // `idemgate log | head`: the reader goes away. The command ends as it would have, with its
    // own exit code, and says nothing of a broken pipe.
    let dir = tempfile::tempdir().expect("tempdir");
    let db = demo(dir.path(), 2_000);
    let gone = |args: &[&str]| {
        // A socket whose other end is already closed: every write to it fails with EPIPE.
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().expect("socket pair");
        drop(theirs);
        Command::new(BIN)
            .args(args)
            .env_remove("IDEMGATE_LEDGER")
            .env_remove("IDEMGATE_CHAIN_KEY")
            .env_remove("IDEMGATE_CHAIN_KEY_FILE")
            .stdout(std::process::Stdio::from(std::os::fd::OwnedFd::from(ours)))
            .output()
            .expect("run idemgate")
    };
    let db = s(&db);
    for args in [
        &["log", "--ledger", db, "--limit", "1000"][..],
        &["log", "--ledger", db, "--json"],
        &["entries", "--ledger", db, "--json"],
        &["show", "--ledger", db, "1"],
        &["verify", "--ledger", db],
    ] {
        let out = gone(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("error"), "{args:?}: {stderr}");
    }
    tamper(
        Path::new(db),
        "UPDATE events SET detail = 'rewritten' WHERE seq = 7",
    );
    let out = gone(&["verify", "--ledger", db]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "the verification's own code: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_relative_ledger_path_is_shown_as_the_file_it_is() {
    // `./idemgate.db` is the working directory's: under systemd that is `/`. What idemgate says
    // of the ledger names the file itself.
    let dir = tempfile::tempdir().expect("tempdir");
    let run = |args: &[&str]| {
        let out = Command::new(BIN)
            .args(args)
            .current_dir(dir.path())
            .env_remove("IDEMGATE_LEDGER")
            .output()
            .expect("run idemgate");
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8(out.stdout).expect("utf8")
    };
    let abs = dir.path().canonicalize().expect("canonical").join("rel.db");
    let seeded = run(&["demo", "--ledger", "./rel.db", "--events", "50"]);
    assert!(
        seeded.contains(&format!("--ledger {}", abs.display())),
        "{seeded}"
    );
    run(&[
        "export", "--ledger", "rel.db", "--format", "ndjson", "-o", "e.ndjson",
    ]);
    let manifest: Value = serde_json::from_slice(
        &std::fs::read(dir.path().join("e.ndjson.manifest.json")).expect("manifest"),
    )
    .expect("json");
    assert_eq!(manifest["ledger"], abs.display().to_string());
}

#[test]
fn entries_filter_by_every_state_the_ledger_has() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = demo(dir.path(), 600);
    let all = json(&["entries", "--ledger", s(&db), "--json"]);
    let total = all.as_array().expect("array").len();
    let mut counted = 0;
    for state in [
        "pending",
        "completed",
        "released",
        "failed",
        "awaiting_approval",
    ] {
        let some = json(&["entries", "--ledger", s(&db), "--status", state, "--json"]);
        let some = some.as_array().expect("array");
        assert!(!some.is_empty(), "the demo has {state} entries");
        assert!(
            some.iter().all(|e| e["state"] == state),
            "{state}: {some:?}"
        );
        counted += some.len();
    }
    assert_eq!(counted, total, "every entry is in one of the states");
    // A state the ledger does not have is refused, and the answer lists those it has.
    let bad = idemgate(&["entries", "--ledger", s(&db), "--status", "held"]);
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("awaiting_approval"), "{err}");
}

#[test]
fn each_operation_lists_its_parameters_in_its_help() {
    let help = |op: &str| ok(&["call", op, "--help"]);
    let resolve = help("resolve");
    for line in [
        "  entry_id  integer, required",
        "  as  completed|failed|released, required",
        "  external_ref  string",
        "          Why, as the log records it.",
    ] {
        assert!(resolve.contains(line), "{line:?} in {resolve}");
    }
    // `--operator` names who acts: not listed again as a parameter.
    assert!(!resolve.contains("  operator  "), "{resolve}");
    // One with no route takes its parameters from the same document.
    assert!(help("archive").contains("  dir  string, required"));
    // Every operation the CLI runs has the section.
    let all = ok(&["call", "--help"]);
    let ops: Vec<&str> = all
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|op| *op != "help")
        .collect();
    assert!(ops.len() >= 30, "{all}");
    for op in ops {
        assert!(help(op).contains("\nParameters"), "{op}");
    }
}

#[test]
fn entries_search_finds_what_the_consoles_search_box_finds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = demo(dir.path(), 600);
    let ids = |v: &Value| -> Vec<i64> {
        v.as_array()
            .expect("array")
            .iter()
            .filter_map(|e| e["id"].as_i64())
            .collect()
    };
    let stuck = json(&["entries", "--ledger", s(&db), "--stuck", "--json"]);
    let key = stuck[0]["key"].as_str().expect("key").to_owned();
    let customer = json(&["entries", "--ledger", s(&db), "--duplicates", "--json"])[0]["subjects"]
        ["customer"]
        .as_str()
        .expect("a duplicate suspect with a customer")
        .to_owned();
    for text in [key.as_str(), customer.as_str()] {
        let cli = json(&["entries", "--ledger", s(&db), "--search", text, "--json"]);
        let op = json(&[
            "call",
            "entries",
            "--ledger",
            s(&db),
            &format!("search={text}"),
        ]);
        assert!(!ids(&cli).is_empty(), "{text}");
        assert_eq!(ids(&cli), ids(&op["entries"]), "{text}");
    }
}

#[test]
fn held_calls_are_listed_in_columns_whatever_their_titles() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = demo(dir.path(), 600);
    let list = ok(&["approvals", "--ledger", s(&db)]);
    let lines: Vec<&str> = list.lines().collect();
    // The demo holds refunds of several sizes: their titles differ in length.
    assert!(lines.len() >= 3, "{list}");
    // Where each call's standing begins: one column, whatever its title and key.
    let standing: Vec<Option<usize>> = lines
        .iter()
        .map(|l| {
            let at = ["waiting:", "approved:", "rejected:"]
                .iter()
                .find_map(|w| l.find(w));
            at.map(|at| l[..at].chars().count())
        })
        .collect();
    assert!(
        standing[0].is_some() && standing.iter().all(|c| *c == standing[0]),
        "{standing:?}\n{list}"
    );
}
