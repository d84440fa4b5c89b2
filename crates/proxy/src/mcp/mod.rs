//! MCP gateway mode: a route with `protocol = "mcp"` is an MCP server's Streamable HTTP endpoint.
//! Every message passes through as it is, streamed, with its headers (sessions, protocol version,
//! credentials), except a `tools/call` of a tool that is not a read: that is the operation made to
//! happen once. An MCP client sends no idempotency key and re-issues a call under a new JSON-RPC
//! `id`, so the call's key comes from the call itself (a header, `params.idempotencyKey`, its
//! `_meta`, a configured argument) or is derived from its scope, tool and canonical arguments; its
//! fingerprint covers the tool and the arguments. The call is claimed, forwarded, its response
//! recorded, and a retry is given that response under the retry's own `id`. Errors are JSON-RPC
//! errors ([`jsonrpc`] has the codes).

pub(crate) mod attempt;
pub(crate) mod calls;
mod claim;
pub mod jsonrpc;
pub(crate) mod sse;
pub(crate) mod tools;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::http::{request::Parts, Method};
use bytes::Bytes;
use hyper::body::Incoming;
use idemgate_ledger::{canon, now_millis, ClaimRequest, Effect, ResponseRecord, ToolsListed};
use metrics::counter;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

pub(crate) use attempt::{McpCall, Sink, Via};
use jsonrpc::{Accept, Call, Message};
pub use sse::EventBody;
pub use tools::{from_annotations, Source, Tools};

use crate::config::Route;
use crate::engine::{Answer, Engine, Req};
use crate::forward::{self, ReadAnswer};
use crate::keys;
use crate::problem::{Code, Problem};
use crate::respond::{respond, respond_upstream, response};
use crate::telemetry;

/// How long a passed-through stream (the server's GET stream, a long answer) may stay quiet
/// before it is cut: such streams idle by nature, and their clients reconnect.
const STREAM_IDLE: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// A `tools/call` as far as its key: what its claim and its forwarding need.
struct Prepared {
    call: Call,
    effect: Effect,
    scope: String,
    key: String,
    /// The key the upstream is sent.
    upstream_key: String,
    fingerprint: String,
    accept: Accept,
    subjects: Vec<(String, String)>,
    dup_fp: Option<String>,
}

impl Engine {
    /// A request on an MCP route.
    pub(crate) async fn mcp(
        self: &Arc<Self>,
        route_at: usize,
        parts: Parts,
        peer: SocketAddr,
        body: Incoming,
    ) -> Answer {
        let req = &self.req(route_at, &parts, peer);
        let session = session_of(&parts);
        if parts.method == Method::DELETE
            && !session.is_empty()
            && self.mcp_calls.in_session(&session)
        {
            return Ok(self.end_session_later(route_at, parts.clone(), peer, session));
        }
        if parts.method != Method::POST {
            return self.pass(req, Bytes::new()).await;
        }
        let accept = Accept::of(&parts.headers);
        let body = match self.body(req, body).await {
            Ok(b) => b,
            Err(p) => return Ok(refused(req, &Value::Null, &p, accept, p.status)),
        };
        match jsonrpc::classify(&body) {
            Message::Refused {
                id,
                code,
                message,
                status,
            } => {
                counter!("idemgate_requests_total", "route" => req.route.name.clone(), "outcome" => "bad-message").increment(1);
                let m = jsonrpc::error_message(&id, code, &message, None);
                Ok(jsonrpc::answer(m, Accept::Json, status))
            }
            Message::ToolsList(trace) => {
                telemetry::mcp("tools/list", None, &trace, &parts);
                self.list(req, route_at, body).await
            }
            // A call idemgate forwarded runs to its end, so that a retry finds its outcome: the
            // client's cancel of it is taken here, not passed on.
            Message::Cancelled { request_id }
                if self.mcp_calls.running(&session_of(&parts), &request_id) =>
            {
                counter!("idemgate_mcp_cancels_held_total", "route" => req.route.name.clone())
                    .increment(1);
                Ok(empty(202))
            }
            Message::Cancelled { .. } => self.pass(req, body).await,
            Message::Other => self.pass(req, body).await,
            Message::ToolsCall(call) => {
                telemetry::mcp(
                    "tools/call",
                    Some((&call.id, &call.name)),
                    &call.trace,
                    &parts,
                );
                let effect = self.tool_effect(route_at, req.route, &call.name).await;
                if effect == Effect::Read {
                    return self.pass(req, body).await;
                }
                let id = call.id.clone();
                match self
                    .tools_call(route_at, parts.clone(), peer, body, call, effect)
                    .await
                {
                    Ok(r) => Ok(r),
                    Err(p) => Ok(refused(req, &id, &p, accept, 200)),
                }
            }
        }
    }

    /// A message passed through: sent as it came (its headers too, hop-by-hop ones aside), its
    /// answer streamed back as it comes.
    async fn pass(&self, req: &Req<'_>, body: Bytes) -> Answer {
        let answer = self.send_on(req, body, false).await?;
        Ok(relay(answer))
    }

    /// Sends a message on to the upstream as it came; its answer, whole when `whole` asks and it
    /// fits what idemgate keeps, else streamed.
    async fn send_on(
        &self,
        req: &Req<'_>,
        body: Bytes,
        whole: bool,
    ) -> Result<ReadAnswer, Problem> {
        let (route, parts) = (req.route, req.parts);
        let pq = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let uri = forward::upstream_uri(&route.upstream, pq)
            .map_err(|e| Problem::new(Code::BadRequest, e))?;
        let headers = self.forward_headers(req, None);
        let out = forward::Outgoing {
            method: &parts.method,
            uri,
            headers: &headers,
            body,
            timeout: route.timeout,
        };
        req.metrics.forwarded.increment(1);
        forward::read_idle(&self.client, out, whole, STREAM_IDLE)
            .await
            .map_err(Problem::from)
    }

    /// A client ends a session (`DELETE`) while calls of it run: the server would cancel them, so
    /// the end is passed on once they have ended, and the client is answered now.
    fn end_session_later(
        self: &Arc<Self>,
        route_at: usize,
        parts: Parts,
        peer: SocketAddr,
        session: String,
    ) -> axum::http::Response<crate::engine::ProxyBody> {
        let e = Arc::clone(self);
        self.requests.spawn(async move {
            let route = &e.cfg.routes[route_at];
            let until = tokio::time::Instant::now() + route.timeout + route.lease;
            while e.mcp_calls.in_session(&session) && tokio::time::Instant::now() < until {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            let req = &e.req(route_at, &parts, peer);
            if let Err(p) = e.pass(req, Bytes::new()).await {
                tracing::warn!(route = %route.name, error = %p.detail, "could not end an MCP session after its calls");
            }
        });
        counter!("idemgate_mcp_session_ends_deferred_total", "route" => self.cfg.routes[route_at].name.clone())
            .increment(1);
        empty(200)
    }

    /// A `tools/list`: passed through, and its answer read for each tool's annotations (unless
    /// it is too long to keep, when it is streamed on unread).
    async fn list(&self, req: &Req<'_>, route_at: usize, body: Bytes) -> Answer {
        let r = match self.send_on(req, body, true).await? {
            ReadAnswer::Whole(r) => r,
            streamed => return Ok(relay(streamed)),
        };
        let stream = r
            .headers
            .iter()
            .any(|(n, v)| n == "content-type" && v.starts_with("text/event-stream"));
        let messages: Vec<Value> = if stream {
            sse::events(&r.body)
                .into_iter()
                .filter_map(|e| serde_json::from_str(e.data.as_deref()?).ok())
                .collect()
        } else {
            serde_json::from_slice(&r.body).into_iter().collect()
        };
        let mut learnt = Vec::new();
        for m in &messages {
            if let Some(result) = m.get("result") {
                learnt.extend(self.tools[route_at].learn(result));
            }
        }
        if !learnt.is_empty() {
            // Stored before the list is answered, so a call the agent makes next through any
            // instance finds it; a ledger that cannot take it leaves this instance's knowledge.
            let listed = ToolsListed {
                route: req.route.name.clone(),
                upstream: req.route.upstream.to_string(),
                tools: learnt,
                at: now_millis(),
            };
            if let Err(e) = self.store.note_tools(listed).recv().await {
                tracing::warn!(error = %e, route = %req.route.name, "the listed tools could not be stored");
            }
        }
        Ok(respond_upstream(r, None, None))
    }

    /// A tool's effect: what this instance knows while it is fresh, else what the ledger says an
    /// instance last learnt (or, when it says nothing, what this one knew, if anything).
    async fn tool_effect(&self, route_at: usize, route: &Route, name: &str) -> Effect {
        let tools = &self.tools[route_at];
        let (effect, source) = tools.effect(route, name);
        if matches!(source, Source::Config | Source::Annotations) {
            return effect;
        }
        let store = self.store.clone();
        let (r, u, n) = (
            route.name.clone(),
            route.upstream.to_string(),
            name.to_owned(),
        );
        match tokio::task::spawn_blocking(move || store.tool_effect(&r, &u, &n)).await {
            Ok(Ok(Some(e))) => {
                tools.remember(name, e);
                e
            }
            Ok(Ok(None)) => {
                if source == Source::Stale {
                    tools.remember(name, effect);
                }
                effect
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, route = %route.name, tool = name, "the tools' effects could not be read");
                effect
            }
            Err(_) => effect,
        }
    }

    /// A non-read `tools/call`: its key and fingerprint made, then answered from the replay
    /// cache, or claimed and run on a task of its own (which may stream the upstream's events to
    /// the client before its response) — to its end, whether the client stays or not.
    async fn tools_call(
        self: &Arc<Self>,
        route_at: usize,
        parts: Parts,
        peer: SocketAddr,
        body: Bytes,
        call: Call,
        effect: Effect,
    ) -> Result<axum::http::Response<crate::engine::ProxyBody>, Problem> {
        let req = &self.req(route_at, &parts, peer);
        let p = prepare(req.route, &parts, call, effect)?;
        telemetry::keyed(&p.scope, &p.key);
        let guard = req
            .route
            .tools
            .get(&p.call.name)
            .and_then(|t| t.loop_guard.as_ref())
            .or(req.route.loop_guard.as_ref());
        if let Some(guard) = guard {
            let what = p.dup_fp.as_deref().unwrap_or(&p.fingerprint);
            self.guard_loop(req, Some(&p.call.name), &p.scope, &p.key, what, guard)
                .await?;
        }
        let cached = self.store.cached_replay(
            &req.route.name,
            &p.scope,
            &p.key,
            &p.fingerprint,
            now_millis(),
        );
        if let Some((_, stored)) = cached {
            req.metrics.replayed.increment(1);
            req.metrics.replays.increment(1);
            telemetry::outcome("replayed");
            return Ok(recorded(stored, &p.call.id, p.accept, tagged(req), true));
        }
        let (sink, answer) = Sink::new();
        let e = Arc::clone(self);
        let task_parts = parts.clone();
        self.requests.spawn(telemetry::carry(async move {
            let req = &e.req(route_at, &task_parts, peer);
            e.run_call(req, p, body, &sink).await;
        }));
        Ok(answer.await.unwrap_or_else(|_| {
            let p = Problem::new(Code::Internal, "the call's task ended without an answer");
            jsonrpc::problem_answer(&Value::Null, &p, Accept::Json)
        }))
    }

    /// Claims a call and runs it, or answers as its claim says; the answer goes to `sink`.
    async fn run_call(&self, req: &Req<'_>, p: Prepared, body: Bytes, sink: &Sink) {
        let route = req.route;
        let stored = stored_call(req, &p);
        let policy = route
            .tools
            .get(&p.call.name)
            .and_then(|t| t.approval.as_ref());
        let approval = crate::approval::ask(policy, Some(&p.call.arguments), &p.subjects);
        let make = |at| ClaimRequest {
            route: route.name.clone(),
            scope: p.scope.clone(),
            key: p.key.clone(),
            fingerprint: p.fingerprint.clone(),
            legacy_fingerprint: None,
            effect: p.effect,
            request: stored.clone(),
            owner: self.owner.clone(),
            lease_ms: route.lease.as_millis() as i64,
            ttl_ms: route.ttl.as_millis() as i64,
            reject_duplicates_within_ms: route
                .reject_duplicates
                .then_some(self.cfg.duplicate_window.as_millis() as i64),
            at,
            tool: Some(p.call.name.clone()),
            subjects: p.subjects.clone(),
            dup_fp: p.dup_fp.clone(),
            approval: approval.clone(),
        };
        let id = &p.call.id;
        let _running = self.mcp_calls.start(&session_of(req.parts), id);
        let Some((entry_id, attempt, _landing)) =
            self.claim_call(req, &p, policy, &make, sink).await
        else {
            return;
        };
        let pq = req.parts.uri.path_and_query().map_or("/", |q| q.as_str());
        let headers = self.forward_headers(req, Some(&p.upstream_key));
        let uri = match forward::upstream_uri(&route.upstream, pq) {
            Ok(u) => u,
            Err(e) => {
                let rep = self.report(entry_id, format!("bad upstream uri: {e}"));
                let _ = self.settle(crate::settle::Outcome::Release(rep)).await;
                let p2 = Problem::new(Code::BadRequest, e);
                return sink.finish_now(jsonrpc::problem_answer(id, &p2, p.accept));
            }
        };
        let via = McpCall::Client {
            id: id.clone(),
            sink,
        };
        let call = crate::drive::ClaimedCall {
            entry_id,
            first_attempt: attempt,
            effect: p.effect,
            via: Via::Mcp(&via),
            method: &attempt::POST,
            uri,
            headers: &headers,
            body,
        };
        let (whole, message) = driven(crate::drive::drive(self, route, call).await, id, p.accept);
        sink.finish(whole, &message).await;
    }
}

/// Whether the request's client reads results that name their type ([`jsonrpc::tagged_results`]).
fn tagged(req: &Req<'_>) -> bool {
    jsonrpc::tagged_results(
        req.parts
            .headers
            .get("mcp-protocol-version")
            .and_then(|v| v.to_str().ok()),
    )
}

/// A call as the ledger keeps its request: a POST of the call without its `id`.
fn stored_call(req: &Req<'_>, p: &Prepared) -> idemgate_ledger::RequestRecord {
    let route = req.route;
    let target = idemgate_ledger::without_secret_params(
        req.parts.uri.path_and_query().map_or("/", |q| q.as_str()),
        &route.secret_query,
    )
    .into_owned();
    let mut stored = Engine::stored_request(
        route,
        req.parts,
        &target,
        &Bytes::from(p.call.stored_body()),
        (route.forward_key && p.upstream_key != p.key).then_some(p.upstream_key.as_str()),
    );
    stored.method = "POST".into();
    stored
}

/// A driven call's answer to the client, and the JSON-RPC message it holds.
fn driven(
    r: Result<crate::forward::UpstreamResponse, Problem>,
    id: &Value,
    accept: Accept,
) -> (axum::http::Response<crate::engine::ProxyBody>, Vec<u8>) {
    match r {
        // A JSON-RPC response (recorded, or one that says the call never ran).
        Ok(r) if r.status == 200 => {
            let m = r.body.to_vec();
            telemetry::tool_result(&m);
            (jsonrpc::answer(m.clone(), accept, 200), m)
        }
        // The transport's refusal, passed on as it came.
        Ok(r) => {
            let m = jsonrpc::upstream_refused(id, r.status);
            (respond_upstream(r, None, None), m)
        }
        Err(e) => (
            jsonrpc::problem_answer(id, &e, accept),
            jsonrpc::problem_message(id, &e),
        ),
    }
}

/// The client's session (`Mcp-Session-Id`), or "" for a client of the stateless revision.
fn session_of(parts: &Parts) -> String {
    parts
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

/// A problem answering request `id` on an MCP route, counted, as a JSON-RPC error with `status`.
fn refused(
    req: &Req<'_>,
    id: &Value,
    p: &Problem,
    accept: Accept,
    status: u16,
) -> axum::http::Response<crate::engine::ProxyBody> {
    counter!("idemgate_requests_total", "route" => req.route.name.clone(), "outcome" => p.code.as_str())
        .increment(1);
    let mut r = jsonrpc::problem_answer(id, p, accept);
    *r.status_mut() =
        axum::http::StatusCode::from_u16(status).unwrap_or(axum::http::StatusCode::OK);
    r
}

/// A stored response given out under the call's `id` (as it is, if it is not a JSON-RPC
/// message), marked `replayed` when it answers a retry.
fn recorded(
    stored: ResponseRecord,
    id: &Value,
    accept: Accept,
    tagged: bool,
    replayed: bool,
) -> axum::http::Response<crate::engine::ProxyBody> {
    match jsonrpc::for_client(&stored.body, id, Some(tagged)) {
        Some(m) => {
            let mut r = jsonrpc::answer(m, accept, 200);
            if replayed {
                r.headers_mut().insert(
                    "idempotent-replayed",
                    axum::http::HeaderValue::from_static("true"),
                );
            }
            r
        }
        None => respond(stored, None, replayed, None),
    }
}

/// An upstream's answer passed on: whole, or streamed as it comes.
fn relay(answer: ReadAnswer) -> axum::http::Response<crate::engine::ProxyBody> {
    match answer {
        ReadAnswer::Streamed {
            status,
            headers,
            body,
        } => response(
            status,
            &headers,
            http_body_util::Either::Right(http_body_util::Either::Left(body)),
            None,
            false,
            None,
        ),
        ReadAnswer::Whole(r) => respond_upstream(r, None, None),
    }
}

/// An answer with no body: a notification taken (202), a session's end (200).
fn empty(status: u16) -> axum::http::Response<crate::engine::ProxyBody> {
    let mut r = jsonrpc::answer(Vec::new(), Accept::Json, status);
    r.headers_mut().remove(axum::http::header::CONTENT_TYPE);
    r
}

/// A call's scope, key and fingerprint. The key, first found: the `Idempotency-Key` header (or
/// the route's key header), `params.idempotencyKey`, `params._meta["io.idemgate/idempotency-key"]`,
/// the tool's `key.arg`; else derived from the scope, route, tool and canonical arguments, which
/// is what makes a retry under a fresh `id` the same entry.
fn prepare(route: &Route, parts: &Parts, call: Call, effect: Effect) -> Result<Prepared, Problem> {
    let scope = keys::scope(route, &parts.headers)?;
    let header = match &route.key {
        Some(crate::config::KeySource::Header(h)) => keys::header_key(&parts.headers, h)?,
        _ => None,
    };
    let text = |v: &Value, what: &str| match v {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        _ => Err(Problem::new(
            Code::InvalidKey,
            format!("{what} must be a string or a number"),
        )),
    };
    let arg = route
        .tools
        .get(&call.name)
        .and_then(|t| t.key_arg.as_deref())
        .and_then(|ptr| Some((ptr, call.arguments.pointer(ptr)?)));
    let given = match (header, &call.params_key, &call.meta_key, arg) {
        (Some(h), ..) => Some(h),
        (None, Some(k), ..) => Some(text(k, "params.idempotencyKey")?),
        (None, None, Some(k), _) => Some(text(k, "params._meta[\"io.idemgate/idempotency-key\"]")?),
        (None, None, None, Some((ptr, v))) => Some(text(v, &format!("the argument {ptr}"))?),
        _ => None,
    };
    let (key, upstream_key) = match given {
        Some(k) => {
            keys::check_key(&k)?;
            let up = keys::upstream_key(route, &scope, &k).into_owned();
            (k, up)
        }
        None => {
            let k = derived_key(&scope, &route.name, &call.name, &call.arguments);
            (k.clone(), k)
        }
    };
    let fingerprint = fingerprint(&route.name, &call.name, &call.arguments);
    // The tool's business terms, else the route's, read from the call's arguments.
    let subjects =
        crate::business::tool_subjects(route, &call.name, &parts.headers, &call.arguments);
    let dup_fp = crate::business::tool_dup_fp(route, &call.name, &scope, &call.arguments);
    Ok(Prepared {
        subjects,
        dup_fp,
        effect,
        scope,
        key,
        upstream_key,
        fingerprint,
        accept: Accept::of(&parts.headers),
        call,
    })
}

/// The key of a call that names none: one per scope, route, tool and canonical arguments (it
/// covers its scope, so it is sent upstream as it is).
pub fn derived_key(scope: &str, route: &str, tool: &str, arguments: &Value) -> String {
    let mut h = Sha256::new();
    h.update(b"idemgate-mcp-key-v1\n");
    for part in [scope, route, tool] {
        h.update(part.as_bytes());
        h.update(b"\n");
    }
    canon::write_canonical(arguments, &mut h);
    format!("mcp:{}", hex::encode(h.finalize()))
}

/// A call's fingerprint: its route, its tool and its canonical arguments (never its `id` or
/// `_meta`, which differ on every re-issue).
pub fn fingerprint(route: &str, tool: &str, arguments: &Value) -> String {
    let v = json!({"name": tool, "arguments": arguments});
    let body = canon::canonical_string(&v);
    canon::fingerprint_parsed("TOOLS/CALL", route, &[], body.as_bytes(), Some(&v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_derived_key_and_a_fingerprint_see_the_arguments_not_their_spelling() {
        let a = json!({"amount": 4999, "customer": "cus_1"});
        let b: Value =
            serde_json::from_str(r#"{ "customer":"cus_1", "amount":4999 }"#).expect("json");
        assert_eq!(
            derived_key("", "tools", "charge", &a),
            derived_key("", "tools", "charge", &b)
        );
        assert_ne!(
            derived_key("", "tools", "charge", &a),
            derived_key("agent-2", "tools", "charge", &a),
            "scopes keep agents apart"
        );
        assert_ne!(
            derived_key("", "tools", "charge", &a),
            derived_key("", "tools", "refund", &a)
        );
        assert_eq!(
            fingerprint("tools", "charge", &a),
            fingerprint("tools", "charge", &b)
        );
        assert_ne!(
            fingerprint("tools", "charge", &a),
            fingerprint(
                "tools",
                "charge",
                &json!({"amount": 5000, "customer": "cus_1"})
            )
        );
        assert!(derived_key("", "tools", "charge", &a).len() <= keys::MAX_KEY_LEN);
    }
}
