//! The audit commands: `export` a run of the log with its manifest, `verify` a ledger or an
//! export, `copy` a ledger into a new one. Each is long work that Ctrl-C stops cleanly.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use idemgate_ops::ledger::{ChainHasher, EventRange, Format, PublicKey};
use idemgate_ops::{op, ExportCmd, Ops, OpsError};

use crate::{interrupt, output, stopped, with_progress, FormatArg, LedgerArg};

/// The arguments of `idemgate export`.
#[derive(Args, Debug)]
pub(crate) struct ExportArgs {
    #[command(flatten)]
    ledger: LedgerArg,
    /// The export's format.
    #[arg(long, value_enum)]
    format: FormatArg,
    /// Only events at or after this time: RFC 3339, a date (2026-11-20), a duration ago (90m,
    /// 2h, 7d) or Unix ms.
    #[arg(long, value_parser = idemgate_ops::parse_time)]
    since: Option<i64>,
    /// Only events before this time, in the forms --since takes.
    #[arg(long, value_parser = idemgate_ops::parse_time)]
    until: Option<i64>,
    /// Output file; FILE.manifest.json is written beside it. An existing one is refused.
    #[arg(short = 'o', long = "output")]
    output: PathBuf,
    /// Replace the output file and its manifest if they exist.
    #[arg(long)]
    overwrite: bool,
    /// Export the entries created in the range with their outcomes (state, subjects, status, the
    /// stored response's sha256, who resolved them and why) instead of the log.
    #[arg(long)]
    entries: bool,
    #[command(flatten)]
    signing: crate::archival::SigningArg,
    /// Print the result as JSON on stdout instead of text.
    #[arg(long)]
    json: bool,
}

pub(crate) fn export(out: &mut output::Out, a: ExportArgs) -> Result<ExitCode, OpsError> {
    let ExportArgs {
        ledger,
        format,
        since,
        until,
        output: path,
        overwrite,
        entries,
        signing,
        json,
    } = a;
    let cmd = ExportCmd {
        format: match format {
            FormatArg::Ndjson => Format::Ndjson,
            FormatArg::Csv => Format::Csv,
        },
        range: EventRange { since, until },
        path: path.display().to_string(),
        overwrite,
    };
    let ops = Ops::open_existing(&ledger.ledger)?.with_signer(signing.signer()?);
    if entries {
        let manifest = with_progress("exporting", "entries", None, |p| {
            op::run::<op::export_entries::Op>(&ops, cmd, op::Host::none(), p)
        })?;
        match (manifest, interrupt::asked()) {
            (Some(m), _) => output::exported_entries(out, &path, &m, json)?,
            (None, Some(stop)) => return Ok(stopped(stop, "export", "no file written")),
            (None, None) => unreachable!("an export stops only when asked"),
        }
        out.flush().ok();
        return Ok(ExitCode::SUCCESS);
    }
    let total = events(&ops)?;
    let manifest = with_progress("exporting", "events", total, |p| {
        op::run::<op::export::Op>(&ops, cmd, op::Host::none(), p)
    })?;
    match (manifest, interrupt::asked()) {
        (Some(m), _) => output::exported(out, &path, &m, json)?,
        (None, Some(stop)) => {
            return Ok(stopped(stop, "export", "no file written"));
        }
        (None, None) => unreachable!("an export stops only when asked"),
    }
    out.flush().ok();
    Ok(ExitCode::SUCCESS)
}

/// The arguments of `idemgate copy`.
#[derive(Args, Debug)]
pub(crate) struct CopyArgs {
    #[command(flatten)]
    ledger: LedgerArg,
    /// The new ledger: a SQLite file path or a postgres:// URL (created; must be empty).
    #[arg(long, value_name = "PATH|URL")]
    to: String,
    /// Print the result as JSON on stdout instead of text.
    #[arg(long)]
    json: bool,
}

pub(crate) fn copy(out: &mut output::Out, a: CopyArgs) -> Result<ExitCode, OpsError> {
    let CopyArgs { ledger, to, json } = a;
    let report = with_progress("copying", "rows", None, |p| {
        idemgate_ops::copy_ledger(&ledger.ledger, &to, p)
    });
    let report = match (report, interrupt::asked()) {
        (Err(_), Some(stop)) => {
            return Ok(stopped(
                stop,
                "copy",
                &format!("rolled back; nothing was copied into {to}"),
            ));
        }
        (r, _) => r?,
    };
    output::copied(out, &report, json)?;
    out.flush().ok();
    Ok(ExitCode::SUCCESS)
}

/// The arguments of `idemgate verify`.
#[derive(Args, Debug)]
pub(crate) struct VerifyArgs {
    /// The ledger: its live log from its archive checkpoint (with --archive, the whole history).
    #[arg(
        long,
        env = "IDEMGATE_LEDGER",
        value_name = "PATH|URL",
        conflicts_with = "export",
        required_unless_present_any = ["export", "archive", "proof", "consistency"]
    )]
    ledger: Option<String>,
    /// An earlier manifest: the ledger (or the export) must still hold its head; with
    /// --public-key, the head its checkpoint signs (so this log extends the one published then).
    #[arg(long, value_name = "MANIFEST", conflicts_with = "archive")]
    against: Option<PathBuf>,
    /// An export file (its FILE.manifest.json is checked too when present).
    #[arg(long, value_name = "FILE", conflicts_with = "archive")]
    export: Option<PathBuf>,
    /// An archive (a directory, or s3://BUCKET/PREFIX): every segment (digest, chain, links,
    /// order) and, with --ledger, the ledger's record of them and the live log after them.
    #[arg(long, value_name = "DIR")]
    archive: Option<String>,
    #[command(flatten)]
    offline: crate::proofs::ProofArgs,
    /// The public key (from `idemgate keygen`) that must have signed the checkpoints: of the
    /// export, of each archive segment, of the --against manifest, of the --proof. No secret is
    /// needed.
    #[arg(long, value_name = "FILE")]
    public_key: Option<PathBuf>,
    /// Print the result as JSON on stdout instead of text.
    #[arg(long)]
    json: bool,
}

pub(crate) fn verify(out: &mut output::Out, a: VerifyArgs) -> Result<ExitCode, OpsError> {
    let VerifyArgs {
        ledger,
        against,
        export,
        archive,
        offline,
        public_key,
        json,
    } = a;
    if offline.asked() {
        let key = crate::archival::public_key(public_key.as_deref())?;
        return crate::proofs::verify(out, offline, key.as_ref(), json);
    }
    if public_key.is_some() && archive.is_none() && export.is_none() && against.is_none() {
        return Err(OpsError::invalid(
            "public-key",
            "checks the signed checkpoints of --export, --archive or --against: name one",
        ));
    }
    let key = crate::archival::public_key(public_key.as_deref())?;
    // An operation takes the key as its text.
    let key_text = key.as_ref().map(PublicKey::encode);
    let (ok, cancelled) = if let Some(dir) = archive {
        verify_archive(out, ledger.as_deref(), dir, key.as_ref(), key_text, json)?
    } else if let Some(file) = export {
        let hasher = ChainHasher::from_env()?;
        let report = with_progress("verifying", "events", None, |p| match &against {
            Some(m) => idemgate_ops::verify_export_extends(&file, m, &hasher, key.as_ref(), p),
            None => idemgate_ops::verify_export_file(&file, &hasher, key.as_ref(), p),
        })?;
        output::verified_export(out, &report, json)?;
        (report.ok, report.chain.cancelled)
    } else {
        let location = ledger.unwrap_or_default();
        let ops = Ops::open_existing(&location)?;
        let total = events(&ops)?;
        match against {
            Some(m) => {
                let req = op::common::KeyedPathArg {
                    path: m.display().to_string(),
                    public_key: key_text,
                };
                let r = with_progress("verifying", "events", total, |p| {
                    op::run::<op::verify_against::Op>(&ops, req, op::Host::none(), p)
                })?;
                output::verified_against(out, &r, json)?;
                (r.ok, r.chain.cancelled)
            }
            None => {
                let r = with_progress("verifying", "events", total, |p| {
                    op::run::<op::verify_ledger::Op>(
                        &ops,
                        op::common::NoArgs {},
                        op::Host::none(),
                        p,
                    )
                })?;
                output::verified(out, &r, json)?;
                (r.ok, r.cancelled)
            }
        }
    };
    out.flush().ok();
    if let (true, Some(stop)) = (cancelled, interrupt::asked()) {
        return Ok(stopped(stop, "verify", "the chain is not verified"));
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    })
}

/// `verify --archive`: the segments against the ledger's record of them, or alone.
fn verify_archive(
    out: &mut output::Out,
    ledger: Option<&str>,
    dir: String,
    key: Option<&PublicKey>,
    key_text: Option<String>,
    json: bool,
) -> Result<(bool, bool), OpsError> {
    // With a ledger the operation reads the place; without one, it is read here.
    let r = match ledger.map(Ops::open_existing).transpose()? {
        Some(ops) => {
            let req = op::common::KeyedPathArg {
                path: dir,
                public_key: key_text,
            };
            with_progress("verifying", "events", None, |p| {
                op::run::<op::verify_archive::Op>(&ops, req, op::Host::none(), p)
            })
        }
        None => {
            let place = idemgate_ops::archive_place("archive", &dir)?;
            let hasher = ChainHasher::from_env()?;
            with_progress("verifying", "events", None, |p| {
                idemgate_ops::verify_archive_files(&place, &hasher, key, p)
            })
        }
    }?;
    crate::archival::verified_archive(out, &r, json)?;
    Ok((r.ok, r.cancelled))
}

/// How many events the log holds (its head's sequence number): a progress bar's total.
fn events(ops: &Ops) -> Result<Option<u64>, OpsError> {
    let head =
        op::run::<op::head::Op>(ops, op::common::NoArgs {}, op::Host::none(), &mut |_| true)?;
    Ok(head.map(|h| h.seq.max(0) as u64))
}
