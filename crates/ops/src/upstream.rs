//! The operator actions that reach the upstream: replay (send a held entry's stored request
//! again) and reconcile (ask the upstream, through the route's probe, whether the effect
//! happened). Both are logged with the operator's name and reason, and both are refused on a
//! destructive route without an explicit confirmation. The HTTP itself is the data plane's
//! ([`idemgate_proxy::redrive`]); what may be done, and what an answer means, is decided here.

use std::sync::Arc;

use idemgate_config::Config;
use idemgate_config::Route;
use idemgate_ledger::{
    now_millis, Action, Effect, EntryDetail, EntrySummary, ReconcileNote, RedriveRequest,
    Resolution, ResolveRequest,
};
use idemgate_proxy::redrive::{self, ProbeAnswer};
use idemgate_proxy::{instance_id, Engine};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::{validate_actor, Ops, OpsError, OpsResult};

/// Who asks for a replay or a reconcile, and why.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionCmd {
    /// The entry.
    pub entry_id: i64,
    /// Who acts, as the log records it.
    #[cfg_attr(feature = "ts", schemars(length(max = 200), pattern(r"\S")))]
    pub operator: String,
    /// Why, as the log records it.
    #[cfg_attr(feature = "ts", schemars(length(max = 4000), pattern(r"\S")))]
    pub reason: String,
    /// Needed when the entry is on a `destructive` route.
    #[serde(default)]
    pub confirm_destructive: bool,
}

/// How a replay ended.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReplayReport {
    /// The entry after the replay.
    pub entry: EntrySummary,
    /// The upstream's status when it answered with a final one.
    pub status: Option<u16>,
    /// The problem when it did not (not executed, unknown).
    #[cfg_attr(feature = "ts", ts(type = "Record<string, unknown> | null"))]
    pub problem: Option<serde_json::Value>,
}

/// What a reconcile probe decided.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReconcileReport {
    /// The entry after the reconcile.
    pub entry: EntrySummary,
    /// The probe's status, when it answered.
    pub probe_status: Option<u16>,
    /// "completed", "released" or "inconclusive".
    pub decision: String,
}

impl Ops {
    /// The data plane that operator actions on this ledger reach the upstream through, built
    /// from the routes of `cfg` (which must be the configuration the entries were claimed under).
    pub fn upstream(&self, cfg: Arc<Config>) -> Engine {
        Engine::new(cfg, self.store.clone(), instance_id())
    }

    async fn entry_now(&self, id: i64) -> OpsResult<EntryDetail> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || store.entry(id, now_millis()))
            .await
            .map_err(|j| OpsError::Internal(j.to_string()))?
            .map_err(OpsError::from)
    }

    fn route_of<'a>(upstream: &'a Engine, d: &EntryDetail) -> OpsResult<&'a Route> {
        upstream
            .cfg
            .route(&d.summary.route)
            .ok_or_else(|| OpsError::UnknownRoute {
                entry: d.summary.id,
                route: d.summary.route.clone(),
            })
    }

    /// Replays a stuck, released or failed entry: its stored request is sent upstream again
    /// through `upstream` (the data plane, built from the route configuration), with the key the
    /// first attempt sent, and the outcome is recorded on the entry as the proxy records one.
    /// The ledger refuses an entry in another state; a destructive route needs
    /// `confirm_destructive`.
    pub async fn replay(&self, upstream: &Engine, cmd: &ActionCmd) -> OpsResult<ReplayReport> {
        let id = cmd.entry_id;
        let actor = validate_actor(&cmd.operator, &cmd.reason)?;
        let d = self.entry_now(id).await?;
        let route = Self::route_of(upstream, &d)?;
        Action::Replay.check(id, d.summary.state, d.summary.stuck)?;
        if d.summary.effect == Effect::Destructive && !cmd.confirm_destructive {
            return Err(OpsError::ConfirmationRequired(vec![d.summary.key.clone()]));
        }
        let rd = self
            .store
            .redrive(RedriveRequest {
                entry_id: id,
                owner: upstream.owner.clone(),
                lease_ms: route.lease.as_millis() as i64,
                actor,
                at: now_millis(),
            })
            .recv()
            .await?;
        let result = redrive::replay(upstream, route, rd).await?;
        let entry = self.entry_now(id).await?.summary;
        Ok(match result {
            Ok(status) => ReplayReport {
                entry,
                status: Some(status),
                problem: None,
            },
            Err(p) => ReplayReport {
                entry,
                status: None,
                problem: Some(p.body()),
            },
        })
    }

    /// Reconciles a stuck entry through its route's probe: a 2xx means the effect happened (the
    /// entry is resolved as completed with the probe's answer), a 404 that it did not (released),
    /// anything else is inconclusive and only noted. Every probe is logged with its decision.
    pub async fn reconcile(
        &self,
        upstream: &Engine,
        cmd: &ActionCmd,
    ) -> OpsResult<ReconcileReport> {
        let id = cmd.entry_id;
        let actor = validate_actor(&cmd.operator, &cmd.reason)?;
        let d = self.entry_now(id).await?;
        let route = Self::route_of(upstream, &d)?;
        let probe = route
            .reconcile
            .as_ref()
            .ok_or_else(|| OpsError::NoProbe(route.name.clone()))?;
        Action::Reconcile.check(id, d.summary.state, d.summary.stuck)?;
        if d.summary.effect == Effect::Destructive && !cmd.confirm_destructive {
            return Err(OpsError::ConfirmationRequired(vec![d.summary.key.clone()]));
        }
        let answer = redrive::probe(upstream, route, probe, &d).await?;
        let (status, decision, resolution) = match answer {
            ProbeAnswer::Executed(r) if (200..300).contains(&r.status) => {
                let status = r.status;
                (
                    Some(status),
                    "completed",
                    Some(Resolution::Completed {
                        response: r,
                        external_ref: Some(format!("reconcile probe {status}")),
                    }),
                )
            }
            ProbeAnswer::Executed(r) if r.status == 404 => {
                (Some(404), "released", Some(Resolution::Released))
            }
            ProbeAnswer::Executed(r) => (Some(r.status), "inconclusive", None),
            ProbeAnswer::Refused(status) => (Some(status), "inconclusive", None),
            ProbeAnswer::Silent => (None, "inconclusive", None),
        };
        // An MCP call's retries are answered in JSON-RPC: the probe's answer becomes its result.
        let resolution = match d.summary.tool {
            Some(_) => resolution.map(crate::resolve::as_tool_call),
            None => resolution,
        };
        self.store
            .note_reconcile(ReconcileNote {
                entry_id: id,
                actor: actor.clone(),
                detail: json!({"probe_status": status, "decision": decision}),
                at: now_millis(),
            })
            .recv()
            .await?;
        if let Some(resolution) = resolution {
            self.store
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
            entry: self.entry_now(id).await?.summary,
            probe_status: status,
            decision: decision.into(),
        })
    }
}
