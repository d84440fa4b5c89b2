//! The proxy's request path. For a write route:
//!
//! 1. match the route, read the body within `max_body`, check the signature;
//! 2. take the scope and the key, fingerprint the request;
//! 3. **claim** `(route, scope, key)` in the ledger — durable before anything is forwarded;
//! 4. map the claim's answer: new → forward; completed → replay; other fingerprint → 422; in flight
//!    → 409 (or wait); stuck → 409;
//! 5. forward with retries for outcomes that were *not executed*, classify the last attempt, and
//!    make the outcome durable (complete / release / outcome unknown) **before** answering.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::http::{Request, Response};
use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use idemgate_ledger::{
    canon, now_millis, without_secret_params, ClaimOutcome, ClaimRequest, Effect, Millis,
};
use metrics::counter;
use opentelemetry::KeyValue;

use crate::claim::{settled, Claimed};
use crate::config::Protocol;
use crate::drive::{drive, ClaimedCall};
use crate::engine::{Answer, Engine, Req};
use crate::forward;
use crate::keys;
use crate::problem::{Code, Problem};
use crate::request_checks::{
    check_headers, declared_json, dot_segment, has_dot_segment, route_path,
};
use crate::respond::{respond, respond_upstream, ProxyBody};
use crate::settle::Outcome;
use crate::telemetry;

/// Every request on the proxy listener, from `peer`. Each request is counted once in
/// `idemgate_requests_total`: successes where they are answered, problems here by their code.
///
/// A write is claimed, forwarded and its outcome recorded on a task of its own
/// ([`Engine::requests`]), even if the client goes away meanwhile (an agent's own timeout is the
/// commonest way a response is lost), so that the client's retry is answered from the ledger
/// instead of finding a claim nobody finished. See [`Engine::write`].
pub async fn handle(
    engine: &Arc<Engine>,
    peer: SocketAddr,
    req: Request<Incoming>,
) -> Response<ProxyBody> {
    let (parts, body) = req.into_parts();
    let route_at = engine.route_at(&parts.method, &route_path(parts.uri.path()));
    let call = engine.tracing.as_ref().map(|t| {
        let route = route_at.map(|i| &engine.cfg.routes[i]);
        t.http_call(route, &parts, peer)
    });
    telemetry::within(call, answer(engine, route_at, parts, peer, body)).await
}

/// [`handle`]'s answer to a request for the route at `route_at`.
async fn answer(
    engine: &Arc<Engine>,
    route_at: Option<usize>,
    parts: axum::http::request::Parts,
    peer: SocketAddr,
    body: Incoming,
) -> Response<ProxyBody> {
    let path = parts.uri.path();
    let (route_name, result) = match route_at {
        _ if has_dot_segment(path) => ("-", Err(dot_segment(path))),
        None => ("-", Err(engine.no_route(&parts.method, &route_path(path)))),
        Some(i) => {
            let route = &engine.cfg.routes[i];
            let r = match check_headers(&parts.headers) {
                Err(p) => Err(p),
                Ok(()) if route.protocol == Protocol::Mcp => engine.mcp(i, parts, peer, body).await,
                Ok(()) if route.effect == Effect::Read => engine.read(i, &parts, peer, body).await,
                Ok(()) => engine.write(i, parts, peer, body).await,
            };
            (route.name.as_str(), r)
        }
    };
    let response = match result {
        Ok(r) => r,
        Err(p) => {
            if !p.counted {
                counter!("idemgate_requests_total", "route" => route_name.to_owned(), "outcome" => p.code.as_str())
                    .increment(1);
            }
            telemetry::failed(p.code.as_str(), p.status >= 500);
            p.into_response_with::<Full<Bytes>>().map(Either::Left)
        }
    };
    let status = response.status().as_u16();
    telemetry::note(|| {
        vec![KeyValue::new(
            "http.response.status_code",
            i64::from(status),
        )]
    });
    response
}

/// A write as far as the replay cache: what the rest of its way needs, or its answer.
enum Prepared {
    Replayed(Response<ProxyBody>),
    Claim(Write),
}

/// A write past the replay cache, to be claimed: what its claim and its forwarding need from the
/// request besides its parts.
struct Write {
    scope: String,
    key: String,
    fingerprint: String,
    /// The fingerprint without the target, for entries claimed before it counted (see
    /// `ClaimRequest::legacy_fingerprint`).
    legacy_fingerprint: Option<String>,
    /// The path and query, secret parameters left out.
    target: String,
    body: Bytes,
    subjects: Vec<(String, String)>,
    dup_fp: Option<String>,
    /// The approval its route's policy asks of this call.
    approval: Option<idemgate_ledger::ApprovalAsk>,
}

impl Engine {
    /// A write. Its body is read, its key and fingerprint made and the replay cache asked on the
    /// connection's task: nothing is written until then, so a client that goes away leaves
    /// nothing behind, and a replay (the commonest write under retries) costs no task of its own.
    /// From its claim on, it runs on a task of its own ([`Engine::to_the_end`]).
    async fn write(
        self: &Arc<Self>,
        route_at: usize,
        parts: axum::http::request::Parts,
        peer: SocketAddr,
        body: Incoming,
    ) -> Answer {
        let req = &self.req(route_at, &parts, peer);
        let body = self.body(req, body).await?;
        let w = match self.prepare_write(req, body).await? {
            Prepared::Replayed(r) => return Ok(r),
            Prepared::Claim(w) => w,
        };
        let e = Arc::clone(self);
        self.to_the_end(async move {
            let req = &e.req(route_at, &parts, peer);
            e.claim_write(req, w).await
        })
        .await
    }

    /// A write's key and fingerprint, and its answer when the replay cache holds it.
    async fn prepare_write(&self, req: &Req<'_>, body: Bytes) -> Result<Prepared, Problem> {
        let (route, parts) = (req.route, req.parts);
        let json = declared_json(&parts.headers, &body)?;
        let scope = keys::scope(route, &parts.headers)?;
        let key = keys::extract_parsed(route, &scope, &parts.headers, &body, json.as_ref())?;
        telemetry::keyed(&scope, &key);
        let fp_headers: Vec<(&str, &str)> = route
            .fingerprint_headers
            .iter()
            .filter_map(|n| {
                parts
                    .headers
                    .get(n.as_str())
                    .and_then(|v| v.to_str().ok())
                    .map(|v| (n.as_str(), v))
            })
            .collect();
        let mut fingerprint = canon::fingerprint_parsed(
            parts.method.as_str(),
            &route.name,
            &fp_headers,
            &body,
            json.as_ref(),
        );
        // Under a route's path, a longer path or a query names another operation
        // (`/v1/charges/ch_1/refund`, `?dry_run=true`): the fingerprint covers it. Secret query
        // parameters (credentials) are not part of the operation, and are never stored.
        let target = without_secret_params(
            parts.uri.path_and_query().map_or("/", |p| p.as_str()),
            &route.secret_query,
        );
        let (path, query) = match target.split_once('?') {
            Some((path, query)) => (path, Some(query).filter(|q| !q.is_empty())),
            None => (target.as_ref(), None),
        };
        let legacy_fingerprint = (path != route.path || query.is_some()).then(|| {
            let target = canon::with_target(&fingerprint, path, query);
            std::mem::replace(&mut fingerprint, target)
        });
        // The route's business terms read the body as JSON even when it was not declared so.
        let business =
            !route.subjects.is_empty() || route.duplicate_on.is_some() || route.approval.is_some();
        let parsed = match (&json, business) {
            (None, true) => canon::parse_json(&body).ok(),
            _ => None,
        };
        let json = json.as_ref().or(parsed.as_ref());
        let subjects =
            crate::business::subjects(&route.subjects, route.money.as_ref(), &parts.headers, json);
        let dup_fp = route.duplicate_on.as_ref().map(|on| {
            crate::business::dup_fp(&route.name, &scope, route.duplicate_any_scope, on, json)
        });
        let approval = crate::approval::ask(route.approval.as_ref(), json, &subjects);
        if let Some(guard) = &route.loop_guard {
            let what = dup_fp.as_deref().unwrap_or(&fingerprint);
            self.guard_loop(req, None, &scope, &key, what, guard)
                .await?;
        }
        if let Some((_, response)) =
            self.store
                .cached_replay(&route.name, &scope, &key, &fingerprint, now_millis())
        {
            req.metrics.replayed.increment(1);
            req.metrics.replays.increment(1);
            telemetry::outcome("replayed");
            return Ok(Prepared::Replayed(respond(
                response,
                Some(&key),
                true,
                None,
            )));
        }
        Ok(Prepared::Claim(Write {
            scope,
            key,
            fingerprint,
            legacy_fingerprint,
            target: target.into_owned(),
            body,
            subjects,
            dup_fp,
            approval,
        }))
    }

    /// A write past the replay cache: claimed, then forwarded and its outcome recorded, or
    /// answered as its claim says (a replay, a collision, in flight, …).
    async fn claim_write(&self, req: &Req<'_>, w: Write) -> Answer {
        let (route, parts) = (req.route, req.parts);
        let Write {
            scope,
            key,
            fingerprint,
            legacy_fingerprint,
            target,
            body,
            subjects,
            dup_fp,
            approval,
        } = w;
        // Past the replay cache: a replay answered there sends nothing upstream.
        let upstream_key = keys::upstream_key(route, &scope, &key);
        // Built afresh for each try (a wait for an in-flight key tries again), so the first try,
        // nearly always the only one, moves it into the ledger without a copy of the body.
        let claim = |at: Millis| ClaimRequest {
            route: route.name.clone(),
            scope: scope.clone(),
            key: key.clone(),
            fingerprint: fingerprint.clone(),
            legacy_fingerprint: legacy_fingerprint.clone(),
            effect: route.effect,
            request: Engine::stored_request(
                route,
                parts,
                &target,
                &body,
                (route.forward_key && upstream_key != key).then_some(upstream_key.as_ref()),
            ),
            owner: self.owner.clone(),
            lease_ms: route.lease.as_millis() as i64,
            ttl_ms: route.ttl.as_millis() as i64,
            reject_duplicates_within_ms: route
                .reject_duplicates
                .then_some(self.cfg.duplicate_window.as_millis() as i64),
            at,
            tool: None,
            subjects: subjects.clone(),
            dup_fp: dup_fp.clone(),
            approval: approval.clone(),
        };
        let claimed = self
            .claim_approved(
                (route, &scope, &key, &fingerprint),
                &claim,
                route.approval.as_ref(),
                |id, hold| self.wait_for_decision(id, hold),
            )
            .await?;
        match claimed {
            Claimed::Run {
                entry_id,
                attempt,
                landing: _landing,
            } => {
                self.execute(req, &key, &upstream_key, body, entry_id, attempt)
                    .await
            }
            // Still held after its wait: it is told to ask again.
            Claimed::Settled(ClaimOutcome::AwaitingApproval {
                entry_id,
                expires_at,
                ..
            }) => Ok(crate::approval::pending(entry_id, expires_at, &key)),
            // Its run counted it as executed; its answer is its own, so not marked replayed.
            Claimed::Approved(response) => {
                telemetry::outcome("executed");
                Ok(respond(response, Some(&key), false, None))
            }
            Claimed::Settled(settled) => answer_settled(req, &key, settled),
        }
    }

    /// Forwards a claimed request, retrying what was not executed, and records the outcome. The
    /// upstream is sent `upstream_key` ([`keys::upstream_key`]); the client gets its `key` back.
    async fn execute(
        &self,
        req: &Req<'_>,
        key: &str,
        upstream_key: &str,
        body: Bytes,
        entry_id: i64,
        first_attempt: i64,
    ) -> Answer {
        let (route, parts) = (req.route, req.parts);
        let pq = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let headers = self.forward_headers(req, Some(upstream_key));
        let uri = match forward::upstream_uri(&route.upstream, pq) {
            Ok(u) => u,
            Err(e) => {
                let rep = self.report(entry_id, format!("bad upstream uri: {e}"));
                self.settle(Outcome::Release(rep)).await?;
                return Err(Problem::new(Code::BadRequest, e));
            }
        };
        let call = ClaimedCall {
            entry_id,
            first_attempt,
            effect: route.effect,
            via: crate::drive::Via::Http,
            method: &parts.method,
            uri,
            headers: &headers,
            body,
        };
        let r = drive(self, route, call).await?;
        Ok(respond_upstream(r, Some(key), None))
    }
}

/// The answer to a claim the ledger settled without this request running: a replay, or why it
/// will not run (a reused key, a held or failed entry, a probable duplicate).
fn answer_settled(req: &Req<'_>, key: &str, outcome: ClaimOutcome) -> Answer {
    settled(req.metrics, outcome).map(|r| respond(r, Some(key), true, None))
}
