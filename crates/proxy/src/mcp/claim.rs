//! Claiming an MCP call: the ledger's answer, and the wait of a call held for approval.

use idemgate_ledger::{ClaimOutcome, ClaimRequest};

use super::{jsonrpc, replayed, tagged, Prepared};
use crate::approval::Waited;
use crate::engine::{settled, Claimed, Engine, Req};

impl Engine {
    /// Claims a call, waiting for its approval when `policy` holds it: the entry to run, with
    /// this process's flight of its key, or the answer to give instead.
    pub(super) async fn claim_call<'e>(
        &'e self,
        req: &Req<'_>,
        p: &Prepared,
        policy: Option<&crate::config::Approval>,
        make: &impl Fn(idemgate_ledger::Millis) -> ClaimRequest,
    ) -> Result<
        (i64, i64, crate::flights::Landing<'e>),
        axum::http::Response<crate::engine::ProxyBody>,
    > {
        let id = &p.call.id;
        let tagged = tagged(req);
        let mut claimed = self
            .claim(req.route, &p.scope, &p.key, &p.fingerprint, make)
            .await;
        // Held: the call waits for the decision, then is claimed again for its answer (the
        // result, or why it will not run); still undecided, the agent is told to call again.
        if let Ok(Claimed::Settled(ClaimOutcome::AwaitingApproval {
            entry_id,
            expires_at,
            requested,
        })) = claimed
        {
            if requested {
                self.notify_approvers(policy, entry_id);
            }
            let hold = policy.map(|a| a.hold).unwrap_or_default();
            if let Waited::Held = self.wait_for_decision(entry_id, hold).await {
                let held = crate::approval::held_result(id, entry_id, expires_at, tagged);
                return Err(jsonrpc::answer(held, p.accept, 200));
            }
            claimed = self
                .claim(req.route, &p.scope, &p.key, &p.fingerprint, make)
                .await;
        }
        match claimed {
            Ok(Claimed::Run {
                entry_id,
                attempt,
                landing,
            }) => Ok((entry_id, attempt, landing)),
            Ok(Claimed::Settled(ClaimOutcome::NotApproved {
                entry_id,
                end,
                reason,
            })) => {
                let refused = crate::approval::not_approved(entry_id, end, reason);
                let text = crate::approval::tool_error(id, tagged, &refused.detail);
                Err(jsonrpc::answer(text, p.accept, 200))
            }
            Ok(Claimed::Settled(ClaimOutcome::AwaitingApproval {
                entry_id,
                expires_at,
                ..
            })) => {
                let held = crate::approval::held_result(id, entry_id, expires_at, tagged);
                Err(jsonrpc::answer(held, p.accept, 200))
            }
            Ok(Claimed::Settled(s)) => {
                let answer = match settled(req.metrics, s) {
                    Ok(stored) => replayed(stored, id, p.accept, tagged),
                    Err(e) => jsonrpc::problem_answer(id, &e, p.accept),
                };
                Err(answer)
            }
            Err(e) => Err(jsonrpc::problem_answer(id, &e, p.accept)),
        }
    }
}
