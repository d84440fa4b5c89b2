//! Operator actions that talk HTTP: replay (re-drive a stored request upstream) and reconcile (ask
//! the upstream, through the route's probe, whether the effect happened). Both are logged with the
//! operator's name and reason; replay is refused on destructive routes without confirmation.

use axum::http::{HeaderMap, HeaderName, HeaderValue, Method};
use bytes::Bytes;
use idemgate_ledger::*;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::engine::{drive, Engine, UPSTREAM_KEY_HEADER};
use crate::forward::{self, Attempt};
use crate::problem::Problem;

#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionCmd {
    pub operator: String,
    pub reason: String,
    #[serde(default)]
    pub confirm_destructive: bool,
}

#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReplayReport {
    pub entry: EntrySummary,
    /// The upstream's status when it answered with a final one.
    pub status: Option<u16>,
    /// The problem when it did not (not executed, unknown).
    #[cfg_attr(feature = "ts", ts(type = "Record<string, unknown> | null"))]
    pub problem: Option<serde_json::Value>,
}

#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReconcileReport {
    pub entry: EntrySummary,
    pub probe_status: Option<u16>,
    /// "completed", "released" or "inconclusive".
    pub decision: String,
}

fn actor(cmd: &ActionCmd) -> Result<Actor, Problem> {
    Ok(idemgate_ops::validate_actor(&cmd.operator, &cmd.reason)?)
}

async fn entry(e: &Engine, id: i64) -> Result<EntryDetail, Problem> {
    let store = e.store.clone();
    tokio::task::spawn_blocking(move || store.entry(id, now_millis()))
        .await
        .map_err(|j| Problem::new(500, "internal", "Internal error", j.to_string()))?
        .map_err(Problem::from)
}

fn route_of<'a>(e: &'a Engine, d: &EntryDetail) -> Result<&'a crate::config::Route, Problem> {
    e.cfg.route(&d.summary.route).ok_or_else(|| {
        Problem::new(
            409,
            "unknown-route",
            "Route not configured",
            format!(
                "entry {} belongs to route {:?}, which this configuration does not have",
                d.summary.id, d.summary.route
            ),
        )
    })
}

/// Re-drives a stuck, released or failed entry's stored request upstream.
pub async fn replay(e: &Engine, id: i64, cmd: &ActionCmd) -> Result<ReplayReport, Problem> {
    let actor = actor(cmd)?;
    let d = entry(e, id).await?;
    let route = route_of(e, &d)?;
    if d.summary.effect == Effect::Destructive && !cmd.confirm_destructive {
        return Err(
            idemgate_ops::OpsError::ConfirmationRequired(vec![d.summary.key.clone()]).into(),
        );
    }
    let rd = e
        .store
        .redrive(RedriveRequest {
            entry_id: id,
            owner: e.owner.clone(),
            lease_ms: route.lease.as_millis() as i64,
            actor,
            at: now_millis(),
        })
        .recv()
        .await?;
    let mut headers = HeaderMap::new();
    for (n, v) in &rd.request.headers {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(n.as_bytes()),
            HeaderValue::from_str(v),
        ) {
            headers.append(n, v);
        }
    }
    if let Ok(v) = HeaderValue::from_str(&route.upstream.authority) {
        headers.insert(axum::http::header::HOST, v);
    }
    if let Some(a) = &route.upstream_auth {
        a.set_in(&mut headers);
    }
    // The key the first attempt sent, as the proxy does: a replay is the same request.
    headers.remove(UPSTREAM_KEY_HEADER);
    crate::keys::send_key(route, &mut headers, &upstream_key(&d));
    let method = Method::from_bytes(rd.request.method.as_bytes()).unwrap_or(Method::POST);
    let uri = forward::upstream_uri(&route.upstream, &rd.request.path)
        .map_err(|err| Problem::new(409, "bad-request", "Stored request unusable", err))?;
    let result = drive(
        e,
        route,
        &method,
        uri,
        &headers,
        Bytes::from(rd.request.body),
        id,
        rd.attempt,
    )
    .await;
    let after = entry(e, id).await?.summary;
    Ok(match result {
        Ok(r) => ReplayReport {
            entry: after,
            status: Some(r.status),
            problem: None,
        },
        Err(p) => ReplayReport {
            entry: after,
            status: None,
            problem: Some(p.body()),
        },
    })
}

/// The key `d`'s upstream was sent: kept with its request when it is not the entry's own
/// ([`crate::keys::upstream_key`]), else the entry's key.
fn upstream_key(d: &EntryDetail) -> String {
    d.request
        .as_ref()
        .and_then(|r| r.headers.iter().find(|(n, _)| n == UPSTREAM_KEY_HEADER))
        .map_or_else(|| d.summary.key.clone(), |(_, v)| v.clone())
}

fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Runs the route's probe for a stuck entry: 2xx → it happened (resolved completed with the probe's
/// answer), 404 → it did not (released), anything else → inconclusive (only noted).
pub async fn reconcile(e: &Engine, id: i64, cmd: &ActionCmd) -> Result<ReconcileReport, Problem> {
    let actor = actor(cmd)?;
    let d = entry(e, id).await?;
    let route = route_of(e, &d)?;
    let probe = route.reconcile.as_ref().ok_or_else(|| {
        Problem::new(
            409,
            "no-probe",
            "No reconcile probe",
            format!("route {} has no reconcile probe configured", route.name),
        )
    })?;
    if !d.summary.stuck {
        return Err(Problem::new(
            409,
            "conflict",
            "Not stuck",
            format!(
                "entry {id} is {} and not stuck; only stuck entries are reconciled",
                d.summary.state
            ),
        ));
    }
    if d.summary.effect == Effect::Destructive && !cmd.confirm_destructive {
        return Err(
            idemgate_ops::OpsError::ConfirmationRequired(vec![d.summary.key.clone()]).into(),
        );
    }
    let url = probe
        .url
        .replace("{key}", &encode(&upstream_key(&d)))
        .replace("{scope}", &encode(&d.summary.scope));
    let uri: axum::http::Uri = url
        .parse()
        .map_err(|err| Problem::new(500, "bad-config", "Bad probe URL", format!("{err}")))?;
    let mut headers = HeaderMap::new();
    if let Some(a) = uri.authority() {
        if let Ok(v) = HeaderValue::from_str(a.as_str()) {
            headers.insert(axum::http::header::HOST, v);
        }
    }
    // The route's credential goes only to the route's own upstream, never to another host a
    // probe may name.
    let same_upstream = uri.authority().map(|a| a.as_str()) == Some(&route.upstream.authority)
        && (uri.scheme_str() == Some("https")) == route.upstream.https;
    if let Some(a) = route.upstream_auth.as_ref().filter(|_| same_upstream) {
        a.set_in(&mut headers);
    }
    let method = Method::from_bytes(probe.method.as_bytes()).unwrap_or(Method::GET);
    let out = forward::Outgoing {
        method: &method,
        uri,
        headers: &headers,
        body: Bytes::new(),
        timeout: route.timeout,
    };
    let a = forward::attempt(&e.client, out).await;
    let (status, decision, resolution) = match a {
        Attempt::Executed(r) if (200..300).contains(&r.status) => {
            let status = r.status;
            (
                Some(status),
                "completed",
                Some(Resolution::Completed {
                    response: r.record(),
                    external_ref: Some(format!("reconcile probe {status}")),
                }),
            )
        }
        Attempt::Executed(r) if r.status == 404 => {
            (Some(404), "released", Some(Resolution::Released))
        }
        Attempt::Executed(r) | Attempt::Refused(r) => (Some(r.status), "inconclusive", None),
        Attempt::NotExecuted { .. } | Attempt::Unknown { .. } => (None, "inconclusive", None),
    };
    e.store
        .note_reconcile(ReconcileNote {
            entry_id: id,
            actor: actor.clone(),
            detail: json!({"probe_status": status, "decision": decision}),
            at: now_millis(),
        })
        .recv()
        .await?;
    if let Some(resolution) = resolution {
        e.store
            .resolve(ResolveRequest {
                entry_id: id,
                resolution,
                actor,
                ttl_ms: route.ttl.as_millis() as i64,
                at: now_millis(),
            })
            .recv()
            .await?;
    }
    Ok(ReconcileReport {
        entry: entry(e, id).await?.summary,
        probe_status: status,
        decision: decision.into(),
    })
}
