//! Archival: sealed segments, the one DELETE the log allows, the whole history verified across
//! segments and the live log, and each missing, altered or reordered segment named.

use std::io::{Read, Write};
use std::path::Path;

use idemgate_ledger::archive::{self, ArchiveOptions, Place};
use idemgate_ledger::checkpoint::{self, PublicKey, Signer};

use super::*;

/// `n` claims, one event each, logged at `T0 + i` seconds.
fn live_seqs(l: &Ledger) -> Vec<i64> {
    let mut s: Vec<i64> = all_events(l).into_iter().map(|e| e.seq).collect();
    s.reverse();
    s
}

fn run(
    l: &Ledger,
    dir: &Path,
    before: Millis,
    per: u64,
    signer: Option<&Signer>,
) -> archive::ArchiveReport {
    archive::archive(
        l,
        &ArchiveOptions {
            before,
            place: Place::Dir(dir.to_path_buf()),
            segment_events: per,
        },
        signer,
        &mut |_| true,
    )
    .expect("archive")
}

fn verify_dir(l: &Ledger, dir: &Path, key: Option<&PublicKey>) -> archive::ArchiveVerifyReport {
    archive::verify_archive(
        &Place::Dir(dir.to_path_buf()),
        Some(l),
        &ChainHasher::unkeyed(),
        key,
        &mut |_| true,
    )
    .expect("verify archive")
}

fn archive_prunes_the_live_log_and_the_whole_history_verifies(b: Backend) {
    let f = fx!(b);
    with_claims(&f.l, 25);
    let dir = tempfile::tempdir().expect("dir");
    // Events 1..=20 were logged before T0 + 20 s: two segments of 10.
    let r = run(&f.l, dir.path(), T0 + 20_000, 10, None);
    assert_eq!(r.segments.len(), 2, "{r:?}");
    assert_eq!(
        (
            r.segments[0].first_seq,
            r.segments[0].seq,
            r.segments[1].seq
        ),
        (1, 10, 20)
    );
    assert_eq!(r.removed, 20);
    assert_eq!(r.archived_through.as_ref().map(|h| h.seq), Some(20));
    // The live log is what followed, and the archive events themselves.
    assert_eq!(live_seqs(&f.l), (21..=27).collect::<Vec<_>>());
    assert_eq!(f.l.archived().expect("archived").len(), 2);
    let files: Vec<String> =
        f.l.archived()
            .expect("archived")
            .into_iter()
            .map(|s| s.file)
            .collect();
    assert_eq!(
        files,
        [
            "events-000000000001-000000000010.ndjson.gz",
            "events-000000000011-000000000020.ndjson.gz"
        ]
    );

    // `verify` starts at the checkpoint; the whole history verifies across the segments.
    let live = f.l.verify(&mut |_| true).expect("verify");
    assert!(live.ok, "{live:?}");
    assert_eq!(live.started_after.as_ref().map(|h| h.seq), Some(20));
    assert_eq!(live.count, 7);
    let whole = verify_dir(&f.l, dir.path(), None);
    assert!(whole.ok, "{whole:?}");
    assert_eq!(whole.count, 27);
    assert!(whole.segments.iter().all(|s| s.recorded == Some(true)));

    // The chain goes on after the archived part, and a second run picks up where it stopped.
    with_claims_from(&f.l, 25, 5);
    let again = run(&f.l, dir.path(), T0 + 60_000, 10, None);
    assert_eq!(again.segments.first().map(|s| s.first_seq), Some(21));
    assert!(verify_dir(&f.l, dir.path(), None).ok);
    let head = f.l.head().expect("head").expect("a head");
    assert_eq!(verify_dir(&f.l, dir.path(), None).head, Some(head.clone()));

    // A copy takes the archive's record along: the whole history verifies on it too.
    let to = dir.path().join("copy.db").display().to_string();
    f.l.close();
    let copied =
        idemgate_ledger::copy::copy(&f.location, &to, &ChainHasher::unkeyed(), &mut |_| true)
            .expect("copy");
    assert_eq!(copied.head, Some(head.clone()));
    let c = Backend::Sqlite
        .open(&to, false, ChainHasher::unkeyed())
        .expect("copy");
    let on_copy = verify_dir(&c, dir.path(), None);
    assert!(
        on_copy.ok && on_copy.count == whole_count(&head),
        "{on_copy:?}"
    );

    // A ledger opened again resumes the chain from what is left.
    drop(f.l);
    let l = b
        .open(&f.location, false, ChainHasher::unkeyed())
        .expect("reopen");
    claimed(
        l.claim(req("after", "{}", T0 + 90_000))
            .wait()
            .expect("claim"),
    );
    assert!(l.verify(&mut |_| true).expect("verify").ok);
}

/// Every event up to `head`: the whole history is seq 1..=head.
fn whole_count(head: &ChainHead) -> u64 {
    u64::try_from(head.seq).expect("seq")
}

/// `n` claims, keys `k{from}`…, logged at `T0 + i` seconds.
fn only_archived_events_can_be_deleted(b: Backend) {
    let f = fx!(b);
    with_claims(&f.l, 6);
    let hash_of = |seq: i64| {
        all_events(&f.l)
            .into_iter()
            .find(|e| e.seq == seq)
            .expect("event")
            .hash
    };
    let h3 = hash_of(3);
    // No record, no delete.
    let e = b
        .raw(&f.location, "DELETE FROM events WHERE seq = 1")
        .expect_err("delete");
    assert!(e.contains("append-only"), "{e}");
    // A record must name a logged event with its hash.
    let insert = |seq: i64, hash: &str| {
        format!(
            "INSERT INTO archived (seq, first_seq, hash, count, file, sha256, bytes, at) \
             VALUES ({seq}, 1, '{hash}', {seq}, 'f', 'x', 1, 0)"
        )
    };
    let e = b
        .raw(&f.location, &insert(3, &"0".repeat(64)))
        .expect_err("a forged hash");
    assert!(e.contains("archive checkpoint"), "{e}");
    b.raw(&f.location, &insert(3, &h3)).expect("a true record");
    // Not behind the last one, and never changed or removed.
    let e = b
        .raw(&f.location, &insert(2, &hash_of(2)))
        .expect_err("behind");
    assert!(e.contains("archive checkpoint"), "{e}");
    for sql in ["UPDATE archived SET seq = 6", "DELETE FROM archived"] {
        let e = b.raw(&f.location, sql).expect_err(sql);
        assert!(e.contains("append-only"), "{sql}: {e}");
    }
    // Past the record, still refused; at or below it, the one DELETE allowed.
    let e = b
        .raw(&f.location, "DELETE FROM events WHERE seq = 4")
        .expect_err("past");
    assert!(e.contains("append-only"), "{e}");
    b.raw(&f.location, "DELETE FROM events WHERE seq <= 3")
        .expect("archived events");
    assert_eq!(live_seqs(&f.l), vec![4, 5, 6]);
    let e = b
        .raw(&f.location, "UPDATE events SET detail = '{}' WHERE seq = 4")
        .expect_err("update");
    assert!(e.contains("append-only"), "{e}");
    // The live log verifies from the record.
    let r = f.l.verify(&mut |_| true).expect("verify");
    assert!(r.ok && r.count == 3, "{r:?}");
}

/// A copy of `dir` to damage.
fn copy_dir(dir: &Path) -> tempfile::TempDir {
    let to = tempfile::tempdir().expect("dir");
    for e in std::fs::read_dir(dir).expect("read") {
        let e = e.expect("entry");
        std::fs::copy(e.path(), to.path().join(e.file_name())).expect("copy");
    }
    to
}

fn seg(first: i64, last: i64) -> String {
    archive::segment_name(first, last)
}

fn a_missing_altered_or_reordered_segment_is_named(b: Backend) {
    let f = fx!(b);
    with_claims(&f.l, 31);
    let dir = tempfile::tempdir().expect("dir");
    run(&f.l, dir.path(), T0 + 30_000, 10, None);
    assert!(verify_dir(&f.l, dir.path(), None).ok);

    // Missing: the second segment and its manifest are gone.
    let d = copy_dir(dir.path());
    for name in [seg(11, 20), format!("{}.manifest.json", seg(11, 20))] {
        std::fs::remove_file(d.path().join(name)).expect("rm");
    }
    let r = verify_dir(&f.l, d.path(), None);
    assert!(!r.ok);
    let missing: Vec<&String> = r
        .problems
        .iter()
        .filter(|p| p.contains("missing"))
        .collect();
    assert!(
        missing
            .iter()
            .any(|p| p.contains("11–20") && p.contains(&seg(11, 20))),
        "{:?}",
        r.problems
    );

    // Altered: one event of the first segment edited, the file compressed again; its manifest
    // (and so its digest) left as they were, and then recomputed too.
    let d = copy_dir(dir.path());
    let path = d.path().join(seg(1, 10));
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&path).expect("open"))
        .read_to_string(&mut text)
        .expect("gunzip");
    let edited = text.replacen("\"key\":\"k4\"", "\"key\":\"k4-forged\"", 1);
    assert_ne!(edited, text);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(edited.as_bytes()).expect("gzip");
    std::fs::write(&path, gz.finish().expect("gzip")).expect("write");
    let r = verify_dir(&f.l, d.path(), None);
    assert!(!r.ok);
    let named: Vec<&String> = r
        .problems
        .iter()
        .filter(|p| p.starts_with(&seg(1, 10)))
        .collect();
    assert!(
        named.iter().any(|p| p.contains("sha256")),
        "{:?}",
        r.problems
    );
    assert!(
        named.iter().any(|p| p.contains("seq 5")),
        "{:?}",
        r.problems
    );
    let bad = r
        .segments
        .iter()
        .find(|s| s.file == seg(1, 10))
        .expect("listed");
    assert!(!bad.ok);
    assert!(r
        .segments
        .iter()
        .filter(|s| s.file != seg(1, 10))
        .all(|s| s.ok));

    // Reordered: two segments' files (and manifests) swapped under each other's names.
    let d = copy_dir(dir.path());
    for suffix in ["", ".manifest.json"] {
        let a = d.path().join(format!("{}{suffix}", seg(1, 10)));
        let c = d.path().join(format!("{}{suffix}", seg(21, 30)));
        let tmp = d.path().join("swap");
        std::fs::rename(&a, &tmp).expect("swap");
        std::fs::rename(&c, &a).expect("swap");
        std::fs::rename(&tmp, &c).expect("swap");
    }
    let r = verify_dir(&f.l, d.path(), None);
    assert!(!r.ok);
    assert!(
        r.problems
            .iter()
            .any(|p| p.starts_with(&seg(1, 10)) && p.contains("reordered")),
        "{:?}",
        r.problems
    );
    assert!(
        r.problems
            .iter()
            .any(|p| p.starts_with(&seg(21, 30)) && p.contains("reordered")),
        "{:?}",
        r.problems
    );
    // Two segments altered: the report lists every segment, and each problem, in the archive's
    // order, whichever was checked first.
    let d = copy_dir(dir.path());
    for (first, last, key) in [(1, 10, "k4"), (21, 30, "k24")] {
        let path = d.path().join(seg(first, last));
        let mut text = String::new();
        flate2::read::GzDecoder::new(std::fs::File::open(&path).expect("open"))
            .read_to_string(&mut text)
            .expect("gunzip");
        let edited = text.replacen(&format!("\"key\":\"{key}\""), "\"key\":\"forged\"", 1);
        assert_ne!(edited, text);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(edited.as_bytes()).expect("gzip");
        std::fs::write(&path, gz.finish().expect("gzip")).expect("write");
    }
    let r = verify_dir(&f.l, d.path(), None);
    let files: Vec<&str> = r.segments.iter().map(|s| s.file.as_str()).collect();
    assert_eq!(files, [seg(1, 10), seg(11, 20), seg(21, 30)]);
    let oks: Vec<bool> = r.segments.iter().map(|s| s.ok).collect();
    assert_eq!(oks, [false, true, false]);
    let named: Vec<&str> = r
        .problems
        .iter()
        .filter_map(|p| p.split(':').next())
        .collect();
    let first_of_last = named.iter().position(|n| *n == seg(21, 30));
    assert!(
        first_of_last.is_some_and(|i| named[..i].contains(&seg(1, 10).as_str())
            && !named[i..].contains(&seg(1, 10).as_str())),
        "{:?}",
        r.problems
    );
    // The original still verifies.
    assert!(verify_dir(&f.l, dir.path(), None).ok);
}

fn signed_segments_verify_with_the_public_key_only(b: Backend) {
    let f = fx!(b);
    with_claims(&f.l, 12);
    let (private, public) = checkpoint::generate("test.example/idemgate").expect("keys");
    let signer = Signer::parse(&private).expect("signer");
    let public = PublicKey::parse(&public).expect("public");
    let dir = tempfile::tempdir().expect("dir");
    run(&f.l, dir.path(), T0 + 10_000, 5, Some(&signer));
    let listed =
        archive::segments(&Place::Dir(dir.path().to_path_buf()), Some(&*f.l)).expect("segments");
    assert_eq!(listed.len(), 2);
    for s in &listed {
        let cp = s.checkpoint.as_ref().expect("signed");
        assert_eq!(Some(cp.seq), s.last_seq);
        assert_eq!(cp.origin, "test.example/idemgate");
    }
    // Each checkpoint is in the log too.
    let logged =
        f.l.events(
            &EventFilter {
                kind: Some("checkpoint".into()),
                ..Default::default()
            },
            Page::default(),
        )
        .expect("events");
    assert_eq!(logged.len(), 2);
    // The archive alone (no ledger) verifies with the public key, and not with another.
    let alone = archive::verify_archive(
        &Place::Dir(dir.path().to_path_buf()),
        None,
        &ChainHasher::unkeyed(),
        Some(&public),
        &mut |_| true,
    )
    .expect("verify");
    assert!(alone.ok, "{alone:?}");
    assert_eq!(alone.count, 10);
    let (_, other) = checkpoint::generate("test.example/idemgate").expect("keys");
    let other = PublicKey::parse(&other).expect("public");
    let r = verify_dir(&f.l, dir.path(), Some(&other));
    assert!(!r.ok);
    assert_eq!(
        r.problems
            .iter()
            .filter(|p| p.contains("not signed"))
            .count(),
        2,
        "{:?}",
        r.problems
    );
}

/// `verify` reads the live log in one snapshot: events archived and removed while it walks the
/// log (past the pages its reader has read ahead) are still there for it.
fn verify_walks_a_log_archived_under_it(b: Backend) {
    let f = fx!(b);
    // Claims submitted together, so they land in large batches.
    let n: i64 = 24_000;
    for chunk in (0..n).collect::<Vec<_>>().chunks(2_000) {
        let tickets: Vec<_> = chunk
            .iter()
            .map(|i| f.l.claim(req(&format!("k{i}"), "{}", T0 + i * 1000)))
            .collect();
        for t in tickets {
            claimed(t.wait().expect("claim"));
        }
    }
    let dir = tempfile::tempdir().expect("dir");
    let mut archived = None;
    // Told the count every 4,096 events: by the first call the reader is a few pages of 2,048
    // ahead, far from event 20,000.
    let report =
        f.l.verify(&mut |count| {
            if archived.is_none() {
                assert!(count < 8_192, "told late: {count}");
                archived = Some(run(&f.l, dir.path(), T0 + 20_000_000, 5_000, None));
            }
            true
        })
        .expect("verify");
    let archived = archived.expect("the walk was told its progress");
    assert_eq!(archived.removed, 20_000, "{archived:?}");
    assert!(report.ok, "{report:?}");
    assert_eq!(report.count, u64::try_from(n).expect("count"));
    // Afterwards the live log starts after the archive, and verifies.
    assert_eq!(live_seqs(&f.l).first(), Some(&20_001));
    verify_ok(&f.l);
}

/// The whole history's verify walks the segments an archival sealed while it ran too: the live
/// log's walk begins after them, and their events are nowhere else.
fn the_whole_history_verifies_across_segments_sealed_meanwhile(b: Backend) {
    let f = fx!(b);
    with_claims(&f.l, 30);
    let dir = tempfile::tempdir().expect("dir");
    let before = run(&f.l, dir.path(), T0 + 10_000, 5, None).segments.len();
    let mut sealed = None;
    let r = archive::verify_archive(
        &Place::Dir(dir.path().to_path_buf()),
        Some(&*f.l),
        &ChainHasher::unkeyed(),
        None,
        &mut |_| {
            // Told at the end of the first segment's walk, before the live log's.
            sealed.get_or_insert_with(|| run(&f.l, dir.path(), T0 + 25_000, 5, None));
            true
        },
    )
    .expect("verify archive");
    let sealed = sealed.expect("told its progress").segments.len();
    assert!(before > 0 && sealed > 0, "{before} segments, then {sealed}");
    assert!(r.ok, "{r:?}");
    assert!(r.unfinished.is_empty(), "{r:?}");
    assert_eq!(r.segments.len(), before + sealed, "{r:?}");
    // Every event once: the count is the last one's seq.
    assert_eq!(
        Some(i64::try_from(r.count).expect("count")),
        r.head.map(|h| h.seq)
    );
}

suite!(
    the_whole_history_verifies_across_segments_sealed_meanwhile,
    verify_walks_a_log_archived_under_it,
    archive_prunes_the_live_log_and_the_whole_history_verifies,
    only_archived_events_can_be_deleted,
    a_missing_altered_or_reordered_segment_is_named,
    signed_segments_verify_with_the_public_key_only,
);
