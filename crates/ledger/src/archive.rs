//! Archival: the old part of the log moves into sealed, compressed segment files, and only then
//! leaves the live ledger.
//!
//! A segment is an NDJSON export of a contiguous run of events, gzip-compressed, named by its range
//! (`events-000000000001-000000100000.ndjson.gz`), with a manifest beside it (first and last seq,
//! the first event's `prev_hash`, the last event's hash, the count, the file's sha256, and a signed
//! checkpoint when a signing key is configured), in a directory or a bucket ([`Place`]). Each step
//! is durable before the next begins:
//!
//! 1. the segment is written beside its place, synced, renamed into place (or uploaded), its
//!    manifest likewise, and the directory synced;
//! 2. the ledger records the segment (`archived`: its range, last hash, file and digest) and logs
//!    it, in one transaction; the database refuses the record unless the log holds its last event
//!    with that hash;
//! 3. the events the recorded segments hold are deleted, in short transactions: the only DELETE
//!    the log's triggers allow. The next segment is written meanwhile.
//!
//! A crash anywhere leaves every event in the live ledger, in a complete segment, or both: an
//! unrecorded segment is rewritten (or taken as it is, when its digest and range check out) by the
//! next run, which also finishes a removal a crash cut short.

use std::fs::File;
use std::io::{BufWriter, Write};

use serde::{Deserialize, Serialize};

use crate::checkpoint::Signer;
use crate::error::{LedgerError, Result};
use crate::export::{self, Format, HashingWriter, Manifest, Row};
use crate::model::{now_millis, rfc3339, ArchivedSegment, ChainHead, Event, Millis};
use crate::store::{Progress, Storage};
use crate::tree::TreeRange;

/// Events per segment unless told otherwise: one file per million events.
pub const SEGMENT_EVENTS: u64 = 1_000_000;

/// Events deleted per transaction once their segment is recorded: short enough to leave the
/// writer to the proxy between two.
pub const DELETE_CHUNK: u64 = 20_000;

/// What to archive, and where.
#[derive(Debug)]
pub struct ArchiveOptions {
    /// Events logged before this time are archived (by sequence: up to the last one before it).
    pub before: Millis,
    pub place: Place,
    /// The most events in one segment.
    pub segment_events: u64,
}

/// What a run of archival did.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ArchiveReport {
    /// The segments this run recorded.
    pub segments: Vec<ArchivedSegment>,
    /// The last archived event: the live log resumes after it.
    pub archived_through: Option<ChainHead>,
    /// Events removed from the live ledger by this run.
    pub removed: u64,
    /// Stopped between two segments when asked.
    #[serde(default)]
    pub cancelled: bool,
}

/// The file name of the segment of events `first..=last`.
pub fn segment_name(first: i64, last: i64) -> String {
    format!("events-{first:012}-{last:012}.ndjson.gz")
}

/// The range a segment's file name says it holds.
fn named_range(file: &str) -> Option<(i64, i64)> {
    let core = file.strip_prefix("events-")?.strip_suffix(".ndjson.gz")?;
    let (a, b) = core.split_once('-')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// Stops the process at a named step of archival while `IDEMGATE_TEST_PAUSE_AT` names it: the
/// crash tests kill it there with SIGKILL, so that each step is shown to lose nothing.
fn pause_at(step: &str) {
    if std::env::var("IDEMGATE_TEST_PAUSE_AT").is_ok_and(|s| s == step) {
        eprintln!("idemgate: paused at {step}");
        loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }
}

/// Removes from the live ledger the events the recorded segments hold (what a crash left).
pub fn finish_removal(store: &dyn Storage) -> Result<u64> {
    let mut removed = 0;
    loop {
        let n = store.drop_archived(DELETE_CHUNK).wait()?;
        removed += n;
        if n == 0 {
            return Ok(removed);
        }
        pause_at("removing");
    }
}

/// Archives the events logged before `opts.before` into segments in `opts.dir`, records each,
/// and removes its events from the live ledger. `progress` hears the events archived and may stop
/// the run between two segments. With a `signer`, each segment's last event is signed, logged and
/// carried in its manifest.
pub fn archive(
    store: &dyn Storage,
    opts: &ArchiveOptions,
    signer: Option<&Signer>,
    progress: Progress<'_>,
) -> Result<ArchiveReport> {
    opts.place.check()?;
    let mut report = ArchiveReport {
        removed: finish_removal(store)?,
        ..ArchiveReport::default()
    };
    let through = store.archived()?.last().map_or(0, |s| s.seq);
    // Only events the tree holds leave the live log: the tree keeps their hashes.
    crate::tree::catch_up(store, &|| true)?;
    let in_tree = store.tree_state()?.last_seq.unwrap_or(0);
    let last = store.seq_before(opts.before)?.unwrap_or(0).min(in_tree);
    let per = i64::try_from(opts.segment_events.max(1)).unwrap_or(i64::MAX);
    // A run cut short (a leader killed) may have left a segment past the recorded ones, sealed
    // for an earlier `before`. Its range is kept, to be taken or sealed again: two segments never
    // start at one seq.
    let left: Vec<(i64, i64)> = opts
        .place
        .names()?
        .iter()
        .filter_map(|n| named_range(n))
        .filter(|(a, _)| *a > through)
        .collect();
    let mut first = through + 1;
    let mut done = 0u64;
    std::thread::scope(|s| -> Result<()> {
        // A recorded segment's events are removed (by the writer) while the next segment is
        // sealed (by this thread and the compressor): each waits on a core the other leaves.
        let mut removing = None;
        let removed = |r: Option<std::thread::ScopedJoinHandle<'_, Result<u64>>>| {
            r.map_or(Ok(0), |h| {
                h.join()
                    .unwrap_or_else(|_| Err(LedgerError::Internal("a removal panicked".into())))
            })
        };
        while first <= last {
            let end = match left.iter().find(|(a, b)| *a == first && *b <= last) {
                Some((_, b)) => *b,
                None => last.min(first.saturating_add(per - 1)),
            };
            let sealed = seal(store, &opts.place, first, end, signer);
            report.removed += removed(removing.take())?;
            let seg = sealed?;
            pause_at("sealed");
            store.mark_archived(seg.clone()).wait()?;
            pause_at("recorded");
            removing = Some(
                std::thread::Builder::new()
                    .name("idemgate-removal".into())
                    .spawn_scoped(s, || finish_removal(store))?,
            );
            done += u64::try_from(seg.count).unwrap_or(0);
            report.segments.push(seg);
            first = end + 1;
            if first <= last && !progress(done) {
                report.cancelled = true;
                break;
            }
        }
        report.removed += removed(removing.take())?;
        Ok(())
    })?;
    progress(done);
    report.archived_through = store.archived()?.last().map(|s| ChainHead {
        seq: s.seq,
        hash: s.hash.clone(),
    });
    Ok(report)
}

/// NDJSON handed to the compressing thread at a time.
const CHUNK: usize = 1 << 18;
/// The segments' gzip level. On the log's NDJSON, zlib-rs at level 2 makes files about 5% larger
/// than at its default (6) in 60% of the time: the compressor is the busiest of archival's threads.
const LEVEL: u32 = 2;

/// The events `first..=last` as gzipped NDJSON into `out`: how many, the hash before the first,
/// and the last one's place in the chain. The events are read and written as lines on this thread
/// and compressed on another, so the two take a core each.
fn gzipped(
    store: &dyn Storage,
    first: i64,
    last: i64,
    out: &mut (impl Write + Send),
) -> Result<(i64, Option<String>, Option<ChainHead>)> {
    let mut count = 0i64;
    let mut first_prev: Option<String> = None;
    let mut head: Option<ChainHead> = None;
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(4);
    std::thread::scope(|s| {
        let compressor = std::thread::Builder::new()
            .name("idemgate-gzip".into())
            .spawn_scoped(s, move || -> std::io::Result<()> {
                let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::new(LEVEL));
                for chunk in rx {
                    gz.write_all(&chunk)?;
                }
                gz.finish().map(|_| ())
            })?;
        // Room for a chunk and the line that ends it.
        let buffer = || Vec::with_capacity(CHUNK + (1 << 12));
        let mut lines = buffer();
        let scanned = store.scan_seqs(first, last, &mut |ev: Event| {
            if first_prev.is_none() {
                first_prev = Some(ev.prev_hash.clone());
            }
            head = Some(ChainHead {
                seq: ev.seq,
                hash: ev.hash.clone(),
            });
            serde_json::to_writer(&mut lines, &Row::from(ev)).map_err(std::io::Error::other)?;
            lines.push(b'\n');
            count += 1;
            // A send fails only when the compressor stopped: its error is the call's.
            Ok(lines.len() < CHUNK || tx.send(std::mem::replace(&mut lines, buffer())).is_ok())
        });
        let sent = scanned.map(|()| lines.is_empty() || tx.send(lines).is_ok());
        drop(tx);
        let compressed = compressor
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("the compressing thread panicked")));
        compressed?;
        match sent? {
            true => Ok((count, first_prev, head)),
            false => Err(LedgerError::Internal(
                "the compressing thread stopped".into(),
            )),
        }
    })
}

/// Writes (or takes, when a crashed run left it complete) the segment of events `first..=last`.
fn seal(
    store: &dyn Storage,
    place: &Place,
    first: i64,
    last: i64,
    signer: Option<&Signer>,
) -> Result<ArchivedSegment> {
    let name = segment_name(first, last);
    if let Some(seg) = sealed_before(store, place, &name, first, last)? {
        return Ok(seg);
    }
    // Removed when dropped, unless committed: a failed run leaves no partial file behind.
    let spool = place.spool(&name);
    let file = File::create(spool.path())?;
    let mut w = HashingWriter::new(BufWriter::with_capacity(1 << 16, file));
    let (count, first_prev, head) = gzipped(store, first, last, &mut w)?;
    if count != last - first + 1 || head.as_ref().map(|h| h.seq) != Some(last) {
        return Err(LedgerError::Corrupt(format!(
            "the live log does not hold every event of seq {first}–{last} ({count} found): \
             run verify"
        )));
    }
    let (sha256, bytes) = w.sync()?;
    pause_at("written");
    place.commit(spool, &name)?;
    pause_at("renamed");
    let checkpoint = match (signer, &head) {
        (Some(s), Some(h)) => Some(s.sign_and_log(store, h)?.0),
        _ => None,
    };
    let tree = TreeRange::of(
        store,
        (first, last),
        u64::try_from(count).unwrap_or(0),
        signer,
    )?;
    let now = now_millis();
    let manifest = Manifest {
        manifest_version: 1,
        format: Format::Ndjson,
        alg: store.chain_alg()?,
        file: name.clone(),
        sha256: sha256.clone(),
        bytes,
        count: u64::try_from(count).unwrap_or(0),
        first_seq: Some(first),
        last_seq: Some(last),
        first_prev_hash: first_prev,
        chain_head: head.clone(),
        ledger_head: store.head()?,
        since: None,
        until: None,
        created_at: rfc3339(now),
        ledger: store.location(),
        compression: Some("gzip".into()),
        checkpoint,
        tree,
    };
    place.put_manifest(&name, &manifest)?;
    Ok(ArchivedSegment {
        first_seq: first,
        seq: last,
        hash: head.map(|h| h.hash).unwrap_or_default(),
        count,
        file: name,
        sha256,
        bytes: i64::try_from(bytes).unwrap_or(i64::MAX),
        at: now,
    })
}

/// A segment `name` of `first..=last` a crashed run left complete in `place`: its manifest names
/// the range, the file has the manifest's digest, and its last hash is the live log's. `None` when
/// there is none, or what is there must be written again.
fn sealed_before(
    store: &dyn Storage,
    place: &Place,
    name: &str,
    first: i64,
    last: i64,
) -> Result<Option<ArchivedSegment>> {
    let Some(m) = place.manifest(name)? else {
        return Ok(None);
    };
    if m.first_seq != Some(first) || m.last_seq != Some(last) {
        return Ok(None);
    }
    let Some(head) = m.chain_head.clone() else {
        return Ok(None);
    };
    let Some(file) = place.local(name)? else {
        return Ok(None);
    };
    if export::file_sha256(file.path())? != m.sha256 {
        return Ok(None);
    }
    if !store.contains(&head)? {
        return Err(LedgerError::Corrupt(format!(
            "{} is a segment of another ledger (its last event is not this ledger's seq {}): \
             archive into a place of this ledger's own",
            place.join(name),
            head.seq
        )));
    }
    Ok(Some(ArchivedSegment {
        first_seq: first,
        seq: last,
        hash: head.hash,
        count: i64::try_from(m.count).unwrap_or(0),
        file: m.file,
        sha256: m.sha256,
        bytes: i64::try_from(m.bytes).unwrap_or(i64::MAX),
        at: now_millis(),
    }))
}

mod place;
mod verify;
pub use place::{Bucket, Place};
pub use verify::{segments, verify_archive, ArchiveVerifyReport, SegmentCheck};

/// Event `seq` as the sealed segment `seg` in `place` holds it; `None` when it does not.
pub fn archived_event(place: &Place, seg: &ArchivedSegment, seq: i64) -> Result<Option<Event>> {
    let Some(file) = place.local(&seg.file)? else {
        return Err(LedgerError::Corrupt(format!(
            "{} is missing: the ledger recorded it",
            place.join(&seg.file)
        )));
    };
    for e in crate::export::read_rows(file.path(), Format::Ndjson, true)? {
        let e = e?;
        if e.seq == seq {
            return Ok(Some(e));
        }
        if e.seq > seq {
            break;
        }
    }
    Ok(None)
}
