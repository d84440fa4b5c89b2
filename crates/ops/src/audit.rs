//! Audit: exports of the log (NDJSON or CSV, with a manifest), verification of a ledger's chain,
//! of an export, and of a ledger against an export's manifest, and copying a ledger whole.

use std::path::Path;

use idemgate_ledger::checkpoint::PublicKey;
use idemgate_ledger::copy::CopyReport;
use idemgate_ledger::entries_export::EntriesManifest;
use idemgate_ledger::export::{self, ExportVerifyReport, Format, Manifest};
use idemgate_ledger::{ChainHasher, ChainHead, EventRange, LedgerError, Progress, VerifyReport};
use serde::{Deserialize, Serialize};

use crate::{check_range, Ops, OpsError, OpsResult};

/// What to export and where: the CLI's and the console's export.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportCmd {
    /// NDJSON or CSV.
    pub format: Format,
    /// The events to export, by time; all of them when both ends are open.
    #[serde(default)]
    pub range: EventRange,
    /// The file to write (its manifest goes beside it, as `FILE.manifest.json`).
    pub path: String,
    /// Replace a file already at `path` (and its manifest). Without it, an existing file is
    /// refused: an earlier export is evidence, not scratch.
    #[serde(default)]
    pub overwrite: bool,
}

/// `verify --ledger PATH --against MANIFEST`.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgainstReport {
    /// Whether the chain verifies and the ledger still holds every head the manifest recorded.
    pub ok: bool,
    /// The ledger's own chain, verified.
    pub chain: VerifyReport,
    /// The manifest's heads, each with whether the ledger still holds it.
    pub heads: Vec<(ChainHead, bool)>,
    /// What is wrong, in words, when `ok` is false.
    pub problems: Vec<String>,
    /// With a public key: the manifest's checkpoint is signed by it (and its head is held).
    #[serde(default)]
    pub signed: Option<bool>,
}

impl Ops {
    /// Exports a range of the log; `Ok(None)` when cancelled through `progress`.
    pub fn export(&self, cmd: &ExportCmd, progress: Progress<'_>) -> OpsResult<Option<Manifest>> {
        let path = check_export(cmd)?;
        let r = export::export(
            self.store.as_ref(),
            cmd.format,
            cmd.range,
            path,
            cmd.overwrite,
            self.signer.as_deref(),
            progress,
        );
        exported(r, path)
    }

    /// Exports the entries created in a range with their outcomes (state, subjects, status, the
    /// stored response's digest, resolution); `Ok(None)` when cancelled through `progress`.
    pub fn export_entries(
        &self,
        cmd: &ExportCmd,
        progress: Progress<'_>,
    ) -> OpsResult<Option<EntriesManifest>> {
        let path = check_export(cmd)?;
        let r = idemgate_ledger::entries_export::export_entries(
            self.store.as_ref(),
            cmd.format,
            cmd.range,
            path,
            cmd.overwrite,
            self.signer.as_deref(),
            progress,
        );
        exported(r, path)
    }

    /// Verifies the ledger's whole chain; `progress` hears the events checked and may stop it.
    pub fn verify(&self, progress: Progress<'_>) -> OpsResult<VerifyReport> {
        Ok(self.store.verify(progress)?)
    }

    /// Verifies the chain and that the ledger still holds the heads a manifest recorded (a cut-off
    /// tail or a rewritten history shows as a missing head).
    pub fn verify_against(
        &self,
        manifest: &Path,
        progress: Progress<'_>,
    ) -> OpsResult<AgainstReport> {
        let m = read_manifest(manifest)?;
        self.verify_against_manifest(&m, progress)
    }

    /// Recomputes the chain, and checks that the ledger still holds the heads manifest `m`
    /// recorded (the ledger's at export time, and the export's last event).
    pub fn verify_against_manifest(
        &self,
        m: &Manifest,
        progress: Progress<'_>,
    ) -> OpsResult<AgainstReport> {
        let chain = self.verify(progress)?;
        let mut problems = Vec::new();
        if let Some(seq) = chain.first_bad_seq {
            problems.push(format!(
                "seq {seq}: {}",
                chain.problem.clone().unwrap_or_default()
            ));
        }
        let mut heads = Vec::new();
        for h in [m.ledger_head.clone(), m.chain_head.clone()]
            .into_iter()
            .flatten()
        {
            if heads.iter().any(|(x, _): &(ChainHead, bool)| x == &h) {
                continue;
            }
            let held = self.store.contains(&h)?;
            if !held {
                problems.push(format!(
                    "the ledger no longer holds seq {} with hash {}",
                    h.seq, h.hash
                ));
            }
            heads.push((h, held));
        }
        Ok(AgainstReport {
            ok: chain.ok && heads.iter().all(|(_, h)| *h),
            chain,
            heads,
            problems,
            signed: None,
        })
    }

    /// `verify --against MANIFEST --public-key K`: as [`Ops::verify_against`], and the manifest's
    /// checkpoint must be signed by `key` and its signed head held: this ledger extends the log
    /// that was published then.
    pub fn verify_extends(
        &self,
        manifest: &Path,
        key: &PublicKey,
        progress: Progress<'_>,
    ) -> OpsResult<AgainstReport> {
        let m = read_manifest(manifest)?;
        let mut r = self.verify_against_manifest(&m, progress)?;
        let signed = signed_head(&m, key).and_then(|h| {
            if self.store.contains(&h)? {
                Ok(h)
            } else {
                Err(OpsError::Conflict(format!(
                    "the ledger does not hold the signed head, seq {} with hash {}",
                    h.seq, h.hash
                )))
            }
        });
        match signed {
            Ok(_) => r.signed = Some(true),
            Err(e) => {
                r.problems.push(e.to_string());
                r.signed = Some(false);
                r.ok = false;
            }
        }
        Ok(r)
    }

    /// Verifies an export file against its manifest (`FILE.manifest.json`), without this ledger.
    pub fn verify_export(
        &self,
        file: &Path,
        progress: Progress<'_>,
    ) -> OpsResult<ExportVerifyReport> {
        verify_export_file(file, &self.hasher, None, progress)
    }
}

/// The file an export writes, checked: named, not standard output, not a directory, in a
/// directory that exists.
fn check_export(cmd: &ExportCmd) -> OpsResult<&Path> {
    check_range(cmd.range.since, cmd.range.until)?;
    let path = Path::new(&cmd.path);
    if cmd.path.trim().is_empty() {
        return Err(OpsError::invalid("path", "name an output file"));
    }
    // An export is a file with its manifest beside it: neither goes to standard output.
    if cmd.path == "-" {
        return Err(OpsError::invalid(
            "path",
            "an export is a file with its manifest beside it: name a file, not -",
        ));
    }
    if path.is_dir() {
        return Err(OpsError::invalid(
            "path",
            &format!("{} is a directory: name a file in it", path.display()),
        ));
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.is_dir() {
            return Err(OpsError::invalid(
                "path",
                &format!("directory {} does not exist", dir.display()),
            ));
        }
    }
    Ok(path)
}

/// An export's result, its refusal to replace a file said the way operators read it.
fn exported<T>(r: idemgate_ledger::Result<T>, path: &Path) -> OpsResult<T> {
    match r {
        // There before it started (the file or its manifest), or made while it ran.
        Err(LedgerError::Io(e)) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            Err(OpsError::Conflict(format!(
                "{} already exists: name another file, or replace it and its manifest (--overwrite; the console's \"Replace\")",
                path.display()
            )))
        }
        r => Ok(r?),
    }
}

fn read_manifest(manifest: &Path) -> OpsResult<Manifest> {
    let raw = std::fs::read(manifest)
        .map_err(|e| OpsError::invalid("against", &format!("{}: {e}", manifest.display())))?;
    serde_json::from_slice(&raw).map_err(|e| {
        OpsError::invalid(
            "against",
            &format!("{}: not a manifest: {e}", manifest.display()),
        )
    })
}

/// The head `m`'s checkpoint signs, when `key` signed it.
fn signed_head(m: &Manifest, key: &PublicKey) -> OpsResult<ChainHead> {
    let cp = m.checkpoint.as_ref().ok_or_else(|| {
        OpsError::Conflict("the earlier manifest carries no signed checkpoint".into())
    })?;
    let v = key
        .verify(&cp.note)
        .map_err(|e| OpsError::Conflict(format!("the earlier manifest's checkpoint: {e}")))?;
    Ok(v.head)
}

/// `verify --export NEW --against OLD [--public-key K]`: NEW verifies (signed by `key`, when given)
/// and holds OLD's head (its signed head, with a key): the later export extends the earlier one.
pub fn verify_export_extends(
    file: &Path,
    manifest: &Path,
    hasher: &ChainHasher,
    key: Option<&PublicKey>,
    progress: Progress<'_>,
) -> OpsResult<ExportVerifyReport> {
    let old = read_manifest(manifest)?;
    let mut r = verify_export_file(file, hasher, key, progress)?;
    let head = match key {
        Some(k) => signed_head(&old, k),
        None => old
            .chain_head
            .clone()
            .ok_or_else(|| OpsError::Conflict("the earlier manifest names no head".into())),
    };
    let held = head.and_then(|h| {
        if export::holds(file, &h)? {
            Ok(())
        } else {
            Err(OpsError::Conflict(format!(
                "{} does not hold the earlier head, seq {} with hash {}: it does not extend it",
                file.display(),
                h.seq,
                h.hash
            )))
        }
    });
    if let Err(e) = held {
        r.problems.push(e.to_string());
        r.ok = false;
    }
    Ok(r)
}

/// Copies the ledger at `from` into a new, empty one at `to` (SQLite → PostgreSQL, or back), with
/// the chain key from the environment; see `idemgate_ledger::copy`.
pub fn copy_ledger(from: &str, to: &str, progress: Progress<'_>) -> OpsResult<CopyReport> {
    // The same file by another name (`./x.db`, a link) too: it was refused only as "not empty".
    let same_file = || {
        let canon = |p| std::fs::canonicalize(p).ok();
        !idemgate_ledger::is_postgres(from) && canon(from).is_some_and(|a| canon(to) == Some(a))
    };
    if from == to || same_file() {
        return Err(OpsError::invalid("to", "is the source ledger itself"));
    }
    let hasher = ChainHasher::from_env()?;
    Ok(idemgate_ledger::copy::copy(from, to, &hasher, progress)?)
}

/// Verifies an export without opening any ledger.
/// With `public_key`, its manifest's signed checkpoint must be that key's and name the file's head.
pub fn verify_export_file(
    file: &Path,
    hasher: &ChainHasher,
    public_key: Option<&PublicKey>,
    progress: Progress<'_>,
) -> OpsResult<ExportVerifyReport> {
    Ok(export::verify_export(file, hasher, public_key, progress)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Another process can make the file while an export runs (the up-front check has passed by
    /// then): the export does not replace it, and leaves no partial file; told to, it replaces it.
    #[test]
    fn an_export_does_not_replace_a_file_made_while_it_ran() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ops =
            Ops::open_or_create(&dir.path().join("l.db").display().to_string()).expect("ledger");
        crate::demo::seed(
            ops.store().as_ref(),
            crate::demo::DemoOptions {
                events: 300,
                seed: 1,
            },
        )
        .expect("demo");
        let out = dir.path().join("audit.csv");
        let cmd = ExportCmd {
            format: Format::Csv,
            range: EventRange::default(),
            path: out.display().to_string(),
            overwrite: false,
        };
        let theirs = b"someone else's file";
        let e = ops
            .export(&cmd, &mut |_| {
                if !out.exists() {
                    std::fs::write(&out, theirs).expect("write");
                }
                true
            })
            .expect_err("made meanwhile");
        assert_eq!(e.code(), "conflict", "{e}");
        assert_eq!(std::fs::read(&out).expect("theirs"), theirs);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("dir")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with("l.db"))
            .collect();
        assert_eq!(names, ["audit.csv"], "no partial file, no manifest");

        let replace = ExportCmd {
            overwrite: true,
            ..cmd
        };
        let m = ops
            .export(&replace, &mut |_| true)
            .expect("export")
            .expect("done");
        assert_eq!(m.bytes, std::fs::metadata(&out).expect("file").len());
        assert!(export::manifest_path(&out).exists());
    }
}
