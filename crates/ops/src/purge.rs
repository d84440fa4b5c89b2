//! Purge: entries by id, or every expired entry a filter matches, in atomic chunks, with progress
//! and a stop between two chunks. The log keeps the purged entries' events; a pending entry is
//! never purged. Also the sweep that marks lease and TTL expiries in the log.

use idemgate_ledger::{
    now_millis, Action, Effect, EntryFilter, EntrySummary, Progress, PurgeRequest, SweepReport,
};
use serde::{Deserialize, Serialize};

use crate::{validate_actor, Ops, OpsError, OpsResult, Preview};

/// What a purge acts on.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "target", rename_all = "lowercase")]
pub enum PurgeTarget {
    /// These entries (each must exist, and be neither pending nor held for an approval).
    Ids {
        /// The entries' ids.
        ids: Vec<i64>,
    },
    /// Every expired entry matching the filter.
    Expired {
        /// Narrows the expired entries (by route, scope …).
        filter: EntryFilter,
    },
}

/// A purge: what, by whom and why.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PurgeCmd {
    /// What it purges.
    #[serde(flatten)]
    pub target: PurgeTarget,
    /// Who acts, as the log records it.
    #[cfg_attr(feature = "ts", schemars(length(max = 200), pattern(r"\S")))]
    pub operator: String,
    /// Why, as the log records it.
    #[cfg_attr(feature = "ts", schemars(length(max = 4000), pattern(r"\S")))]
    pub reason: String,
    /// Needed when an entry is on a `destructive` route.
    #[serde(default)]
    pub confirm_destructive: bool,
}

/// How many entries one purge transaction takes: short enough to leave the writer to the proxy
/// between chunks, and where a purge reports progress and can stop.
pub const PURGE_CHUNK: usize = 1000;

/// A purge read from JSON refuses a member it does not know, as every command does, rather
/// than purge without it: `"dry_run": true` (the CLI's flag) or a misspelt filter member
/// (`"rout"`) would otherwise widen or run the purge. serde cannot refuse unknown members of a
/// flattened or internally tagged type, so both read through one flat form.
mod purge_wire {
    use serde::de::{Deserializer, Error};
    use serde::Deserialize;

    use super::{EntryFilter, PurgeCmd, PurgeTarget};

    #[derive(Deserialize)]
    #[serde(rename_all = "lowercase")]
    enum Kind {
        Ids,
        Expired,
    }

    impl Kind {
        fn target<E: Error>(
            self,
            ids: Option<Vec<i64>>,
            filter: Option<EntryFilter>,
        ) -> Result<PurgeTarget, E> {
            match (self, ids, filter) {
                (Kind::Ids, Some(ids), None) => Ok(PurgeTarget::Ids { ids }),
                (Kind::Expired, None, Some(filter)) => Ok(PurgeTarget::Expired { filter }),
                (Kind::Ids, _, Some(_)) => Err(E::custom(
                    "`filter` goes with target \"expired\"; target \"ids\" takes `ids`",
                )),
                (Kind::Expired, Some(_), _) => Err(E::custom(
                    "`ids` goes with target \"ids\"; target \"expired\" takes `filter`",
                )),
                (Kind::Ids, None, None) => Err(E::missing_field("ids")),
                (Kind::Expired, None, None) => Err(E::missing_field("filter")),
            }
        }
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Target {
        target: Kind,
        ids: Option<Vec<i64>>,
        filter: Option<EntryFilter>,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Cmd {
        target: Kind,
        ids: Option<Vec<i64>>,
        filter: Option<EntryFilter>,
        operator: String,
        reason: String,
        #[serde(default)]
        confirm_destructive: bool,
    }

    impl<'de> Deserialize<'de> for PurgeTarget {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let t = Target::deserialize(d)?;
            t.target.target(t.ids, t.filter)
        }
    }

    impl<'de> Deserialize<'de> for PurgeCmd {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let c = Cmd::deserialize(d)?;
            Ok(PurgeCmd {
                target: c.target.target(c.ids, c.filter)?,
                operator: c.operator,
                reason: c.reason,
                confirm_destructive: c.confirm_destructive,
            })
        }
    }
}

/// How a purge ended.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PurgeReport {
    /// The entries purged.
    pub purged: Vec<i64>,
    /// Stopped before the end (the console's Stop, an admin client that went away): the entries
    /// in `purged` are purged, and the rest are as they were.
    #[serde(default)]
    pub cancelled: bool,
}

impl Ops {
    /// What `purge` would touch.
    pub fn preview_purge(&self, target: &PurgeTarget) -> OpsResult<Preview> {
        let now = now_millis();
        let mut touched: Vec<EntrySummary> = Vec::new();
        let mut skipped = Vec::new();
        match target {
            PurgeTarget::Ids { ids } => {
                if ids.is_empty() {
                    return Err(OpsError::invalid("ids", "name at least one entry"));
                }
                let mut seen = std::collections::HashSet::with_capacity(ids.len());
                // An entry named twice is purged once.
                for &id in ids.iter().filter(|&&id| seen.insert(id)) {
                    let e = self.store.entry(id, now)?.summary;
                    match Action::Purge.refusal(e.state, e.stuck) {
                        Some(why) => skipped.push((id, why)),
                        None => touched.push(e),
                    }
                }
            }
            PurgeTarget::Expired { filter } => {
                let f = EntryFilter {
                    expired: true,
                    ..filter.clone()
                };
                self.each_entry(&f, None, &mut |e| {
                    touched.push(e.clone());
                    Ok(())
                })?;
            }
        }
        Ok(Preview {
            action: "purge".into(),
            count: touched.len(),
            destructive: touched.iter().any(|e| e.effect == Effect::Destructive),
            ids: touched.iter().map(|e| e.id).collect(),
            keys: touched.into_iter().map(|e| e.key).collect(),
            skipped,
        })
    }

    /// Purges what `cmd` names, in chunks of [`PURGE_CHUNK`] entries, each atomic. `progress`
    /// hears the count purged after each chunk and may stop the purge there: what is purged stays
    /// purged (the log says so), and the report says it stopped.
    pub fn purge(&self, cmd: &PurgeCmd, progress: Progress<'_>) -> OpsResult<PurgeReport> {
        let actor = validate_actor(&cmd.operator, &cmd.reason)?;
        let preview = self.preview_purge(&cmd.target)?;
        if let Some((id, why)) = preview.skipped.first() {
            return Err(OpsError::Conflict(format!(
                "entry {id} cannot be purged: {why}"
            )));
        }
        if preview.destructive && !cmd.confirm_destructive {
            return Err(OpsError::ConfirmationRequired(preview.keys));
        }
        let expired = matches!(cmd.target, PurgeTarget::Expired { .. });
        let mut purged = Vec::with_capacity(preview.ids.len());
        // Chunks keep each transaction short; each chunk is atomic.
        let chunks = preview.ids.chunks(PURGE_CHUNK);
        let last = chunks.len().saturating_sub(1);
        for (i, chunk) in chunks.enumerate() {
            let at = now_millis();
            let done = self
                .store
                .purge(PurgeRequest {
                    ids: chunk.to_vec(),
                    expired_by: expired.then_some(at),
                    actor: actor.clone(),
                    at,
                })
                .wait()?;
            purged.extend(done);
            if !progress(purged.len() as u64) && i < last {
                return Ok(PurgeReport {
                    purged,
                    cancelled: true,
                });
            }
        }
        Ok(PurgeReport {
            purged,
            cancelled: false,
        })
    }

    /// Marks lease and TTL expiries in the log (the proxy's sweeper calls this periodically).
    pub fn sweep(&self) -> OpsResult<SweepReport> {
        Ok(self.store.sweep(now_millis()).wait()?)
    }
}

#[cfg(test)]
#[allow(
    clippy::too_many_lines,
    reason = "a test is one scenario told top to bottom, its steps checked in order"
)]
mod tests {
    use super::*;
    use crate::ResolveCmd;
    use idemgate_ledger::{testing, EventFilter};

    #[test]
    fn a_command_with_a_member_it_does_not_know_is_refused_not_run_without_it() {
        let expired = PurgeCmd {
            target: PurgeTarget::Expired {
                filter: EntryFilter {
                    expired: true,
                    route: Some("charges".into()),
                    ..EntryFilter::default()
                },
            },
            operator: "o".into(),
            reason: "r".into(),
            confirm_destructive: true,
        };
        let ids = PurgeCmd {
            target: PurgeTarget::Ids { ids: vec![1, 2] },
            ..expired.clone()
        };
        // What is written reads back as it was, flattened target and all.
        for cmd in [&expired, &ids] {
            let json = serde_json::to_value(cmd).expect("json");
            assert_eq!(
                &serde_json::from_value::<PurgeCmd>(json).expect("reads"),
                cmd
            );
            let target = serde_json::to_value(&cmd.target).expect("json");
            assert_eq!(
                serde_json::from_value::<PurgeTarget>(target).expect("reads"),
                cmd.target
            );
        }
        let purge = |v: serde_json::Value| serde_json::from_value::<PurgeCmd>(v).map(|_| ());
        let with = |mut v: serde_json::Value, k: &str, x: serde_json::Value| {
            v[k] = x;
            v
        };
        let base = serde_json::json!({"target": "ids", "ids": [1], "operator": "o", "reason": "r"});
        assert!(purge(base.clone()).is_ok());
        for (bad, why) in [
            (with(base.clone(), "dry_run", true.into()), "dry_run"),
            (
                with(base.clone(), "filter", serde_json::json!({})),
                "filter",
            ),
            (with(base.clone(), "target", "expired".into()), "ids"),
            (with(base.clone(), "target", "all".into()), "all"),
            (
                serde_json::json!({"target": "ids", "operator": "o", "reason": "r"}),
                "ids",
            ),
            (
                serde_json::json!({"target": "expired", "filter": {"rout": "charges"},
                                   "operator": "o", "reason": "r"}),
                "rout",
            ),
            (
                serde_json::json!({"target": "expired", "operator": "o", "reason": "r"}),
                "filter",
            ),
        ] {
            let e = purge(bad.clone()).expect_err(&bad.to_string()).to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
        for bad in [
            serde_json::json!({"target": "ids", "ids": [1], "dry_run": true}),
            serde_json::json!({"target": "expired", "filter": {"expired": true, "scopes": "a"}}),
        ] {
            assert!(
                serde_json::from_value::<PurgeTarget>(bad.clone()).is_err(),
                "{bad}"
            );
        }
        let resolve = serde_json::json!({"entry_id": 1, "as": "completed", "operator": "o",
            "reason": "r", "response": {"status": 200, "headers": [], "body": "x"}});
        assert!(serde_json::from_value::<ResolveCmd>(resolve.clone()).is_ok());
        let mut typo = resolve.clone();
        typo["response"]["content_type"] = "text/plain".into();
        assert!(serde_json::from_value::<ResolveCmd>(typo).is_err());
        assert!(
            serde_json::from_value::<ResolveCmd>(with(resolve, "dry_run", true.into())).is_err()
        );
        assert!(
            serde_json::from_value::<EventFilter>(serde_json::json!({"kinds": "claim"})).is_err()
        );
    }

    /// A purge goes in chunks, each atomic, and reports after each; told to stop, it stops between
    /// two: the chunks done stay purged, the rest stay as they were, and a second purge takes them.
    #[test]
    fn a_purge_reports_each_chunk_and_stops_between_two_when_told() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ops =
            Ops::open_or_create(&dir.path().join("l.db").display().to_string()).expect("ledger");
        let n = 2 * PURGE_CHUNK + 500;
        testing::expired_charges(ops.store().as_ref(), n);
        let expired = || {
            ops.preview_purge(&PurgeTarget::Expired {
                filter: EntryFilter::default(),
            })
            .expect("preview")
            .count
        };
        assert_eq!(expired(), n);
        let cmd = PurgeCmd {
            target: PurgeTarget::Expired {
                filter: EntryFilter::default(),
            },
            operator: "o".into(),
            reason: "r".into(),
            confirm_destructive: false,
        };

        let mut heard = Vec::new();
        let r = ops
            .purge(&cmd, &mut |done| {
                heard.push(done);
                heard.len() < 2
            })
            .expect("purge");
        assert!(r.cancelled);
        assert_eq!(heard, [PURGE_CHUNK as u64, 2 * PURGE_CHUNK as u64]);
        assert_eq!(r.purged.len(), 2 * PURGE_CHUNK);
        assert_eq!(expired(), n - 2 * PURGE_CHUNK, "the rest as they were");

        // Told to stop after the last chunk, there is nothing left to stop: it is done.
        let mut heard = Vec::new();
        let r = ops
            .purge(&cmd, &mut |done| {
                heard.push(done);
                false
            })
            .expect("purge");
        assert!(!r.cancelled);
        assert_eq!(heard, [500]);
        assert_eq!(r.purged.len(), 500);
        assert_eq!(expired(), 0);
    }
}
