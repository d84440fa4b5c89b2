//! The audit trail over years: archival of the old log into sealed segments, the retention policy
//! (purge long-expired entries, archive the log past its hot period), signed checkpoints of the
//! chain's head, and verification of an archive with the live log after it.

use idemgate_ledger::archive::{self, ArchiveOptions, ArchiveReport, ArchiveVerifyReport, Place};
use idemgate_ledger::checkpoint::{PublicKey, SignedCheckpoint};
use idemgate_ledger::{
    now_millis, ChainHasher, ChainHead, EntryFilter, EventFilter, EventKind, Leader, Millis, Page,
    Progress, PurgeRequest, State, Storage, RETENTION_OPERATOR,
};
use serde::{Deserialize, Serialize};

use crate::op::common::Time;
use crate::{Ops, OpsError, OpsResult, PURGE_CHUNK};

/// What `idemgate archive` (and the console) asks for.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArchiveCmd {
    /// Events logged before this time are archived.
    pub before: Time,
    /// The archive: a directory (it must exist) or `s3://bucket/prefix`.
    pub dir: String,
    /// The most events in one segment (default 1,000,000).
    #[serde(default)]
    pub segment_events: Option<u64>,
}

/// A retention policy: how long what stays in the live ledger.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetentionPolicy {
    /// Completed, released and failed entries this long past their expiry are purged (ms).
    pub entries_ms: Option<i64>,
    /// Events older than this are archived into `archive_dir` (ms).
    pub log_hot_ms: Option<i64>,
    /// Where archive segments go.
    pub archive_dir: Option<String>,
}

impl RetentionPolicy {
    /// The policy `[retention]` configures.
    pub fn from_config(r: &idemgate_config::Retention) -> RetentionPolicy {
        let ms = |d: std::time::Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        RetentionPolicy {
            entries_ms: r.entries.map(ms),
            log_hot_ms: r.log_hot.map(ms),
            archive_dir: r.archive_dir.clone(),
        }
    }

    /// Whether it does anything.
    pub fn is_empty(&self) -> bool {
        self.entries_ms.is_none() && self.log_hot_ms.is_none()
    }

    /// A duration in its largest whole unit, as the configuration writes it (`30d`, `1h`).
    pub fn span(d: std::time::Duration) -> String {
        span(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }

    /// The policy in words, as the log records it as the reason of what it does.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(ms) = self.entries_ms {
            parts.push(format!("entries = {}", span(ms)));
        }
        if let Some(ms) = self.log_hot_ms {
            parts.push(format!("log_hot = {}", span(ms)));
        }
        if let Some(d) = &self.archive_dir {
            parts.push(format!("archive_dir = {d}"));
        }
        format!("retention policy: {}", parts.join(", "))
    }
}

/// A span in the largest whole unit: `30d`, `36h`, `90m`, `45s`, `500ms`.
fn span(ms: i64) -> String {
    for (unit, n) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
    ] {
        if ms != 0 && ms % n == 0 {
            return format!("{}{unit}", ms / n);
        }
    }
    format!("{ms}ms")
}

/// What one run of a retention policy did.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetentionReport {
    /// The policy, in words.
    pub policy: String,
    /// Entries purged.
    pub purged: u64,
    /// What archival did, when the policy archives.
    pub archive: Option<ArchiveReport>,
    /// When it ran.
    pub at: Millis,
    /// The seq of the log event that records the run.
    pub logged_as: i64,
}

/// The retention policy's last run, as the log recorded it, and the archive so far.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetentionStatus {
    /// The policy of the last run, in words.
    pub policy: Option<String>,
    /// When it last ran.
    pub last_run_at: Option<Millis>,
    /// What it did then.
    pub last_run: Option<RetentionRun>,
    /// Segments the ledger recorded.
    pub segments: u64,
    /// The last archived event's seq.
    pub archived_through: Option<i64>,
    /// Where the last run archived to.
    pub archive_dir: Option<String>,
    /// On a ledger several instances share, the one that keeps the books now (runs retention,
    /// archives and signs); `None` on a ledger one process writes.
    pub leader: Option<Leader>,
}

/// What one run of the policy did, as its log event records it.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetentionRun {
    /// Entries purged.
    #[serde(default)]
    pub purged: u64,
    /// Segments sealed.
    #[serde(default)]
    pub segments: u64,
    /// The last archived event after the run.
    #[serde(default)]
    pub archived_through: Option<i64>,
    /// Events that left the live ledger.
    #[serde(default)]
    pub removed: u64,
}

impl Ops {
    /// Archives the events logged before `cmd.before` into `cmd.dir` and removes them from the
    /// live ledger; signs each segment when a signing key is configured.
    pub fn archive(&self, cmd: &ArchiveCmd, progress: Progress<'_>) -> OpsResult<ArchiveReport> {
        if cmd.dir.trim().is_empty() {
            return Err(OpsError::invalid("to", "name the archive directory"));
        }
        let place = place("to", &cmd.dir)?;
        if let Place::Dir(dir) = &place {
            if !dir.is_dir() {
                return Err(OpsError::invalid(
                    "to",
                    &format!("{} is not a directory (create it first)", dir.display()),
                ));
            }
        }
        if cmd.before.0 > now_millis() {
            return Err(OpsError::invalid(
                "before",
                "is in the future: only the past is archived",
            ));
        }
        if cmd.segment_events == Some(0) {
            return Err(OpsError::invalid("segment_events", "must be at least 1"));
        }
        let opts = ArchiveOptions {
            before: cmd.before.0,
            place,
            segment_events: cmd.segment_events.unwrap_or(archive::SEGMENT_EVENTS),
        };
        Ok(archive::archive(
            self.store.as_ref(),
            &opts,
            self.signer.as_deref(),
            progress,
        )?)
    }

    /// Verifies the archive `place` and the live log after it: the whole history, naming each
    /// missing, altered or reordered segment. With `public_key`, every segment must carry a
    /// checkpoint it signed.
    pub fn verify_archive(
        &self,
        place: &Place,
        public_key: Option<&PublicKey>,
        progress: Progress<'_>,
    ) -> OpsResult<ArchiveVerifyReport> {
        verify_place(
            place,
            Some(self.store.as_ref()),
            &self.hasher,
            public_key,
            progress,
        )
    }

    /// The archive segments in `place`, from their manifests (not verified), each marked
    /// recorded or not by this ledger.
    pub fn archive_segments(&self, place: &Place) -> OpsResult<Vec<archive::SegmentCheck>> {
        check_place(place)?;
        Ok(archive::segments(place, Some(self.store.as_ref()))?)
    }

    /// The segments of the host's own archive; none while its directory is not made yet (no
    /// retention run has archived anything).
    pub fn archived(&self) -> OpsResult<Vec<archive::SegmentCheck>> {
        let place = self.archive_place()?.ok_or(OpsError::NoArchive)?;
        if !place.exists() && self.store.archived()?.is_empty() {
            return Ok(Vec::new());
        }
        self.archive_segments(&place)
    }

    /// Verifies the host's own archive and the live log after it.
    pub fn verify_history(&self, progress: Progress<'_>) -> OpsResult<ArchiveVerifyReport> {
        let place = self.archive_place()?.ok_or(OpsError::NoArchive)?;
        if !place.exists() {
            return Err(OpsError::invalid(
                "archive_dir",
                &format!("{place} does not exist: no retention run has archived anything yet"),
            ));
        }
        self.verify_archive(&place, None, progress)
    }

    /// Runs `policy` once: purges the entries long past their expiry (never a pending one), then
    /// archives the log past its hot period, and logs the run.
    pub fn retention_run(
        &self,
        policy: &RetentionPolicy,
        progress: Progress<'_>,
    ) -> OpsResult<RetentionReport> {
        if policy.is_empty() {
            return Err(OpsError::invalid(
                "retention",
                "the policy sets neither `entries` nor `log_hot`",
            ));
        }
        let reason = policy.describe();
        let at = now_millis();
        let purged = match policy.entries_ms {
            Some(ms) => self.purge_expired_by(at - ms, &reason)?,
            None => 0,
        };
        let archive = match (policy.log_hot_ms, &policy.archive_dir) {
            (Some(ms), Some(dir)) => Some(self.archive(
                &ArchiveCmd {
                    before: Time(at - ms),
                    dir: dir.clone(),
                    segment_events: None,
                },
                progress,
            )?),
            (Some(_), None) => {
                return Err(OpsError::invalid(
                    "retention",
                    "`log_hot` needs `archive_dir`: archived events go there",
                ))
            }
            (None, _) => None,
        };
        let detail = serde_json::json!({
            "entries_ms": policy.entries_ms,
            "log_hot_ms": policy.log_hot_ms,
            "archive_dir": policy.archive_dir,
            "purged": purged,
            "segments": archive.as_ref().map_or(0, |a| a.segments.len()),
            "archived_through": archive.as_ref().and_then(|a| a.archived_through.as_ref()).map(|h| h.seq),
            "removed": archive.as_ref().map_or(0, |a| a.removed),
        });
        let logged_as = self
            .store
            .note_retention(detail, reason.clone(), now_millis())
            .wait()?;
        Ok(RetentionReport {
            policy: reason,
            purged,
            archive,
            at,
            logged_as,
        })
    }

    /// Purges, in chunks, every completed, released or failed entry that had expired by `by`.
    fn purge_expired_by(&self, by: Millis, reason: &str) -> OpsResult<u64> {
        let mut ids = Vec::new();
        self.each_entry(
            &EntryFilter {
                expired: true,
                ..EntryFilter::default()
            },
            None,
            &mut |e| {
                if e.state != State::Pending && e.expires_at.is_some_and(|x| x <= by) {
                    ids.push(e.id);
                }
                Ok(())
            },
        )?;
        let actor = idemgate_ledger::Actor {
            operator: RETENTION_OPERATOR.to_owned(),
            reason: reason.to_owned(),
        };
        let mut purged = 0u64;
        for chunk in ids.chunks(PURGE_CHUNK) {
            purged += self
                .store
                .purge(PurgeRequest {
                    ids: chunk.to_vec(),
                    expired_by: Some(by),
                    actor: actor.clone(),
                    at: now_millis(),
                })
                .wait()?
                .len() as u64;
        }
        Ok(purged)
    }

    /// The last run of the retention policy, from the log, and the archive's extent.
    pub fn retention_status(&self) -> OpsResult<RetentionStatus> {
        let last = self
            .store
            .events(
                &EventFilter {
                    kind: Some("retention".into()),
                    ..EventFilter::default()
                },
                Page::newest(None, 1),
            )?
            .into_iter()
            .next();
        let recorded = self.store.archived()?;
        let detail: Option<serde_json::Value> = last
            .as_ref()
            .and_then(|e| serde_json::from_str(&e.detail).ok());
        Ok(RetentionStatus {
            policy: last.as_ref().and_then(|e| e.reason.clone()),
            last_run_at: last.as_ref().map(|e| e.at),
            archive_dir: detail
                .as_ref()
                .and_then(|d| d.get("archive_dir"))
                .and_then(|d| d.as_str())
                .map(str::to_owned),
            last_run: detail.and_then(|d| serde_json::from_value(d).ok()),
            segments: recorded.len() as u64,
            archived_through: recorded.last().map(|s| s.seq),
            leader: self.store.leader()?,
        })
    }

    /// Signs the chain's head and logs the checkpoint, unless the head is itself a checkpoint's
    /// event: nothing happened since the last one, whichever instance signed it. The checkpoint
    /// and its event's seq.
    pub fn checkpoint(&self) -> OpsResult<Option<(SignedCheckpoint, i64)>> {
        let signer = self.signing_key("a checkpoint")?;
        let newest = self
            .store
            .events(&EventFilter::default(), Page::newest(None, 1))?;
        let head = match newest.into_iter().next() {
            Some(e) if e.kind == EventKind::Checkpoint.as_str() => return Ok(None),
            Some(e) => ChainHead {
                seq: e.seq,
                hash: e.hash,
            },
            // Every event archived: the head is the last archived one.
            None => match self.store.head()? {
                Some(head) => head,
                None => return Ok(None),
            },
        };
        Ok(Some(signer.sign_head_and_log(self.store.as_ref(), &head)?))
    }
}

/// Verifies the archive `place` alone, with no ledger: each segment, and the segments chained
/// to each other (`hasher` as the ledger that wrote them hashed). With `public_key`, every
/// segment must carry a checkpoint it signed.
pub fn verify_archive_files(
    place: &Place,
    hasher: &ChainHasher,
    public_key: Option<&PublicKey>,
    progress: Progress<'_>,
) -> OpsResult<ArchiveVerifyReport> {
    verify_place(place, None, hasher, public_key, progress)
}

/// The archive `place` verified, and the live log after it when `store` is given.
fn verify_place(
    place: &Place,
    store: Option<&dyn Storage>,
    hasher: &ChainHasher,
    public_key: Option<&PublicKey>,
    progress: Progress<'_>,
) -> OpsResult<ArchiveVerifyReport> {
    check_place(place)?;
    Ok(archive::verify_archive(
        place, store, hasher, public_key, progress,
    )?)
}

/// The archive `s` names (a directory or `s3://bucket/prefix`), or why it names none, as the
/// request's `field`.
pub fn place(field: &str, s: &str) -> OpsResult<Place> {
    Place::parse(s).map_err(|e| OpsError::invalid(field, &e.to_string()))
}

fn check_place(place: &Place) -> OpsResult<()> {
    if let Place::Dir(dir) = place {
        if !dir.is_dir() {
            return Err(OpsError::invalid(
                "archive",
                &format!("{} is not a directory", dir.display()),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_reads_as_its_configuration() {
        let p = RetentionPolicy {
            entries_ms: Some(30 * 86_400_000),
            log_hot_ms: Some(36 * 3_600_000),
            archive_dir: Some("/var/lib/idemgate/archive".into()),
        };
        assert_eq!(
            p.describe(),
            "retention policy: entries = 30d, log_hot = 36h, archive_dir = /var/lib/idemgate/archive"
        );
        assert_eq!(span(1500), "1500ms");
    }
}
