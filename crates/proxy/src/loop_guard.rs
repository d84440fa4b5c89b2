//! The loop guard's step on a call's path: a call counted in its window (in the ledger when it
//! counts for a fleet, else here), and past the guard's limit logged as a loop suspect, and
//! refused when the guard rejects.

use idemgate_ledger::{now_millis, Millis};
use sha2::{Digest, Sha256};

use crate::business::{loop_detail, loop_key, Verdict};
use crate::engine::{Engine, Req};
use crate::problem::{Code, Problem};

impl Engine {
    /// Counts a call of `what` (its fingerprint, or its `duplicate_on` values) from `scope` under
    /// `guard`: past its limit, the first call of the window is logged as a loop suspect and
    /// counted; with `reject`, every call past it is refused, nothing forwarded.
    pub(crate) async fn guard_loop(
        &self,
        req: &Req<'_>,
        tool: Option<&str>,
        scope: &str,
        key: &str,
        what: &str,
        guard: &crate::config::LoopGuard,
    ) -> Result<(), Problem> {
        let route = req.route;
        let now = now_millis();
        let name = loop_key(&route.name, tool, scope, what);
        let Verdict::Past {
            calls,
            first,
            retry_after,
        } = self.count_call(name, guard, now).await
        else {
            return Ok(());
        };
        let action = if guard.reject { "reject" } else { "flag" };
        if first {
            req.metrics.loop_suspects.increment(1);
            tracing::warn!(route = %route.name, scope = %scope, key = %key, calls, action, "loop suspect: one request called more often than the loop guard allows");
            // Logged, not waited for: the guard's answer does not depend on it.
            let _ = self.store.note_loop(idemgate_ledger::LoopNote {
                route: route.name.clone(),
                scope: scope.to_owned(),
                key: key.to_owned(),
                detail: loop_detail(guard, calls, tool, what),
                at: now,
            });
        }
        if !guard.reject {
            return Ok(());
        }
        Err(Problem::new(
            Code::LoopSuspect,
            format!(
                "this request was sent {calls} times within {:?} (the route allows {}): it looks like a loop, and is refused until the window ends",
                guard.window, guard.max
            ),
        )
        .retry_after(retry_after))
    }
}

impl Engine {
    /// Counts a call of `name` under `guard`: in the ledger when it counts for a fleet
    /// (PostgreSQL), so a loop spread over instances is caught; else, or when the ledger cannot
    /// answer, in this process.
    async fn count_call(
        &self,
        name: String,
        guard: &crate::config::LoopGuard,
        now: Millis,
    ) -> Verdict {
        if !self.store.counts_calls() {
            return self.loops.hit(name, guard, now);
        }
        let window = guard.window.as_millis() as i64;
        let store = self.store.clone();
        // The name joins its parts with NUL bytes, which a PostgreSQL text cannot hold; its
        // digest is as unique and of one length.
        let key = hex::encode(Sha256::digest(name.as_bytes()));
        match tokio::task::spawn_blocking(move || store.count_call(&key, window, now)).await {
            Ok(Ok((ends, calls))) => Verdict::of(calls, ends, guard.max, now),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "the ledger could not count a loop-guard call: counted here");
                self.loops.hit(name, guard, now)
            }
            Err(_) => self.loops.hit(name, guard, now),
        }
    }
}
