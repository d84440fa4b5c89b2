//! `idemgate demo`: a realistic ledger for a first look and for benchmarks.
//!
//! Three days of traffic from several agents through six routes (charges, refunds, emails, tickets,
//! webhooks and a destructive subscription cancel), run through the real state machine with
//! timestamps in the past: executions, retries after 503s, releases, replays absorbed, TTL expiries
//! marked by a sweeper; then the incidents an operator is there for — stuck entries (timeouts and a
//! crashed instance), key-reuse collisions, a customer charged twice under two keys, an agent's
//! MCP tool calls (one held), entries about to expire, and past operator resolutions and purges.
//! Each call is recorded as the proxy records it under `examples/idemgate.toml`: its effect,
//! subjects, money and duplicates come from that file, which the console's demo runs under.

use idemgate_ledger::canon::fingerprint;
use idemgate_ledger::{
    now_millis, Actor, ApprovalAsk, ClaimOutcome, ClaimRequest, CompleteRequest, Effect,
    EntryFilter, LoopNote, Millis, OwnerReport, Page, PurgeRequest, RequestRecord, Resolution,
    ResolveRequest, ResponseRecord, Stats, Storage, Ticket,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::json;

use idemgate_config::Config;

use crate::{OpsError, OpsResult};

mod approvals;
mod scenes;
use scenes::incidents;

/// How to seed a demo ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DemoOptions {
    /// At least this many log events (the incidents come on top of the traffic).
    pub events: u64,
    /// The random seed: the same seed gives a ledger of the same shape.
    pub seed: u64,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            events: 10_000,
            seed: 7,
        }
    }
}

/// What a demo seed made.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DemoReport {
    /// The events in the log.
    pub events: i64,
    /// The ledger's overview after the seed.
    pub stats: Stats,
}

const HOUR: i64 = 3_600_000;
const MIN: i64 = 60_000;
// The example configuration's defaults, which its routes keep.
const TTL: i64 = 24 * HOUR;
const LEASE: i64 = 30_000;
const DUP_WINDOW: i64 = 10 * MIN;
const CHUNK: usize = 2_000;

const SCOPES: &[&str] = &[
    "agent-billing-01",
    "agent-billing-02",
    "agent-support-01",
    "agent-ops-01",
    "agent-refunds-01",
];
const OWNERS: &[&str] = &["idemgate@proxy-a", "idemgate@proxy-b"];

/// A route the demo's calls go through, and the request they make of it; what the route
/// records of them (effect, subjects, duplicates, loop guard) comes from [`example`].
#[derive(Clone, Copy)]
struct Route {
    name: &'static str,
    method: &'static str,
    path: &'static str,
}

const ROUTES: &[Route] = &[
    Route {
        name: "charges",
        method: "POST",
        path: "/v1/charges",
    },
    Route {
        name: "refunds",
        method: "POST",
        path: "/v1/refunds",
    },
    Route {
        name: "emails",
        method: "POST",
        path: "/v1/emails/send",
    },
    Route {
        name: "tickets",
        method: "POST",
        path: "/v1/tickets",
    },
    Route {
        name: "webhooks",
        method: "POST",
        path: "/hooks/payments",
    },
    Route {
        name: "subscriptions-cancel",
        method: "POST",
        path: "/v1/subscriptions/cancel",
    },
];

fn pick(rng: &mut StdRng, from: &[&'static str]) -> &'static str {
    from[rng.random_range(0..from.len())]
}

/// The demo's generator: its random source, and the configuration its calls go through.
struct Gen {
    rng: StdRng,
    serial: u64,
    config: Config,
}

/// The configuration the demo's calls went through: `examples/idemgate.toml`, which the
/// console's demo runs its embedded proxy under (`.ci/demo`). The demo forwards nothing, so it
/// reads none of the secrets the file names.
fn example() -> OpsResult<Config> {
    const EXAMPLE: &str = include_str!("../../../examples/idemgate.toml");
    Config::parse_without_secrets(EXAMPLE)
        .map_err(|e| OpsError::Internal(format!("examples/idemgate.toml: {e}")))
}

impl Gen {
    /// How [`example`] configures `route`.
    fn terms(&self, route: Route) -> OpsResult<&idemgate_config::Route> {
        self.config.route(route.name).ok_or_else(|| {
            OpsError::Internal(format!(
                "examples/idemgate.toml has no route {}",
                route.name
            ))
        })
    }

    fn uuid(&mut self) -> String {
        let v: u128 = self.rng.random();
        let h = format!("{v:032x}");
        format!(
            "{}-{}-4{}-a{}-{}",
            &h[0..8],
            &h[8..12],
            &h[13..16],
            &h[17..20],
            &h[20..32]
        )
    }

    fn id(&mut self, prefix: &str) -> String {
        self.serial += 1;
        format!(
            "{prefix}_{:06}{:08x}",
            self.serial,
            self.rng.random::<u32>()
        )
    }

    fn route(&mut self) -> Route {
        // Charges and emails dominate; destructive calls are rare.
        let x: u32 = self.rng.random_range(0..100);
        let i = match x {
            0..=34 => 0,
            35..=44 => 1,
            45..=69 => 2,
            70..=81 => 3,
            82..=97 => 4,
            _ => 5,
        };
        ROUTES[i]
    }

    fn body(&mut self, route: &Route, customer: Option<&str>) -> serde_json::Value {
        let customer = customer
            .map(str::to_owned)
            .unwrap_or_else(|| format!("cus_{:05}", self.rng.random_range(1..40_000)));
        match route.name {
            "charges" => json!({
                "customer": customer,
                "amount": f64::from(self.rng.random_range(500..50_000u32)) / 100.0,
                "currency": "usd",
                "description": format!("Order #{}", self.rng.random_range(100_000..999_999)),
            }),
            "refunds" => {
                json!({"charge": self.id("ch"), "amount": self.rng.random_range(1..200) * 100, "reason": "requested_by_customer"})
            }
            "emails" => json!({
                "to": format!("{customer}@example.com"),
                "template": pick(&mut self.rng, &["receipt", "password-reset", "shipping-update", "invoice"]),
                "vars": {"order": self.rng.random_range(100_000..999_999)},
            }),
            "tickets" => json!({
                "subject": pick(&mut self.rng, &["Refund not received", "Double charge?", "Cannot log in", "Change plan"]),
                "customer": customer,
                "priority": pick(&mut self.rng, &["low", "normal", "high"]),
            }),
            "webhooks" => {
                json!({"event_id": self.id("evt"), "type": "charge.succeeded", "data": {"customer": customer}})
            }
            _ => {
                json!({"subscription": self.id("sub"), "customer": customer, "at_period_end": false})
            }
        }
    }

    fn response(&mut self, route: &Route, ok: bool) -> ResponseRecord {
        let (status, body) = if ok {
            let (prefix, status) = match route.name {
                "charges" => ("ch", 201),
                "refunds" => ("re", 201),
                "emails" => ("msg", 202),
                "tickets" => ("tkt", 201),
                "webhooks" => ("ack", 200),
                _ => ("sub", 200),
            };
            (
                status,
                json!({"id": self.id(prefix), "status": "succeeded"}),
            )
        } else {
            (
                402,
                json!({"error": {"type": "card_error", "code": "card_declined"}}),
            )
        };
        ResponseRecord {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: serde_json::to_vec(&body).unwrap_or_default(),
        }
    }
}

/// One planned call, and what its route records of it.
struct Call {
    route: Route,
    scope: &'static str,
    key: String,
    body: Vec<u8>,
    fp: String,
    at: Millis,
    effect: Effect,
    subjects: Vec<(String, String)>,
    dup_fp: Option<String>,
    /// The approval its route's policy holds it for, if the policy matches it.
    approval: Option<ApprovalAsk>,
}

impl Call {
    fn claim(&self, owner: &str, ttl: i64) -> ClaimRequest {
        ClaimRequest {
            route: self.route.name.into(),
            scope: self.scope.into(),
            key: self.key.clone(),
            fingerprint: self.fp.clone(),
            legacy_fingerprint: None,
            effect: self.effect,
            request: RequestRecord {
                method: self.route.method.into(),
                path: self.route.path.into(),
                headers: vec![
                    ("content-type".into(), "application/json".into()),
                    ("idempotency-key".into(), self.key.clone()),
                    ("x-agent-id".into(), self.scope.into()),
                ],
                body: self.body.clone(),
            },
            owner: owner.into(),
            lease_ms: LEASE,
            ttl_ms: ttl,
            reject_duplicates_within_ms: None,
            tool: None,
            subjects: self.subjects.clone(),
            dup_fp: self.dup_fp.clone(),
            approval: self.approval.clone(),
            at: self.at,
        }
    }
}

/// A call of `route` from `scope` with `body` at `at`, as the proxy under [`example`] claims it.
fn new_call(
    g: &mut Gen,
    route: Route,
    scope: &'static str,
    body: &serde_json::Value,
    at: Millis,
) -> OpsResult<Call> {
    let terms = g.terms(route)?;
    let subjects = idemgate_proxy::business::subjects(
        &terms.subjects,
        terms.money.as_ref(),
        &Default::default(),
        Some(body),
    );
    let dup_fp = terms.duplicate_on.as_ref().map(|on| {
        idemgate_proxy::business::dup_fp(
            route.name,
            scope,
            terms.duplicate_any_scope,
            on,
            Some(body),
        )
    });
    let approval = terms
        .approval
        .as_ref()
        .and_then(|p| p.ask(Some(body), &subjects));
    let effect = terms.effect;
    let body = serde_json::to_vec(body).unwrap_or_default();
    let fp = fingerprint(route.method, route.name, &[], &body);
    Ok(Call {
        route,
        scope,
        key: g.uuid(),
        body,
        fp,
        at,
        effect,
        subjects,
        dup_fp,
        approval,
    })
}

fn wait_all<T>(tickets: Vec<Ticket<T>>) -> OpsResult<Vec<T>> {
    tickets
        .into_iter()
        .map(|t| t.wait().map_err(OpsError::from))
        .collect()
}

fn claimed_id(o: &ClaimOutcome) -> OpsResult<i64> {
    match o {
        ClaimOutcome::Claimed { entry_id, .. } => Ok(*entry_id),
        other => Err(OpsError::Conflict(format!(
            "demo: unexpected claim outcome {other:?}"
        ))),
    }
}

fn actor(operator: &str, reason: &str) -> Actor {
    Actor {
        operator: operator.into(),
        reason: reason.into(),
    }
}

/// Seeds `store` (which must hold no events yet) with a realistic history ending now.
pub fn seed(store: &dyn Storage, opts: DemoOptions) -> OpsResult<DemoReport> {
    if store.head()?.is_some() {
        return Err(OpsError::Conflict(format!(
            "{} already holds events; the demo only seeds an empty ledger",
            store.location()
        )));
    }
    let mut g = Gen {
        rng: StdRng::seed_from_u64(opts.seed),
        serial: 0,
        config: example()?,
    };
    let now = now_millis();
    let start = now - 72 * HOUR;
    let traffic_end = now - 3 * HOUR;
    // About 2.3 events per call on average.
    let calls_total = ((opts.events.saturating_sub(200)) as f64 / 2.3).max(100.0) as u64;
    let chunks = calls_total.div_ceil(CHUNK as u64).max(1);
    let slice = (traffic_end - start) / chunks as i64;

    let mut t = start;
    loop {
        let seq = store.head()?.map_or(0, |h| h.seq);
        if seq as u64 + 200 >= opts.events {
            break;
        }
        traffic_chunk(store, &mut g, t, slice)?;
        t = (t + slice).min(traffic_end);
        sweep_until_done(store, t)?;
    }
    incidents(store, &mut g, now)?;
    sweep_until_done(store, now)?;
    Ok(DemoReport {
        events: store.head()?.map_or(0, |h| h.seq),
        stats: store.stats(now, 72)?,
    })
}

fn sweep_until_done(store: &dyn Storage, at: Millis) -> OpsResult<()> {
    loop {
        let r = store.sweep(at).wait()?;
        if r.lease_expired == 0 && r.ttl_expired == 0 {
            return Ok(());
        }
    }
}

/// One slice of ordinary traffic: CHUNK calls spread over `slice` milliseconds from `t0`.
fn traffic_chunk(store: &dyn Storage, g: &mut Gen, t0: Millis, slice: i64) -> OpsResult<()> {
    let dt = (slice / CHUNK as i64).max(1);
    let calls: Vec<Call> = (0..CHUNK)
        .map(|j| {
            let route = g.route();
            let scope = SCOPES[g.rng.random_range(0..SCOPES.len())];
            let body = g.body(&route, None);
            let at = t0 + j as i64 * dt + g.rng.random_range(0..dt);
            new_call(g, route, scope, &body, at)
        })
        .collect::<OpsResult<_>>()?;
    let owner = OWNERS[g.rng.random_range(0..OWNERS.len())];
    let ids: Vec<i64> = wait_all(
        calls
            .iter()
            .map(|c| store.claim(c.claim(owner, TTL)))
            .collect(),
    )?
    .iter()
    .map(claimed_id)
    .collect::<OpsResult<_>>()?;

    // 0..80: executes; 80..90: a 503 first, then executes; 90..95: declined (402, permanent);
    // 95..100: not executed after retries (connect refused / 503), released.
    let fate: Vec<u32> = calls.iter().map(|_| g.rng.random_range(0..100)).collect();
    let mut tickets = Vec::new();
    for (i, c) in calls.iter().enumerate() {
        if (80..90).contains(&fate[i]) || fate[i] >= 95 {
            let error = if fate[i] >= 95 {
                "connect refused"
            } else {
                "upstream 503"
            };
            let rep = OwnerReport {
                entry_id: ids[i],
                owner: owner.into(),
                error: error.into(),
                at: c.at + 120,
            };
            tickets.push(store.record_attempt(rep, 2, LEASE));
        }
    }
    wait_all(tickets)?;
    let mut completes = Vec::new();
    let mut releases = Vec::new();
    for (i, c) in calls.iter().enumerate() {
        let at = c.at + g.rng.random_range(40..900);
        if fate[i] >= 95 {
            releases.push(store.release(OwnerReport {
                entry_id: ids[i],
                owner: owner.into(),
                error: "not executed after 3 attempts: upstream 503".into(),
                at: at + 2_000,
            }));
        } else {
            let ok = !(90..95).contains(&fate[i]) || c.route.name != "charges";
            completes.push(store.complete(CompleteRequest {
                entry_id: ids[i],
                owner: owner.into(),
                response: g.response(&c.route, ok),
                ttl_ms: TTL,
                duplicate_window_ms: Some(DUP_WINDOW),
                at,
            }));
        }
    }
    wait_all(completes)?;
    wait_all(releases)?;
    // Agents retry: about one call in five is retried once or more and answered from the ledger.
    let mut replays = Vec::new();
    for (i, c) in calls.iter().enumerate() {
        if fate[i] < 95 && g.rng.random_range(0..5) == 0 {
            for r in 0..g.rng.random_range(1..4) {
                let mut retry = c.claim(owner, TTL);
                retry.at = c.at + 1_500 + r * 2_000;
                replays.push(store.claim(retry));
            }
        }
    }
    wait_all(replays)?;
    Ok(())
}

fn complete_now(
    store: &dyn Storage,
    g: &mut Gen,
    c: &Call,
    owner: &str,
    ttl: i64,
    after: i64,
) -> OpsResult<i64> {
    let id = claimed_id(&store.claim(c.claim(owner, ttl)).wait()?)?;
    store
        .complete(CompleteRequest {
            entry_id: id,
            owner: owner.into(),
            response: g.response(&c.route, true),
            ttl_ms: ttl,
            duplicate_window_ms: Some(DUP_WINDOW),
            at: c.at + after,
        })
        .wait()?;
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use idemgate_config::Protocol;
    use std::time::Duration;

    /// The demo's calls take their routes' terms from `examples/idemgate.toml`; what it keeps
    /// itself (each call's method and path, and its clock) must fit the routes there, so a demo
    /// entry can be replayed or reconciled through its route in the console's demo.
    #[test]
    fn every_call_the_demo_makes_fits_its_route_in_the_example_configuration() {
        let cfg = example().expect("the demo's configuration");
        let ms = |d: Duration| d.as_millis() as i64;
        assert_eq!(ms(cfg.duplicate_window), DUP_WINDOW);
        for r in ROUTES.iter().chain([&scenes::TOOLS]) {
            let route = cfg.route(r.name);
            let route = route.unwrap_or_else(|| panic!("{} is not configured", r.name));
            assert!(route.serves(r.method) && route.takes(r.path), "{}", r.name);
            assert_eq!((ms(route.ttl), ms(route.lease)), (TTL, LEASE), "{}", r.name);
        }
        let tools = cfg.route(scenes::TOOLS.name).expect("the MCP route");
        assert_eq!(tools.protocol, Protocol::Mcp);
        assert!(cfg.route("charges").is_some_and(|c| c.loop_guard.is_some()));
    }

    /// The console's demo shows refunds held under the policy its embedded proxy runs: each
    /// refund the example's policy matches was held for it, under its hash, and no other was.
    #[test]
    fn the_demo_holds_the_refunds_the_example_s_policy_holds_and_no_others() {
        let cfg = example().expect("the demo's configuration");
        let policy = cfg.route("refunds").and_then(|r| r.approval.as_ref());
        let policy = policy.expect("the example holds refunds for approval");
        let dir = tempfile::tempdir().expect("tempdir");
        let ops = crate::Ops::open_or_create(&dir.path().join("l.db").display().to_string())
            .expect("ledger");
        let store = ops.store();
        let opts = DemoOptions {
            events: 2_000,
            seed: 3,
        };
        seed(store.as_ref(), opts).expect("demo");
        let refunds = EntryFilter {
            route: Some("refunds".into()),
            ..EntryFilter::default()
        };
        let page = Page {
            limit: 10_000,
            ..Page::default()
        };
        let (mut held, mut ran) = (0, 0);
        for e in store
            .entries(&refunds, page, now_millis())
            .expect("refunds")
        {
            let d = store.entry(e.id, now_millis()).expect("entry");
            let Some(request) = &d.request else { continue };
            let body: serde_json::Value = serde_json::from_slice(&request.body).expect("JSON");
            let asks = policy.ask(Some(&body), &e.subjects);
            assert_eq!(
                asks.is_some(),
                d.approval.is_some(),
                "entry {}: {body}",
                e.id
            );
            if let Some(a) = &d.approval {
                assert_eq!((&a.policy_hash, a.needed), (&policy.hash, policy.approvals));
                held += 1;
            } else {
                ran += 1;
            }
        }
        assert!(held >= 5 && ran > 0, "{held} held, {ran} not");
    }
}
