//! The log's Merkle tree: every committed event integrated once, in seq order; its root the RFC
//! 6962 root of the events' leaves (computed here from the definition, not by the tree code);
//! each event's inclusion proof and each older tree's consistency proof checking; a step computed
//! from a stale size refused with nothing written; signed checkpoints kept once per size; and the
//! tree kept when the log is archived.

use idemgate_ledger::archive::{self, ArchiveOptions, Place};
use idemgate_ledger::checkpoint::{self, PublicKey, Signer};
use idemgate_ledger::export::{self, Format};
use idemgate_ledger::tree::{self, TreeBatch, TreeHead};
use idemgate_ledger::{proof, EventRange};
use sha2::{Digest, Sha256};

use super::*;

/// RFC 6962's Merkle Tree Hash, straight from section 2.1.
fn mth(leaves: &[Vec<u8>]) -> [u8; 32] {
    match leaves.len() {
        0 => Sha256::digest(b"").into(),
        1 => {
            let mut h = Sha256::new();
            h.update([0u8]);
            h.update(&leaves[0]);
            h.finalize().into()
        }
        n => {
            let k = n.next_power_of_two() / 2;
            let mut h = Sha256::new();
            h.update([1u8]);
            h.update(mth(&leaves[..k]));
            h.update(mth(&leaves[k..]));
            h.finalize().into()
        }
    }
}

/// The live events' leaf bytes, oldest first.
fn leaves(l: &Ledger) -> Vec<Vec<u8>> {
    let mut evs = all_events(l);
    evs.reverse();
    evs.iter().map(tree::leaf_bytes).collect()
}

fn the_tree_holds_every_event_once_and_proves_each(b: Backend) {
    let f = fx!(b);
    assert_eq!(tree::integrate(&*f.l, 10).expect("integrate"), 0, "empty");
    assert_eq!(tree::head(&*f.l).expect("head").size, 0);
    for i in 0..13 {
        claimed(
            f.l.claim(req(&format!("k{i}"), "{}", T0 + i))
                .wait()
                .expect("claim"),
        );
    }
    // In steps of 5: 5, 5, 3, then nothing new.
    assert_eq!(tree::integrate(&*f.l, 5).expect("integrate"), 5);
    let five = tree::head(&*f.l).expect("head");
    assert_eq!(five.size, 5);
    let caught = tree::catch_up(&*f.l, &|| true).expect("catch up");
    assert_eq!(caught.events, 8);
    assert_eq!(caught.oldest_at, Some(T0 + 5), "the sixth claim's time");
    assert_eq!(tree::integrate(&*f.l, 5).expect("integrate"), 0);
    let all = leaves(&f.l);
    let head = tree::head(&*f.l).expect("head");
    assert_eq!(head.size, 13);
    assert_eq!(head.root, mth(&all), "the root is RFC 6962's");
    assert_eq!(five.root, mth(&all[..5]));
    for (i, leaf) in all.iter().enumerate() {
        let seq = i as i64 + 1;
        assert_eq!(f.l.leaf_of(seq).expect("leaf"), Some(i as u64));
        let proof = tree::prove_leaf(&*f.l, head.size, i as u64).expect("prove");
        assert!(tree::check_leaf(
            &proof, head.size, head.root, i as u64, leaf
        ));
        assert!(
            !tree::check_leaf(&proof, head.size, head.root, i as u64, b"{}"),
            "another leaf does not check"
        );
        let at = ((i + 1) % all.len()) as u64;
        assert!(
            !tree::check_leaf(&proof, head.size, head.root, at, leaf),
            "nor the leaf at another index"
        );
    }
    for old in 1..head.size {
        let proof = tree::prove_extends(&*f.l, head.size, old).expect("prove");
        let then = TreeHead {
            size: old,
            root: mth(&all[..old as usize]),
        };
        assert!(tree::check_extends(&proof, head, then), "{old} → 13");
        let forked = TreeHead {
            root: mth(&all[1..=old as usize]),
            ..then
        };
        assert!(
            !tree::check_extends(&proof, head, forked),
            "a fork of {old}"
        );
    }
    // A step computed from the tree of five is refused now, and writes nothing.
    let e =
        f.l.extend_tree(TreeBatch {
            size: 5,
            seqs: vec![6],
            hashes: vec![[0; 32]],
        })
        .wait()
        .expect_err("a stale step");
    assert!(
        matches!(
            e,
            LedgerError::TreeMoved {
                expected: 5,
                found: 13
            }
        ),
        "{e}"
    );
    assert_eq!(e.code(), error::Code::Conflict);
    assert_eq!(tree::head(&*f.l).expect("head"), head);
    // Signed checkpoints of the tree: each larger than the last, the newest covering a leaf
    // found for it.
    let keep = |size: u64| {
        f.l.note_tree_checkpoint(size, format!("note {size}"), T0)
            .wait()
    };
    keep(5).expect("the tree of five");
    for again in [5, 3] {
        let e = keep(again).expect_err("signed already");
        assert!(matches!(e, LedgerError::AlreadySigned { .. }), "{e}");
    }
    keep(13).expect("the tree of thirteen");
    let found = |index: u64| f.l.tree_checkpoint(index).expect("read");
    assert_eq!(
        found(4),
        Some((13, "note 13".to_owned())),
        "the newest covering"
    );
    assert_eq!(found(12), Some((13, "note 13".to_owned())));
    assert_eq!(found(13), None, "none covers a leaf past the trees signed");
}

/// Archival first brings the tree up to date, and the tree keeps the archived events' hashes:
/// a proof of an archived event still checks against the root.
fn archived_events_stay_in_the_tree(b: Backend) {
    let f = fx!(b);
    with_claims(&f.l, 20);
    let all = leaves(&f.l);
    let dir = tempfile::tempdir().expect("tempdir");
    let r = archive::archive(
        &*f.l,
        &ArchiveOptions {
            place: Place::Dir(dir.path().to_path_buf()),
            before: T0 + 10_000,
            segment_events: 100,
        },
        None,
        &mut |_| true,
    )
    .expect("archive");
    assert_eq!(r.archived_through.map(|h| h.seq), Some(10));
    // Ten events left the live log; the archival's own event joined it.
    let live = leaves(&f.l);
    assert_eq!(live.len(), 11);
    tree::catch_up(&*f.l, &|| true).expect("catch up");
    let whole: Vec<Vec<u8>> = all[..10].iter().chain(&live).cloned().collect();
    let head = tree::head(&*f.l).expect("head");
    assert_eq!((head.size, head.root), (21, mth(&whole)));
    let proof = tree::prove_leaf(&*f.l, head.size, 3).expect("an archived event's proof");
    assert!(tree::check_leaf(&proof, head.size, head.root, 3, &all[3]));
}

/// `verify` recomputes the tree from the events after the chain, and names a stored hash that is
/// not its events' and a kept checkpoint whose root is not the tree's.
fn verify_names_a_tree_that_is_not_its_events(b: Backend) {
    let f = fx!(b);
    for i in 0..6 {
        claimed(
            f.l.claim(req(&format!("k{i}"), "{}", T0 + i))
                .wait()
                .expect("claim"),
        );
    }
    tree::catch_up(&*f.l, &|| true).expect("catch up");
    let head = tree::head(&*f.l).expect("head");
    let note = format!(
        "log.example/idemgate\n{}\n{}\n\n",
        head.size,
        head.root_base64()
    );
    f.l.note_tree_checkpoint(head.size, note, T0)
        .wait()
        .expect("kept");
    verify_ok(&f.l);
    // A checkpoint kept for a size whose root is not the tree's.
    let wrong = format!("log.example/idemgate\n3\n{}\n\n", head.root_base64());
    let sql = format!("INSERT INTO tree_checkpoints (size, note, at) VALUES (3, '{wrong}', 0)");
    b.raw(&f.location, &sql).expect("insert");
    let r = f.l.verify(&mut |_| true).expect("verify");
    assert!(!r.ok);
    assert!(
        r.problem
            .as_deref()
            .is_some_and(|p| p.contains("checkpoint of 3 events")),
        "{r:?}"
    );
    b.raw(&f.location, "DELETE FROM tree_checkpoints WHERE size = 3")
        .expect("delete");
    verify_ok(&f.l);
    // Leaf 3 made to name an event before leaf 2's: a leaf out of the log's order, whose event
    // the walk has passed (or that is no event at all), is named, not taken for an archived one.
    b.raw(&f.location, "UPDATE tree_leaves SET seq = 0 WHERE leaf = 3")
        .expect("update");
    let r = f.l.verify(&mut |_| true).expect("verify");
    assert!(!r.ok);
    assert!(
        r.problem
            .as_deref()
            .is_some_and(|p| p.contains("leaf 3 holds event 0")),
        "{r:?}"
    );
    b.raw(&f.location, "UPDATE tree_leaves SET seq = 4 WHERE leaf = 3")
        .expect("update");
    verify_ok(&f.l);
    // Leaf 4's hash (stored hash 7) replaced by leaf 0's: event 5 is not what the tree holds.
    let sql = "UPDATE tree_hashes SET hash = (SELECT hash FROM tree_hashes WHERE idx = 0) \
               WHERE idx = 7";
    b.raw(&f.location, sql).expect("update");
    let r = f.l.verify(&mut |_| true).expect("verify");
    assert!(!r.ok);
    assert_eq!(r.first_bad_seq, Some(5), "{r:?}");
    assert!(
        r.problem
            .as_deref()
            .is_some_and(|p| p.contains("Merkle tree")),
        "{r:?}"
    );
}

/// On PostgreSQL the integrator writes the tree outside the log's write lock: its steps do not
/// wait for the fleet's write batches, nor make them wait. SQLite's one writer writes both.
fn the_tree_grows_while_the_write_lock_is_held(b: Backend) {
    let f = fx!(b);
    if matches!(b, Backend::Sqlite) {
        return;
    }
    with_claims(&f.l, 10);
    let held = testing::hold_write_lock(&f.location);
    let (tx, rx) = std::sync::mpsc::channel();
    let l = f.l.clone();
    std::thread::spawn(move || {
        let _ = tx.send(tree::catch_up(&*l, &|| true));
    });
    // A bound on a hang, not a wait for something: the step needs no lock the test holds.
    let step = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the integrator waited for the write lock");
    assert!(step.expect("catch up").events >= 10);
    drop(held);
    assert_eq!(
        tree::head(&*f.l).expect("head").size,
        leaves(&f.l).len() as u64
    );
    verify_ok(&f.l);
}

/// A proof the ledger cannot read its stored hashes for fails with the database's error, not as a
/// corrupt tree: an operator told "corrupt" goes looking for tampering, not for a table.
fn a_failed_read_of_the_tree_is_not_a_corrupt_tree(b: Backend) {
    let f = fx!(b);
    with_claims(&f.l, 4);
    tree::catch_up(&*f.l, &|| true).expect("catch up");
    let head = tree::head(&*f.l).expect("head");
    b.raw(
        &f.location,
        "ALTER TABLE tree_hashes RENAME TO tree_hashes_away",
    )
    .expect("rename");
    let e = tree::prove_leaf(&*f.l, head.size, 1).expect_err("no stored hashes to read");
    assert_eq!(e.code(), error::Code::Database, "{e}");
    assert!(e.to_string().contains("tree_hashes"), "{e}");
    b.raw(
        &f.location,
        "ALTER TABLE tree_hashes_away RENAME TO tree_hashes",
    )
    .expect("rename back");
    let proof = tree::prove_leaf(&*f.l, head.size, 1).expect("proof");
    assert!(tree::check_leaf(
        &proof,
        head.size,
        head.root,
        1,
        &leaves(&f.l)[1]
    ));
}

/// The manifests of an export and of an archive segment place their events in the tree: the
/// hashes left of the first recompute, with the file's lines, the root of the tree its last event
/// ends, which the log's key signs; an altered place is named, by `verify` and by the key.
fn files_carry_their_place_in_the_tree(b: Backend) {
    let f = fx!(b);
    with_claims(&f.l, 12);
    let all = leaves(&f.l);
    let (private, public) = checkpoint::generate("test.example/idemgate").expect("keys");
    let signer = Signer::parse(&private).expect("signer");
    let public = PublicKey::parse(&public).expect("public");
    let dir = tempfile::tempdir().expect("tempdir");
    // Events 4..=9, not yet in the tree: the export brings it up to date.
    let out = dir.path().join("middle.ndjson");
    let range = EventRange {
        since: Some(T0 + 3000),
        until: Some(T0 + 8999),
    };
    let m = export::export(
        &*f.l,
        Format::Ndjson,
        range,
        &out,
        false,
        Some(&signer),
        &mut |_| true,
    )
    .expect("export")
    .expect("not cancelled");
    let place = m.tree.clone().expect("placed in the tree");
    assert_eq!((place.first_leaf, place.size, place.left.len()), (3, 9, 2));
    let head = TreeHead {
        size: 9,
        root: mth(&all[..9]),
    };
    assert_eq!(place.head(), Ok(head));
    let note = place.checkpoint.as_deref().expect("signed");
    assert_eq!(proof::signed_tree(&public, note), Ok(head));
    let checked = |key| {
        export::verify_export(&out, &ChainHasher::unkeyed(), key, &mut |_| true).expect("verify")
    };
    let r = checked(Some(&public));
    assert!(
        r.ok && r.tree_matches == Some(true) && r.signed == Some(true),
        "{r:?}"
    );
    // The same lines placed one leaf further on: the tree they make is not the one named.
    let mpath = export::manifest_path(&out);
    let moved = |edit: &dyn Fn(&mut export::Manifest)| {
        let mut m = m.clone();
        edit(&mut m);
        std::fs::write(&mpath, serde_json::to_vec(&m).expect("json")).expect("write");
        checked(Some(&public))
    };
    let r = moved(&|m| {
        m.tree.as_mut().expect("tree").root = tree::TreeHead {
            size: 9,
            root: [7; 32],
        }
        .root_base64()
    });
    assert!(!r.ok && r.tree_matches == Some(false), "{r:?}");
    assert!(
        r.problems.iter().any(|p| p.contains("not leaves 3–8")),
        "{:?}",
        r.problems
    );
    assert!(
        r.problems
            .iter()
            .any(|p| p.contains("tree's signed checkpoint")),
        "{:?}",
        r.problems
    );
    let r = moved(&|m| {
        m.tree
            .as_mut()
            .expect("tree")
            .left
            .pop()
            .map(drop)
            .unwrap_or(())
    });
    assert!(
        !r.ok && r.problems.iter().any(|p| p.contains("needs 2 hashes")),
        "{:?}",
        r.problems
    );
    // Another log's key signed the tree's checkpoint.
    let (other, _) = checkpoint::generate("test.example/idemgate").expect("keys");
    let forged = Signer::parse(&other)
        .expect("signer")
        .sign(&head.signed_head(), T0)
        .note;
    let r = moved(&|m| m.tree.as_mut().expect("tree").checkpoint = Some(forged.clone()));
    assert!(!r.ok && r.signed == Some(false), "{r:?}");

    // Archive segments likewise, checked with the archive alone.
    let arch = tempfile::tempdir().expect("tempdir");
    archive::archive(
        &*f.l,
        &ArchiveOptions {
            place: Place::Dir(arch.path().to_path_buf()),
            before: T0 + 10_000,
            segment_events: 4,
        },
        Some(&signer),
        &mut |_| true,
    )
    .expect("archive");
    let verify = || {
        archive::verify_archive(
            &Place::Dir(arch.path().to_path_buf()),
            None,
            &ChainHasher::unkeyed(),
            Some(&public),
            &mut |_| true,
        )
        .expect("verify")
    };
    assert!(verify().ok, "{:?}", verify());
    let second = arch.path().join(archive::segment_name(5, 8));
    let smpath = export::manifest_path(&second);
    let mut sm: export::Manifest =
        serde_json::from_slice(&std::fs::read(&smpath).expect("read")).expect("manifest");
    let t = sm.tree.as_mut().expect("the segment is placed in the tree");
    assert_eq!((t.first_leaf, t.size), (4, 8));
    t.first_leaf = 5;
    t.left = vec![t.left[0].clone(), t.left[0].clone()];
    std::fs::write(&smpath, serde_json::to_vec(&sm).expect("json")).expect("write");
    let r = verify();
    assert!(
        !r.ok && r.problems.iter().any(|p| p.contains("not leaves 5–7")),
        "{:?}",
        r.problems
    );
}

suite!(
    the_tree_grows_while_the_write_lock_is_held,
    a_failed_read_of_the_tree_is_not_a_corrupt_tree,
    files_carry_their_place_in_the_tree,
    verify_names_a_tree_that_is_not_its_events,
    the_tree_holds_every_event_once_and_proves_each,
    archived_events_stay_in_the_tree,
);
