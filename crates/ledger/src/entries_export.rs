//! Entries exports: the entries of a time range (by creation) with their outcomes — state,
//! subjects, status, the stored response's digest, who resolved them and why — as NDJSON or CSV,
//! with a manifest that ties them to the log's head (signed, when a key is configured).
//!
//! Entries change (a pending one completes, an expired one is purged), so they are not chained
//! like the log: the manifest records the file's digest and the log's head at export time, and an
//! entry's history is the log's.

use std::fs::File;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::chain::VerifyReport;
use crate::checkpoint::{PublicKey, Signer};
use crate::error::Result;
use crate::export::{self, ExportVerifyReport, Format, Written};
pub use crate::model::EntryRow;
use crate::model::{now_millis, rfc3339, ChainHead, Millis, SignedCheckpoint};
use crate::store::{EventRange, Progress, Storage};

/// The manifest of an entries export (`FILE.manifest.json`).
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntriesManifest {
    pub manifest_version: u32,
    /// Always `entries`.
    pub kind: String,
    pub format: Format,
    pub file: String,
    pub sha256: String,
    pub bytes: u64,
    pub count: u64,
    /// Entries created in this range.
    pub since: Option<String>,
    pub until: Option<String>,
    /// The log's head at export time: each entry's history up to here is in the log.
    pub ledger_head: Option<ChainHead>,
    /// That head, signed, when a signing key is configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<SignedCheckpoint>,
    pub created_at: String,
    pub ledger: String,
}

/// Exports the entries created in `range` to `out` with its manifest, as [`export::export`]
/// exports events: written beside and renamed into place; never over a file unless `overwrite`;
/// `Ok(None)` when `progress` cancels, leaving nothing.
pub fn export_entries(
    store: &dyn Storage,
    format: Format,
    range: EventRange,
    out: &Path,
    overwrite: bool,
    signer: Option<&Signer>,
    progress: Progress<'_>,
) -> Result<Option<EntriesManifest>> {
    let ledger_head = store.head()?;
    let written = export::write_rows(out, format, overwrite, progress, |row| {
        store.scan_entries(range, row)
    })?;
    let Some(Written {
        sha256,
        bytes,
        count,
    }) = written
    else {
        return Ok(None);
    };
    let checkpoint = match (signer, &ledger_head) {
        (Some(s), Some(h)) => Some(s.sign_and_log(store, h)?.0),
        _ => None,
    };
    let manifest = EntriesManifest {
        manifest_version: 1,
        kind: "entries".into(),
        format,
        file: out
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default(),
        sha256,
        bytes,
        count,
        since: range.since.map(rfc3339),
        until: range.until.map(rfc3339),
        ledger_head,
        checkpoint,
        created_at: rfc3339(now_millis()),
        ledger: store.location(),
    };
    export::write_manifest(out, &manifest)?;
    Ok(Some(manifest))
}

/// Verifies an entries export against its manifest: the file's digest, its row count, and with
/// `public_key` the signed log head it is tied to. Entries are not chained: `chain` counts rows.
pub(crate) fn verify(
    path: &Path,
    mpath: &Path,
    m: &EntriesManifest,
    public_key: Option<&PublicKey>,
) -> Result<ExportVerifyReport> {
    let mut problems = Vec::new();
    let sha_ok = export::file_sha256(path)? == m.sha256;
    if !sha_ok {
        problems.push("the file's sha256 differs from the manifest's".to_owned());
    }
    let file = std::io::BufReader::new(File::open(path)?);
    let rows = match m.format {
        Format::Ndjson => std::io::BufRead::lines(file)
            .map_while(std::result::Result::ok)
            .filter(|l| !l.trim().is_empty())
            .count() as u64,
        Format::Csv => csv::Reader::from_reader(file).records().count() as u64,
    };
    let count_ok = rows == m.count;
    if !count_ok {
        problems.push(format!(
            "{rows} entries in the file, {} in the manifest",
            m.count
        ));
    }
    let signed = public_key.map(|k| {
        let r = export::check_signed_head(k, m.checkpoint.as_ref(), m.ledger_head.as_ref());
        if let Err(why) = &r {
            problems.push(why.clone());
        }
        r.is_ok()
    });
    Ok(ExportVerifyReport {
        ok: problems.is_empty(),
        file: path.display().to_string(),
        manifest: Some(mpath.display().to_string()),
        sha256_matches: Some(sha_ok),
        manifest_matches: Some(count_ok),
        tree_matches: None,
        signed,
        chain: VerifyReport {
            count: rows,
            ..VerifyReport::empty("none (entries are not chained)")
        },
        problems,
    })
}

/// An entry's times as the export writes them.
pub(crate) fn time(t: Option<Millis>) -> Option<String> {
    t.map(rfc3339)
}
