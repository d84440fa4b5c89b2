//! The commands of the audit trail over years: `keygen` (a checkpoint signing key), `archive`
//! (old events into sealed segments), `retention run` (a configuration's policy, by hand), and
//! the archive's part of `verify`.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Subcommand};
use idemgate_config::Config;
use idemgate_ops::ledger::{generate_key, ArchiveReport, ArchiveVerifyReport, PublicKey, Signer};
use idemgate_ops::{op, ArchiveCmd, Ops, OpsError};

use crate::{interrupt, output, stopped, with_progress, LedgerArg};

/// The arguments of `idemgate keygen`.
#[derive(Args, Debug)]
pub(crate) struct KeygenArgs {
    /// Writes PREFIX.key (the signing key, readable by its owner only) and PREFIX.pub (the public
    /// key, for auditors). Neither may exist.
    #[arg(long, value_name = "PREFIX")]
    out: PathBuf,
    /// The key's name, which is the origin of every checkpoint it signs (default HOST/idemgate;
    /// a witness's, HOST/witness).
    #[arg(long)]
    name: Option<String>,
    /// A witness's key (C2SP cosignature/v1, for `idemgate witness serve --key`) instead of a
    /// log's.
    #[arg(long)]
    witness: bool,
    /// Let this group read the signing key too (0640): the group of the user the server runs as
    /// (`idemgate` for the package's service), so that it can sign without owning the key.
    #[arg(long, value_name = "GROUP")]
    group: Option<String>,
}

/// A signing key's file, for the commands that sign what they write.
#[derive(Args, Debug, Clone)]
pub(crate) struct SigningArg {
    /// Sign a checkpoint of what is written with this key (from `idemgate keygen`), log it, and
    /// put it in the manifest.
    #[arg(long, env = "IDEMGATE_SIGNING_KEY_FILE", value_name = "FILE")]
    signing_key: Option<PathBuf>,
}

impl SigningArg {
    pub(crate) fn signer(&self) -> Result<Option<Arc<Signer>>, OpsError> {
        signer_from(self.signing_key.as_deref())
    }
}

/// The signing key in `file`, if one is given.
pub(crate) fn signer_from(file: Option<&Path>) -> Result<Option<Arc<Signer>>, OpsError> {
    file.map(|f| {
        Signer::from_file(f)
            .map(Arc::new)
            .map_err(|e| OpsError::invalid("signing-key", &e.to_string()))
    })
    .transpose()
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty() && !h.contains(char::is_whitespace) && !h.contains('+'))
        .unwrap_or_else(|| "localhost".into())
}

pub(crate) fn keygen(out: &mut output::Out, a: KeygenArgs) -> Result<ExitCode, OpsError> {
    let role = if a.witness { "witness" } else { "idemgate" };
    let name = a.name.unwrap_or_else(|| format!("{}/{role}", host_name()));
    let generated = if a.witness {
        idemgate_witness::generate_key(&name)
    } else {
        generate_key(&name)
    };
    let (private, public) = generated.map_err(|e| OpsError::invalid("name", &e.to_string()))?;
    let with = |ext: &str| {
        let mut s = a.out.as_os_str().to_owned();
        s.push(ext);
        PathBuf::from(s)
    };
    let (key, pubf) = (with(".key"), with(".pub"));
    let gid = a.group.as_deref().map(group_id).transpose()?;
    for p in [&key, &pubf] {
        if p.symlink_metadata().is_ok() {
            return Err(OpsError::Conflict(format!(
                "{} exists: a signing key is never replaced (choose another --out)",
                p.display()
            )));
        }
    }
    write_new(&key, &private, 0o600)?;
    let written = share_with_group(&key, gid).and_then(|()| write_new(&pubf, &public, 0o644));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&key);
        return Err(e);
    }
    let (secret, public_use) = if a.witness {
        (
            "the witness's key: keep it secret; `idemgate witness serve --key` reads it",
            "the witness's public key: `verify --witness-key` checks its cosignatures",
        )
    } else {
        (
            "the signing key: keep it secret; the server reads it through signing_key_file or \
             IDEMGATE_SIGNING_KEY_FILE",
            "the public key: auditors verify with it",
        )
    };
    writeln!(out, "wrote {} ({secret})", key.display())?;
    writeln!(out, "wrote {} ({public_use})", pubf.display())?;
    writeln!(out, "{public}")?;
    Ok(ExitCode::SUCCESS)
}

/// The id of the group `name`, from the group database.
fn group_id(name: &str) -> Result<u32, OpsError> {
    let groups = std::fs::read_to_string("/etc/group")
        .map_err(|e| OpsError::invalid("group", &format!("/etc/group: {e}")))?;
    groups
        .lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            Some((f.next()?, f.nth(1)?))
        })
        .find(|(n, _)| *n == name)
        .and_then(|(_, gid)| gid.parse().ok())
        .ok_or_else(|| OpsError::invalid("group", &format!("{name:?}: no such group")))
}

/// Gives the key at `path` to group `gid` and lets the group read it; the file was made 0600, so
/// nobody else could read it in between.
fn share_with_group(path: &Path, gid: Option<u32>) -> Result<(), OpsError> {
    let Some(gid) = gid else { return Ok(()) };
    let fail = |e: std::io::Error| OpsError::invalid("group", &format!("{}: {e}", path.display()));
    std::os::unix::fs::chown(path, None, Some(gid)).map_err(fail)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o640)).map_err(fail)
}

/// Creates `path` with `text` and a newline, with `mode`, failing if it exists.
fn write_new(path: &Path, text: &str, mode: u32) -> Result<(), OpsError> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|e| OpsError::invalid("out", &format!("{}: {e}", path.display())))?;
    f.write_all(text.as_bytes())?;
    f.write_all(b"\n")?;
    f.sync_all()?;
    Ok(())
}

/// The arguments of `idemgate archive`.
#[derive(Args, Debug)]
pub(crate) struct ArchiveArgs {
    #[command(flatten)]
    ledger: LedgerArg,
    /// Archive the events logged before this: RFC 3339, a date, a duration ago (90d) or Unix ms.
    #[arg(long, value_parser = idemgate_ops::parse_time)]
    before: i64,
    /// The archive directory (it must exist), or s3://BUCKET/PREFIX: segments and their
    /// manifests go there.
    #[arg(long, value_name = "DIR")]
    to: String,
    /// The most events in one segment.
    #[arg(long, value_name = "N")]
    segment_events: Option<u64>,
    #[command(flatten)]
    signing: SigningArg,
    /// Print the result as JSON on stdout instead of text.
    #[arg(long)]
    json: bool,
}

pub(crate) fn archive(out: &mut output::Out, a: ArchiveArgs) -> Result<ExitCode, OpsError> {
    let ops = Ops::open_existing(&a.ledger.ledger)?.with_signer(a.signing.signer()?);
    let cmd = ArchiveCmd {
        before: op::common::Time(a.before),
        dir: a.to,
        segment_events: a.segment_events,
    };
    let report = with_progress("archiving", "events", None, |p| {
        op::run::<op::archive::Op>(&ops, cmd, op::Host::none(), p)
    })?;
    archived(out, &report, a.json)?;
    if let (true, Some(stop)) = (report.cancelled, interrupt::asked()) {
        return Ok(stopped(
            stop,
            "archive",
            "every segment written so far is recorded and its events removed; run it again for the rest",
        ));
    }
    Ok(ExitCode::SUCCESS)
}

fn archived(out: &mut output::Out, r: &ArchiveReport, json: bool) -> Result<(), OpsError> {
    if json {
        return output::pretty(out, r);
    }
    for s in &r.segments {
        writeln!(
            out,
            "sealed {} (seq {}–{}, {} events, {} bytes)",
            s.file, s.first_seq, s.seq, s.count, s.bytes
        )?;
    }
    match &r.archived_through {
        Some(h) => writeln!(
            out,
            "archived through seq {} ({}); {} events left the live ledger",
            h.seq, h.hash, r.removed
        )?,
        None => writeln!(out, "nothing archived: no event is that old")?,
    }
    Ok(())
}

/// `idemgate retention …`.
#[derive(Subcommand, Debug)]
pub(crate) enum RetentionCmd {
    /// Apply a configuration's `[retention]` policy once, as the server does at its interval: for a
    /// ledger no server runs on.
    Run {
        /// The configuration with the `[retention]` policy (and its ledger, unless --ledger).
        #[arg(long, env = "IDEMGATE_CONFIG", value_name = "FILE")]
        config: PathBuf,
        /// The ledger, when not the one the configuration names.
        #[arg(long, env = "IDEMGATE_LEDGER", value_name = "PATH|URL")]
        ledger: Option<String>,
        /// Print the result as JSON on stdout instead of text.
        #[arg(long)]
        json: bool,
    },
}

pub(crate) fn retention(out: &mut output::Out, c: RetentionCmd) -> Result<ExitCode, OpsError> {
    let RetentionCmd::Run {
        config,
        ledger,
        json,
    } = c;
    let cfg = Config::load_without_secrets(&config.display().to_string())
        .map_err(|e| OpsError::BadConfig(e.to_string()))?;
    if cfg.retention.is_none() {
        return Err(OpsError::BadConfig(format!(
            "{}: no [retention] policy",
            config.display()
        )));
    }
    let ops =
        Ops::open_existing(&ledger.unwrap_or_else(|| cfg.ledger.clone()))?.configured_by(&cfg);
    let report = with_progress("archiving", "events", None, |p| {
        op::run::<op::run_retention::Op>(&ops, op::common::NoArgs {}, op::Host::none(), p)
    })?;
    if json {
        output::pretty(out, &report)?;
    } else {
        writeln!(out, "{}", report.policy)?;
        writeln!(
            out,
            "purged {}",
            output::counted(report.purged, "entry", "entries")
        )?;
        if let Some(a) = &report.archive {
            archived(out, a, false)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The public key `verify --public-key` names.
pub(crate) fn public_key(path: Option<&Path>) -> Result<Option<PublicKey>, OpsError> {
    path.map(|p| {
        PublicKey::from_file(p).map_err(|e| OpsError::invalid("public-key", &e.to_string()))
    })
    .transpose()
}

pub(crate) fn verified_archive(
    out: &mut output::Out,
    r: &ArchiveVerifyReport,
    json: bool,
) -> Result<(), OpsError> {
    if json {
        return output::pretty(out, r);
    }
    writeln!(out, "archive {}", r.dir)?;
    for s in &r.segments {
        writeln!(
            out,
            "  {} seq {}–{} {} events{}: {}",
            s.file,
            s.first_seq.unwrap_or(0),
            s.last_seq.unwrap_or(0),
            s.count,
            if s.checkpoint.is_some() {
                ", signed"
            } else {
                ""
            },
            if s.ok { "ok" } else { "BAD" }
        )?;
    }
    if let Some(l) = &r.live {
        writeln!(
            out,
            "live log: {} events after seq {}{}",
            l.count,
            l.started_after.as_ref().map_or(0, |h| h.seq),
            if l.ok { "" } else { " (BAD)" }
        )?;
    }
    writeln!(
        out,
        "{} events verified{}",
        r.count,
        r.head
            .as_ref()
            .map(|h| format!(", head seq {} {}", h.seq, h.hash))
            .unwrap_or_default()
    )?;
    for p in &r.problems {
        writeln!(out, "  {p}")?;
    }
    writeln!(out, "{}", output::verdict(r.ok, r.cancelled))?;
    Ok(())
}
