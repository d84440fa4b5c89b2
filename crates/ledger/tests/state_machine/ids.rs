//! Entry ids: each handed out once, whatever purged the newest, copied the ledger, or took ids
//! both read ahead and from the sequence in one batch.

use super::*;

/// The log names entries by id, so a purged entry's id is never a new entry's, even when it was
/// the newest; nor is a purged collision's id another collision's.
fn a_purged_entrys_id_is_never_handed_out_again(b: Backend) {
    let f = fx!(b);
    let a = claim_new(&f.l, "a", "{}", T0);
    complete(&f.l, a, T0 + 1, "{}");
    let collided = f.l.claim(req("a", r#"{"n":1}"#, T0 + 2)).wait();
    assert_eq!(
        collided.expect("claim"),
        ClaimOutcome::Collision { entry_id: a }
    );
    let collision = |id| {
        let e = f.l.entry(id, T0 + 3).expect("entry");
        e.collision_requests.first().expect("a collision").id
    };
    let first_collision = collision(a);
    f.l.purge(purge_of(vec![a], T0 + 3)).wait().expect("purge");
    let b = claim_new(&f.l, "b", "{}", T0 + 4);
    assert!(b > a, "entry {b} took the purged entry {a}'s id");
    complete(&f.l, b, T0 + 5, "{}");
    let collided = f.l.claim(req("b", r#"{"n":1}"#, T0 + 6)).wait();
    assert_eq!(
        collided.expect("claim"),
        ClaimOutcome::Collision { entry_id: b }
    );
    let second_collision = collision(b);
    assert!(
        second_collision > first_collision,
        "collision {second_collision} took the purged collision {first_collision}'s id"
    );
    // The purged entry's history is its own: none of the new entry's events name it.
    assert_eq!(kinds(&f.l, b), ["claim", "complete", "collision"]);
    verify_ok(&f.l);
}

/// A batch that hands out new ids itself (read ahead) and also takes some from the entries'
/// sequence (a second claim of a key, which inserts nothing; a claim under the reject policy, read
/// after reading ahead ended) leaves the sequence past every id it used, so a later claim that
/// takes the sequence's next id does not take an entry's.
fn ids_read_ahead_and_from_the_sequence_in_one_batch_stay_unique(b: Backend) {
    let f = fx!(b);
    let rejecting = |key: &str| ClaimRequest {
        reject_duplicates_within_ms: Some(1_000),
        ..req(key, &format!(r#"{{"k":"{key}"}}"#), T0)
    };
    let held = matches!(b, Backend::Postgres).then(|| testing::hold_write_lock(&f.location));
    // The writer waits in its first batch with the first claim and takes the others in the next.
    let tickets = [
        f.l.claim(req("first", "{}", T0)),
        f.l.claim(req("a", "{}", T0)),
        f.l.claim(req("a", "{}", T0)),
        f.l.claim(rejecting("b")),
        f.l.claim(rejecting("b2")),
    ];
    drop(held);
    let mut ids: Vec<i64> = tickets
        .into_iter()
        .map(|t| match t.wait().expect("claim") {
            ClaimOutcome::InFlight { entry_id, .. } => entry_id,
            o => claimed(o),
        })
        .collect();
    // A claim alone in its batch, under the reject policy: no rows read ahead, the sequence's id
    // (a batch that fails runs once more, so one id taken twice would go unseen).
    ids.push(claimed(
        f.l.claim(rejecting("c")).wait().expect("a later claim"),
    ));
    assert_eq!(ids[1], ids[2], "the second claim of a is in flight");
    ids.dedup();
    let mut unique = ids.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(
        unique.len(),
        ids.len(),
        "an id was handed out twice: {ids:?}"
    );
    // A new key read ahead, then one claimed after reading ahead ended: the batch runs once (the
    // second does not take the id the first was handed).
    let reruns = f.l.writer_reruns();
    let held = matches!(b, Backend::Postgres).then(|| testing::hold_write_lock(&f.location));
    let tickets = [
        f.l.claim(req("filler", "{}", T0)),
        f.l.claim(req("d", "{}", T0)),
        f.l.claim(rejecting("e")),
    ];
    drop(held);
    for t in tickets {
        claimed(t.wait().expect("claim"));
    }
    assert_eq!(f.l.writer_reruns(), reruns, "a batch ran twice");
    verify_ok(&f.l);
}

/// A copy of a ledger (to either backend) numbers new entries past the purged newest one, which
/// the copied log still names.
fn a_copy_numbers_new_entries_past_a_purged_one(b: Backend) {
    let f = fx!(b);
    claim_new(&f.l, "kept", "{}", T0);
    let newest = claim_new(&f.l, "purged", "{}", T0);
    complete(&f.l, newest, T0 + 1, "{}");
    f.l.purge(purge_of(vec![newest], T0 + 2))
        .wait()
        .expect("purge");
    f.l.close();
    let dir = tempfile::tempdir().expect("tempdir");
    for to in [Backend::Sqlite, Backend::Postgres] {
        let Some(location) = to.fresh(&dir, "copy") else {
            continue;
        };
        let hasher = ChainHasher::unkeyed();
        idemgate_ledger::copy::copy(&f.location, &location, &hasher, &mut |_| true).expect("copy");
        let copied = to.open(&location, false, hasher).expect("open the copy");
        let id = claimed(
            copied
                .claim(req("new", "{}", T0 + 3))
                .wait()
                .expect("claim"),
        );
        assert!(
            id > newest,
            "{to:?}: entry {id} took the purged entry {newest}'s id"
        );
        copied.close();
    }
}

suite!(
    a_purged_entrys_id_is_never_handed_out_again,
    ids_read_ahead_and_from_the_sequence_in_one_batch_stay_unique,
    a_copy_numbers_new_entries_past_a_purged_one,
);
