//! The log's Merkle tree: every committed event integrated once, in seq order; its root the RFC
//! 6962 root of the events' leaves (computed here from the definition, not by the tree code);
//! each event's inclusion proof and each older tree's consistency proof checking; a step computed
//! from a stale size refused with nothing written; signed checkpoints kept once per size; and the
//! tree kept when the log is archived.

use idemgate_ledger::archive::{self, ArchiveOptions};
use idemgate_ledger::tree::{self, TreeBatch, TreeHead};
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
    for i in 0..20 {
        claimed(
            f.l.claim(req(&format!("k{i}"), "{}", T0 + i * 1000))
                .wait()
                .expect("claim"),
        );
    }
    let all = leaves(&f.l);
    let dir = tempfile::tempdir().expect("tempdir");
    let r = archive::archive(
        &*f.l,
        &ArchiveOptions {
            dir: dir.path().to_path_buf(),
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

suite!(
    verify_names_a_tree_that_is_not_its_events,
    the_tree_holds_every_event_once_and_proves_each,
    archived_events_stay_in_the_tree,
);
