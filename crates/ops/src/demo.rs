//! `idemgate demo`: a realistic ledger for a first look and for benchmarks.
//!
//! Three days of traffic from several agents through six routes (charges, refunds, emails, tickets,
//! webhooks and a destructive subscription cancel), run through the real state machine with
//! timestamps in the past: executions, retries after 503s, releases, replays absorbed, TTL expiries
//! marked by a sweeper; then the incidents an operator is there for — stuck entries (timeouts and a
//! crashed instance), key-reuse collisions, a customer charged twice under two keys, an agent's
//! MCP tool calls (one held), entries about to expire, and past operator resolutions and purges.

use idemgate_ledger::canon::fingerprint;
use idemgate_ledger::{
    now_millis, Actor, ClaimOutcome, ClaimRequest, CompleteRequest, Effect, EntryFilter, LoopNote,
    Millis, OwnerReport, Page, PurgeRequest, RequestRecord, Resolution, ResolveRequest,
    ResponseRecord, Stats, Storage, Ticket,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::json;

use idemgate_config::{Money, Subject, SubjectSource};

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

#[derive(Clone, Copy)]
struct Route {
    name: &'static str,
    method: &'static str,
    path: &'static str,
    effect: Effect,
}

const ROUTES: &[Route] = &[
    Route {
        name: "charges",
        method: "POST",
        path: "/v1/charges",
        effect: Effect::Write,
    },
    Route {
        name: "refunds",
        method: "POST",
        path: "/v1/refunds",
        effect: Effect::Write,
    },
    Route {
        name: "emails",
        method: "POST",
        path: "/v1/emails/send",
        effect: Effect::Write,
    },
    Route {
        name: "tickets",
        method: "POST",
        path: "/v1/tickets",
        effect: Effect::Idempotent,
    },
    Route {
        name: "webhooks",
        method: "POST",
        path: "/hooks/payments",
        effect: Effect::Idempotent,
    },
    Route {
        name: "subscriptions-cancel",
        method: "POST",
        path: "/v1/subscriptions/cancel",
        effect: Effect::Destructive,
    },
];

fn pick(rng: &mut StdRng, from: &[&'static str]) -> &'static str {
    from[rng.random_range(0..from.len())]
}

struct Gen {
    rng: StdRng,
    serial: u64,
}

impl Gen {
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

/// One planned call.
struct Call {
    route: Route,
    scope: &'static str,
    key: String,
    body: Vec<u8>,
    fp: String,
    at: Millis,
}

/// The subjects each demo route (and each MCP tool, `route/tool`, that names its own) names, as
/// `examples/idemgate.toml` configures them.
fn subject_spec(route: &str) -> Vec<Subject> {
    let spec: &[(&str, &str)] = match route {
        "charges" => &[
            ("amount", "/amount"),
            ("currency", "/currency"),
            ("customer", "/customer"),
        ],
        "refunds" => &[("amount", "/amount"), ("charge", "/charge")],
        "emails" => &[("to", "/to")],
        "tickets" | "subscriptions-cancel" => &[("customer", "/customer")],
        "webhooks" => &[("customer", "/data/customer")],
        // The MCP route's, and those of its tools that name their own (`route/tool`).
        "tools" => &[("amount", "/amount"), ("customer", "/customer")],
        "tools/refund" => &[("amount", "/amount"), ("charge", "/charge")],
        "tools/send_email" => &[("to", "/to")],
        _ => &[],
    };
    spec.iter()
        .map(|(n, p)| Subject {
            name: (*n).into(),
            from: SubjectSource::Pointer((*p).into()),
        })
        .collect()
}

/// How a demo route's calls state their amount, as `examples/idemgate.toml` configures it: the
/// refunds and the MCP tools' calls in US cents.
fn money_spec(route: &str) -> Option<Money> {
    matches!(route, "refunds" | "tools").then(|| Money {
        minor_units: true,
        currency: Some("USD".into()),
    })
}

/// The charges' `duplicate_on`: one customer, amount and currency, in any scope.
const CHARGE_DUPLICATE_ON: [&str; 3] = ["/customer", "/amount", "/currency"];

impl Call {
    fn claim(&self, owner: &str, ttl: i64) -> ClaimRequest {
        let body: Option<serde_json::Value> = serde_json::from_slice(&self.body).ok();
        let subjects = idemgate_proxy::business::subjects(
            &subject_spec(self.route.name),
            money_spec(self.route.name).as_ref(),
            &Default::default(),
            body.as_ref(),
        );
        let dup_fp = (self.route.name == "charges").then(|| {
            let on = CHARGE_DUPLICATE_ON.map(str::to_owned);
            idemgate_proxy::business::dup_fp("charges", self.scope, true, &on, body.as_ref())
        });
        ClaimRequest {
            route: self.route.name.into(),
            scope: self.scope.into(),
            key: self.key.clone(),
            fingerprint: self.fp.clone(),
            legacy_fingerprint: None,
            effect: self.route.effect,
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
            subjects,
            dup_fp,
            approval: None,
            at: self.at,
        }
    }
}

fn new_call(
    g: &mut Gen,
    route: Route,
    scope: &'static str,
    body: &serde_json::Value,
    at: Millis,
) -> Call {
    let body = serde_json::to_vec(body).unwrap_or_default();
    let fp = fingerprint(route.method, route.name, &[], &body);
    Call {
        route,
        scope,
        key: g.uuid(),
        body,
        fp,
        at,
    }
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
        .collect();
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
    use idemgate_config::{Config, Protocol};

    /// The console's demo runs its embedded proxy under `examples/idemgate.toml` (`.ci/demo`):
    /// every route the demo's calls went through is there, takes them, and names the subjects
    /// they were recorded with, so a demo entry can be replayed or reconciled through its route.
    #[test]
    fn every_route_the_demo_seeds_is_in_the_example_configuration() {
        let example = include_str!("../../../examples/idemgate.toml");
        // As `.ci/demo` runs it: without the webhook signature, whose secret the demo has not.
        let demo: Vec<&str> = example
            .lines()
            .filter(|l| !l.starts_with("signature = "))
            .collect();
        let cfg = Config::parse(&demo.join("\n")).expect("the demo's configuration");
        for r in ROUTES {
            let route = cfg.route(r.name);
            let route = route.unwrap_or_else(|| panic!("{} is not configured", r.name));
            assert!(route.serves(r.method) && route.takes(r.path), "{}", r.name);
            assert_eq!(route.subjects, subject_spec(r.name), "{}", r.name);
            assert_eq!(route.money, money_spec(r.name), "{}", r.name);
            assert_eq!(route.effect, r.effect, "{}", r.name);
        }
        let tools = cfg.route(scenes::TOOLS).expect("the MCP route");
        assert_eq!(tools.protocol, Protocol::Mcp);
        assert_eq!(tools.subjects, subject_spec(scenes::TOOLS));
        assert_eq!(tools.money, money_spec(scenes::TOOLS));
        for (tool, rule) in &tools.tools {
            let own = subject_spec(&format!("{}/{tool}", scenes::TOOLS));
            assert_eq!(rule.subjects, own, "{tool}");
        }
        for tool in ["refund", "send_email"] {
            assert!(
                tools.tools.contains_key(tool),
                "{tool} names its own subjects"
            );
        }
    }
}
