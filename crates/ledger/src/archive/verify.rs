//! Verifying an archive: each sealed segment against its manifest and the ledger's record of it,
//! the segments against each other (no gap, no overlap, each chaining onto the one before), and
//! the live log against the last segment.

use serde::{Deserialize, Serialize};

use super::{named_range, Place};
use crate::chain::{ChainHasher, ChainStart, VerifyReport, GENESIS};
use crate::checkpoint::{PublicKey, SignedCheckpoint};
use crate::error::{LedgerError, Result};
use crate::export::{self, Format, Manifest};
use crate::model::{ArchivedSegment, ChainHead};
use crate::store::{Progress, Storage};

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

/// The manifests in `place`, and the segment files without one.
fn list(place: &Place) -> Result<Listing> {
    let mut manifests = Vec::new();
    let mut files = Vec::new();
    for name in place.names()? {
        if let Some(seg) = name.strip_suffix(".manifest.json") {
            if seg.ends_with(".ndjson.gz") {
                if let Some(m) = place.manifest(seg)? {
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

/// The segments in `place` as their manifests describe them, oldest first, without reading the
/// files; each marked recorded or not by `store`'s ledger.
pub fn segments(place: &Place, store: Option<&dyn Storage>) -> Result<Vec<SegmentCheck>> {
    let (manifests, _) = list(place)?;
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

/// Verifies the whole history: every segment in `place` (its digest, the chain inside it, its link
/// to the one before, its signed checkpoint when `public_key` is given) and, with a `store`, the
/// ledger's record of them and the live log after them. Names each missing, altered or reordered
/// segment.
///
/// What a run cut short leaves is not a problem: a segment file without its manifest, or a
/// segment the ledger has not recorded yet, past the last recorded one (its events are still
/// live; the next run takes it or writes it again). They are listed in `unfinished`.
pub fn verify_archive(
    place: &Place,
    store: Option<&dyn Storage>,
    hasher: &ChainHasher,
    public_key: Option<&PublicKey>,
    progress: Progress<'_>,
) -> Result<ArchiveVerifyReport> {
    // The ledger's record first: a segment is in place before it is recorded, so every one
    // recorded by now is in the listing that follows, while an archival runs meanwhile.
    let recorded = store.map(Storage::archived).transpose()?;
    let (manifests, orphans) = list(place)?;
    let through = recorded.as_ref().and_then(|r| r.last()).map(|r| r.seq);
    let mut w = Walk {
        place,
        hasher,
        public_key,
        recorded,
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
    let mut todo = Vec::with_capacity(manifests.len());
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
        todo.push((name.as_str(), m));
    }
    w.segments(&todo, progress)?;
    let mut live = None;
    if let (Some(store), true, false) = (store, w.recorded.is_some(), w.cancelled) {
        let chain = w.live(store, &manifests, progress)?;
        if let Some(after) = chain.started_after.as_ref() {
            if after.seq > through.unwrap_or(0) && !w.cancelled {
                w.archived_meanwhile(store, after, progress)?;
            }
        }
        live = Some(chain);
    }
    let head = live
        .as_ref()
        .and_then(|l| l.head.clone())
        .or_else(|| (w.next.seq > 0).then(|| w.next.clone()));
    Ok(ArchiveVerifyReport {
        ok: w.problems.is_empty() && !w.cancelled,
        dir: place.to_string(),
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
    place: &'a Place,
    hasher: &'a ChainHasher,
    public_key: Option<&'a PublicKey>,
    /// The ledger's record of its segments (when a ledger was given).
    recorded: Option<Vec<ArchivedSegment>>,
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
        progress: Progress<'_>,
    ) -> Result<VerifyReport> {
        let recorded = self.recorded.as_deref().unwrap_or_default();
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

    /// Walks the segments recorded while this run went on (an archival beside it): the live
    /// log's walk began after the newest of them, `after`, their events removed from the live log
    /// by then. They are listed again, and must end where the live log began.
    fn archived_meanwhile(
        &mut self,
        store: &dyn Storage,
        after: &ChainHead,
        progress: Progress<'_>,
    ) -> Result<()> {
        self.recorded = Some(store.archived()?);
        let (manifests, _) = list(self.place)?;
        let through = self.next.seq;
        let mut todo = Vec::new();
        for (name, m) in &manifests {
            let (first, last) = (m.first_seq.unwrap_or(0), m.last_seq.unwrap_or(0));
            if first <= through || last > after.seq {
                continue;
            }
            self.unfinished.retain(|u| u != name);
            todo.push((name.as_str(), m));
        }
        self.segments(&todo, progress)?;
        if self.cancelled {
            return Ok(());
        }
        if self.next.seq < after.seq {
            let missed = missing(self.next.seq + 1, after.seq, self.recorded.as_deref());
            self.problems.push(missed);
        } else if self.next.hash != after.hash {
            self.problems.push(format!(
                "the last segment ends at seq {} with another hash than the live log continues from",
                after.seq
            ));
        }
        Ok(())
    }

    /// Checks the segments `todo`, in order, after the ones walked. Each one's chain starts from
    /// its manifest's place after the one before (not from that one's events), so their files
    /// verify independently, on as many threads as there are cores; what each found is taken in
    /// order, up to an error or a cancel.
    fn segments(&mut self, todo: &[(&str, &Manifest)], progress: Progress<'_>) -> Result<()> {
        // Each segment is planned after the one before it; `next` moves only as one is taken.
        let mut after = self.next.clone();
        let planned: Vec<Planned<'_>> = todo
            .iter()
            .map(|(name, m)| {
                let p = self.plan(name, m, &after);
                after.clone_from(&p.head);
                p
            })
            .collect();
        let cx = SegmentCtx {
            place: self.place,
            hasher: self.hasher,
            public_key: self.public_key,
            recorded: self.recorded.as_deref(),
        };
        let base = self.count;
        let mut found = check_in_parallel(&cx, &planned, &mut |n| progress(base + n));
        for (p, found) in planned.into_iter().zip(found.iter_mut()) {
            let Some((mut check, chain)) = found.take() else {
                break;
            };
            self.problems.extend(p.gap);
            let chain = chain?;
            self.cancelled |= chain.cancelled;
            self.count += chain.count;
            check.ok = check.problems.is_empty();
            self.problems.extend(
                check
                    .problems
                    .iter()
                    .map(|why| format!("{}: {why}", p.name)),
            );
            self.segments.push(check);
            self.next = p.head;
            if self.cancelled {
                break;
            }
        }
        Ok(())
    }

    /// What checking the segment `name` after the event `after` needs: the problems its place
    /// shows (before its file is read) and where its chain starts.
    fn plan<'m>(&self, name: &'m str, m: &'m Manifest, after: &ChainHead) -> Planned<'m> {
        let mut check = SegmentCheck {
            file: name.to_owned(),
            first_seq: m.first_seq,
            last_seq: m.last_seq,
            count: m.count,
            bytes: m.bytes,
            checkpoint: m.checkpoint.clone(),
            recorded: self
                .recorded
                .as_ref()
                .map(|r| r.iter().any(|s| s.file == name)),
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
        let mut gap = None;
        let start = if first == after.seq + 1 {
            ChainStart::After(after.clone())
        } else {
            if first > after.seq + 1 {
                gap = Some(missing(after.seq + 1, first - 1, self.recorded.as_deref()));
            } else {
                check.problems.push(format!(
                    "reordered: it starts at seq {first}, inside the segments before it (through seq {})",
                    after.seq
                ));
            }
            ChainStart::Anywhere {
                prev_hash: m.first_prev_hash.clone(),
            }
        };
        Planned {
            name,
            m,
            check,
            start,
            gap,
            head: ChainHead {
                seq: last,
                hash: m.chain_head.clone().map(|h| h.hash).unwrap_or_default(),
            },
        }
    }
}

/// One segment to check, as [`Walk::plan`] placed it.
struct Planned<'m> {
    name: &'m str,
    m: &'m Manifest,
    check: SegmentCheck,
    start: ChainStart,
    /// The gap before it, a problem of the archive's rather than of this segment's.
    gap: Option<String>,
    /// Where the walk is once it is taken: its manifest's last event.
    head: ChainHead,
}

/// What one segment's check found: the segment as checked, and its chain's report.
type Found = Option<(SegmentCheck, Result<VerifyReport>)>;

/// A thread's word to the one reporting progress.
enum Word {
    /// Events verified since its last word.
    Verified(u64),
    Done(usize, SegmentCheck, Result<VerifyReport>),
}

/// The most segments checked at once: one a core, up to this (each of a bucket's is a downloaded
/// copy on local disk while it is checked).
const MAX_THREADS: usize = 8;

/// Checks each of `planned` on a pool of threads (one a core, up to [`MAX_THREADS`]), while this thread tells
/// `progress` the events verified in all; `None` for a segment not checked because `progress`
/// cancelled the run before a thread took it.
fn check_in_parallel(
    cx: &SegmentCtx<'_>,
    planned: &[Planned<'_>],
    progress: Progress<'_>,
) -> Vec<Found> {
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .min(MAX_THREADS)
        .min(planned.len());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let cancel = std::sync::atomic::AtomicBool::new(false);
    let mut found: Vec<Found> = planned.iter().map(|_| None).collect();
    std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::channel::<Word>();
        for _ in 0..threads {
            let (tx, next, cancel) = (tx.clone(), &next, &cancel);
            s.spawn(move || loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(p) = planned.get(i) else { break };
                if cancel.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                let mut check = p.check.clone();
                let mut told = 0;
                let chain = check_segment(cx, p.name, p.m, p.start.clone(), &mut check, &mut |n| {
                    let _ = tx.send(Word::Verified(n.saturating_sub(told)));
                    told = n;
                    !cancel.load(std::sync::atomic::Ordering::Relaxed)
                });
                let _ = tx.send(Word::Done(i, check, chain));
            });
        }
        drop(tx);
        let mut verified = 0;
        for word in rx {
            match word {
                Word::Verified(n) => {
                    verified += n;
                    if !progress(verified) {
                        cancel.store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                }
                Word::Done(i, check, chain) => found[i] = Some((check, chain)),
            }
        }
    });
    found
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
    place: &'a Place,
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
        place,
        hasher,
        public_key,
        recorded,
    } = *cx;
    let empty = VerifyReport {
        ok: false,
        ..VerifyReport::empty(hasher.alg())
    };
    let Some(file) = place.local(name)? else {
        check.problems.push(format!(
            "missing: its manifest is here, the file is not (seq {}–{})",
            m.first_seq.unwrap_or(0),
            m.last_seq.unwrap_or(0)
        ));
        return Ok(empty);
    };
    let path = file.path();
    let sha = export::file_sha256(path)?;
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
    let rows = export::verify_rows(
        path,
        Format::Ndjson,
        true,
        hasher,
        start,
        m.tree.as_ref(),
        progress,
    );
    let (chain, tree_problem) = match rows {
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
    } else if let Some(why) = tree_problem {
        check.problems.push(format!("altered: {why}"));
    }
    if let Some(key) = public_key {
        if let Err(why) = export::check_signed_head(key, m.checkpoint.as_ref(), chain.head.as_ref())
            .and_then(|()| export::check_signed_tree(key, m))
        {
            check.problems.push(why);
        }
    }
    Ok(chain)
}
