//! Archival: the old part of the log moves into sealed, compressed segment files, and only then
//! leaves the live ledger.
//!
//! A segment is an NDJSON export of a contiguous run of events, gzip-compressed, named by its range
//! (`events-000000000001-000000100000.ndjson.gz`), with a manifest beside it (first and last seq,
//! the first event's `prev_hash`, the last event's hash, the count, the file's sha256, and a signed
//! checkpoint when a signing key is configured). Each step is durable before the next begins:
//!
//! 1. the segment is written beside its place, synced, renamed into place, its manifest likewise,
//!    and the directory synced;
//! 2. the ledger records the segment (`archived`: its range, last hash, file and digest) and logs
//!    it, in one transaction; the database refuses the record unless the log holds its last event
//!    with that hash;
//! 3. the events the recorded segments hold are deleted, in short transactions: the only DELETE
//!    the log's triggers allow.
//!
//! A crash anywhere leaves every event in the live ledger, in a complete segment, or both: an
//! unrecorded segment is rewritten (or taken as it is, when its digest and range check out) by the
//! next run, which also finishes a removal a crash cut short.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::chain::{ChainHasher, ChainStart, VerifyReport, GENESIS};
use crate::checkpoint::{PublicKey, SignedCheckpoint, Signer};
use crate::error::{LedgerError, Result};
use crate::export::{self, Format, HashingWriter, Manifest, Row};
use crate::model::{now_millis, rfc3339, ArchivedSegment, ChainHead, Event, Millis};
use crate::store::{Progress, Storage};

/// Events per segment unless told otherwise: one file per million events.
pub const SEGMENT_EVENTS: u64 = 1_000_000;

/// Events deleted per transaction once their segment is recorded: short enough to leave the
/// writer to the proxy between two.
pub const DELETE_CHUNK: u64 = 20_000;

/// What to archive, and where.
#[derive(Debug, Clone)]
pub struct ArchiveOptions {
    /// Events logged before this time are archived (by sequence: up to the last one before it).
    pub before: Millis,
    pub dir: PathBuf,
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
    if !opts.dir.is_dir() {
        return Err(LedgerError::Io(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("archive directory {} does not exist", opts.dir.display()),
        )));
    }
    let mut report = ArchiveReport {
        removed: finish_removal(store)?,
        ..ArchiveReport::default()
    };
    let through = store.archived()?.last().map_or(0, |s| s.seq);
    let last = store.seq_before(opts.before)?.unwrap_or(0);
    let per = i64::try_from(opts.segment_events.max(1)).unwrap_or(i64::MAX);
    let mut first = through + 1;
    let mut done = 0u64;
    while first <= last {
        let end = last.min(first.saturating_add(per - 1));
        let seg = seal(store, &opts.dir, first, end, signer)?;
        pause_at("sealed");
        store.mark_archived(seg.clone()).wait()?;
        pause_at("recorded");
        report.removed += finish_removal(store)?;
        done += u64::try_from(seg.count).unwrap_or(0);
        report.segments.push(seg);
        first = end + 1;
        if first <= last && !progress(done) {
            report.cancelled = true;
            break;
        }
    }
    progress(done);
    report.archived_through = store.archived()?.last().map(|s| ChainHead {
        seq: s.seq,
        hash: s.hash.clone(),
    });
    Ok(report)
}

/// The events `first..=last` as gzipped NDJSON into `out`: how many, the hash before the first,
/// and the last one's place in the chain.
fn gzipped(
    store: &dyn Storage,
    first: i64,
    last: i64,
    out: &mut impl Write,
) -> Result<(i64, Option<String>, Option<ChainHead>)> {
    let mut count = 0i64;
    let mut first_prev: Option<String> = None;
    let mut head: Option<ChainHead> = None;
    let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
    let mut line = Vec::with_capacity(512);
    let mut io_err = None;
    store.scan_seqs(first, last, &mut |ev: Event| {
        if first_prev.is_none() {
            first_prev = Some(ev.prev_hash.clone());
        }
        head = Some(ChainHead {
            seq: ev.seq,
            hash: ev.hash.clone(),
        });
        line.clear();
        serde_json::to_writer(&mut line, &Row::from(ev)).map_err(std::io::Error::other)?;
        line.push(b'\n');
        if let Err(e) = gz.write_all(&line) {
            io_err = Some(e);
            return Ok(false);
        }
        count += 1;
        Ok(true)
    })?;
    if let Some(e) = io_err {
        return Err(e.into());
    }
    gz.finish()?;
    Ok((count, first_prev, head))
}

/// Writes (or takes, when a crashed run left it complete) the segment of events `first..=last`.
fn seal(
    store: &dyn Storage,
    dir: &Path,
    first: i64,
    last: i64,
    signer: Option<&Signer>,
) -> Result<ArchivedSegment> {
    let name = segment_name(first, last);
    let path = dir.join(&name);
    if let Some(seg) = sealed_before(store, &path, first, last)? {
        return Ok(seg);
    }
    let tmp = export::partial(&path);
    let file = File::create(&tmp)?;
    let mut w = HashingWriter::new(BufWriter::with_capacity(1 << 16, file));
    let (count, first_prev, head) = match gzipped(store, first, last, &mut w) {
        Ok(written) => written,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    };
    if count != last - first + 1 || head.as_ref().map(|h| h.seq) != Some(last) {
        let _ = std::fs::remove_file(&tmp);
        return Err(LedgerError::Corrupt(format!(
            "the live log does not hold every event of seq {first}–{last} ({count} found): \
             run verify"
        )));
    }
    let (sha256, bytes) = w.sync()?;
    pause_at("written");
    // Nothing recorded points at this name yet, so what is there is replaced.
    std::fs::rename(&tmp, &path)?;
    pause_at("renamed");
    let checkpoint = match (signer, &head) {
        (Some(s), Some(h)) => Some(s.sign_and_log(store, h)?.0),
        _ => None,
    };
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
    };
    export::write_manifest(&path, &manifest)?;
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

/// A segment of `first..=last` a crashed run left complete at `path`: its manifest names the
/// range, the file has the manifest's digest, and its last hash is the live log's. `None` when
/// there is none, or what is there must be written again.
fn sealed_before(
    store: &dyn Storage,
    path: &Path,
    first: i64,
    last: i64,
) -> Result<Option<ArchivedSegment>> {
    let Some(m) = read_manifest(&export::manifest_path(path))? else {
        return Ok(None);
    };
    if !path.exists() || m.first_seq != Some(first) || m.last_seq != Some(last) {
        return Ok(None);
    }
    let Some(head) = m.chain_head.clone() else {
        return Ok(None);
    };
    if export::file_sha256(path)? != m.sha256 {
        return Ok(None);
    }
    if !store.contains(&head)? {
        return Err(LedgerError::Corrupt(format!(
            "{} is a segment of another ledger (its last event is not this ledger's seq {}): \
             archive into a directory of this ledger's own",
            path.display(),
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

fn read_manifest(path: &Path) -> Result<Option<Manifest>> {
    match std::fs::read(path) {
        Ok(raw) => serde_json::from_slice(&raw)
            .map(Some)
            .map_err(|e| LedgerError::BadExport(format!("{}: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// One segment as verification found it.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentCheck {
    pub file: String,
    pub first_seq: Option<i64>,
    pub last_seq: Option<i64>,
    pub count: u64,
    pub bytes: u64,
    /// The signed checkpoint its manifest carries.
    pub checkpoint: Option<SignedCheckpoint>,
    /// Recorded by the ledger (known only when a ledger was given).
    pub recorded: Option<bool>,
    /// Whether the file was verified; a listing only reads the manifests.
    pub checked: bool,
    pub ok: bool,
    /// What is wrong with it.
    pub problems: Vec<String>,
}

/// What verifying an archive (and the live log after it) found.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchiveVerifyReport {
    pub ok: bool,
    pub dir: String,
    pub segments: Vec<SegmentCheck>,
    /// The live log after the archived part, when a ledger was given.
    pub live: Option<VerifyReport>,
    /// Events verified, archived and live.
    pub count: u64,
    /// The last event verified.
    pub head: Option<ChainHead>,
    /// Everything wrong, each naming its segment or range.
    pub problems: Vec<String>,
    /// What a run cut short left (not a problem: the next run finishes it).
    pub unfinished: Vec<String>,
    #[serde(default)]
    pub cancelled: bool,
}

/// The segments with a manifest (by file name), oldest first, and the files without one.
type Listing = (Vec<(String, Manifest)>, Vec<String>);

/// The manifests in `dir`, and the segment files without one.
fn list(dir: &Path) -> Result<Listing> {
    let mut manifests = Vec::new();
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let name = e?.file_name().to_string_lossy().into_owned();
        if let Some(seg) = name.strip_suffix(".manifest.json") {
            if seg.ends_with(".ndjson.gz") {
                if let Some(m) = read_manifest(&dir.join(&name))? {
                    manifests.push((seg.to_owned(), m));
                }
            }
        } else if name.starts_with("events-") && name.ends_with(".ndjson.gz") {
            files.push(name);
        }
    }
    manifests.sort_by_key(|(name, m)| (m.first_seq.unwrap_or(i64::MAX), name.clone()));
    let orphans = files
        .into_iter()
        .filter(|f| !manifests.iter().any(|(n, _)| n == f))
        .collect();
    Ok((manifests, orphans))
}

/// The segments in `dir` as their manifests describe them, oldest first, without reading the
/// files; each marked recorded or not by `store`'s ledger.
pub fn segments(dir: &Path, store: Option<&dyn Storage>) -> Result<Vec<SegmentCheck>> {
    let (manifests, _) = list(dir)?;
    let recorded = match store {
        Some(s) => Some(s.archived()?),
        None => None,
    };
    Ok(manifests
        .into_iter()
        .map(|(name, m)| SegmentCheck {
            recorded: recorded.as_ref().map(|r| r.iter().any(|s| s.file == name)),
            file: name,
            first_seq: m.first_seq,
            last_seq: m.last_seq,
            count: m.count,
            bytes: m.bytes,
            checkpoint: m.checkpoint,
            checked: false,
            ok: true,
            problems: Vec::new(),
        })
        .collect())
}

/// Verifies the whole history: every segment in `dir` (its digest, the chain inside it, its link
/// to the one before, its signed checkpoint when `public_key` is given) and, with a `store`, the
/// ledger's record of them and the live log after them. Names each missing, altered or reordered
/// segment.
///
/// What a run cut short leaves is not a problem: a segment file without its manifest, or a
/// segment the ledger has not recorded yet, past the last recorded one (its events are still
/// live; the next run takes it or writes it again). They are listed in `unfinished`.
pub fn verify_archive(
    dir: &Path,
    store: Option<&dyn Storage>,
    hasher: &ChainHasher,
    public_key: Option<&PublicKey>,
    progress: Progress<'_>,
) -> Result<ArchiveVerifyReport> {
    let (manifests, orphans) = list(dir)?;
    let recorded = store.map(Storage::archived).transpose()?;
    let through = recorded.as_ref().and_then(|r| r.last()).map(|r| r.seq);
    let mut w = Walk {
        dir,
        hasher,
        public_key,
        recorded: recorded.as_deref(),
        next: ChainHead {
            seq: 0,
            hash: GENESIS.to_owned(),
        },
        count: 0,
        problems: Vec::new(),
        unfinished: Vec::new(),
        segments: Vec::with_capacity(manifests.len()),
        cancelled: false,
    };
    // Past the archived part (with a ledger) or the last sealed segment (without), a run was cut
    // short; before it, a file without a manifest is a damaged archive.
    let sealed_through = match store {
        Some(_) => through.unwrap_or(0),
        None => manifests
            .iter()
            .filter_map(|(_, m)| m.last_seq)
            .max()
            .unwrap_or(0),
    };
    for f in orphans {
        match named_range(&f) {
            Some((first, _)) if first > sealed_through => w.unfinished.push(f),
            _ => w.problems.push(format!("{f}: no manifest beside it")),
        }
    }
    for (name, m) in &manifests {
        if store.is_some() && m.first_seq.unwrap_or(0) > through.unwrap_or(0) {
            // Not recorded yet: its events are live, and the live log is verified below.
            if let (Some(store), Some(h)) = (store, &m.chain_head) {
                if !store.contains(h)? {
                    w.problems.push(format!(
                        "{name}: its last event is not this ledger's seq {}",
                        h.seq
                    ));
                }
            }
            w.unfinished.push(name.clone());
            continue;
        }
        w.segment(name, m, progress)?;
        if w.cancelled {
            break;
        }
    }
    let mut live = None;
    if let (Some(store), Some(recorded), false) = (store, &recorded, w.cancelled) {
        live = Some(w.live(store, &manifests, recorded, progress)?);
    }
    let head = live
        .as_ref()
        .and_then(|l| l.head.clone())
        .or_else(|| (w.next.seq > 0).then(|| w.next.clone()));
    Ok(ArchiveVerifyReport {
        ok: w.problems.is_empty() && !w.cancelled,
        dir: dir.display().to_string(),
        segments: w.segments,
        live,
        count: w.count,
        head,
        problems: w.problems,
        unfinished: w.unfinished,
        cancelled: w.cancelled,
    })
}

/// A walk through the segments in order.
struct Walk<'a> {
    dir: &'a Path,
    hasher: &'a ChainHasher,
    public_key: Option<&'a PublicKey>,
    recorded: Option<&'a [ArchivedSegment]>,
    /// The last event of the segments walked so far.
    next: ChainHead,
    count: u64,
    problems: Vec<String>,
    unfinished: Vec<String>,
    segments: Vec<SegmentCheck>,
    cancelled: bool,
}

impl Walk<'_> {
    /// After the segments: each segment the ledger recorded is here, the last ends where the
    /// ledger says, and the live log verifies on from it.
    fn live(
        &mut self,
        store: &dyn Storage,
        manifests: &[(String, Manifest)],
        recorded: &[ArchivedSegment],
        progress: Progress<'_>,
    ) -> Result<VerifyReport> {
        for r in recorded {
            if !manifests.iter().any(|(n, _)| n == &r.file) {
                self.problems.push(format!(
                    "{}: missing (seq {}–{}, recorded in the ledger)",
                    r.file, r.first_seq, r.seq
                ));
            }
        }
        let through = recorded.last().map_or(0, |r| r.seq);
        if self.next.seq < through {
            self.problems
                .push(missing(self.next.seq + 1, through, Some(recorded)));
        } else if self.next.seq == through && through > 0 {
            let recorded_head = recorded.last().map(|r| r.hash.as_str());
            if recorded_head != Some(self.next.hash.as_str()) {
                self.problems.push(format!(
                    "the last segment ends at seq {through} with another hash than the ledger recorded"
                ));
            }
        }
        let base = self.count;
        let chain = store.verify(&mut |n| progress(base + n))?;
        if let (Some(seq), Some(p)) = (chain.first_bad_seq, &chain.problem) {
            self.problems.push(format!("live log: seq {seq}: {p}"));
        }
        self.cancelled |= chain.cancelled;
        self.count += chain.count;
        Ok(chain)
    }

    /// Checks the segment `name` after the ones walked.
    fn segment(&mut self, name: &str, m: &Manifest, progress: Progress<'_>) -> Result<()> {
        let mut check = SegmentCheck {
            file: name.to_owned(),
            first_seq: m.first_seq,
            last_seq: m.last_seq,
            count: m.count,
            bytes: m.bytes,
            checkpoint: m.checkpoint.clone(),
            recorded: self.recorded.map(|r| r.iter().any(|s| s.file == name)),
            checked: true,
            ok: true,
            problems: Vec::new(),
        };
        let (first, last) = (m.first_seq.unwrap_or(0), m.last_seq.unwrap_or(0));
        if named_range(name) != Some((first, last)) {
            check.problems.push(format!(
                "reordered: its manifest says it holds seq {first}–{last}, not what its name says"
            ));
        }
        let start = if first == self.next.seq + 1 {
            ChainStart::After(self.next.clone())
        } else {
            if first > self.next.seq + 1 {
                self.problems
                    .push(missing(self.next.seq + 1, first - 1, self.recorded));
            } else {
                check.problems.push(format!(
                    "reordered: it starts at seq {first}, inside the segments before it (through seq {})",
                    self.next.seq
                ));
            }
            ChainStart::Anywhere {
                prev_hash: m.first_prev_hash.clone(),
            }
        };
        let base = self.count;
        let chain = check_segment(
            &SegmentCtx {
                dir: self.dir,
                hasher: self.hasher,
                public_key: self.public_key,
                recorded: self.recorded,
            },
            name,
            m,
            start,
            &mut check,
            &mut |n| progress(base + n),
        )?;
        self.cancelled |= chain.cancelled;
        self.count += chain.count;
        self.next = ChainHead {
            seq: last,
            hash: m.chain_head.clone().map(|h| h.hash).unwrap_or_default(),
        };
        check.ok = check.problems.is_empty();
        self.problems
            .extend(check.problems.iter().map(|p| format!("{name}: {p}")));
        self.segments.push(check);
        Ok(())
    }
}

/// The problem of a gap in the segments, naming the recorded segment that covered it if any.
fn missing(first: i64, last: i64, recorded: Option<&[ArchivedSegment]>) -> String {
    let named: Vec<&str> = recorded
        .unwrap_or_default()
        .iter()
        .filter(|r| r.first_seq <= last && r.seq >= first)
        .map(|r| r.file.as_str())
        .collect();
    if named.is_empty() {
        format!("missing: no segment holds seq {first}–{last}")
    } else {
        format!(
            "missing: no segment holds seq {first}–{last} (the ledger recorded {})",
            named.join(", ")
        )
    }
}

/// What checking a segment needs besides the segment.
struct SegmentCtx<'a> {
    dir: &'a Path,
    hasher: &'a ChainHasher,
    public_key: Option<&'a PublicKey>,
    recorded: Option<&'a [ArchivedSegment]>,
}

/// Checks one segment's file against its manifest, the ledger's record and the public key.
fn check_segment(
    cx: &SegmentCtx<'_>,
    name: &str,
    m: &Manifest,
    start: ChainStart,
    check: &mut SegmentCheck,
    progress: Progress<'_>,
) -> Result<VerifyReport> {
    let SegmentCtx {
        dir,
        hasher,
        public_key,
        recorded,
    } = *cx;
    let path = dir.join(name);
    let empty = VerifyReport {
        ok: false,
        ..VerifyReport::empty(hasher.alg())
    };
    if !path.exists() {
        check.problems.push(format!(
            "missing: its manifest is here, the file is not (seq {}–{})",
            m.first_seq.unwrap_or(0),
            m.last_seq.unwrap_or(0)
        ));
        return Ok(empty);
    }
    let sha = export::file_sha256(&path)?;
    if sha != m.sha256 {
        check
            .problems
            .push("altered: the file's sha256 differs from its manifest's".into());
    }
    if let Some(r) = recorded.and_then(|r| r.iter().find(|s| s.file == name)) {
        if r.sha256 != sha
            || r.first_seq != m.first_seq.unwrap_or(0)
            || r.seq != m.last_seq.unwrap_or(0)
        {
            check.problems.push(format!(
                "altered: the ledger recorded seq {}–{} with sha256 {}",
                r.first_seq, r.seq, r.sha256
            ));
        }
    }
    crate::chain::check_alg(hasher, &m.alg)?;
    let chain = match export::verify_rows(&path, Format::Ndjson, true, hasher, start, progress) {
        Ok(c) => c,
        Err(LedgerError::BadExport(why)) => {
            check.problems.push(format!("altered: {why}"));
            return Ok(empty);
        }
        // A compressed stream that does not decode is an altered file, as is a bad row.
        Err(LedgerError::Io(e)) => {
            check.problems.push(format!("altered or unreadable: {e}"));
            return Ok(empty);
        }
        Err(e) => return Err(e),
    };
    if chain.cancelled {
        return Ok(chain);
    }
    if let (Some(seq), Some(p)) = (chain.first_bad_seq, &chain.problem) {
        check.problems.push(format!("altered: seq {seq}: {p}"));
    } else if chain.count != m.count || chain.first_seq != m.first_seq || chain.head != m.chain_head
    {
        check
            .problems
            .push("altered: its events differ from its manifest's count, range or head".into());
    }
    if let Some(key) = public_key {
        if let Err(why) = export::check_signed_head(key, m.checkpoint.as_ref(), chain.head.as_ref())
        {
            check.problems.push(why);
        }
    }
    Ok(chain)
}
