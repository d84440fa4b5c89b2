//! Refunds the example configuration's policy held for approval: three waiting in the inbox (one
//! approved once of the two it needs), one approved by two operators and run, one rejected.

#[allow(
    clippy::wildcard_imports,
    reason = "the scenes use the demo's generator and its vocabulary"
)]
use super::*;
use idemgate_ledger::DecideRequest;

fn decide(
    store: &dyn Storage,
    id: i64,
    approve: bool,
    who: &str,
    why: &str,
    at: Millis,
) -> OpsResult<()> {
    store
        .decide(DecideRequest {
            entry_id: id,
            approve,
            actor: actor(who, why),
            fingerprint: None,
            at,
        })
        .wait()?;
    Ok(())
}

/// Large refunds an agent asked for in the last hour, held before they ran, and what
/// operators decided on some.
pub(super) fn held_for_approval(store: &dyn Storage, g: &mut Gen, now: Millis) -> OpsResult<()> {
    let held = hold_refunds(store, g, now)?;
    let refunds = ROUTES[1];
    let (ran, at) = held[0];
    decide(
        store,
        ran,
        true,
        "alice@payments-oncall",
        "customer confirmed on the phone",
        at + 4 * MIN,
    )?;
    decide(
        store,
        ran,
        true,
        "bob@support-ops",
        "refund matches the returned order",
        at + 6 * MIN,
    )?;
    for r in store
        .take_approved(OWNERS[0].into(), LEASE, at + 6 * MIN, 16)
        .wait()?
    {
        store
            .complete(CompleteRequest {
                entry_id: r.entry.id,
                owner: OWNERS[0].into(),
                response: g.response(&refunds, true),
                ttl_ms: TTL,
                duplicate_window_ms: None,
                at: at + 6 * MIN + 800,
            })
            .wait()?;
    }
    let (rejected, at) = held[1];
    decide(
        store,
        rejected,
        false,
        "carol@sre",
        "the order was never delivered; the agent misread the ticket",
        at + 3 * MIN,
    )?;
    let (once, at) = held[3];
    decide(
        store,
        once,
        true,
        "alice@payments-oncall",
        "amount checked against the invoice",
        at + 2 * MIN,
    )?;
    Ok(())
}

/// Five refunds claimed under the policy: each held, with its entry and time.
fn hold_refunds(store: &dyn Storage, g: &mut Gen, now: Millis) -> OpsResult<Vec<(i64, Millis)>> {
    let mut held = Vec::new();
    for (i, (customer, amount)) in [
        ("cus_52210", 64_000),
        ("cus_70913", 125_000),
        ("vip_3301", 99_000),
        ("cus_11873", 58_000),
        ("cus_40027", 310_000),
    ]
    .into_iter()
    .enumerate()
    {
        let body = json!({"charge": g.id("ch"), "amount": amount, "currency": "usd",
            "customer": customer, "reason": "requested_by_customer"});
        let at = now - (55 - 9 * i as i64) * MIN;
        let c = new_call(g, ROUTES[1], SCOPES[i % SCOPES.len()], &body, at)?;
        if c.approval.is_none() {
            return Err(OpsError::Internal(format!(
                "examples/idemgate.toml: the refunds policy does not hold {body}"
            )));
        }
        match store.claim(c.claim(OWNERS[i % 2], TTL)).wait()? {
            ClaimOutcome::AwaitingApproval { entry_id, .. } => held.push((entry_id, c.at)),
            other => {
                return Err(OpsError::Conflict(format!(
                    "demo: unexpected claim outcome {other:?}"
                )))
            }
        }
    }
    Ok(held)
}
