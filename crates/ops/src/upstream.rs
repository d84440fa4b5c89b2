//! The operator actions that reach the upstream: replay (send a held entry's stored request
//! again) and reconcile (ask the upstream, through the route's probe, whether the effect
//! happened). Both are logged with the operator's name and reason, and both are refused on a
//! destructive route without an explicit confirmation. The HTTP itself is the data plane's
//! ([`idemgate_proxy::redrive`]); what may be done, and what an answer means, is decided here.

use std::sync::Arc;

use idemgate_config::Config;
use idemgate_config::{Reconcile, Route};
use idemgate_ledger::{
    now_millis, Action, Effect, EntryDetail, EntrySummary, ReconcileNote, RedriveRequest,
    Resolution, ResolveRequest,
};
use idemgate_proxy::redrive::{self, ProbeAnswer};
use idemgate_proxy::{instance_id, Engine};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::op::{Host, Routes};
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

/// The route of `e` in `cfg`, which a replay reaches the upstream through, with the credential
/// it sends there: refused when this host could not read it.
fn route_of<'c>(e: &EntrySummary, cfg: &'c Config) -> OpsResult<&'c Route> {
    let route = configured(e, cfg)?;
    credential(route, "a replay")?;
    Ok(route)
}

/// The route of `e` in `cfg` and its probe, which a reconcile asks: refused when the probe may
/// go to the route's upstream, and so carry its credential, and this host could not read it.
fn probe_of<'c>(e: &EntrySummary, cfg: &'c Config) -> OpsResult<(&'c Route, &'c Reconcile)> {
    let route = configured(e, cfg)?;
    let probe = route
        .reconcile
        .as_ref()
        .ok_or_else(|| OpsError::NoProbe(route.name.clone()))?;
    if probe.may_reach(&route.upstream) {
        credential(route, "a reconcile")?;
    }
    Ok((route, probe))
}

/// The route of `e` in `cfg`.
fn configured<'c>(e: &EntrySummary, cfg: &'c Config) -> OpsResult<&'c Route> {
    cfg.route(&e.route).ok_or_else(|| OpsError::UnknownRoute {
        entry: e.id,
        route: e.route.clone(),
    })
}

/// Refused when `route`'s credential, which `what` sends, could not be read on this host.
fn credential(route: &Route, what: &str) -> OpsResult<()> {
    match &route.upstream_auth_unread {
        Some(why) => Err(OpsError::BadConfig(format!(
            "{why} ({what} through route {} sends it)",
            route.name
        ))),
        None => Ok(()),
    }
}

/// Why `action` is refused on `e` as it stands, in words, or `None`: first its state (the
/// ledger's rule, [`Action::needs`]), then what a replay or a reconcile needs of the routes the
/// host has (a configuration, the entry's route in it, and a reconcile its probe). An entry's
/// view and every preview say it; the actions refuse by the same checks.
pub(crate) fn refusal(action: Action, e: &EntrySummary, host: Host<'_>) -> Option<String> {
    if let Some(why) = action.refusal(e.state, e.stuck) {
        return Some(why);
    }
    let cfg = match (action, host.routes) {
        (Action::Resolve | Action::Release | Action::Purge, _) | (_, Routes::Unknown) => {
            return None
        }
        (_, Routes::Absent) => return Some(OpsError::NoConfig.to_string()),
        (_, Routes::Known(cfg)) => cfg,
    };
    let refused = match action {
        Action::Reconcile => probe_of(e, cfg).err(),
        _ => route_of(e, cfg).err(),
    };
    refused.map(|err| err.to_string())
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

    /// Replays a stuck, released or failed entry: its stored request is sent upstream again
    /// through `upstream` (the data plane, built from the route configuration), with the key the
    /// first attempt sent, and the outcome is recorded on the entry as the proxy records one.
    /// The ledger refuses an entry in another state; a destructive route needs
    /// `confirm_destructive`.
    pub async fn replay(&self, upstream: &Engine, cmd: &ActionCmd) -> OpsResult<ReplayReport> {
        let id = cmd.entry_id;
        let actor = validate_actor(&cmd.operator, &cmd.reason)?;
        let d = self.entry_now(id).await?;
        Action::Replay.check(id, d.summary.state, d.summary.stuck)?;
        let route = route_of(&d.summary, &upstream.cfg)?;
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
        Action::Reconcile.check(id, d.summary.state, d.summary.stuck)?;
        let (route, probe) = probe_of(&d.summary, &upstream.cfg)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BulkCmd, BulkKind, BulkTarget};
    use idemgate_ledger::{testing, ClaimOutcome};

    const CHARGES: &str = "[[routes]]\nname = \"charges\"\nmethod = \"POST\"\n\
        path = \"/v1/charges\"\nupstream = \"http://127.0.0.1:9\"\neffect = \"destructive\"\n";

    fn config(routes: &str) -> Arc<Config> {
        let toml = format!("[server]\nledger = \"l.db\"\n{routes}");
        Arc::new(Config::parse(&toml).expect("config"))
    }

    /// A ledger with one stuck charge on a destructive route.
    fn stuck_charge(dir: &tempfile::TempDir) -> (Ops, i64) {
        let ops =
            Ops::open_or_create(&dir.path().join("l.db").display().to_string()).expect("ledger");
        let mut stuck = testing::charge("k", now_millis() - 120_000);
        stuck.effect = Effect::Destructive;
        let ClaimOutcome::Claimed { entry_id, .. } =
            ops.store().claim(stuck).wait().expect("claim")
        else {
            panic!("not claimed");
        };
        (ops, entry_id)
    }

    fn bulk_reconcile(target: BulkTarget) -> BulkCmd {
        BulkCmd {
            action: BulkKind::Reconcile,
            target,
            as_: None,
            response: None,
            external_ref: None,
            operator: "dana".into(),
            reason: "checking".into(),
            confirm_destructive: false,
        }
    }

    #[test]
    fn replay_and_reconcile_are_offered_only_where_the_entrys_route_reaches_the_upstream() {
        let probe = "reconcile = { url = \"http://127.0.0.1:9/v1/charges/{key}\" }\n";
        let no_probe = "route charges has no reconcile probe configured";
        let unknown =
            "entry 1 belongs to route \"charges\", which this configuration does not have";
        let cases = [
            (config(&format!("{CHARGES}{probe}")), None, None),
            (config(CHARGES), None, Some(no_probe)),
            (
                config(&CHARGES.replace("charges", "refunds")),
                Some(unknown),
                Some(unknown),
            ),
        ];
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        for (cfg, replay, reconcile) in cases {
            let dir = tempfile::tempdir().expect("tempdir");
            let (ops, id) = stuck_charge(&dir);
            let refused = |host: Host<'_>, action| {
                let view = ops.show(id, host).expect("show");
                let a = view.actions.into_iter().find(|a| a.action == action);
                a.expect("every action is listed").refused
            };
            let what = format!("{:?}", cfg.routes.first().map(|r| (&r.name, &r.reconcile)));
            let under = Host::routes(&cfg);
            assert_eq!(refused(under, Action::Replay).as_deref(), replay, "{what}");
            assert_eq!(
                refused(under, Action::Reconcile).as_deref(),
                reconcile,
                "{what}"
            );
            // A host that takes its configuration per command cannot tell: the state alone is
            // judged. One that has none now reaches no upstream.
            assert_eq!(refused(Host::none(), Action::Reconcile), None);
            let none = OpsError::NoConfig.to_string();
            for action in [Action::Replay, Action::Reconcile] {
                assert_eq!(refused(Host::without_routes(), action), Some(none.clone()));
            }
            assert_eq!(refused(Host::without_routes(), Action::Resolve), None);

            // A bulk preview skips the entry for the same words; the action asks no confirmation
            // for it, and is refused it in those words, before anything reaches the upstream.
            let target = BulkTarget {
                filter: Default::default(),
                ids: Some(vec![id]),
            };
            let preview = ops
                .preview_bulk(BulkKind::Reconcile, None, &target, under)
                .expect("preview");
            let skipped = preview.skipped.first().map(|(_, why)| why.as_str());
            assert_eq!(skipped, reconcile, "{what}");
            let engine = ops.upstream(Arc::clone(&cfg));
            let ran = {
                let _in = rt.enter();
                ops.bulk(
                    &bulk_reconcile(target),
                    Host::upstream(&engine),
                    &mut |_| true,
                )
            };
            match (reconcile, ran) {
                (None, Err(OpsError::ConfirmationRequired(keys))) => assert_eq!(keys, ["k"]),
                (Some(why), Ok(r)) => assert_eq!(r.failures[0].message, why),
                (why, ran) => panic!("{what}: {why:?} but {ran:?}"),
            }
            let cmd = ActionCmd {
                entry_id: id,
                operator: "dana".into(),
                reason: "checking".into(),
                confirm_destructive: true,
            };
            let done = rt.block_on(ops.reconcile(&engine, &cmd)).map(drop);
            assert_eq!(done.map_err(|e| e.to_string()).err().as_deref(), reconcile);
            let done = rt.block_on(ops.replay(&engine, &cmd)).map(drop);
            assert_eq!(done.map_err(|e| e.to_string()).err().as_deref(), replay);
        }
    }
}
