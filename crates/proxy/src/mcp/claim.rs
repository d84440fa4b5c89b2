//! Claiming an MCP call: the ledger's answer, and the wait of a call held for approval (with
//! progress notifications for a client that asked for them).

use std::time::Duration;

use axum::http::header;
use idemgate_ledger::{ClaimOutcome, ClaimRequest, Millis, ResponseRecord};
use serde_json::{json, Value};

use super::attempt::Sink;
use super::{jsonrpc, recorded, tagged, Prepared};
use crate::approval::{held_result, tool_error, Waited};
use crate::claim::{not_approved, settled, Claimed};
use crate::config::Approval;
use crate::engine::{Engine, Req};
use crate::flights::Landing;
use crate::telemetry;

/// How often a held call tells a client that asked for progress that it still waits.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

impl Engine {
    /// Claims a call, waiting for its approval when `policy` holds it: the entry to run, with
    /// this process's flight of its key; or `None`, the call answered through `sink`.
    pub(super) async fn claim_call<'e>(
        &'e self,
        req: &Req<'_>,
        p: &Prepared,
        policy: Option<&Approval>,
        make: &impl Fn(Millis) -> ClaimRequest,
        sink: &Sink,
    ) -> Option<(i64, i64, Landing<'e>)> {
        let id = &p.call.id;
        let tagged = tagged(req);
        let hold_call = |entry_id, hold| {
            let progress = p.call.progress_token.clone().filter(|_| streams(req));
            self.hold_call(entry_id, hold, progress, sink)
        };
        let claimed = self
            .claim_approved(
                (req.route, &p.scope, &p.key, &p.fingerprint),
                make,
                policy,
                hold_call,
            )
            .await;
        // A recorded answer, and the message that ends it if the answer already streams.
        let given = |stored: ResponseRecord, replayed| {
            let m = jsonrpc::for_client(&stored.body, id, Some(tagged))
                .unwrap_or_else(|| stored.body.clone());
            (recorded(stored, id, p.accept, tagged, replayed), m)
        };
        let (whole, message) = match claimed {
            Ok(Claimed::Run {
                entry_id,
                attempt,
                landing,
            }) => return Some((entry_id, attempt, landing)),
            Ok(Claimed::Settled(ClaimOutcome::NotApproved {
                entry_id,
                end,
                reason,
            })) => {
                let m = tool_error(id, tagged, &not_approved(entry_id, end, reason).detail);
                (jsonrpc::answer(m.clone(), p.accept, 200), m)
            }
            Ok(Claimed::Settled(ClaimOutcome::AwaitingApproval {
                entry_id,
                expires_at,
                ..
            })) => {
                let m = held_result(id, entry_id, expires_at, tagged);
                (jsonrpc::answer(m.clone(), p.accept, 200), m)
            }
            // Its run counted it as executed; its answer is its own, so not marked replayed.
            Ok(Claimed::Approved(response)) => {
                telemetry::outcome("executed");
                given(response, false)
            }
            Ok(Claimed::Settled(s)) => match settled(req.metrics, s) {
                Ok(stored) => given(stored, true),
                Err(e) => (
                    jsonrpc::problem_answer(id, &e, p.accept),
                    jsonrpc::problem_message(id, &e),
                ),
            },
            Err(e) => (
                jsonrpc::problem_answer(id, &e, p.accept),
                jsonrpc::problem_message(id, &e),
            ),
        };
        sink.finish(whole, &message).await;
        None
    }

    /// Waits up to `hold` for held entry `entry_id`'s decision; with a `progress` token, a
    /// `notifications/progress` every second meanwhile (the answer becomes an event stream).
    async fn hold_call(
        &self,
        entry_id: i64,
        hold: Duration,
        progress: Option<Value>,
        sink: &Sink,
    ) -> Waited {
        let wait = self.wait_for_decision(entry_id, hold);
        let Some(token) = progress else {
            return wait.await;
        };
        tokio::pin!(wait);
        let mut tick = tokio::time::interval(PROGRESS_EVERY);
        let mut n: u64 = 0;
        loop {
            tokio::select! {
                w = &mut wait => return w,
                _ = tick.tick() => {
                    n += 1;
                    let note = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                        "params": {"progressToken": token, "progress": n,
                            "message": format!("held for approval by an operator, entry {entry_id}")}});
                    sink.notify(&serde_json::to_vec(&note).unwrap_or_default());
                }
            }
        }
    }
}

/// Whether the client takes an event stream for this call (MCP clients send both types).
fn streams(req: &Req<'_>) -> bool {
    req.parts
        .headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/event-stream"))
}
