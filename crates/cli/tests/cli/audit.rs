//! The log and exports: tampering named by sequence number, verification, export ranges.

use super::*;

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

#[test]
fn entries_export_with_their_outcomes_in_both_formats() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = demo(dir.path(), 1500);
    let all = json(&["entries", "--ledger", s(&db), "--json"]);
    let n = all.as_array().map_or(0, Vec::len);
    let nd = dir.path().join("entries.ndjson");
    let m = json(&[
        "export",
        "--ledger",
        s(&db),
        "--entries",
        "--format",
        "ndjson",
        "-o",
        s(&nd),
        "--json",
    ]);
    assert_eq!(
        (m["kind"].as_str(), m["count"].as_u64()),
        (Some("entries"), Some(n as u64))
    );
    let rows: Vec<Value> = std::fs::read_to_string(&nd)
        .expect("read")
        .lines()
        .map(|l| serde_json::from_str(l).expect("row"))
        .collect();
    assert_eq!(rows.len(), n);
    // Outcomes: a completed entry has its status and the digest of its stored response; an
    // operator's resolution names who and why; subjects are there for the routes that name them.
    assert!(rows.iter().any(|r| r["state"] == "completed"
        && r["status"].as_u64().is_some()
        && r["response_sha256"].as_str().is_some_and(|d| d.len() == 64)));
    assert!(rows
        .iter()
        .any(|r| r["resolved_by"].is_string() && r["resolution_reason"].is_string()));
    assert!(rows.iter().any(|r| r["subjects"]
        .as_str()
        .is_some_and(|s| s.contains("customer"))));
    let (code, v) = verify_json(&["--export", s(&nd)]);
    assert_eq!(code, 0, "{v}");
    // CSV: a header and one line per entry.
    let csv = dir.path().join("entries.csv");
    ok(&[
        "export",
        "--ledger",
        s(&db),
        "--entries",
        "--format",
        "csv",
        "-o",
        s(&csv),
    ]);
    let text = std::fs::read_to_string(&csv).expect("csv");
    let mut r = csv_reader(&text);
    assert!(r
        .headers()
        .expect("header")
        .iter()
        .any(|h| h == "response_sha256"));
    assert_eq!(r.records().count(), n);
    // An edited row is caught by the manifest's digest.
    rewrite_lines(&nd, |l| {
        l[0] = l[0].replacen("\"state\":\"", "\"state\":\"x", 1);
    });
    let (code, v) = verify_json(&["--export", s(&nd)]);
    assert_eq!(code, 3, "{v}");
}

fn csv_reader(text: &str) -> csv::Reader<&[u8]> {
    csv::Reader::from_reader(text.as_bytes())
}
