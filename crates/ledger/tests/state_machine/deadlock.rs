//! Batches of several instances on one PostgreSQL database lock rows in the order their jobs come,
//! so two can wait on each other; PostgreSQL then refuses a statement of one to break the cycle.

use super::*;

/// A batch that PostgreSQL chose to break a deadlock, in its pass with a savepoint per job, is
/// rolled back and runs again once the other transaction has gone on: every call in it lands,
/// none is answered "deadlock detected".
///
/// The cycle is built step by step. A trigger makes inserting key `gate-N` take advisory lock N,
/// as a row lock would. The batch runs a failing purge first, so it goes to its savepoint pass;
/// there it takes lock 1 and waits for lock 2 (held by `y`); `x`, holding lock 3, asks for lock 1
/// (its own deadlock check put off, so the batch's finds the cycle); `y` lets go, the batch asks
/// for lock 3 and PostgreSQL breaks the cycle by refusing the batch.
fn a_batch_chosen_to_break_a_deadlock_runs_again_and_lands(b: Backend) {
    if matches!(b, Backend::Sqlite) {
        return;
    }
    let f = fx!(b);
    let url = f.location.as_str();
    postgres_exec(
        url,
        "CREATE FUNCTION gate() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
           IF NEW.key LIKE 'gate-%' THEN PERFORM pg_advisory_xact_lock(substr(NEW.key, 6)::bigint); \
           END IF; RETURN NEW; END $$; \
         CREATE TRIGGER gate BEFORE INSERT ON entries FOR EACH ROW EXECUTE FUNCTION gate()",
    )
    .expect("the trigger");
    let waiting_for = |lock: i64| {
        wait_for(60, || {
            let n = postgres_i64(
                url,
                &format!(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 0 \
                     AND objid = {lock} AND objsubid = 1 AND NOT granted"
                ),
            )?;
            (n == 1)
                .then_some(())
                .ok_or(format!("nobody waits for lock {lock} yet"))
        });
    };
    let deadlocks = || {
        postgres_i64(
            url,
            "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()",
        )
        .expect("deadlocks")
    };
    let deadlocks_before = deadlocks();
    let pending = claim_new(&f.l, "pending", "{}", T0);
    let reruns = f.l.writer_reruns();

    // The writer waits for the write lock with a first claim; the rest queue for its next batch.
    let held = testing::hold_write_lock(url);
    let first = f.l.claim(req("first", "{}", T0));
    wait_for(60, || {
        let n = postgres_i64(
            url,
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
             AND wait_event_type = 'Lock' AND query LIKE '%pg_advisory_xact_lock_shared%'",
        )?;
        (n == 1)
            .then_some(())
            .ok_or("the writer does not wait yet".to_owned())
    });
    let y = testing::begin(url, "SELECT pg_advisory_xact_lock(2)");
    let x = testing::begin(
        url,
        "SET LOCAL deadlock_timeout = '1h'; SELECT pg_advisory_xact_lock(3)",
    );
    let purge = f.l.purge(purge_of(vec![pending], T0 + 1));
    let gated: Vec<_> = (1..=3)
        .map(|n| f.l.claim(req(&format!("gate-{n}"), "{}", T0 + 1)))
        .collect();
    drop(held);
    claimed(first.wait().expect("the first claim"));

    waiting_for(2);
    let x = std::thread::spawn(move || {
        let mut x = x;
        x.i64("SELECT 1::bigint FROM (SELECT pg_advisory_xact_lock(1)) AS l");
        x.commit();
    });
    waiting_for(1);
    y.commit();

    assert!(matches!(
        purge.wait(),
        Err(LedgerError::InvalidTransition { .. })
    ));
    for (n, t) in gated.into_iter().enumerate() {
        match t.wait() {
            Ok(o) => {
                claimed(o);
            }
            Err(e) => panic!("gate-{}: {e}", n + 1),
        }
    }
    x.join().expect("x");
    wait_for(60, || {
        (deadlocks() > deadlocks_before)
            .then_some(())
            .ok_or("PostgreSQL has not counted the deadlock".to_owned())
    });
    assert_eq!(
        f.l.writer_reruns() - reruns,
        2,
        "the savepoint pass, and the pass after the deadlock"
    );
    verify_ok(&f.l);
}

suite!(a_batch_chosen_to_break_a_deadlock_runs_again_and_lands);
