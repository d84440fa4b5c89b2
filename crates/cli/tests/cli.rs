//! The `idemgate` binary against real ledger files: the demo, `--json`, verification of tampered
//! ledgers and exports, and refused actions that must leave the ledger byte-for-byte unchanged.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use sha2::{Digest, Sha256};

const BIN: &str = env!("CARGO_BIN_EXE_idemgate");

fn idemgate(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("IDEMGATE_LEDGER")
        .env_remove("IDEMGATE_CHAIN_KEY")
        .env_remove("IDEMGATE_CHAIN_KEY_FILE")
        .env_remove("IDEMGATE_OPERATOR")
        .output()
        .expect("run idemgate")
}

fn ok(args: &[&str]) -> String {
    let out = idemgate(args);
    assert!(
        out.status.success(),
        "idemgate {args:?} failed ({:?}): {}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf8")
}

fn json(args: &[&str]) -> Value {
    serde_json::from_str(&ok(args)).expect("json output")
}

fn demo(dir: &Path, events: u64) -> PathBuf {
    let db = dir.join("demo.db");
    ok(&["demo", "--ledger", s(&db), "--events", &events.to_string()]);
    db
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf8 path")
}

fn file_sha(p: &Path) -> String {
    hex::encode(Sha256::digest(std::fs::read(p).expect("read")))
}

/// Runs SQL on the ledger behind its back, with the append-only triggers dropped.
fn tamper(db: &Path, sql: &str) {
    let c = rusqlite::Connection::open(db).expect("open raw");
    c.execute_batch(
        "DROP TRIGGER IF EXISTS events_append_only_update; DROP TRIGGER IF EXISTS events_append_only_delete;",
    )
    .expect("drop triggers");
    c.execute_batch(sql).expect("tamper");
}

fn verify_json(args: &[&str]) -> (i32, Value) {
    let mut a = vec!["verify"];
    a.extend_from_slice(args);
    a.push("--json");
    let out = idemgate(&a);
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "verify printed no JSON: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), v)
}

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
    assert_eq!(all.len(), 12);
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

#[test]
fn every_kind_of_log_tampering_is_named_by_sequence_number() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pristine = demo(dir.path(), 400);
    let (code, v) = verify_json(&["--ledger", s(&pristine)]);
    assert_eq!(code, 0, "{v}");
    let n = 50;
    let cases: Vec<(&str, String, i64)> = vec![
        ("at", format!("UPDATE events SET at = at + 1 WHERE seq = {n}"), n),
        ("kind", format!("UPDATE events SET kind = CASE kind WHEN 'complete' THEN 'claim' ELSE 'complete' END WHERE seq = {n}"), n),
        ("entry_id", format!("UPDATE events SET entry_id = COALESCE(entry_id, 0) + 1 WHERE seq = {n}"), n),
        ("route", format!("UPDATE events SET route = 'refunds' || route WHERE seq = {n}"), n),
        ("scope", format!("UPDATE events SET scope = scope || 'x' WHERE seq = {n}"), n),
        ("key", format!("UPDATE events SET key = 'forged-key' WHERE seq = {n}"), n),
        ("operator", format!("UPDATE events SET operator = 'mallory' WHERE seq = {n}"), n),
        ("reason", format!("UPDATE events SET reason = 'because' WHERE seq = {n}"), n),
        ("detail", format!("UPDATE events SET detail = '{{}}' WHERE seq = {n}"), n),
        ("payload_digest", format!("UPDATE events SET payload_digest = 'ab' WHERE seq = {n}"), n),
        ("prev_hash", format!("UPDATE events SET prev_hash = hash WHERE seq = {n}"), n),
        ("hash", format!("UPDATE events SET hash = prev_hash WHERE seq = {n}"), n),
        ("seq (moved)", format!("UPDATE events SET seq = 1000000 WHERE seq = {n}"), n),
        ("row deleted", format!("DELETE FROM events WHERE seq = {n}"), n),
        (
            "rows reordered",
            format!(
                "CREATE TEMP TABLE a AS SELECT * FROM events WHERE seq = {n}; \
                 CREATE TEMP TABLE b AS SELECT * FROM events WHERE seq = {n} + 1; \
                 DELETE FROM events WHERE seq IN ({n}, {n} + 1); \
                 UPDATE a SET seq = {n} + 1; UPDATE b SET seq = {n}; \
                 INSERT INTO events SELECT * FROM a; INSERT INTO events SELECT * FROM b;"
            ),
            n,
        ),
        (
            "row inserted at the end",
            "INSERT INTO events SELECT seq + 1, at, kind, entry_id, route, scope, 'injected', operator, reason, detail, \
             payload_digest, hash, hash FROM events WHERE seq = (SELECT MAX(seq) FROM events)"
                .into(),
            -1,
        ),
    ];
    let head: i64 = rusqlite::Connection::open(&pristine)
        .expect("open")
        .query_row("SELECT MAX(seq) FROM events", [], |r| r.get(0))
        .expect("head");
    for (what, sql, expect) in cases {
        let db = dir.path().join(format!("t-{}.db", what.replace(' ', "_")));
        std::fs::copy(&pristine, &db).expect("copy");
        tamper(&db, &sql);
        let (code, v) = verify_json(&["--ledger", s(&db)]);
        let expect = if expect < 0 { head + 1 } else { expect };
        assert_eq!(code, 3, "{what}: verify must fail: {v}");
        assert_eq!(v["ok"], false, "{what}");
        assert_eq!(v["first_bad_seq"].as_i64(), Some(expect), "{what}: {v}");
        // The human output names it too.
        let out = idemgate(&["verify", "--ledger", s(&db)]);
        assert!(
            String::from_utf8_lossy(&out.stdout).contains(&format!("seq {expect}")),
            "{what}"
        );
    }
}

#[test]
fn the_log_refuses_update_and_delete() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = demo(dir.path(), 300);
    let c = rusqlite::Connection::open(&db).expect("open raw");
    let upd = c.execute("UPDATE events SET key = 'x' WHERE seq = 1", []);
    assert!(upd.is_err_and(|e| e.to_string().contains("append-only")));
    let del = c.execute("DELETE FROM events WHERE seq = 1", []);
    assert!(del.is_err_and(|e| e.to_string().contains("append-only")));
}

fn rewrite_lines(p: &Path, f: impl FnOnce(&mut Vec<String>)) {
    let text = std::fs::read_to_string(p).expect("read");
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    f(&mut lines);
    std::fs::write(p, lines.join("\n") + "\n").expect("write");
}

/// What an attacker who edits the export would also do: make the manifest's sha256 match again.
fn fix_manifest_sha(file: &Path) {
    let m = PathBuf::from(format!("{}.manifest.json", file.display()));
    let mut v: Value = serde_json::from_slice(&std::fs::read(&m).expect("manifest")).expect("json");
    v["sha256"] = Value::String(file_sha(file));
    std::fs::write(&m, serde_json::to_vec_pretty(&v).expect("json")).expect("write");
}

#[test]
fn edited_exports_fail_verification_naming_the_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = demo(dir.path(), 400);
    for format in ["ndjson", "csv"] {
        let file = dir.path().join(format!("audit.{format}"));
        let m = json(&[
            "export",
            "--ledger",
            s(&db),
            "--format",
            format,
            "-o",
            s(&file),
            "--json",
        ]);
        assert!(m["count"].as_u64().expect("count") >= 400);
        assert_eq!(m["sha256"].as_str(), Some(file_sha(&file).as_str()));
        let (code, v) = verify_json(&["--export", s(&file)]);
        assert_eq!(code, 0, "{format}: pristine export verifies: {v}");
        // Header line in CSV: data row i is line i+1.
        let row = |seq: usize| if format == "csv" { seq } else { seq - 1 };

        // 1. One field edited: the sha256 and the chain both fail.
        let edited = dir.path().join(format!("edited.{format}"));
        std::fs::copy(&file, &edited).expect("copy");
        std::fs::copy(
            dir.path().join(format!("audit.{format}.manifest.json")),
            dir.path().join(format!("edited.{format}.manifest.json")),
        )
        .expect("copy");
        rewrite_lines(&edited, |l| {
            let line = &mut l[row(20)];
            assert!(
                line.contains("charges")
                    || line.contains("emails")
                    || line.contains("refunds")
                    || line.contains("tickets")
                    || line.contains("webhooks")
                    || line.contains("subscriptions"),
                "{line}"
            );
            *line = line.replacen("agent-", "agent-X", 1);
        });
        let (code, v) = verify_json(&["--export", s(&edited)]);
        assert_eq!(code, 3, "{format}: {v}");
        assert_eq!(v["sha256_matches"], false);
        assert_eq!(
            v["chain"]["first_bad_seq"].as_i64(),
            Some(20),
            "{format}: {v}"
        );
        // ... and still when the attacker also fixes the manifest's sha256.
        fix_manifest_sha(&edited);
        let (code, v) = verify_json(&["--export", s(&edited)]);
        assert_eq!(code, 3, "{format}: {v}");
        assert_eq!(
            v["chain"]["first_bad_seq"].as_i64(),
            Some(20),
            "{format}: {v}"
        );

        // 2. A row removed from the middle.
        std::fs::copy(&file, &edited).expect("copy");
        rewrite_lines(&edited, |l| {
            l.remove(row(30));
        });
        fix_manifest_sha(&edited);
        let (code, v) = verify_json(&["--export", s(&edited)]);
        assert_eq!(code, 3);
        assert_eq!(
            v["chain"]["first_bad_seq"].as_i64(),
            Some(30),
            "{format}: {v}"
        );

        // 3. The tail cut off: the rows left still chain, but the manifest's count and head differ.
        std::fs::copy(&file, &edited).expect("copy");
        rewrite_lines(&edited, |l| {
            l.truncate(l.len() - 5);
        });
        fix_manifest_sha(&edited);
        let (code, v) = verify_json(&["--export", s(&edited)]);
        assert_eq!(code, 3, "{format}: {v}");
        assert_eq!(v["chain"]["ok"], true);
        assert_eq!(v["manifest_matches"], false);
    }
}

#[test]
fn verify_against_a_manifest_detects_a_cut_off_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = demo(dir.path(), 400);
    let file = dir.path().join("audit.ndjson");
    ok(&[
        "export",
        "--ledger",
        s(&db),
        "--format",
        "ndjson",
        "-o",
        s(&file),
    ]);
    let manifest = dir.path().join("audit.ndjson.manifest.json");
    let (code, v) = verify_json(&["--ledger", s(&db), "--against", s(&manifest)]);
    assert_eq!(code, 0, "{v}");
    // New events after the export are fine: the head is still held.
    ok(&[
        "purge",
        "--ledger",
        s(&db),
        "--expired",
        "--reason",
        "retention",
        "--operator",
        "dana",
        "--confirm-destructive",
    ]);
    assert_eq!(
        verify_json(&["--ledger", s(&db), "--against", s(&manifest)]).0,
        0
    );
    // Cut the tail back past the exported head: the plain chain still verifies, the manifest does not.
    let head = v["heads"][0][0]["seq"].as_i64().expect("head seq");
    tamper(
        &db,
        &format!("DELETE FROM events WHERE seq >= {}", head - 3),
    );
    assert_eq!(
        verify_json(&["--ledger", s(&db)]).0,
        0,
        "a prefix of a chain is a valid chain"
    );
    let (code, v) = verify_json(&["--ledger", s(&db), "--against", s(&manifest)]);
    assert_eq!(code, 3, "{v}");
    assert_eq!(v["heads"][0][1], false);
}

#[test]
fn export_ranges_are_contiguous_and_verify() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = demo(dir.path(), 2_000);
    let file = dir.path().join("range.csv");
    let m = json(&[
        "export",
        "--ledger",
        s(&db),
        "--format",
        "csv",
        "--since",
        "48h",
        "--until",
        "12h",
        "-o",
        s(&file),
        "--json",
    ]);
    let (first, last) = (
        m["first_seq"].as_i64().expect("first"),
        m["last_seq"].as_i64().expect("last"),
    );
    assert!(first > 1 && last > first);
    assert_eq!(m["count"].as_i64(), Some(last - first + 1));
    assert_eq!(verify_json(&["--export", s(&file)]).0, 0);
    // An export is a file and a manifest: "-" (it wrote a file named "-") and a directory (an
    // i/o error naming nothing) are refused, and nothing is written.
    let cwd = tempfile::tempdir().expect("tempdir");
    for (out, said) in [
        ("-", "name a file, not -"),
        (s(dir.path()), "is a directory"),
    ] {
        let r = Command::new(BIN)
            .args(["export", "--ledger", s(&db), "--format", "csv", "-o", out])
            .current_dir(cwd.path())
            .output()
            .expect("run idemgate");
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(1), "{out}: {err}");
        assert!(err.contains(said), "{out}: {err}");
    }
    assert_eq!(std::fs::read_dir(cwd.path()).expect("dir").count(), 0);
}

/// An earlier export is evidence: a second export to its name is refused and changes neither the
/// file nor its manifest (nor leaves a partial file); `--overwrite` replaces both.
#[test]
fn an_export_never_replaces_an_existing_file_unless_told_to() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = demo(dir.path(), 300);
    let file = dir.path().join("audit.ndjson");
    let manifest = dir.path().join("audit.ndjson.manifest.json");
    let export = |extra: &[&str]| {
        let mut args = vec![
            "export",
            "--ledger",
            s(&db),
            "--format",
            "ndjson",
            "-o",
            s(&file),
        ];
        args.extend_from_slice(extra);
        Command::new(BIN)
            .args(&args)
            .output()
            .expect("run idemgate")
    };
    assert!(export(&["--until", "12h"]).status.success());
    let before = (file_sha(&file), file_sha(&manifest));
    let listing = || {
        let mut v: Vec<String> = std::fs::read_dir(dir.path())
            .expect("dir")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let files = listing();

    let r = export(&[]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(1), "{err}");
    assert!(
        err.contains("error[conflict]") && err.contains("already exists"),
        "{err}"
    );
    assert_eq!((file_sha(&file), file_sha(&manifest)), before);
    assert_eq!(listing(), files, "nothing else written");
    // Its manifest alone is enough to refuse: the pair is one export.
    let lone = dir.path().join("lone.ndjson");
    std::fs::write(dir.path().join("lone.ndjson.manifest.json"), b"{}").expect("write");
    let r = Command::new(BIN)
        .args([
            "export",
            "--ledger",
            s(&db),
            "--format",
            "ndjson",
            "-o",
            s(&lone),
        ])
        .output()
        .expect("run idemgate");
    assert_eq!(r.status.code(), Some(1));
    assert!(!lone.exists());

    assert!(export(&["--overwrite"]).status.success());
    assert_ne!(
        file_sha(&file),
        before.0,
        "the whole log now, not the range"
    );
    assert_ne!(file_sha(&manifest), before.1);
    assert_eq!(verify_json(&["--export", s(&file)]).0, 0);
}

fn ledger_fingerprint(db: &Path) -> (String, bool) {
    let wal = PathBuf::from(format!("{}-wal", db.display()));
    let wal_has_frames = wal.exists()
        && std::fs::metadata(&wal)
            .map(|m| m.len() > 0)
            .unwrap_or(false);
    (file_sha(db), wal_has_frames)
}

#[test]
fn refused_operator_actions_leave_the_ledger_byte_for_byte_unchanged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = demo(dir.path(), 600);
    let l = s(&db);
    let stuck = json(&["entries", "--ledger", l, "--stuck", "--json"]);
    let stuck = stuck.as_array().expect("array");
    let stuck_id = stuck
        .iter()
        .find(|e| e["route"] != "subscriptions-cancel")
        .expect("stuck")["id"]
        .to_string();
    let destructive_id = stuck
        .iter()
        .find(|e| e["route"] == "subscriptions-cancel")
        .expect("destructive stuck")["id"]
        .to_string();
    let completed = json(&[
        "entries",
        "--ledger",
        l,
        "--status",
        "completed",
        "--limit",
        "1",
        "--json",
    ]);
    let completed_id = completed[0]["id"].to_string();
    let missing_file = dir.path().join("nope.json");
    let declined = dir.path().join("declined.json");
    std::fs::write(&declined, br#"{"error":"card_declined"}"#).expect("write");
    let same_db = dir.path().join(".").join(db.file_name().expect("name"));
    let before = ledger_fingerprint(&db);
    assert!(!before.1, "the WAL is checkpointed when the CLI exits");

    let refused: Vec<(Vec<&str>, i32, &str)> = vec![
        (
            vec!["copy", "--ledger", l, "--to", s(&same_db)],
            1,
            "is the source ledger itself",
        ),
        (
            vec![
                "resolve",
                "--ledger",
                l,
                "99999999",
                "--as",
                "released",
                "--reason",
                "r",
                "--operator",
                "o",
            ],
            1,
            "entry-not-found",
        ),
        (
            vec![
                "resolve",
                "--ledger",
                l,
                &stuck_id,
                "--as",
                "released",
                "--reason",
                "  ",
                "--operator",
                "o",
            ],
            1,
            "missing-reason",
        ),
        (
            vec![
                "resolve",
                "--ledger",
                l,
                &stuck_id,
                "--as",
                "released",
                "--reason",
                "r",
                "--operator",
                "",
            ],
            1,
            "missing-operator",
        ),
        (
            vec![
                "resolve",
                "--ledger",
                l,
                &stuck_id,
                "--as",
                "released",
                "--operator",
                "o",
            ],
            2,
            "--reason",
        ),
        (
            vec![
                "resolve",
                "--ledger",
                l,
                &stuck_id,
                "--as",
                "maybe",
                "--reason",
                "r",
                "--operator",
                "o",
            ],
            2,
            "maybe",
        ),
        (
            vec![
                "resolve",
                "--ledger",
                l,
                &stuck_id,
                "--as",
                "released",
                "--reason",
                "r",
                "--operator",
                "o",
                "--bogus",
            ],
            2,
            "--bogus",
        ),
        (
            vec![
                "resolve",
                "--ledger",
                l,
                &completed_id,
                "--as",
                "released",
                "--reason",
                "r",
                "--operator",
                "o",
            ],
            1,
            "conflict",
        ),
        (
            vec![
                "resolve",
                "--ledger",
                l,
                &stuck_id,
                "--as",
                "completed",
                "--reason",
                "r",
                "--operator",
                "o",
            ],
            1,
            "invalid-argument",
        ),
        (
            vec![
                "resolve",
                "--ledger",
                l,
                &stuck_id,
                "--as",
                "completed",
                "--response-file",
                s(&missing_file),
                "--reason",
                "r",
                "--operator",
                "o",
            ],
            1,
            "invalid-argument",
        ),
        // A failed entry's response has the upstream's error status, which is not guessed (the
        // default, 200, is refused for it).
        (
            vec![
                "resolve",
                "--ledger",
                l,
                &stuck_id,
                "--as",
                "failed",
                "--response-file",
                s(&declined),
                "--reason",
                "r",
                "--operator",
                "o",
            ],
            1,
            "needs --status",
        ),
        // --status and --content-type describe the response file's response; alone, they would
        // be ignored.
        (
            vec![
                "resolve",
                "--ledger",
                l,
                &stuck_id,
                "--as",
                "failed",
                "--status",
                "402",
                "--reason",
                "r",
                "--operator",
                "o",
            ],
            2,
            "--response-file",
        ),
        (
            vec![
                "resolve",
                "--ledger",
                l,
                &destructive_id,
                "--as",
                "released",
                "--reason",
                "r",
                "--operator",
                "o",
            ],
            1,
            "confirmation-required",
        ),
        (
            vec![
                "purge",
                "--ledger",
                l,
                &stuck_id,
                "--reason",
                "r",
                "--operator",
                "o",
            ],
            1,
            "conflict",
        ),
        (
            vec![
                "purge",
                "--ledger",
                l,
                &completed_id,
                "99999999",
                "--reason",
                "r",
                "--operator",
                "o",
            ],
            1,
            "entry-not-found",
        ),
        (
            vec!["purge", "--ledger", l, "--reason", "r", "--operator", "o"],
            2,
            "required",
        ),
        (
            vec!["entries", "--ledger", l, "--status", "stuckish"],
            2,
            "stuckish",
        ),
        (
            vec!["log", "--ledger", l, "--kind", "nonsense"],
            1,
            "invalid-argument",
        ),
        (
            vec!["log", "--ledger", l, "--since", "last tuesday"],
            2,
            "not a time",
        ),
        (
            vec![
                "log",
                "--ledger",
                l,
                "--since",
                "2026-11-20",
                "--until",
                "2026-11-19",
            ],
            1,
            "before until",
        ),
        (
            vec![
                "export",
                "--ledger",
                l,
                "--format",
                "csv",
                "--since",
                "1795168800",
                "-o",
                "x",
            ],
            2,
            "milliseconds",
        ),
        (
            vec![
                "export",
                "--ledger",
                l,
                "--format",
                "ndjson",
                "-o",
                "/nonexistent/dir/x.ndjson",
            ],
            1,
            "invalid-argument",
        ),
    ];
    for (args, code, needle) in refused {
        let out = idemgate(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert!(
            err.contains(needle),
            "{args:?}: stderr {err:?} should mention {needle:?}"
        );
        assert_eq!(
            ledger_fingerprint(&db),
            before,
            "{args:?} changed the ledger"
        );
    }
    // The check can see a change: an accepted action does change the file.
    ok(&[
        "resolve",
        "--ledger",
        l,
        &destructive_id,
        "--as",
        "released",
        "--reason",
        "checked twice",
        "--operator",
        "o",
        "--confirm-destructive",
    ]);
    assert_ne!(ledger_fingerprint(&db), before);
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

/// A ledger of `n` expired entries, each claimed and completed: 2n events.
fn expired_ledger(dir: &Path, n: usize) -> PathBuf {
    let db = dir.join("expired.db");
    let ops = idemgate_ops::Ops::open_or_create(s(&db)).expect("ledger");
    idemgate_ledger::testing::expired_charges(ops.store().as_ref(), n);
    db
}

/// Runs idemgate, waits until `ready` holds, sends it `signal` (`INT`, as Ctrl-C does, or `TERM`),
/// and returns what it printed and how it ended.
fn interrupted(signal: &str, args: &[&str], mut ready: impl FnMut() -> bool) -> Output {
    use std::process::Stdio;
    let child = Command::new(BIN)
        .args(args)
        .env_remove("IDEMGATE_LEDGER")
        .env_remove("IDEMGATE_CHAIN_KEY")
        .env_remove("IDEMGATE_CHAIN_KEY_FILE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run idemgate");
    let mut child = child;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !ready() {
        assert!(
            child.try_wait().expect("try_wait").is_none(),
            "idemgate {args:?} ended before it could be interrupted"
        );
        assert!(std::time::Instant::now() < deadline, "never ready");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let kill = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(kill.success());
    child.wait_with_output().expect("wait")
}

fn count(db: &Path, sql: &str) -> u64 {
    let c = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .expect("open");
    c.query_row(sql, [], |r| r.get::<_, i64>(0))
        .expect("count")
        .unsigned_abs()
}

/// Ctrl-C in the middle of a purge stops it between two of its atomic chunks: what is purged stays
/// purged and logged, the rest is as it was, the command says so and exits 130, and purging again
/// takes the rest. (Without the handler, the process died with its chunk rolled back and said
/// nothing of the chunks before.)
#[test]
fn ctrl_c_stops_a_purge_between_two_chunks_and_says_what_it_left() {
    let dir = tempfile::tempdir().expect("tempdir");
    let n = 40 * idemgate_ops::PURGE_CHUNK;
    let db = expired_ledger(dir.path(), n);
    let purges = "SELECT count(*) FROM events WHERE kind = 'purge'";
    let purge = |reason| {
        [
            "purge",
            "--ledger",
            s(&db),
            "--expired",
            "--operator",
            "ci",
            "--reason",
            reason,
            "--json",
        ]
    };
    let out = interrupted("INT", &purge("a purge that is stopped"), || {
        count(&db, purges) > 0
    });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).expect("the report, as JSON");
    assert_eq!(report["cancelled"], true);
    let purged = report["purged"].as_array().expect("purged").len();
    assert!(purged > 0 && purged < n, "purged {purged} of {n}");
    assert_eq!(purged % idemgate_ops::PURGE_CHUNK, 0, "whole chunks");
    assert!(
        stderr.contains(&format!(
            "purge stopped (Ctrl-C): purged {purged} of {n}; the other {} are as they were",
            n - purged
        )),
        "{stderr}"
    );
    assert_eq!(
        count(&db, purges),
        purged as u64,
        "each purged entry logged"
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM entries"),
        (n - purged) as u64
    );

    let again = json(&purge("the rest"));
    assert_eq!(again["cancelled"], false);
    assert_eq!(
        again["purged"].as_array().expect("purged").len(),
        n - purged
    );
    assert_eq!(count(&db, "SELECT count(*) FROM entries"), 0);
    let (code, v) = verify_json(&["--ledger", s(&db)]);
    assert_eq!((code, &v["ok"]), (0, &Value::Bool(true)));
}

/// Ctrl-C in the middle of an export removes its partial file and writes no manifest, so no
/// half-written file is left under a name an auditor might pick up; SIGTERM does the same.
#[test]
fn ctrl_c_or_sigterm_stops_an_export_and_leaves_no_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = expired_ledger(dir.path(), 40_000);
    let out_file = dir.path().join("audit.ndjson");
    let partial = dir.path().join(".audit.ndjson.partial");
    let export = [
        "export",
        "--ledger",
        s(&db),
        "--format",
        "ndjson",
        "--output",
        s(&out_file),
    ];
    for (signal, code, name) in [("INT", 130, "Ctrl-C"), ("TERM", 143, "SIGTERM")] {
        let out = interrupted(signal, &export, || {
            partial.metadata().is_ok_and(|m| m.len() > 0)
        });
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{stderr}");
        assert!(
            stderr.contains(&format!("export stopped ({name}): no file written")),
            "{stderr}"
        );
        assert!(out.stdout.is_empty());
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains("audit"))
            .collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    }
    // The same export, left alone, writes the file.
    ok(&export);
    assert!(out_file.exists());
}
