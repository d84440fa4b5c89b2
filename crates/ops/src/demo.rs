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

use idemgate_proxy::config::{Subject, SubjectSource};

use crate::{OpsError, OpsResult};

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
        effect: Effect::Write,
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

/// The subjects each demo route names, as `examples/idemgate.toml` would configure them.
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
        _ => &[],
    };
    spec.iter()
        .map(|(n, p)| Subject {
            name: (*n).into(),
            from: SubjectSource::Pointer((*p).into()),
        })
        .collect()
}

/// The charges' `duplicate_on`: one customer, amount and currency, in any scope.
const CHARGE_DUPLICATE_ON: [&str; 3] = ["/customer", "/amount", "/currency"];

impl Call {
    fn claim(&self, owner: &str, ttl: i64) -> ClaimRequest {
        let body: Option<serde_json::Value> = serde_json::from_slice(&self.body).ok();
        let subjects = idemgate_proxy::business::subjects(
            &subject_spec(self.route.name),
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

/// The incidents of the last three hours, and operators' past work.
fn incidents(store: &dyn Storage, g: &mut Gen, now: Millis) -> OpsResult<()> {
    past_decisions(store, g, now)?;
    stuck_now(store, g, now)?;
    collisions(store, g, now)?;
    double_charges(store, g, now)?;
    tool_calls(store, g, now)?;
    about_to_expire(store, g, now)?;
    past_purge(store, now)?;
    Ok(())
}

/// Past resolutions: entries that got stuck and that operators decided.
fn past_decisions(store: &dyn Storage, g: &mut Gen, now: Millis) -> OpsResult<()> {
    let charges = ROUTES[0];
    let owner = OWNERS[0];
    let decisions: [(&str, ResolveAs, &str); 6] = [
        (
            "alice@payments-oncall",
            ResolveAs::Completed,
            "found the charge in the processor dashboard",
        ),
        (
            "alice@payments-oncall",
            ResolveAs::Released,
            "processor has no record of the call; safe to retry",
        ),
        (
            "bob@support-ops",
            ResolveAs::Failed,
            "customer cancelled the order before we could confirm",
        ),
        (
            "bob@support-ops",
            ResolveAs::Completed,
            "email provider log shows delivery",
        ),
        (
            "carol@sre",
            ResolveAs::Released,
            "connection reset before the request was sent (pcap)",
        ),
        (
            "carol@sre",
            ResolveAs::Completed,
            "ticket exists upstream; linking it",
        ),
    ];
    for (i, (op, as_, why)) in decisions.into_iter().enumerate() {
        let route = [charges, charges, charges, ROUTES[2], ROUTES[0], ROUTES[3]][i];
        let body = g.body(&route, None);
        let c = new_call(
            g,
            route,
            SCOPES[i % SCOPES.len()],
            &body,
            now - 2 * HOUR - (i as i64) * 9 * MIN,
        );
        let id = claimed_id(&store.claim(c.claim(owner, TTL)).wait()?)?;
        store
            .mark_unknown(OwnerReport {
                entry_id: id,
                owner: owner.into(),
                error: "upstream timeout after 10s".into(),
                at: c.at + 10_000,
            })
            .wait()?;
        let resolution = match as_ {
            ResolveAs::Completed => {
                let r = g.response(&route, true);
                let x = String::from_utf8_lossy(&r.body).to_string();
                Resolution::Completed {
                    response: r,
                    external_ref: Some(
                        x.chars()
                            .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
                            .skip(2)
                            .take(17)
                            .collect(),
                    ),
                }
            }
            ResolveAs::Failed => Resolution::Failed { response: None },
            ResolveAs::Released => Resolution::Released,
        };
        store
            .resolve(ResolveRequest {
                entry_id: id,
                resolution,
                actor: actor(op, why),
                ttl_ms: TTL,
                at: c.at + 25 * MIN,
            })
            .wait()?;
    }
    Ok(())
}

/// Stuck now: timeouts (outcome unknown) and a crashed instance (lease lapsed).
fn stuck_now(store: &dyn Storage, g: &mut Gen, now: Millis) -> OpsResult<()> {
    let charges = ROUTES[0];
    for i in 0..12i64 {
        let route = if i == 11 {
            ROUTES[5]
        } else {
            [charges, ROUTES[1], ROUTES[2], ROUTES[4]][(i % 4) as usize]
        };
        let scope = SCOPES[(i as usize) % SCOPES.len()];
        let body = g.body(&route, None);
        let c = new_call(g, route, scope, &body, now - (5 + i * 9) * MIN);
        let owner = OWNERS[(i % 2) as usize];
        let id = claimed_id(&store.claim(c.claim(owner, TTL)).wait()?)?;
        if i % 3 != 2 {
            let error = if i % 2 == 0 {
                "upstream timeout after 10s"
            } else {
                "connection reset after request was sent"
            };
            store
                .mark_unknown(OwnerReport {
                    entry_id: id,
                    owner: owner.into(),
                    error: error.into(),
                    at: c.at + 10_000,
                })
                .wait()?;
        }
    }
    Ok(())
}

/// An agent's tool calls through an MCP route (`tools`): charges, refunds and emails, one of
/// them declined by the tool (`isError`), one held after the server's stream ended early.
fn tool_calls(store: &dyn Storage, g: &mut Gen, now: Millis) -> OpsResult<()> {
    const ROUTE: &str = "tools";
    let scope = "agent-mcp-01";
    for i in 0..10i64 {
        let tool = ["charge", "refund", "send_email"][(i % 3) as usize];
        let customer = format!("cus_{:05}", 42_000 + i);
        let arguments = match tool {
            "charge" => json!({"customer": customer, "amount": 1999 + i * 500, "currency": "usd"}),
            "refund" => json!({"charge": g.id("ch"), "amount": 500}),
            _ => json!({"to": format!("{customer}@example.com"), "template": "receipt"}),
        };
        let at = now - (170 - i * 15) * MIN;
        let key = idemgate_proxy::mcp::derived_key(scope, ROUTE, tool, &arguments);
        let call = json!({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}});
        let c = ClaimRequest {
            route: ROUTE.into(),
            scope: scope.into(),
            key,
            fingerprint: idemgate_proxy::mcp::fingerprint(ROUTE, tool, &arguments),
            legacy_fingerprint: None,
            effect: if tool == "send_email" {
                Effect::Write
            } else {
                Effect::Destructive
            },
            request: RequestRecord {
                method: "POST".into(),
                path: "/mcp".into(),
                headers: vec![
                    ("content-type".into(), "application/json".into()),
                    ("mcp-protocol-version".into(), "2026-07-28".into()),
                    ("x-agent-id".into(), scope.into()),
                ],
                body: serde_json::to_vec(&call).unwrap_or_default(),
            },
            owner: OWNERS[0].into(),
            lease_ms: LEASE,
            ttl_ms: TTL,
            reject_duplicates_within_ms: None,
            tool: Some(tool.into()),
            subjects: Vec::new(),
            dup_fp: None,
            at,
        };
        let id = claimed_id(&store.claim(c).wait()?)?;
        if i == 7 {
            store
                .mark_unknown(OwnerReport {
                    entry_id: id,
                    owner: OWNERS[0].into(),
                    error: "the upstream's event stream ended without the call's response".into(),
                    at: at + 4_000,
                })
                .wait()?;
            continue;
        }
        let declined = i == 3;
        let text = match (tool, declined) {
            (_, true) => "card declined".to_owned(),
            ("charge", _) => format!("charged {customer}: {}", g.id("ch")),
            ("refund", _) => format!("refunded: {}", g.id("re")),
            _ => format!("sent: {}", g.id("msg")),
        };
        let result = json!({"jsonrpc": "2.0", "id": i + 1,
            "result": {"content": [{"type": "text", "text": text}], "isError": declined}});
        store
            .complete(CompleteRequest {
                entry_id: id,
                owner: OWNERS[0].into(),
                response: ResponseRecord {
                    status: 200,
                    headers: vec![("content-type".into(), "application/json".into())],
                    body: serde_json::to_vec(&result).unwrap_or_default(),
                },
                ttl_ms: TTL,
                duplicate_window_ms: Some(DUP_WINDOW),
                at: at + 1_500,
            })
            .wait()?;
    }
    Ok(())
}

/// Collisions: an agent reused a key with different arguments.
fn collisions(store: &dyn Storage, g: &mut Gen, now: Millis) -> OpsResult<()> {
    let charges = ROUTES[0];
    let owner = OWNERS[0];
    for i in 0..8i64 {
        let route = [charges, ROUTES[2], ROUTES[3], ROUTES[1]][(i % 4) as usize];
        let body = g.body(&route, None);
        let c = new_call(
            g,
            route,
            SCOPES[(i as usize + 1) % SCOPES.len()],
            &body,
            now - (30 + i * 13) * MIN,
        );
        complete_now(store, g, &c, owner, TTL, 300)?;
        let mut retry = c.claim(owner, TTL);
        retry.at = c.at + 60_000;
        store.claim(retry).wait()?;
        for n in 0..(1 + i % 2) {
            let mut changed = body.clone();
            if let Some(obj) = changed.as_object_mut() {
                obj.insert("amount".into(), json!(999 + n * 100));
                obj.insert("note".into(), json!("agent re-planned and kept the key"));
            }
            let other = serde_json::to_vec(&changed).unwrap_or_default();
            let mut clash = c.claim(owner, TTL);
            clash.fingerprint = fingerprint(route.method, route.name, &[], &other);
            clash.request.body = other;
            clash.at = c.at + (2 + n) * 60_000;
            store.claim(clash).wait()?;
        }
    }
    Ok(())
}

/// Double charges: the same charge sent under fresh keys ("new UUID on every retry").
fn double_charges(store: &dyn Storage, g: &mut Gen, now: Millis) -> OpsResult<()> {
    let charges = ROUTES[0];
    let owner = OWNERS[0];
    for i in 0..5i64 {
        let customer = format!("cus_{:05}", 41_000 + i);
        let amount = (4_999 + i * 1_000) as f64 / 100.0;
        let copies = if i == 0 { 3 } else { 2 };
        let t0 = now - (20 + i * 17) * MIN;
        for n in 0..copies {
            // A retry with a fresh request_id, from the other agent: the same charge by its
            // customer, amount and currency, though no two bodies are equal.
            let body = json!({"customer": customer, "amount": amount, "currency": "usd",
                "description": format!("Order #{}", 700_100 + i), "request_id": g.uuid()});
            let c = new_call(
                g,
                charges,
                SCOPES[((i + n) as usize) % 2],
                &body,
                t0 + n * 14_000,
            );
            complete_now(store, g, &c, owner, TTL, 800)?;
        }
    }
    // An agent in a loop: the same charge over and over, its loop guard's flag logged.
    let looping = "agent-loop-01";
    let body = json!({"customer": "cus_43210", "amount": 12.5, "currency": "usd", "description": "Order #700900"});
    let c = new_call(g, charges, looping, &body, now - 9 * MIN);
    complete_now(store, g, &c, owner, TTL, 600)?;
    for (n, calls) in [(0i64, 21), (1, 21)] {
        store
            .note_loop(LoopNote {
                route: "charges".into(),
                scope: looping.into(),
                key: c.key.clone(),
                detail: json!({"calls": calls, "max": 20, "window_ms": 60_000, "action": "flag",
                    "tool": null, "request": c.fp}),
                at: now - (8 - n) * MIN,
            })
            .wait()?;
    }
    Ok(())
}

/// About to expire: short-TTL entries completing now.
fn about_to_expire(store: &dyn Storage, g: &mut Gen, now: Millis) -> OpsResult<()> {
    let owner = OWNERS[0];
    for i in 0..10i64 {
        let route = [ROUTES[2], ROUTES[3], ROUTES[4]][(i % 3) as usize];
        let body = g.body(&route, None);
        let c = new_call(
            g,
            route,
            SCOPES[(i as usize) % SCOPES.len()],
            &body,
            now - 2 * HOUR + i * MIN,
        );
        complete_now(store, g, &c, owner, 2 * HOUR + (10 + i * 5) * MIN, 200)?;
    }
    Ok(())
}

/// A past purge of expired entries (an erasure request).
fn past_purge(store: &dyn Storage, now: Millis) -> OpsResult<()> {
    let expired = store.entries(
        &EntryFilter {
            expired: true,
            ..Default::default()
        },
        Page::newest(None, 3),
        now,
    )?;
    if !expired.is_empty() {
        store
            .purge(PurgeRequest {
                ids: expired.iter().map(|e| e.id).collect(),
                expired_by: Some(now - 90 * MIN),
                actor: actor(
                    "dana@compliance",
                    "erasure request #4411: purge expired entries of the customer",
                ),
                at: now - 90 * MIN,
            })
            .wait()?;
    }
    Ok(())
}

use crate::ResolveAs;
