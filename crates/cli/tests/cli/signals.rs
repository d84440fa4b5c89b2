//! Ctrl-C and SIGTERM stop long work where it safely can, and say what they left.

use super::*;

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
