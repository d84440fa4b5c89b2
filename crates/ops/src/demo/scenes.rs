//! The incidents of the demo's last three hours, and operators' past work: each scene written
//! through the real state machine.

#[allow(
    clippy::wildcard_imports,
    reason = "the scenes use the demo's generator and its vocabulary"
)]
use super::*;
use idemgate_proxy::business::loop_detail;

/// The incidents of the last three hours, and operators' past work.
pub(super) fn incidents(store: &dyn Storage, g: &mut Gen, now: Millis) -> OpsResult<()> {
    past_decisions(store, g, now)?;
    stuck_now(store, g, now)?;
    collisions(store, g, now)?;
    double_charges(store, g, now)?;
    tool_calls(store, g, now)?;
    about_to_expire(store, g, now)?;
    past_purge(store, now)?;
    super::approvals::held_for_approval(store, g, now)?;
    Ok(())
}

/// The operators' past decisions on stuck entries: who, how, and why.
const DECISIONS: [(&str, ResolveAs, &str); 6] = [
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

/// Past resolutions: entries that got stuck and that operators decided.
fn past_decisions(store: &dyn Storage, g: &mut Gen, now: Millis) -> OpsResult<()> {
    let charges = ROUTES[0];
    let owner = OWNERS[0];
    for (i, (op, as_, why)) in DECISIONS.into_iter().enumerate() {
        let route = [charges, charges, charges, ROUTES[2], ROUTES[0], ROUTES[3]][i];
        let body = g.body(&route, None);
        let c = new_call(
            g,
            route,
            SCOPES[i % SCOPES.len()],
            &body,
            now - 2 * HOUR - (i as i64) * 9 * MIN,
        )?;
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
        let c = new_call(g, route, scope, &body, now - (5 + i * 9) * MIN)?;
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

/// The MCP route the demo's agent calls its tools through.
pub(super) const TOOLS: Route = Route {
    name: "tools",
    method: "POST",
    path: "/mcp",
};

/// An agent's tool calls through an MCP route ([`TOOLS`]): charges, refunds and emails, one of
/// them declined by the tool (`isError`), one held after the server's stream ended early.
fn tool_calls(store: &dyn Storage, g: &mut Gen, now: Millis) -> OpsResult<()> {
    let scope = "agent-mcp-01";
    let route = g.terms(TOOLS)?.clone();
    for i in 0..10i64 {
        let tool = ["charge", "refund", "send_email"][(i % 3) as usize];
        let customer = format!("cus_{:05}", 42_000 + i);
        let arguments = match tool {
            "charge" => json!({"customer": customer, "amount": 1999 + i * 500, "currency": "usd"}),
            "refund" => json!({"charge": g.id("ch"), "amount": 500}),
            _ => json!({"to": format!("{customer}@example.com"), "template": "receipt"}),
        };
        let at = now - (170 - i * 15) * MIN;
        let c = tool_claim(&route, scope, tool, &arguments, i + 1, at);
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

/// The claim of an agent's MCP call of `tool` with `arguments` through `route`, JSON-RPC id
/// `id`, at `at`, as the proxy makes it.
fn tool_claim(
    route: &idemgate_config::Route,
    scope: &str,
    tool: &str,
    arguments: &serde_json::Value,
    id: i64,
    at: Millis,
) -> ClaimRequest {
    let name = route.name.as_str();
    let key = idemgate_proxy::mcp::derived_key(scope, name, tool, arguments);
    let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments}});
    let rule = route.tools.get(tool);
    let subjects =
        idemgate_proxy::business::tool_subjects(route, tool, &Default::default(), arguments);
    let policy = rule.and_then(|r| r.approval.as_ref());
    ClaimRequest {
        route: name.into(),
        scope: scope.into(),
        key,
        fingerprint: idemgate_proxy::mcp::fingerprint(name, tool, arguments),
        legacy_fingerprint: None,
        // A tool the configuration gives no effect is destructive: the demo's MCP server
        // annotates its payment tools so, and the proxy takes a tool it has not seen listed so.
        effect: rule.and_then(|r| r.effect).unwrap_or(Effect::Destructive),
        request: RequestRecord {
            method: "POST".into(),
            path: route.path.clone(),
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
        approval: policy.and_then(|p| p.ask(Some(arguments), &subjects)),
        subjects,
        dup_fp: idemgate_proxy::business::tool_dup_fp(route, tool, scope, arguments),
        at,
    }
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
        )?;
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
            )?;
            complete_now(store, g, &c, owner, TTL, 800)?;
        }
    }
    // An agent in a loop: the same charge over and over, its loop guard's flag logged.
    let looping = "agent-loop-01";
    let body = json!({"customer": "cus_43210", "amount": 12.5, "currency": "usd", "description": "Order #700900"});
    let c = new_call(g, charges, looping, &body, now - 9 * MIN)?;
    complete_now(store, g, &c, owner, TTL, 600)?;
    let guard = g.terms(charges)?.loop_guard.ok_or_else(|| {
        OpsError::Internal("examples/idemgate.toml: charges has no loop guard".into())
    })?;
    // What the proxy counts: the charge by its `duplicate_on` values, else the whole request.
    let what = c.dup_fp.as_deref().unwrap_or(&c.fp);
    for n in 0..2 {
        store
            .note_loop(LoopNote {
                route: charges.name.into(),
                scope: looping.into(),
                key: c.key.clone(),
                detail: loop_detail(&guard, guard.max + 1, None, what),
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
        )?;
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
