//! Driving a claimed write upstream: attempts with backoff (or the upstream's `Retry-After`) while
//! the answer says the request was not executed, then the outcome recorded durably — completed,
//! released, or held as unknown — before anything is answered. The proxy path and an operator's
//! replay share it.

use std::time::Instant;

use axum::http::{HeaderMap, Method, Uri};
use bytes::Bytes;
use idemgate_ledger::{now_millis, CompleteRequest, Effect, LedgerError, Result};
use metrics::counter;

use crate::config::Route;
use crate::engine::{Engine, RouteMetrics};
use crate::forward::{self, Attempt, UpstreamResponse};
pub(crate) use crate::mcp::attempt::Via;
use crate::problem::{Code, Problem};
use crate::settle::Outcome;
use crate::telemetry;
use opentelemetry::trace::SpanKind;

/// A claimed entry's request, as the upstream gets it, and the attempt the entry is on.
pub(crate) struct ClaimedCall<'a> {
    pub(crate) entry_id: i64,
    pub(crate) first_attempt: i64,
    /// The call's effect: its route's, or on an MCP route its tool's.
    pub(crate) effect: Effect,
    /// How each attempt reaches the upstream.
    pub(crate) via: Via<'a>,
    pub(crate) method: &'a Method,
    pub(crate) uri: Uri,
    pub(crate) headers: &'a HeaderMap,
    pub(crate) body: Bytes,
}

/// Drives one claimed entry upstream until it is executed, definitely not executed (then released)
/// or of unknown outcome (then held), recording each step durably. Shared by the proxy path and the
/// operator's replay.
pub(crate) async fn drive(
    e: &Engine,
    route: &Route,
    call: ClaimedCall<'_>,
) -> Result<UpstreamResponse, Problem> {
    let ClaimedCall {
        entry_id,
        first_attempt,
        effect,
        via,
        method,
        uri,
        headers,
        body,
    } = call;
    let m = e.metrics_of(route);
    let (attempts, unknown_is_retryable) = retry_policy(route, effect);
    let mut attempt = first_attempt;
    let mut tries: u32 = 1;
    loop {
        let out = forward::Outgoing {
            method,
            uri: uri.clone(),
            headers,
            body: body.clone(),
            timeout: route.timeout,
        };
        let a = send(e, &m, &via, out, attempt).await;
        let (why, retry_after, class) = match a {
            Attempt::Executed(resp) => return record_executed(e, route, &m, entry_id, resp).await,
            Attempt::Refused(resp) => {
                telemetry::outcome("refused");
                // Nothing was done, and trying again would be refused again: the caller gets the
                // upstream's answer (its credentials or permissions are what to fix), and the key
                // is released (now, or once the ledger takes writes again), so that the same
                // request runs once the caller may make it, instead of replaying this refusal.
                e.settle(Outcome::Release(e.report(
                    entry_id,
                    format!("refused by the upstream ({})", resp.status),
                )))
                .await?;
                m.not_executed.increment(1);
                return Ok(resp);
            }
            Attempt::NotExecuted {
                why,
                retry_after,
                class,
            } => (why, retry_after, class),
            Attempt::Unknown { why, .. } if unknown_is_retryable => (why, None, "unknown"),
            Attempt::Unknown { why, timed_out } => {
                return Err(hold_unknown(e, route, &m, entry_id, tries, why, timed_out).await)
            }
        };
        // The upstream's Retry-After is waited out when the route waits that long; when it asks
        // for longer, the caller is told to wait instead.
        let wait = (tries < attempts)
            .then(|| forward::retry_wait(route.retry.base, route.retry.max, tries, retry_after))
            .flatten();
        if let Some(wait) = wait {
            counter!("idemgate_retries_total", "route" => route.name.clone(), "class" => class)
                .increment(1);
            tracing::debug!(route = %route.name, entry_id, attempts = tries, error = %why, ?wait, "not executed; trying again");
            let recorded = e
                .store
                .record_attempt(
                    e.report(entry_id, why.clone()),
                    attempt + 1,
                    route.lease.as_millis() as i64,
                )
                .recv()
                .await;
            // Tried again only once the ledger has the attempt; if it cannot take it, the key is
            // released (now, or once the ledger takes writes again) for the caller to retry.
            if recorded.is_ok() {
                attempt += 1;
                tokio::time::sleep(wait).await;
                tries += 1;
                continue;
            }
        }
        let not_run = NotRun {
            entry_id,
            tries,
            why,
            retry_after,
        };
        return Err(release(e, route, &m, not_run).await?);
    }
}

/// An entry definitely not executed after its last attempt.
struct NotRun {
    entry_id: i64,
    tries: u32,
    why: String,
    retry_after: Option<u64>,
}

/// A call not executed upstream after its attempts: its key released (now, or once the ledger
/// takes writes again), and the answer saying it may be retried.
async fn release(
    e: &Engine,
    route: &Route,
    m: &RouteMetrics,
    n: NotRun,
) -> Result<Problem, Problem> {
    let NotRun {
        entry_id,
        tries,
        why,
        retry_after,
    } = n;
    let released = e
        .settle(Outcome::Release(e.report(
            entry_id,
            format!("not executed after {tries} attempt(s): {why}"),
        )))
        .await?;
    m.not_executed.increment(1);
    tracing::warn!(
        route = %route.name,
        entry_id,
        attempts = tries,
        error = %why,
        "upstream unavailable: not executed, the key is released"
    );
    let detail = if released {
        format!("{why}; the request was not executed and may be retried with the same key")
    } else {
        format!("{why}; the request was not executed and may be retried with the same key once the ledger, which cannot take writes right now, records that (until then a retry gets 409 or 503)")
    };
    Ok(Problem::new(Code::UpstreamUnavailable, detail)
        .retry_after(retry_after.unwrap_or(1))
        .with("entry_id", entry_id)
        .counted())
}

/// One attempt upstream (the entry's attempt number `attempt`), timed.
async fn send(
    e: &Engine,
    m: &RouteMetrics,
    via: &Via<'_>,
    out: forward::Outgoing<'_>,
    attempt: i64,
) -> Attempt {
    let started = Instant::now();
    let step = telemetry::step("upstream", SpanKind::Client);
    let method = out.method;
    let a = match via {
        Via::Http => forward::attempt(&e.client, out).await,
        Via::Mcp(x) => x.attempt(&e.client, out).await,
    };
    m.upstream_seconds.record(started.elapsed().as_secs_f64());
    step.end(|| telemetry::attempted(method.as_str(), attempt, &a));
    a
}

/// How many attempts a call of `effect` on `route` gets, and whether an unknown outcome may be
/// tried again (the upstream dedupes, or the call is idempotent). Destructive calls are never
/// retried automatically.
fn retry_policy(route: &Route, effect: Effect) -> (u32, bool) {
    let attempts = match effect {
        Effect::Destructive => 1,
        _ => route.retry.attempts,
    };
    (
        attempts,
        route.upstream_dedupes || effect == Effect::Idempotent,
    )
}

/// An executed attempt: its response recorded as the entry's outcome, and given out once recorded.
async fn record_executed(
    e: &Engine,
    route: &Route,
    m: &RouteMetrics,
    entry_id: i64,
    resp: UpstreamResponse,
) -> Result<UpstreamResponse, Problem> {
    let completion = |at| CompleteRequest {
        entry_id,
        owner: e.owner.clone(),
        // The ledger's copy of the body; the client's is the upstream's bytes.
        response: resp.record(),
        ttl_ms: route.ttl.as_millis() as i64,
        duplicate_window_ms: Some(e.cfg.duplicate_window.as_millis() as i64),
        at,
    };
    let step = telemetry::step("ledger commit", SpanKind::Internal);
    let done = e.store.complete(completion(now_millis())).recv().await;
    step.end(|| telemetry::committed("complete", done.as_ref().err()));
    match done {
            Ok(c) => {
                m.executed.increment(1);
                telemetry::outcome("executed");
                if c.duplicate_of.is_some() {
                    m.duplicate_suspects.increment(1);
                }
                Ok(resp)
            }
            // An operator decided the entry while it was in flight: the ledger's decision
            // stands, and this response was not recorded, so it is not given out either.
            Err(LedgerError::LeaseLost(_) | LedgerError::InvalidTransition { .. }) => Err(Problem::new(Code::ResolvedMeanwhile, "an operator resolved this key while the request was in flight; retry to get the recorded outcome")
            .with("entry_id", entry_id)),
            // The effect happened and the ledger could not record it (a full disk, a
            // lost database): the entry stays pending under this lease, so it is never run
            // again. The response is not given out, since a retry could not be given it
            // again if this process ended before the ledger took it. It is kept, to be
            // recorded once the ledger takes writes again (then retries replay it), or,
            // if it cannot be kept, the entry is stuck for an operator once the lease
            // passes.
            Err(err) => {
                let kept = e.unsettled.keep(Outcome::Complete(completion(now_millis())), &err);
                let detail = if kept {
                    format!("the upstream executed the request (status {}), but the ledger could not record its outcome yet ({err}); it will not be run again, and this process records the outcome as soon as the ledger takes writes: a retry with the same key gets 409 (or 503) until then, and this response after", resp.status)
                } else {
                    format!("the upstream executed the request (status {}), but the ledger could not record its outcome ({err}); it will not be run again: retries get 409 until an operator resolves the entry", resp.status)
                };
                let p = Problem::new(Code::OutcomeUnrecorded, detail)
                    .with("entry_id", entry_id)
                    .with("upstream_status", resp.status);
                Err(if kept { p.retry_after(1) } else { p })
            }
        }
}

/// An attempt of unknown outcome: the entry held for an operator, and the answer saying so.
async fn hold_unknown(
    e: &Engine,
    route: &Route,
    m: &RouteMetrics,
    entry_id: i64,
    tries: u32,
    why: String,
    timed_out: bool,
) -> Problem {
    // Even unrecorded (kept to record later, or not: `settle` logs it), the entry is
    // held: pending under this lease, and stuck for an operator once it passes. The
    // answer tells the caller what happened upstream.
    let _ = e
        .settle(Outcome::Unknown(e.report(entry_id, why.clone())))
        .await;
    m.unknown.increment(1);
    // For the people on call: the ledger logs it too, but this is where they look
    // first. Names only; never a header value or a body.
    tracing::warn!(
        route = %route.name,
        entry_id,
        attempts = tries,
        error = %why,
        "outcome unknown: the entry is held for an operator"
    );
    Problem::new(Code::OutcomeUnknown, format!("{why}; the request may have been executed upstream, so it will not be retried automatically — an operator must resolve it")).with_status(if timed_out { 504 } else { 502 })
        .with("entry_id", entry_id)
        .counted()
}
