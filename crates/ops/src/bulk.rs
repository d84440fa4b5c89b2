//! Operator actions on many entries at once: resolve (or release), replay and reconcile every
//! entry a filter matches, or a selection of them. A bulk action is previewed (the exact count,
//! the keys, whether any is on a destructive route), then runs as a job: one entry at a time, each
//! its own atomic action logged under the operator and the reason, with progress after each and
//! a stop between two. An entry that fails is reported and the rest go on.

use idemgate_ledger::{
    Action, Effect, EntryFilter, EntrySummary, Progress, ResponseRecord, Result,
};
use idemgate_proxy::Engine;
use serde::{Deserialize, Serialize};

use crate::{
    validate_actor, ActionCmd, Code, Ops, OpsError, OpsResult, Preview, ResolveAs, ResolveCmd,
};

/// The most entries one bulk action takes: a larger set is narrowed by its filter first.
pub const MAX_BULK: usize = 100_000;
/// The most failures a [`BulkReport`] lists (all are counted).
pub const MAX_BULK_FAILURES: usize = 100;

/// Which action a bulk action runs on each entry.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BulkKind {
    /// Resolve (or release) each entry with one outcome.
    Resolve,
    /// Send each entry's stored request upstream again.
    Replay,
    /// Ask each entry's route probe whether its effect happened.
    Reconcile,
}

impl BulkKind {
    /// The action as the admin API and the log name it.
    pub fn as_str(self) -> &'static str {
        match self {
            BulkKind::Resolve => "resolve",
            BulkKind::Replay => "replay",
            BulkKind::Reconcile => "reconcile",
        }
    }

    /// Whether the action sends requests upstream (and so needs the route configuration).
    pub fn reaches_upstream(self) -> bool {
        !matches!(self, BulkKind::Resolve)
    }

    /// The action run on each entry: a resolve `as` released releases it.
    pub fn action(self, as_: Option<ResolveAs>) -> Action {
        match self {
            BulkKind::Resolve => as_.map_or(Action::Resolve, ResolveAs::action),
            BulkKind::Replay => Action::Replay,
            BulkKind::Reconcile => Action::Reconcile,
        }
    }
}

/// The entries a bulk action acts on: every entry `filter` matches, or, with `ids`, those of them
/// that it matches (a selection made in a filtered list stays within the filter).
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BulkTarget {
    /// Which entries: the same filter `entries` takes.
    pub filter: EntryFilter,
    /// Only these of the entries the filter matches (`None`: all of them).
    #[serde(default)]
    pub ids: Option<Vec<i64>>,
}

/// A bulk action: what to run, on which entries, by whom and why.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BulkCmd {
    /// What to run on each entry.
    pub action: BulkKind,
    /// Which entries.
    pub target: BulkTarget,
    /// A resolve's outcome (resolve only).
    #[serde(rename = "as", default)]
    pub as_: Option<ResolveAs>,
    /// A resolve's response, as for one entry (resolve only).
    #[serde(default)]
    pub response: Option<ResponseRecord>,
    /// A resolve's external reference (resolve only).
    #[serde(default)]
    pub external_ref: Option<String>,
    /// Who acts, as the log records it.
    #[cfg_attr(feature = "ts", schemars(length(max = 200), pattern(r"\S")))]
    pub operator: String,
    /// Why, as the log records it.
    #[cfg_attr(feature = "ts", schemars(length(max = 4000), pattern(r"\S")))]
    pub reason: String,
    /// Needed when any entry is on a `destructive` route.
    #[serde(default)]
    pub confirm_destructive: bool,
}

/// One entry a bulk action could not act on.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkFailure {
    /// The entry.
    pub id: i64,
    /// Its key.
    pub key: String,
    /// The error's stable code.
    pub code: Code,
    /// The error, in words.
    pub message: String,
}

/// How a bulk action ended.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkReport {
    /// The action it ran.
    pub action: BulkKind,
    /// The entries it set out to act on.
    pub total: usize,
    /// The entries it acted on (succeeded or failed) before it ended.
    pub attempted: usize,
    /// Those that succeeded.
    pub succeeded: usize,
    /// How many failed; the first [`MAX_BULK_FAILURES`] are in `failures`.
    pub failed: usize,
    /// The first [`MAX_BULK_FAILURES`] failures.
    pub failures: Vec<BulkFailure>,
    /// Stopped before the end: the entries not attempted are as they were.
    pub cancelled: bool,
}

impl BulkCmd {
    /// Checks everything the command says without the ledger: the actor, and that only a resolve
    /// carries an outcome (and carries one).
    pub fn check(&self) -> OpsResult<()> {
        validate_actor(&self.operator, &self.reason)?;
        let outcome = self.response.is_some() || self.external_ref.is_some();
        match (self.action, self.as_) {
            (BulkKind::Resolve, None) => Err(OpsError::invalid(
                "as",
                "a bulk resolve needs its outcome: completed, failed or released",
            )),
            (BulkKind::Resolve, Some(_)) => Ok(()),
            (_, Some(_)) => Err(OpsError::invalid("as", "only a resolve takes an outcome")),
            (_, None) if outcome => Err(OpsError::invalid(
                "response",
                "only a resolve takes a response or an external reference",
            )),
            (_, None) => Ok(()),
        }
    }

    fn resolve_cmd(&self, id: i64, as_: ResolveAs) -> ResolveCmd {
        ResolveCmd {
            entry_id: id,
            as_,
            response: self.response.clone(),
            external_ref: self.external_ref.clone(),
            operator: self.operator.clone(),
            reason: self.reason.clone(),
            confirm_destructive: self.confirm_destructive,
        }
    }

    fn action_cmd(&self, id: i64) -> ActionCmd {
        ActionCmd {
            entry_id: id,
            operator: self.operator.clone(),
            reason: self.reason.clone(),
            confirm_destructive: self.confirm_destructive,
        }
    }
}

impl Ops {
    /// The entries `target` names, newest first, at most [`MAX_BULK`].
    fn bulk_targets(&self, target: &BulkTarget) -> OpsResult<Vec<EntrySummary>> {
        if target.ids.as_ref().is_some_and(Vec::is_empty) {
            return Err(OpsError::invalid(
                "ids",
                "name at least one entry, or none to take every entry the filter matches",
            ));
        }
        let wanted: Option<std::collections::HashSet<i64>> =
            target.ids.as_ref().map(|ids| ids.iter().copied().collect());
        let mut out = Vec::new();
        self.each_entry(&target.filter, None, &mut |e| {
            if wanted.as_ref().is_none_or(|w| w.contains(&e.id)) {
                if out.len() == MAX_BULK {
                    return Err(OpsError::invalid(
                        "filter",
                        &format!("matches more than {MAX_BULK} entries: narrow it first"),
                    ));
                }
                out.push(e.clone());
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// One entry of a bulk action; its failure as a code and a message.
    fn bulk_one(
        &self,
        cmd: &BulkCmd,
        e: &EntrySummary,
        upstream: Option<&(&Engine, tokio::runtime::Handle)>,
    ) -> Result<(), (Code, String)> {
        let failed = |err: OpsError| (err.code(), err.to_string());
        match (cmd.action, cmd.as_, upstream) {
            (BulkKind::Resolve, Some(as_), _) => self
                .resolve(&cmd.resolve_cmd(e.id, as_))
                .map(drop)
                .map_err(failed),
            (BulkKind::Replay, _, Some((engine, rt))) => {
                let r = rt
                    .block_on(self.replay(engine, &cmd.action_cmd(e.id)))
                    .map_err(failed)?;
                match r.problem {
                    None => Ok(()),
                    Some(p) => Err((
                        serde_json::from_value(p["code"].clone()).unwrap_or(Code::UpstreamError),
                        p["detail"].as_str().unwrap_or("").to_owned(),
                    )),
                }
            }
            (BulkKind::Reconcile, _, Some((engine, rt))) => rt
                .block_on(self.reconcile(engine, &cmd.action_cmd(e.id)))
                .map(drop)
                .map_err(failed),
            _ => Err(failed(OpsError::NoConfig)),
        }
    }

    /// What a bulk action would touch: the exact count and keys, the entries it names that the
    /// action would refuse as they stand (held for an approval, say, or on a route of `host`'s
    /// with no probe) and why, and whether any is on a destructive route (the action then needs
    /// confirming). The action itself takes the entries that match when it runs, and reports
    /// each one it is refused.
    pub fn preview_bulk(
        &self,
        action: BulkKind,
        as_: Option<ResolveAs>,
        target: &BulkTarget,
        host: crate::op::Host<'_>,
    ) -> OpsResult<Preview> {
        let each = action.action(as_);
        let named = self.bulk_targets(target)?;
        let mut skipped = Vec::new();
        let mut touched = Vec::new();
        for e in named {
            match crate::upstream::refusal(each, &e, host) {
                Some(why) => skipped.push((e.id, why)),
                None => touched.push(e),
            }
        }
        Ok(Preview {
            action: action.as_str().into(),
            count: touched.len(),
            destructive: touched.iter().any(|e| e.effect == Effect::Destructive),
            ids: touched.iter().map(|e| e.id).collect(),
            keys: touched.into_iter().map(|e| e.key).collect(),
            skipped,
        })
    }

    /// Runs a bulk action on every entry its target names when it starts, one at a time:
    /// `progress` hears the count attempted after each and may stop it there. Replay and reconcile
    /// need `host`'s data plane (built from the route configuration) and a tokio runtime to run
    /// on; call this off the runtime's async threads. Nothing is done when the command is
    /// invalid, or when an entry is on a destructive route and the command does not confirm it.
    pub fn bulk(
        &self,
        cmd: &BulkCmd,
        host: crate::op::Host<'_>,
        progress: Progress<'_>,
    ) -> OpsResult<BulkReport> {
        cmd.check()?;
        let runtime = if cmd.action.reaches_upstream() {
            let Some(engine) = host.engine() else {
                return Err(OpsError::NoConfig);
            };
            let handle = tokio::runtime::Handle::try_current().map_err(|_| {
                OpsError::Internal("a bulk replay or reconcile runs inside a tokio runtime".into())
            })?;
            Some((engine, handle))
        } else {
            None
        };
        let targets = self.bulk_targets(&cmd.target)?;
        // As the preview: an entry the action refuses is not acted on, so it asks for nothing.
        // One that a state change makes actionable meanwhile is refused unconfirmed by its action.
        let each = cmd.action.action(cmd.as_);
        let destructive: Vec<String> = targets
            .iter()
            .filter(|e| {
                e.effect == Effect::Destructive && crate::upstream::refusal(each, e, host).is_none()
            })
            .map(|e| e.key.clone())
            .collect();
        if !destructive.is_empty() && !cmd.confirm_destructive {
            return Err(OpsError::ConfirmationRequired(destructive));
        }
        let mut report = BulkReport {
            action: cmd.action,
            total: targets.len(),
            attempted: 0,
            succeeded: 0,
            failed: 0,
            failures: Vec::new(),
            cancelled: false,
        };
        for (i, e) in targets.iter().enumerate() {
            report.attempted += 1;
            match self.bulk_one(cmd, e, runtime.as_ref()) {
                Ok(()) => report.succeeded += 1,
                Err((code, message)) => {
                    report.failed += 1;
                    if report.failures.len() < MAX_BULK_FAILURES {
                        report.failures.push(BulkFailure {
                            id: e.id,
                            key: e.key.clone(),
                            code,
                            message,
                        });
                    }
                }
            }
            if !progress(report.attempted as u64) && i + 1 < targets.len() {
                report.cancelled = true;
                break;
            }
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::Host;
    use idemgate_ledger::{now_millis, testing, ClaimOutcome, EventFilter, State};

    /// A ledger with `n` stuck charges (claimed two minutes ago, leased for one), the last of
    /// them on a destructive route, and one completed charge.
    fn stuck_ledger(dir: &tempfile::TempDir, n: usize) -> (Ops, Vec<i64>, i64) {
        let ops =
            Ops::open_or_create(&dir.path().join("l.db").display().to_string()).expect("ledger");
        let at = now_millis() - 120_000;
        let mut ids = Vec::new();
        for i in 0..n {
            let mut c = testing::charge(&format!("s{i}"), at);
            if i + 1 == n {
                c.effect = Effect::Destructive;
            }
            let ClaimOutcome::Claimed { entry_id, .. } =
                ops.store().claim(c).wait().expect("claim")
            else {
                panic!("not claimed");
            };
            ids.push(entry_id);
        }
        let done = testing::expired_charges(ops.store().as_ref(), 1)[0];
        (ops, ids, done)
    }

    fn cmd(target: BulkTarget) -> BulkCmd {
        BulkCmd {
            action: BulkKind::Resolve,
            target,
            as_: Some(ResolveAs::Released),
            response: None,
            external_ref: None,
            operator: "dana".into(),
            reason: "processor says none ran".into(),
            confirm_destructive: false,
        }
    }

    fn stuck() -> BulkTarget {
        BulkTarget {
            filter: EntryFilter {
                stuck: true,
                ..EntryFilter::default()
            },
            ids: None,
        }
    }

    fn state(ops: &Ops, id: i64) -> State {
        ops.show(id, Host::none())
            .expect("show")
            .entry
            .summary
            .state
    }

    #[test]
    fn a_bulk_preview_counts_exactly_what_the_filter_or_the_selection_names() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (ops, ids, done) = stuck_ledger(&dir, 4);
        let p = ops
            .preview_bulk(BulkKind::Resolve, None, &stuck(), Host::none())
            .expect("preview");
        assert_eq!(p.count, 4);
        let mut seen = p.ids.clone();
        seen.sort_unstable();
        assert_eq!(seen, ids);
        assert!(p.destructive, "the last is on a destructive route");
        // A selection stays within the filter: the completed entry is not stuck, so not taken.
        let picked = BulkTarget {
            ids: Some(vec![ids[0], ids[1], done]),
            ..stuck()
        };
        let p = ops
            .preview_bulk(BulkKind::Replay, None, &picked, Host::none())
            .expect("preview");
        assert_eq!(
            (p.count, p.destructive, p.action.as_str()),
            (2, false, "replay")
        );
        let none = BulkTarget {
            ids: Some(vec![]),
            ..stuck()
        };
        assert_eq!(
            ops.preview_bulk(BulkKind::Resolve, None, &none, Host::none())
                .expect_err("empty")
                .code(),
            "invalid-argument"
        );
    }

    #[test]
    fn a_bulk_preview_names_what_the_action_would_refuse_and_why() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (ops, ids, done) = stuck_ledger(&dir, 2);
        let held = testing::held_charge("held", now_millis());
        let ClaimOutcome::AwaitingApproval { entry_id: held, .. } =
            ops.store().claim(held).wait().expect("claim")
        else {
            panic!("not held");
        };
        let every = |ids: Vec<i64>| BulkTarget {
            filter: EntryFilter::default(),
            ids: Some(ids),
        };
        let preview = |kind, as_, target: &BulkTarget| {
            let p = ops.preview_bulk(kind, as_, target, Host::none());
            p.expect("preview")
        };
        let release = cmd(every(vec![ids[0], done, held]));
        let p = preview(BulkKind::Resolve, release.as_, &release.target);
        assert_eq!((p.count, p.ids.clone()), (1, vec![ids[0]]));
        assert_eq!(
            p.skipped,
            [
                (
                    held,
                    "entry is awaiting_approval; release needs a stuck or failed entry".to_owned()
                ),
                (
                    done,
                    "entry is completed; release needs a stuck or failed entry".to_owned()
                ),
            ]
        );
        // The action is refused on exactly those.
        let report = ops
            .bulk(&release, Host::none(), &mut |_| true)
            .expect("bulk");
        let mut refused: Vec<i64> = report.failures.iter().map(|f| f.id).collect();
        refused.sort_unstable();
        let mut skipped: Vec<i64> = p.skipped.iter().map(|(id, _)| *id).collect();
        skipped.sort_unstable();
        assert_eq!((report.succeeded, refused), (1, skipped));
        // Released now, it is not released again, but may still be resolved.
        let p = preview(BulkKind::Resolve, release.as_, &every(vec![ids[0]]));
        assert_eq!(
            (p.count, p.skipped),
            (
                0,
                vec![(
                    ids[0],
                    "entry is released; release needs a stuck or failed entry".to_owned()
                )]
            )
        );
        let report = ops
            .bulk(&cmd(every(vec![ids[0]])), Host::none(), &mut |_| true)
            .expect("bulk");
        assert_eq!((report.succeeded, report.failed), (0, 1));
        let failed = Some(ResolveAs::Failed);
        let p = preview(BulkKind::Resolve, failed, &every(vec![ids[0]]));
        assert_eq!(p.ids, [ids[0]]);
        // Reconcile takes only the stuck: a released entry is named as not stuck.
        let p = preview(BulkKind::Reconcile, None, &every(vec![ids[0], ids[1]]));
        assert_eq!(p.ids, [ids[1]]);
        assert_eq!(
            p.skipped,
            [(
                ids[0],
                "entry is released; reconcile needs a stuck entry".to_owned()
            )]
        );
    }

    #[test]
    fn a_bulk_action_on_a_destructive_route_needs_confirmation_and_changes_nothing_without() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (ops, ids, _) = stuck_ledger(&dir, 3);
        let e = ops
            .bulk(&cmd(stuck()), Host::none(), &mut |_| true)
            .expect_err("destructive");
        assert_eq!(e.code(), "confirmation-required");
        assert!(ids.iter().all(|&id| state(&ops, id) == State::Pending));
        let r = ops
            .bulk(
                &BulkCmd {
                    confirm_destructive: true,
                    ..cmd(stuck())
                },
                Host::none(),
                &mut |_| true,
            )
            .expect("bulk");
        assert_eq!(
            (r.total, r.succeeded, r.failed, r.cancelled),
            (3, 3, 0, false)
        );
        assert!(ids.iter().all(|&id| state(&ops, id) == State::Released));
        // Each entry's resolve is its own event, under the operator and the reason.
        let log = ops
            .log(
                &EventFilter {
                    kind: Some("resolve".into()),
                    operator: Some("dana".into()),
                    ..EventFilter::default()
                },
                None,
                100,
            )
            .expect("log");
        let mut logged: Vec<i64> = log.events.iter().filter_map(|e| e.entry_id).collect();
        logged.sort_unstable();
        assert_eq!(logged, ids);
        assert!(log
            .events
            .iter()
            .all(|e| e.reason.as_deref() == Some("processor says none ran")));
        // Released now, the destructive one is not acted on again: nothing to confirm.
        let last = BulkTarget {
            filter: EntryFilter::default(),
            ids: Some(vec![ids[2]]),
        };
        let p = ops
            .preview_bulk(
                BulkKind::Resolve,
                Some(ResolveAs::Released),
                &last,
                Host::none(),
            )
            .expect("preview");
        assert_eq!((p.count, p.destructive), (0, false));
        let r = ops
            .bulk(&cmd(last), Host::none(), &mut |_| true)
            .expect("bulk");
        assert_eq!((r.succeeded, r.failed), (0, 1));
    }

    #[test]
    fn a_bulk_action_reports_each_entry_and_stops_between_two_when_told() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (ops, ids, _) = stuck_ledger(&dir, 5);
        let mut heard = Vec::new();
        let r = ops
            .bulk(
                &BulkCmd {
                    confirm_destructive: true,
                    ..cmd(stuck())
                },
                Host::none(),
                &mut |n| {
                    heard.push(n);
                    n < 2
                },
            )
            .expect("bulk");
        assert_eq!(heard, [1, 2]);
        assert_eq!((r.attempted, r.succeeded, r.cancelled), (2, 2, true));
        let released = ids
            .iter()
            .filter(|&&id| state(&ops, id) == State::Released)
            .count();
        assert_eq!(released, 2, "the rest are as they were");
    }

    #[test]
    fn an_entry_that_fails_is_reported_and_the_rest_go_on() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (ops, ids, done) = stuck_ledger(&dir, 2);
        // Every entry, the completed one among them: it cannot be released.
        let all = BulkTarget {
            filter: EntryFilter::default(),
            ids: Some(vec![ids[0], done]),
        };
        let r = ops
            .bulk(&cmd(all), Host::none(), &mut |_| true)
            .expect("bulk");
        assert_eq!((r.total, r.succeeded, r.failed), (2, 1, 1));
        assert_eq!(r.failures[0].id, done);
        assert_eq!(r.failures[0].code, "conflict");
        assert_eq!(state(&ops, ids[0]), State::Released);
        assert_eq!(state(&ops, done), State::Completed);
    }

    #[test]
    fn a_bulk_command_is_checked_before_anything_is_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (ops, ids, _) = stuck_ledger(&dir, 2);
        let bad = [
            (
                BulkCmd {
                    as_: None,
                    ..cmd(stuck())
                },
                "invalid-argument",
            ),
            (
                BulkCmd {
                    action: BulkKind::Replay,
                    ..cmd(stuck())
                },
                "invalid-argument",
            ),
            (
                BulkCmd {
                    action: BulkKind::Replay,
                    as_: None,
                    external_ref: Some("ch_1".into()),
                    ..cmd(stuck())
                },
                "invalid-argument",
            ),
            (
                BulkCmd {
                    action: BulkKind::Reconcile,
                    as_: None,
                    ..cmd(stuck())
                },
                "no-config",
            ),
            (
                BulkCmd {
                    reason: " ".into(),
                    ..cmd(stuck())
                },
                "missing-reason",
            ),
        ];
        for (c, code) in bad {
            let e = ops.bulk(&c, Host::none(), &mut |_| true).expect_err(code);
            assert_eq!(e.code(), code, "{c:?}");
        }
        assert!(ids.iter().all(|&id| state(&ops, id) == State::Pending));
        // A member the command does not know is refused, not ignored.
        let json = serde_json::json!({"action": "resolve", "as": "released",
            "target": {"filter": {}}, "operator": "o", "reason": "r", "dry_run": true});
        assert!(serde_json::from_value::<BulkCmd>(json).is_err());
    }
}
