//! Audit exports (NDJSON or CSV) with a manifest, and their verification.
//!
//! An export is one contiguous run of the log. It is written to a temporary file beside the target
//! and renamed into place when complete, hashing as it goes; `FILE.manifest.json` records the
//! format, the chain algorithm, the count, the first and last sequence numbers, the `prev_hash` the
//! run starts from, its last hash, the ledger's head at export time, and the file's sha256.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::checkpoint::Signer;
use crate::error::{LedgerError, Result};
use crate::model::{now_millis, rfc3339, ChainHead, Event, SignedCheckpoint};
use crate::store::{EventRange, Progress, Storage};
use crate::tree::{self, TreeRange};

#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Ndjson,
    Csv,
}

impl Format {
    pub fn parse(s: &str) -> Option<Format> {
        match s {
            "ndjson" => Some(Format::Ndjson),
            "csv" => Some(Format::Csv),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Format::Ndjson => "ndjson",
            Format::Csv => "csv",
        }
    }
}

#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub manifest_version: u32,
    pub format: Format,
    pub alg: String,
    pub file: String,
    pub sha256: String,
    pub bytes: u64,
    pub count: u64,
    pub first_seq: Option<i64>,
    pub last_seq: Option<i64>,
    /// The `prev_hash` of the first exported event (the link into the rest of the chain).
    pub first_prev_hash: Option<String>,
    /// The last exported event.
    pub chain_head: Option<ChainHead>,
    /// The ledger's head when the export began; `verify --against` checks the ledger still has it.
    pub ledger_head: Option<ChainHead>,
    pub since: Option<String>,
    pub until: Option<String>,
    pub created_at: String,
    pub ledger: String,
    /// `gzip` for an archive segment; absent for a plain export.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<String>,
    /// The signed checkpoint of `chain_head`, when the ledger's operator configured a signing key:
    /// anyone with the public key can check that this run of the log is the one they published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<SignedCheckpoint>,
    /// Where the file's events sit in the log's Merkle tree, with the hashes that recompute the
    /// root of the tree they end from the file alone, and that tree's signed checkpoint. Absent
    /// when they are not all leaves of the tree (logged before it began).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree: Option<TreeRange>,
}

/// The manifest path for an export file: `FILE.manifest.json`.
pub fn manifest_path(file: &Path) -> PathBuf {
    let mut s = file.as_os_str().to_owned();
    s.push(".manifest.json");
    PathBuf::from(s)
}

/// One exported event: the stored columns, `at` as RFC 3339 with milliseconds (exact).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Row {
    seq: i64,
    at: String,
    kind: String,
    entry_id: Option<i64>,
    route: String,
    scope: String,
    key: String,
    operator: Option<String>,
    reason: Option<String>,
    detail: String,
    payload_digest: Option<String>,
    prev_hash: String,
    hash: String,
}

impl From<Event> for Row {
    fn from(e: Event) -> Row {
        Row {
            seq: e.seq,
            at: rfc3339(e.at),
            kind: e.kind,
            entry_id: e.entry_id,
            route: e.route,
            scope: e.scope,
            key: e.key,
            operator: e.operator,
            reason: e.reason,
            detail: e.detail,
            payload_digest: e.payload_digest,
            prev_hash: e.prev_hash,
            hash: e.hash,
        }
    }
}

impl Row {
    pub(crate) fn into_event(self) -> Result<Event> {
        let at = chrono::DateTime::parse_from_rfc3339(&self.at)
            .map_err(|e| {
                LedgerError::BadExport(format!("seq {}: bad time {:?}: {e}", self.seq, self.at))
            })?
            .timestamp_millis();
        // CSV has no null: an empty optional column reads back as None. The ledger never stores an
        // empty operator, reason or digest, so this is exact.
        let none_if_empty = |s: Option<String>| s.filter(|s| !s.is_empty());
        Ok(Event {
            seq: self.seq,
            at,
            kind: self.kind,
            entry_id: self.entry_id,
            route: self.route,
            scope: self.scope,
            key: self.key,
            operator: none_if_empty(self.operator),
            reason: none_if_empty(self.reason),
            detail: self.detail,
            payload_digest: none_if_empty(self.payload_digest),
            prev_hash: self.prev_hash,
            hash: self.hash,
        })
    }
}

/// The leaf bytes of an event exported as an NDJSON line: what a verifier hashes.
pub fn leaf_of_line(line: &str) -> Result<Vec<u8>> {
    let row: Row = serde_json::from_str(line).map_err(|e| LedgerError::BadExport(e.to_string()))?;
    Ok(tree::leaf_bytes(&row.into_event()?))
}

/// Writes through to `inner` while hashing and counting bytes.
pub(crate) struct HashingWriter<W: Write> {
    pub inner: W,
    pub hasher: Sha256,
    pub bytes: u64,
}

impl<W: Write> HashingWriter<W> {
    pub fn new(inner: W) -> Self {
        HashingWriter {
            inner,
            hasher: Sha256::new(),
            bytes: 0,
        }
    }
}

impl HashingWriter<BufWriter<File>> {
    /// Flushes and syncs the file: what was written is on disk, with its sha256 (hex) and size.
    pub fn sync(mut self) -> std::io::Result<(String, u64)> {
        self.flush()?;
        let HashingWriter {
            inner,
            hasher,
            bytes,
        } = self;
        let file = inner.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        Ok((hex::encode(hasher.finalize()), bytes))
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Exports `range` of the log to `out` and writes `out.manifest.json`. `progress` may cancel; a
/// cancelled export leaves no file behind and returns `Ok(None)`. Unless `overwrite`, a file at
/// `out` is never replaced, even one made while the export ran, and an export whose file or
/// manifest exists does not start: either is an [`std::io::ErrorKind::AlreadyExists`] error, and
/// leaves nothing.
/// With a `signer`, the export's last event is signed, the checkpoint logged, and the manifest
/// carries it.
pub fn export(
    store: &dyn Storage,
    format: Format,
    range: EventRange,
    out: &Path,
    overwrite: bool,
    signer: Option<&Signer>,
    progress: Progress<'_>,
) -> Result<Option<Manifest>> {
    let ledger_head = store.head()?;
    let alg = store.chain_alg()?;
    let mut first: Option<(i64, String)> = None;
    let mut last: Option<ChainHead> = None;
    let written = write_rows(out, format, overwrite, progress, |row| {
        store.scan_events(range, &mut |ev: Event| {
            if first.is_none() {
                first = Some((ev.seq, ev.prev_hash.clone()));
            }
            last = Some(ChainHead {
                seq: ev.seq,
                hash: ev.hash.clone(),
            });
            row(Row::from(ev))
        })
    })?;
    let Some(Written {
        sha256,
        bytes,
        count,
    }) = written
    else {
        return Ok(None);
    };
    let checkpoint = match (signer, &last) {
        (Some(s), Some(head)) => Some(s.sign_and_log(store, head)?.0),
        _ => None,
    };
    // The exported events were committed before the scan, so the tree can be brought to hold
    // them all.
    tree::catch_up(store, &|| true)?;
    let tree = match (&first, &last) {
        (Some(f), Some(l)) => TreeRange::of(store, (f.0, l.seq), count, signer)?,
        _ => None,
    };
    let manifest = Manifest {
        manifest_version: 1,
        format,
        alg,
        file: out
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default(),
        sha256,
        bytes,
        count,
        first_seq: first.as_ref().map(|f| f.0),
        last_seq: last.as_ref().map(|l| l.seq),
        first_prev_hash: first.map(|f| f.1),
        chain_head: last,
        ledger_head,
        since: range.since.map(rfc3339),
        until: range.until.map(rfc3339),
        created_at: rfc3339(now_millis()),
        ledger: store.location(),
        compression: None,
        checkpoint,
        tree,
    };
    write_manifest(out, &manifest)?;
    Ok(Some(manifest))
}

/// An export's file, written and in place.
pub(crate) struct Written {
    pub sha256: String,
    pub bytes: u64,
    /// The rows in it.
    pub count: u64,
}

/// Writes to `out` the rows `scan` hands to the function it is given (which answers whether to go
/// on), as every export file is written: never over a file or manifest already there unless
/// `overwrite`; beside its place, synced, and renamed in when whole; nothing left behind when it
/// fails or when `progress` (told the rows so far every 4096) stops it, which is `Ok(None)`.
pub(crate) fn write_rows<R: Serialize>(
    out: &Path,
    format: Format,
    overwrite: bool,
    progress: Progress<'_>,
    scan: impl FnOnce(&mut dyn FnMut(R) -> Result<bool>) -> Result<()>,
) -> Result<Option<Written>> {
    if !overwrite
        && [out, &manifest_path(out)]
            .iter()
            .any(|p| p.symlink_metadata().is_ok())
    {
        return Err(already_exists(out).into());
    }
    let tmp = partial(out);
    let mut w = HashingWriter::new(BufWriter::with_capacity(1 << 16, File::create(&tmp)?));
    let mut count = 0u64;
    let mut cancelled = false;
    let scanned = {
        let mut sink = Sink::new(format, &mut w);
        scan(&mut |row: R| {
            sink.write(&row)?;
            count += 1;
            if count.is_multiple_of(4096) && !progress(count) {
                cancelled = true;
                return Ok(false);
            }
            Ok(true)
        })
        .and_then(|()| Ok(sink.flush()?))
    };
    if let Err(e) = scanned {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    if cancelled {
        drop(w);
        let _ = std::fs::remove_file(&tmp);
        return Ok(None);
    }
    progress(count);
    let (sha256, bytes) = w.sync()?;
    if let Err(e) = put_in_place(&tmp, out, overwrite) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e.into());
    }
    Ok(Some(Written {
        sha256,
        bytes,
        count,
    }))
}

/// Writes `out`'s manifest beside it, renamed into place as the file was (a crash leaves the old
/// manifest or the new one), and syncs the directory so that both renames outlive a crash.
pub(crate) fn write_manifest(out: &Path, manifest: &impl Serialize) -> Result<()> {
    // Written beside and renamed, as the file: a crash leaves the old manifest or the new one.
    let mpath = manifest_path(out);
    let mtmp = partial(&mpath);
    let mut mf = File::create(&mtmp)?;
    serde_json::to_writer_pretty(&mut mf, manifest).map_err(std::io::Error::other)?;
    mf.write_all(b"\n")?;
    mf.sync_all()?;
    drop(mf);
    std::fs::rename(&mtmp, &mpath)?;
    // The renames themselves outlive a crash once the directory is synced.
    if let Some(dir) = out.parent() {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// `.NAME.partial` beside `path`: where it is written before it is renamed into place.
pub(crate) fn partial(path: &Path) -> PathBuf {
    path.with_file_name(format!(
        ".{}.partial",
        path.file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_else(|| "export".into())
    ))
}

/// Moves the written `tmp` to `out`. Without `overwrite`, by a hard link, which fails if `out`
/// exists however recently it was made; where the file system has no hard links, by a rename after
/// one last look.
fn put_in_place(tmp: &Path, out: &Path, overwrite: bool) -> std::io::Result<()> {
    if overwrite {
        return std::fs::rename(tmp, out);
    }
    match std::fs::hard_link(tmp, out) {
        Ok(()) => std::fs::remove_file(tmp),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(e),
        Err(_) if out.symlink_metadata().is_ok() => Err(already_exists(out)),
        Err(_) => std::fs::rename(tmp, out),
    }
}

fn already_exists(out: &Path) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::AlreadyExists,
        format!("{} exists", out.display()),
    )
}

/// Rows out, as CSV or NDJSON.
enum Sink<'a, W: Write> {
    Csv(csv::Writer<&'a mut W>),
    Ndjson(&'a mut W, Vec<u8>),
}

impl<'a, W: Write> Sink<'a, W> {
    pub(crate) fn new(format: Format, w: &'a mut W) -> Self {
        match format {
            Format::Csv => Sink::Csv(csv::Writer::from_writer(w)),
            Format::Ndjson => Sink::Ndjson(w, Vec::with_capacity(512)),
        }
    }

    pub(crate) fn write(&mut self, row: &impl Serialize) -> std::io::Result<()> {
        match self {
            Sink::Csv(c) => c
                .serialize(row)
                .map_err(|e| std::io::Error::other(e.to_string())),
            Sink::Ndjson(w, buf) => {
                buf.clear();
                serde_json::to_writer(&mut *buf, row).map_err(std::io::Error::other)?;
                buf.push(b'\n');
                w.write_all(buf)
            }
        }
    }

    pub(crate) fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Sink::Csv(c) => c.flush(),
            Sink::Ndjson(w, _) => w.flush(),
        }
    }
}

mod verify;
pub(crate) use verify::{
    check_signed_head, check_signed_tree, file_sha256, read_rows, verify_rows,
};
pub use verify::{holds, verify_export, ExportVerifyReport};
