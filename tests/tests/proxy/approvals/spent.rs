//! An approval is spent on one run: a call the upstream answered it did not run asks again.

use idemgate_tests::upstream::Chaos;

use super::*;

#[test]
fn an_approved_call_the_upstream_did_not_run_is_held_again() {
    let f = serve("1h", "30s");
    let waiting = payout(&f, "p-spent");
    let id = asked(&f, "p-spent");
    // The upstream refuses every write with 503: nothing runs.
    f.upstream.counts.set_chaos(Some(Chaos {
        drop_pct: 0,
        unavailable_pct: 100,
        stall_pct: 0,
        stall_ms: 0,
    }));
    assert_eq!(decide(&f, "olga", id, "approve", "payout").status, 200);
    // Refused, the key is released, and the request that waited is told the call waits for a
    // decision again: it is not sent once more on the old one.
    let r = waiting.join().expect("client");
    assert_eq!(held(&r), id);
    let sent = f.upstream.counts.requests("p-spent");
    assert!(sent > 0);
    assert_eq!(f.upstream.counts.effects("p-spent"), 0);
    f.upstream.counts.set_chaos(None);
    let retry = payout(&f, "p-spent");
    assert_eq!(asked(&f, "p-spent"), id);
    assert_eq!(f.upstream.counts.requests("p-spent"), sent);
    // A new request: the operator who approved the first may approve this one.
    assert_eq!(decide(&f, "olga", id, "approve", "again").status, 200);
    let r = retry.join().expect("client");
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(f.upstream.counts.effects("p-spent"), 1);
    let kinds: Vec<String> = timeline(&f, id).into_iter().map(|(k, _)| k).collect();
    let requested = kinds.iter().filter(|k| *k == "approval_requested").count();
    let approved = kinds.iter().filter(|k| *k == "approved").count();
    assert_eq!((requested, approved), (2, 2), "{kinds:?}");
}
