//! The proxy's request path. For a write route:
//!
//! 1. match the route, read the body within `max_body`, check the signature;
//! 2. take the scope and the key, fingerprint the request;
//! 3. **claim** `(route, scope, key)` in the ledger — durable before anything is forwarded;
//! 4. map the claim's answer: new → forward; completed → replay; other fingerprint → 422; in flight
//!    → 409 (or wait); stuck → 409;
//! 5. forward with retries for outcomes that were *not executed*, classify the last attempt, and
//!    make the outcome durable (complete / release / outcome unknown) **before** answering.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::http::{header, HeaderMap, HeaderValue, Method, Request, Response};
use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use idemgate_ledger::{
    canon, now_millis, without_secret_params, ClaimOutcome, ClaimRequest, Effect, LedgerError,
    Millis, OwnerReport, RequestRecord, Result, Storage,
};
use metrics::{counter, Histogram};
use opentelemetry::trace::SpanKind;
use opentelemetry::KeyValue;

use crate::config::{Config, Protocol, Route};
use crate::flights::Flights;
use crate::forward::{self, HttpClient};
use crate::keys;
use crate::problem::{Code, Problem};
use crate::read_body;
use crate::read_cache::ReadCache;
use crate::request_checks::{
    check_headers, declared_json, dot_segment, has_dot_segment, route_path,
};
use crate::settle::{Outcome, Unsettled};
use crate::signature;
use crate::telemetry;

pub(crate) use crate::claim::{settled, Claimed};
pub(crate) use crate::drive::{drive, ClaimedCall};
pub use crate::request_checks::{MAX_HEADERS, MAX_HEADER_BYTES};
pub use crate::respond::{respond, respond_upstream, ProxyBody};
pub(crate) use metrics_of_route::RouteMetrics;

mod make;
mod metrics_of_route;
mod read;

/// Where a stored request keeps the key its upstream was sent (`forward_key`) when that is not the
/// entry's own key ([`keys::upstream_key`]: a scoped key). Never sent under this name: a replay
/// sends it as `Idempotency-Key`. An entry stored without it was sent its own key.
pub const UPSTREAM_KEY_HEADER: &str = "idemgate-upstream-key";

/// Everything the request path needs; shared by all connections.
#[derive(Debug)]
pub struct Engine {
    pub cfg: Arc<Config>,
    pub store: Arc<dyn Storage>,
    pub client: HttpClient,
    /// This instance's lease-owner id.
    pub owner: String,
    read_cache: ReadCache,
    pub(crate) flights: Arc<Flights>,
    /// Per route, in the configuration's order: an MCP route's tools as last listed.
    pub(crate) tools: Vec<Arc<crate::mcp::Tools>>,
    /// The MCP calls running for clients, whose cancels are held back.
    pub(crate) mcp_calls: Arc<crate::mcp::Calls>,
    /// The loop guards' counts.
    pub(crate) loops: Arc<crate::business::LoopGuards>,
    /// Outcomes known here that the ledger could not take yet.
    pub unsettled: Arc<Unsettled>,
    /// Per route, in the configuration's order.
    metrics: Vec<RouteMetrics>,
    pub(crate) claim_seconds: Histogram,
    /// Where spans of proxied calls go, when `[telemetry]` is configured.
    pub tracing: Option<Arc<crate::telemetry::Tracing>>,
    /// The write requests being served, each on a task of its own: a client that goes away does
    /// not cancel its request, and shutdown waits for them.
    pub requests: tokio_util::task::TaskTracker,
}

pub(crate) type Answer = Result<Response<ProxyBody>, Problem>;

impl Engine {
    /// The first route that serves the method and whose path is a prefix of the request path at a
    /// segment boundary.
    fn route_at(&self, method: &Method, path: &str) -> Option<usize> {
        self.cfg
            .routes
            .iter()
            .position(|r| r.serves(method.as_str()) && r.takes(path))
    }

    /// Runs `work` on a task of its own ([`Engine::requests`]) and waits for it: if the caller
    /// goes away (its future dropped with its connection), `work` still runs to the end.
    pub async fn to_the_end<T: Send + 'static>(
        &self,
        work: impl std::future::Future<Output = Result<T, Problem>> + Send + 'static,
    ) -> Result<T, Problem> {
        self.requests
            .spawn(telemetry::carry(work))
            .await
            .map_err(|j| Problem::new(Code::Internal, j.to_string()))?
    }

    /// The problem for a request no route takes: `405` with `Allow` when routes take its path
    /// with other methods, else `404`.
    fn no_route(&self, method: &Method, path: &str) -> Problem {
        let mut allow: Vec<&str> = Vec::new();
        for r in self.cfg.routes.iter().filter(|r| r.takes(path)) {
            let head = r.serves("HEAD").then_some("HEAD");
            for m in std::iter::once(r.method.as_str()).chain(head) {
                if !allow.contains(&m) {
                    allow.push(m);
                }
            }
        }
        if allow.is_empty() {
            return Problem::new(Code::UnknownRoute, format!("no route for {method} {path}"));
        }
        let allow = allow.join(", ");
        let p = Problem::new(
            Code::MethodNotAllowed,
            format!("no route for {method} {path}; its routes take {allow}"),
        );
        match HeaderValue::from_str(&allow) {
            Ok(v) => p.header(header::ALLOW, v),
            Err(_) => p,
        }
    }

    /// `route`'s metric handles (registered now if `route` is not one of this configuration's).
    pub(crate) fn metrics_of(&self, route: &Route) -> std::borrow::Cow<'_, RouteMetrics> {
        match self
            .cfg
            .routes
            .iter()
            .position(|r| std::ptr::eq(r, route) || r.name == route.name)
        {
            Some(i) => std::borrow::Cow::Borrowed(&self.metrics[i]),
            None => std::borrow::Cow::Owned(RouteMetrics::new(&route.name)),
        }
    }
}

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

/// One request on its route, as the request path passes it along.
pub(crate) struct Req<'a> {
    pub(crate) route: &'a Route,
    pub(crate) metrics: &'a RouteMetrics,
    pub(crate) parts: &'a axum::http::request::Parts,
    pub(crate) peer: SocketAddr,
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
    pub(crate) fn req<'a>(
        &'a self,
        route_at: usize,
        parts: &'a axum::http::request::Parts,
        peer: SocketAddr,
    ) -> Req<'a> {
        Req {
            route: &self.cfg.routes[route_at],
            metrics: &self.metrics[route_at],
            parts,
            peer,
        }
    }

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

    /// A request's body, read whole within the route's limit and the body deadline, its signature
    /// checked.
    pub(crate) async fn body(&self, req: &Req<'_>, body: Incoming) -> Result<Bytes, Problem> {
        let (route, parts) = (req.route, req.parts);
        let body =
            read_body::read(body, &parts.headers, route.max_body, self.cfg.body_timeout).await?;
        if let Some(sig) = &route.signature {
            let h = parts
                .headers
                .get(sig.header.as_str())
                .and_then(|v| v.to_str().ok());
            signature::verify(sig, h, &body, now_millis() / 1000)?;
        }
        Ok(body)
    }

    /// Headers sent upstream: the client's minus hop-by-hop ones, with forwarding headers and,
    /// when the route says so, the idempotency key.
    pub(crate) fn forward_headers(&self, req: &Req<'_>, key: Option<&str>) -> HeaderMap {
        let route = req.route;
        let mut h = req.parts.headers.clone();
        forward::strip_hop_by_hop(&mut h);
        h.remove(header::CONTENT_LENGTH);
        // The client's `Expect: 100-continue` was this proxy's to answer, and was: by now the body
        // is read (or on its way). An upstream that does not take expectations answers it `417`,
        // which a write would have stored as its outcome.
        h.remove(header::EXPECT);
        let original_host = h.remove(header::HOST);
        if let Ok(v) = HeaderValue::from_str(&route.upstream.authority) {
            h.insert(header::HOST, v);
        }
        if let Some(host) = original_host {
            h.insert("x-forwarded-host", host);
        }
        h.insert("x-forwarded-proto", HeaderValue::from_static("http"));
        if let Some(a) = &route.upstream_auth {
            a.set_in(&mut h);
        }
        // The client's own hop appended to what came, all of it: a second `X-Forwarded-For`
        // line is the same list continued (RFC 9110 §5.3), which `insert` would drop.
        let mut xff = String::new();
        for prev in h
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
        {
            xff.push_str(prev);
            xff.push_str(", ");
        }
        let _ = write!(xff, "{}", req.peer.ip());
        if let Some(v) = forward::header_value(&xff) {
            h.insert("x-forwarded-for", v);
        }
        if let Some(k) = key {
            keys::send_key(route, &mut h, k);
        }
        if let Some(t) = telemetry::traceparent() {
            h.insert("traceparent", t);
        }
        h
    }

    /// The request as stored: method, `target` (its path and query without secret parameters),
    /// an allowlist of headers (never secrets), body; and the key the upstream is sent, as
    /// [`UPSTREAM_KEY_HEADER`], so that a replay or a reconcile probe uses the same one.
    pub(crate) fn stored_request(
        route: &Route,
        parts: &axum::http::request::Parts,
        target: &str,
        body: &Bytes,
        upstream_key: Option<&str>,
    ) -> RequestRecord {
        let mut keep: Vec<&str> = vec![
            "content-type",
            "accept",
            "user-agent",
            "x-request-id",
            "traceparent",
            "idempotency-key",
            "mcp-protocol-version",
        ];
        if let Some(crate::config::KeySource::Header(h)) = &route.key {
            keep.push(h);
        }
        if let Some(h) = &route.scope_header {
            keep.push(h);
        }
        keep.extend(route.fingerprint_headers.iter().map(String::as_str));
        let headers = parts
            .headers
            .iter()
            .filter(|(n, _)| {
                keep.contains(&n.as_str()) && !route.secret_headers.iter().any(|s| s == n.as_str())
            })
            .filter_map(|(n, v)| {
                v.to_str()
                    .ok()
                    .map(|v| (n.as_str().to_owned(), v.to_owned()))
            })
            .chain(upstream_key.map(|k| (UPSTREAM_KEY_HEADER.to_owned(), k.to_owned())))
            .collect();
        RequestRecord {
            method: parts.method.to_string(),
            path: target.to_owned(),
            headers,
            body: body.to_vec(),
        }
        .redacted()
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
        let subjects = crate::business::subjects(&route.subjects, &parts.headers, json);
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

    /// Records an outcome; if the ledger cannot take it now, keeps it to record later. `Ok(true)`
    /// once recorded, `Ok(false)` when kept; the ledger's error when it was refused for good.
    pub(crate) async fn settle(&self, o: Outcome) -> Result<bool, LedgerError> {
        let step = telemetry::step("ledger commit", SpanKind::Internal);
        let written = o.clone().write(&*self.store).await;
        step.end(|| telemetry::committed(o.name(), written.as_ref().err()));
        match written {
            Ok(()) => Ok(true),
            Err(e) if self.unsettled.keep(o, &e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    pub(crate) fn report(&self, entry_id: i64, error: String) -> OwnerReport {
        OwnerReport {
            entry_id,
            owner: self.owner.clone(),
            error,
            at: now_millis(),
        }
    }
}

/// The answer to a claim the ledger settled without this request running: a replay, or why it
/// will not run (a reused key, a held or failed entry, a probable duplicate).
fn answer_settled(req: &Req<'_>, key: &str, outcome: ClaimOutcome) -> Answer {
    settled(req.metrics, outcome).map(|r| respond(r, Some(key), true, None))
}

#[cfg(test)]
mod tests;
