//! Claiming a write's key, for HTTP and MCP writes alike: this process's map of flights first
//! (a duplicate of a request it drives is answered, or waits, without the ledger), then the
//! ledger; and what a claim the ledger settled means for the route's metrics and the client.

use std::sync::Arc;
use std::time::{Duration, Instant};

use idemgate_ledger::{now_millis, ApprovalEnd, ClaimOutcome, ClaimRequest, LedgerError, Millis};

use crate::config::{InFlight, Route};
use crate::engine::{Engine, RouteMetrics};
use crate::flights::{flight_key, Flight, Landing, Seen};
use crate::problem::{Code, Problem};
use crate::telemetry;
use opentelemetry::trace::SpanKind;
use opentelemetry::KeyValue;

/// The answer to a duplicate of a request still in flight.
pub(crate) fn in_flight(entry_id: i64, lease_expires_at: Millis) -> Problem {
    let secs = ((lease_expires_at - now_millis()).max(0) as u64).div_ceil(1000);
    Problem::new(
        Code::InFlight,
        "a request with this key is being processed; retry later",
    )
    .retry_after(secs.min(5))
    .with("entry_id", entry_id)
}

/// The final answer to a call whose approval was rejected or expired: it never runs.
pub(crate) fn not_approved(entry_id: i64, end: ApprovalEnd, reason: Option<String>) -> Problem {
    let p = match end {
        ApprovalEnd::Expired => Problem::new(
            Code::ApprovalExpired,
            "no operator decided on this call in time; it was not run and will not be",
        ),
        _ => Problem::new(
            Code::ApprovalRejected,
            format!(
                "an operator rejected this call; it was not run and will not be{}",
                reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            ),
        ),
    };
    p.with("entry_id", entry_id)
}

/// What a claim came to.
pub(crate) enum Claimed<'e> {
    /// The entry to run now, on its `attempt`; this process's map of flights holds its key until
    /// `landing` drops.
    Run {
        entry_id: i64,
        attempt: i64,
        landing: Landing<'e>,
    },
    /// The ledger's answer without running it: a replay, a collision, a held or failed entry, a
    /// probable duplicate.
    Settled(ClaimOutcome),
    /// The held call this request asked for, approved and run once while it waited: the
    /// recorded answer is the request's own, not a replay of another's.
    Approved(idemgate_ledger::ResponseRecord),
}

impl Engine {
    /// Claims `(route, scope, key)` for a request with `fingerprint` (`make` builds the claim for
    /// a time; a wait for an in-flight key claims again): the entry to run, held in this
    /// process's map of flights until [`Claimed::Run`]'s guard drops, or what the ledger
    /// settled. A duplicate of a request in flight is answered (or waited for) here.
    pub(crate) async fn claim(
        &self,
        route: &Route,
        scope: &str,
        key: &str,
        fingerprint: &str,
        make: impl Fn(Millis) -> ClaimRequest,
    ) -> Result<Claimed<'_>, Problem> {
        let deadline = Instant::now() + self.cfg.wait;
        let waits = self.cfg.in_flight == InFlight::Wait;
        let fk = flight_key(&route.name, scope, key);
        loop {
            // A duplicate of a request this process is driving: answered here, or woken when it
            // ends (the wait policy), without the ledger.
            if let Seen::InFlight {
                entry_id,
                lease_expires_at,
                ended,
            } = self.flights.seen(&fk, fingerprint, now_millis())
            {
                if waits && Instant::now() < deadline {
                    let _ = tokio::time::timeout_at(deadline.into(), ended).await;
                    continue;
                }
                return Err(in_flight(entry_id, lease_expires_at));
            }
            let started = Instant::now();
            let at = now_millis();
            let step = telemetry::step("ledger claim", SpanKind::Internal);
            let outcome = self.store.claim(make(at)).recv().await;
            step.end(|| match &outcome {
                Ok(o) => vec![KeyValue::new("idemgate.claim", outcome_label(o))],
                Err(e) => vec![KeyValue::new("error.type", e.code().as_str())],
            });
            let outcome = outcome.map_err(claim_failed)?;
            self.claim_seconds.record(started.elapsed().as_secs_f64());
            // Names only: keys and scopes are not secret, header values and bodies may be.
            tracing::debug!(route = %route.name, scope = %scope, key = %key, outcome = outcome_label(&outcome), "claim");
            return match outcome {
                ClaimOutcome::Claimed { entry_id, attempt } => {
                    telemetry::note(|| vec![KeyValue::new("idemgate.entry.id", entry_id)]);
                    let landing = self.flights.take_off(
                        fk,
                        Flight {
                            entry_id,
                            fingerprint: fingerprint.to_owned(),
                            // The ledger's own lease: the claim's time plus the lease.
                            lease_expires_at: at + route.lease.as_millis() as i64,
                            done: Arc::default(),
                        },
                    );
                    Ok(Claimed::Run {
                        entry_id,
                        attempt,
                        landing,
                    })
                }
                ClaimOutcome::InFlight {
                    entry_id,
                    lease_expires_at,
                } => {
                    // Held by another process (or this one's claim is just being answered): ask
                    // the ledger again shortly.
                    if waits && Instant::now() < deadline {
                        tokio::time::sleep(Duration::from_millis(25)).await;
                        continue;
                    }
                    Err(in_flight(entry_id, lease_expires_at))
                }
                settled => Ok(Claimed::Settled(settled)),
            };
        }
    }
}

/// The ledger could not take a claim. Nothing was forwarded, so when it is unavailable (a full
/// disk, a lost database) the same key may be tried again shortly.
fn claim_failed(e: LedgerError) -> Problem {
    let p = Problem::from(e);
    if p.status == 503 {
        let detail = format!(
            "{}; nothing was forwarded, so the request may be retried with the same key",
            p.detail
        );
        Problem { detail, ..p }.retry_after(1)
    } else {
        p
    }
}

/// The name of a claim's outcome, for the debug log.
fn outcome_label(o: &ClaimOutcome) -> &'static str {
    match o {
        ClaimOutcome::Claimed { .. } => "claimed",
        ClaimOutcome::Replay { .. } => "replay",
        ClaimOutcome::Collision { .. } => "collision",
        ClaimOutcome::InFlight { .. } => "in_flight",
        ClaimOutcome::Stuck { .. } => "stuck",
        ClaimOutcome::Failed { .. } => "failed",
        ClaimOutcome::ProbableDuplicate { .. } => "probable_duplicate",
        ClaimOutcome::AwaitingApproval { .. } => "awaiting_approval",
        ClaimOutcome::NotApproved { .. } => "not_approved",
    }
}

/// A claim the ledger settled without the request running: the stored response to give out
/// again, or the problem that says why it will not run. Counted in the route's metrics.
pub(crate) fn settled(
    metrics: &RouteMetrics,
    outcome: ClaimOutcome,
) -> Result<idemgate_ledger::ResponseRecord, Problem> {
    match outcome {
        ClaimOutcome::Replay { response, .. } => {
            telemetry::outcome("replayed");
            metrics.replayed.increment(1);
            metrics.replays.increment(1);
            Ok(response)
        }
        ClaimOutcome::Collision { entry_id } => {
            metrics.collisions.increment(1);
            Err(Problem::new(Code::KeyReuse, "this key was already used with a different request; use a new key for a new operation")
                .with("entry_id", entry_id))
        }
        ClaimOutcome::Stuck { entry_id } => Err(Problem::new(Code::OutcomeUnknown, "an earlier attempt with this key may or may not have happened upstream; it is held for an operator and will not be run again automatically").with_status(409)
        .with("entry_id", entry_id)),
        ClaimOutcome::Failed { entry_id, response } => match response {
            Some(r) => {
                telemetry::outcome("replayed");
                metrics.replayed.increment(1);
                Ok(r)
            }
            None => Err(Problem::new(Code::EntryFailed, "an operator marked this operation as permanently failed").with("entry_id", entry_id)),
        },
        ClaimOutcome::ProbableDuplicate { entry_id, key: other } => {
            metrics.duplicate_suspects.increment(1);
            Err(Problem::new(Code::ProbableDuplicate, format!("the same request completed under another key ({other}) within the duplicate window"))
                .with("duplicate_of", entry_id))
        }
        ClaimOutcome::NotApproved {
            entry_id,
            end,
            reason,
        } => Err(not_approved(entry_id, end, reason)),
        // The request that is held answers it; another one (of a route without a policy now)
        // is told it is held.
        ClaimOutcome::AwaitingApproval {
            entry_id,
            expires_at,
            ..
        } => Err(in_flight(entry_id, expires_at)),
        ClaimOutcome::Claimed { .. } | ClaimOutcome::InFlight { .. } => Err(Problem::new(
            Code::Internal,
            "a claim that runs or waits is not settled",
        )),
    }
}
