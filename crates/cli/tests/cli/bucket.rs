//! Archives in S3-compatible object storage, against a real server on loopback (`s3s-fs`): sealed,
//! verified and proved from the bucket alone, altered and removed objects named, a refused upload
//! that changes nothing, and SIGKILL at each step of archival.

use idemgate_ledger::testing::S3;

use super::archival::head_seq;
use super::*;

const BUCKET: &str = "archive";

fn start() -> Option<S3> {
    let s3 = S3::start(BUCKET);
    if s3.is_none() {
        eprintln!("skipped: {}=skip", idemgate_ledger::testing::TEST_S3);
    }
    s3
}

/// The stored objects under `prefix` whose names end with `suffix`, sorted.
fn objects(s3: &S3, prefix: &str, suffix: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(s3.object(BUCKET, prefix))
        .expect("the prefix's directory")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(suffix))
        .collect();
    v.sort();
    v
}

#[test]
fn an_archive_in_a_bucket_verifies_proves_and_names_an_altered_or_missing_segment() {
    let Some(s3) = start() else { return };
    let env = s3.env();
    let dir = tempfile::tempdir().expect("tempdir");
    let db = demo(dir.path(), 2000);
    let (key, public) = (dir.path().join("k.key"), dir.path().join("k.pub"));
    ok(&[
        "keygen",
        "--out",
        s(&dir.path().join("k")),
        "--name",
        "b.example/log",
    ]);
    let url = format!("s3://{BUCKET}/ledgers/a/");
    let out = ok_env(
        &[
            "archive",
            "--ledger",
            s(&db),
            "--before",
            "1h",
            "--to",
            &url,
            "--segment-events",
            "700",
            "--signing-key",
            s(&key),
        ],
        &env,
    );
    assert!(out.contains("archived through seq"), "{out}");
    let segs = objects(&s3, "ledgers/a", ".ndjson.gz");
    assert_eq!(
        objects(&s3, "ledgers/a", ".manifest.json").len(),
        segs.len()
    );
    assert!(segs.len() >= 2, "{segs:?}");
    // Nothing is left behind on this machine: the spool files are gone.
    let spooled = std::fs::read_dir(std::env::temp_dir())
        .expect("tmp")
        .flatten()
        .any(|e| e.file_name().to_string_lossy().ends_with(&segs[0]));
    assert!(!spooled);

    // The whole history verifies from the bucket and the ledger, and from the bucket alone.
    let (code, v) = verify_json_env(&["--ledger", s(&db), "--archive", &url], &env);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["count"].as_u64(), Some(head_seq(&db)), "{v}");
    assert_eq!(v["dir"], format!("s3://{BUCKET}/ledgers/a"), "{v}");
    let (code, v) = verify_json_env(&["--archive", &url, "--public-key", s(&public)], &env);
    assert_eq!(code, 0, "{v}");
    // An archived event is proved from its segment in the bucket.
    let proof = dir.path().join("e5.tlog-proof");
    let out = ok_env(
        &[
            "prove",
            "--ledger",
            s(&db),
            "--event",
            "5",
            "--archive",
            &url,
            "--signing-key",
            s(&key),
            "-o",
            s(&proof),
        ],
        &env,
    );
    assert!(out.contains("event 5 is leaf 4"), "{out}");
    let out = ok(&["verify", "--proof", s(&proof), "--public-key", s(&public)]);
    assert!(out.starts_with("ok: event 5"), "{out}");

    // An object altered in the bucket is named, and so is one removed.
    let first = s3.object(BUCKET, &format!("ledgers/a/{}", segs[0]));
    let mut raw = std::fs::read(&first).expect("object");
    let mid = raw.len() / 2;
    raw[mid] ^= 0x20;
    std::fs::write(&first, &raw).expect("alter");
    let (code, v) = verify_json_env(&["--ledger", s(&db), "--archive", &url], &env);
    assert_eq!(code, 3, "{v}");
    let problems = v["problems"].to_string();
    assert!(
        problems.contains(&segs[0]) && problems.contains("altered"),
        "{v}"
    );
    std::fs::remove_file(&first).expect("remove");
    let (code, v) = verify_json_env(&["--archive", &url], &env);
    assert_eq!(code, 3, "{v}");
    let problems = v["problems"].to_string();
    assert!(
        problems.contains(&segs[0]) && problems.contains("missing"),
        "{v}"
    );
}

#[test]
fn a_bucket_that_refuses_the_upload_changes_nothing() {
    let Some(s3) = start() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let db = demo(dir.path(), 600);
    let before = (
        count(&db, "SELECT COUNT(*) FROM events"),
        count(&db, "SELECT COUNT(*) FROM archived"),
    );
    let wrong: Vec<(&str, String)> = s3
        .env()
        .into_iter()
        .map(|(k, v)| match k {
            "AWS_SECRET_ACCESS_KEY" => (k, "not-the-secret".to_owned()),
            _ => (k, v),
        })
        .collect();
    let url = format!("s3://{BUCKET}/refused");
    let out = idemgate_env(
        &[
            "archive",
            "--ledger",
            s(&db),
            "--before",
            "1h",
            "--to",
            &url,
        ],
        &wrong,
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&url), "{err}");
    assert!(!err.contains("not-the-secret"), "{err}");
    assert_eq!(
        (
            count(&db, "SELECT COUNT(*) FROM events"),
            count(&db, "SELECT COUNT(*) FROM archived"),
        ),
        before
    );
    assert!(!s3.object(BUCKET, "refused").exists());
    // A URL that names no bucket, or carries credentials, is refused before anything is read.
    for bad in ["s3://", "s3://key:secret@bucket/x", "gs://bucket/x"] {
        let out = idemgate(&["archive", "--ledger", s(&db), "--before", "1h", "--to", bad]);
        assert_eq!(out.status.code(), Some(1), "{bad}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("s3://bucket/prefix"), "{bad}: {err}");
        assert!(!err.contains("secret@"), "{bad}: {err}");
    }
    assert_eq!(count(&db, "SELECT COUNT(*) FROM events"), before.0);
}

#[test]
fn sigkill_at_each_step_of_archival_into_a_bucket_loses_nothing() {
    let Some(s3) = start() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().to_path_buf();
    super::archival::sigkill_at_each_step(
        |step| Some(root.join(format!("{step}.db")).display().to_string()),
        |step| format!("s3://{BUCKET}/{step}"),
        &s3.env(),
    );
}
