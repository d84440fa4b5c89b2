//! Verifying an export: the file's digest, the chain inside it, its place in the log's tree,
//! and the manifest's count, head and signed checkpoints.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{manifest_path, Format, Manifest, Row};
use crate::chain::{self, ChainHasher, ChainStart, VerifyReport};
use crate::checkpoint::{PublicKey, SignedCheckpoint};
use crate::error::{LedgerError, Result};
use crate::model::{ChainHead, Event};
use crate::store::Progress;
use crate::tree::{self, TreeRange};

/// What verifying an export found.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportVerifyReport {
    pub ok: bool,
    pub file: String,
    pub manifest: Option<String>,
    /// The file's sha256 equals the manifest's.
    pub sha256_matches: Option<bool>,
    /// Count, first/last sequence and head equal the manifest's.
    pub manifest_matches: Option<bool>,
    /// The file's events are the leaves of the log's tree its manifest says they are.
    #[serde(default)]
    pub tree_matches: Option<bool>,
    /// With a public key: the manifest's checkpoints are signed by it and name the chain's head
    /// and the tree.
    #[serde(default)]
    pub signed: Option<bool>,
    pub chain: VerifyReport,
    pub problems: Vec<String>,
}

/// The sha256 of a file, in hex.
pub(crate) fn file_sha256(path: &Path) -> Result<String> {
    let mut f = BufReader::new(File::open(path)?);
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

/// The rows of an export file as events, in its format (gzip-compressed when `gzip`).
pub(crate) fn read_rows(
    path: &Path,
    format: Format,
    gzip: bool,
) -> Result<Box<dyn Iterator<Item = Result<Event>>>> {
    let raw = File::open(path)?;
    let file: Box<dyn BufRead> = if gzip {
        Box::new(BufReader::with_capacity(
            1 << 16,
            flate2::read::GzDecoder::new(BufReader::with_capacity(1 << 16, raw)),
        ))
    } else {
        Box::new(BufReader::with_capacity(1 << 16, raw))
    };
    Ok(match format {
        Format::Ndjson => Box::new(file.lines().enumerate().filter_map(|(i, line)| {
            match line {
                Ok(l) if l.trim().is_empty() => None,
                Ok(l) => Some(
                    serde_json::from_str::<Row>(&l)
                        .map_err(|e| LedgerError::BadExport(format!("line {}: {e}", i + 1)))
                        .and_then(Row::into_event),
                ),
                Err(e) => Some(Err(e.into())),
            }
        })),
        Format::Csv => Box::new(
            csv::Reader::from_reader(file)
                .into_deserialize::<Row>()
                .map(|r| {
                    r.map_err(|e| LedgerError::BadExport(e.to_string()))
                        .and_then(Row::into_event)
                }),
        ),
    })
}

/// The chain of the rows of an export file, in its format (gzip-compressed when `gzip`); and,
/// when its manifest places them in the log's tree (`tree`), why they are not those leaves of
/// the tree it names, if they are not.
pub(crate) fn verify_rows(
    path: &Path,
    format: Format,
    gzip: bool,
    hasher: &ChainHasher,
    start: ChainStart,
    tree: Option<&TreeRange>,
    progress: Progress<'_>,
) -> Result<(VerifyReport, Option<String>)> {
    let mut leaves = tree.map(TreeRange::hasher);
    let rows = read_rows(path, format, gzip)?.inspect(|row| {
        if let (Ok(ev), Some(Ok(h))) = (row, leaves.as_mut()) {
            h.push(&tree::leaf_bytes(ev));
        }
    });
    let chain = chain::verify_events(hasher, start, rows, progress)?;
    let problem = match (tree, leaves) {
        (Some(range), Some(Ok(h))) if Ok(h.head()) != range.head() => Some(format!(
            "its events are not leaves {}–{} of the tree of {} the manifest names (they make a tree of {} with root {})",
            range.first_leaf,
            range.size.saturating_sub(1),
            range.size,
            h.head().size,
            h.head().root_base64()
        )),
        (_, Some(Err(why))) => Some(format!("the manifest's tree: {why}")),
        _ => None,
    };
    Ok((chain, problem))
}

/// With a `key`, whether the manifest's tree is the one the key signed: checked when the
/// manifest places its file in the tree and carries a signed checkpoint of the chain (a manifest
/// signed before the tree, or without a key, has no tree checkpoint to check).
pub(crate) fn check_signed_tree(key: &PublicKey, m: &Manifest) -> std::result::Result<(), String> {
    match (&m.tree, &m.checkpoint) {
        (Some(range), Some(_)) => range.check_signed(key),
        _ => Ok(()),
    }
}

/// An export's format and compression: its manifest's, else the file name's (`.csv`, or NDJSON).
fn format_of(path: &Path, manifest: Option<&Manifest>) -> (Format, bool) {
    match manifest {
        Some(m) => (m.format, m.compression.as_deref() == Some("gzip")),
        None => match path.extension().and_then(|e| e.to_str()) {
            Some("csv") => (Format::Csv, false),
            _ => (Format::Ndjson, false),
        },
    }
}

/// Verifies an export file, and its manifest when `FILE.manifest.json` exists: the file's sha256,
/// the chain inside it (naming the first bad sequence number), the manifest's count and head, and
/// the file's events as the leaves of the tree the manifest names. With `public_key`, the
/// manifest's signed checkpoints must be signed by it and name the head the file's chain ends at
/// and the tree its leaves end.
pub fn verify_export(
    path: &Path,
    hasher: &ChainHasher,
    public_key: Option<&PublicKey>,
    progress: Progress<'_>,
) -> Result<ExportVerifyReport> {
    // A file that is not text (an image sent for an export) is a bad export, not a failed disk.
    verify_export_text(path, hasher, public_key, progress).map_err(|e| match e {
        LedgerError::Io(io) if io.kind() == std::io::ErrorKind::InvalidData => {
            LedgerError::BadExport(format!(
                "{}: {io}: an export is NDJSON or CSV text, gzipped or not",
                path.display()
            ))
        }
        e => e,
    })
}

/// The manifest beside an export, by what it describes.
enum Beside {
    Entries(crate::entries_export::EntriesManifest),
    /// An export of events: its manifest, when there is one.
    Events(Option<Manifest>),
}

fn beside(mpath: &Path) -> Result<Beside> {
    if !mpath.exists() {
        return Ok(Beside::Events(None));
    }
    let raw = std::fs::read(mpath)?;
    if let Ok(m) = serde_json::from_slice::<crate::entries_export::EntriesManifest>(&raw) {
        return Ok(Beside::Entries(m));
    }
    serde_json::from_slice(&raw)
        .map(|m| Beside::Events(Some(m)))
        .map_err(|e| LedgerError::BadExport(format!("{}: {e}", mpath.display())))
}

fn verify_export_text(
    path: &Path,
    hasher: &ChainHasher,
    public_key: Option<&PublicKey>,
    progress: Progress<'_>,
) -> Result<ExportVerifyReport> {
    let mpath = manifest_path(path);
    let manifest = match beside(&mpath)? {
        Beside::Entries(m) => return crate::entries_export::verify(path, &mpath, &m, public_key),
        Beside::Events(m) => m,
    };
    if !path.exists() {
        return Err(LedgerError::BadExport(format!(
            "{}: no such file",
            path.display()
        )));
    }
    if let Some(m) = &manifest {
        chain::check_alg(hasher, &m.alg)?;
    }
    let (format, gzip) = format_of(path, manifest.as_ref());
    let mut problems = Vec::new();

    let sha256_matches = match &manifest {
        Some(m) => {
            let ok = file_sha256(path)? == m.sha256;
            if !ok {
                problems.push("the file's sha256 differs from the manifest's".to_owned());
            }
            Some(ok)
        }
        None => None,
    };

    let start = ChainStart::Anywhere {
        prev_hash: manifest.as_ref().and_then(|m| m.first_prev_hash.clone()),
    };
    let (chain, tree_problem) = verify_rows(
        path,
        format,
        gzip,
        hasher,
        start,
        manifest.as_ref().and_then(|m| m.tree.as_ref()),
        progress,
    )?;
    if !chain.ok {
        if let (Some(seq), Some(p)) = (chain.first_bad_seq, &chain.problem) {
            problems.push(format!("seq {seq}: {p}"));
        }
    }
    let (manifest_matches, tree_matches) =
        matches_manifest(manifest.as_ref(), &chain, tree_problem, &mut problems);
    if manifest.is_none() {
        problems.push(format!(
            "no manifest at {}: only the chain inside the file was checked",
            mpath.display()
        ));
    }
    let signed = match (public_key, &manifest) {
        (Some(key), Some(m)) => {
            let found = check_signed_head(key, m.checkpoint.as_ref(), chain.head.as_ref())
                .and_then(|()| check_signed_tree(key, m));
            if let Err(why) = &found {
                problems.push(why.clone());
            }
            Some(found.is_ok())
        }
        (Some(_), None) => Some(false),
        (None, _) => None,
    };
    let ok = chain.ok
        && sha256_matches != Some(false)
        && manifest_matches != Some(false)
        && tree_matches != Some(false)
        && signed != Some(false);
    Ok(ExportVerifyReport {
        ok,
        file: path.display().to_string(),
        manifest: manifest.map(|_| mpath.display().to_string()),
        sha256_matches,
        manifest_matches,
        tree_matches,
        signed,
        chain,
        problems,
    })
}

/// Whether the verified rows are the ones `manifest` describes (count, first sequence and head),
/// and the leaves of the tree it names; each `None` when there is nothing to compare.
fn matches_manifest(
    manifest: Option<&Manifest>,
    chain: &VerifyReport,
    tree_problem: Option<String>,
    problems: &mut Vec<String>,
) -> (Option<bool>, Option<bool>) {
    let Some(m) = manifest.filter(|_| chain.ok) else {
        return (None, None);
    };
    let rows =
        m.count == chain.count && m.first_seq == chain.first_seq && m.chain_head == chain.head;
    if !rows {
        problems.push(
            "count, first sequence or head differ from the manifest (rows added or removed)"
                .to_owned(),
        );
    }
    let tree = m.tree.as_ref().map(|_| match tree_problem {
        Some(why) => {
            problems.push(why);
            false
        }
        None => true,
    });
    (Some(rows), tree)
}

/// Whether the export at `path` holds event `head.seq` with exactly `head.hash`: a later export
/// extends an earlier one when it holds the earlier one's head and its chain verifies.
pub fn holds(path: &Path, head: &ChainHead) -> Result<bool> {
    let manifest: Option<Manifest> = std::fs::read(manifest_path(path))
        .ok()
        .and_then(|raw| serde_json::from_slice(&raw).ok());
    let (format, gzip) = format_of(path, manifest.as_ref());
    Ok(read_rows(path, format, gzip)?
        .any(|e| e.is_ok_and(|e| e.seq == head.seq && e.hash == head.hash)))
}

/// Checks that `checkpoint` is signed by `key` and names `head`, the head the verified chain ends
/// at; why not, in words.
pub(crate) fn check_signed_head(
    key: &PublicKey,
    checkpoint: Option<&SignedCheckpoint>,
    head: Option<&ChainHead>,
) -> std::result::Result<(), String> {
    let cp = checkpoint.ok_or("the manifest carries no signed checkpoint")?;
    let v = key
        .verify(&cp.note)
        .map_err(|e| format!("signed checkpoint: {e}"))?;
    match head {
        Some(h) if *h == v.head => Ok(()),
        Some(h) => Err(format!(
            "the signed checkpoint names seq {} with hash {}, but the chain ends at seq {} with hash {} (an edited head)",
            v.head.seq, v.head.hash, h.seq, h.hash
        )),
        None => Err("the signed checkpoint names a head, but the file holds no event".into()),
    }
}
