//! `idemgate prove`: an event's inclusion proof for an auditor, as a C2SP tlog-proof file; and
//! its check, `idemgate verify --proof FILE --public-key KEY`, which needs nothing else.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use idemgate_ops::ledger::PublicKey;
use idemgate_ops::{op, Ops, OpsError};

use crate::{output, LedgerArg};

/// The arguments of `idemgate prove`.
#[derive(Args, Debug)]
pub(crate) struct ProveArgs {
    #[command(flatten)]
    ledger: LedgerArg,
    /// The event's sequence number (`idemgate log` shows it).
    #[arg(long, value_name = "SEQ", required_unless_present = "consistency")]
    event: Option<i64>,
    /// Instead of an event's proof, the proof that the log's tree now extends the one this
    /// checkpoint signs (a checkpoint of this log, or a proof file that carries one), as a C2SP
    /// tlog-witness `add-checkpoint` body.
    #[arg(long, value_name = "CHECKPOINT", conflicts_with = "event")]
    consistency: Option<PathBuf>,
    /// The proof file (conventionally NAME.tlog-proof). An existing one is refused.
    #[arg(short = 'o', long = "output")]
    output: PathBuf,
    #[command(flatten)]
    signing: crate::archival::SigningArg,
    #[arg(long)]
    json: bool,
}

pub(crate) fn prove(out: &mut output::Out, a: ProveArgs) -> Result<ExitCode, OpsError> {
    if a.output.exists() {
        return Err(OpsError::invalid(
            "output",
            &format!("{} exists: choose another file", a.output.display()),
        ));
    }
    let old = a
        .consistency
        .as_deref()
        .map(|f| {
            std::fs::read_to_string(f)
                .map_err(|e| OpsError::invalid("consistency", &format!("{}: {e}", f.display())))
        })
        .transpose()?;
    let ops = Ops::open_existing(&a.ledger.ledger)?.with_signer(a.signing.signer()?);
    if let Some(checkpoint) = old {
        let req = op::prove_consistency::CheckpointArg { checkpoint };
        let p = op::run::<op::prove_consistency::Op>(&ops, req, None, &mut |_| true)?;
        write_new(&a.output, &p.proof)?;
        if a.json {
            output::pretty(out, &p)?;
        } else {
            writeln!(
                out,
                "wrote {}: the tree of {} events extends the one of {} (root {})",
                a.output.display(),
                p.size,
                p.old,
                p.root
            )?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let req = op::prove::EventRef {
        seq: a.event.unwrap_or_default(),
    };
    let p = op::run::<op::prove::Op>(&ops, req, None, &mut |_| true)?;
    write_new(&a.output, &p.proof)?;
    if a.json {
        output::pretty(out, &p)?;
    } else {
        writeln!(
            out,
            "wrote {}: event {} is leaf {} of the tree of {} events (root {})",
            a.output.display(),
            p.seq,
            p.index,
            p.size,
            p.root
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes `text` to a file that must not exist yet.
fn write_new(path: &Path, text: &str) -> Result<(), OpsError> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| OpsError::invalid("output", &format!("{}: {e}", path.display())))
}

/// `verify --proof FILE`, or `verify --consistency OLD --to NEW`.
pub(crate) fn verify(
    out: &mut output::Out,
    proof: Option<PathBuf>,
    extension: Option<(PathBuf, PathBuf)>,
    key: Option<&PublicKey>,
    json: bool,
) -> Result<ExitCode, OpsError> {
    match (proof, extension) {
        (Some(file), _) => verify_proof(out, &file, key, json),
        (None, Some((old, new))) => verify_consistency(out, &old, &new, key, json),
        (None, None) => Err(OpsError::invalid(
            "proof",
            "name a --proof, or --consistency and --to",
        )),
    }
}

/// `verify --consistency OLD --to NEW`: exits 0 when the newer tree extends the older one, 3
/// when it does not (a rollback, a fork, another key).
fn verify_consistency(
    out: &mut output::Out,
    old: &Path,
    new: &Path,
    key: Option<&PublicKey>,
    json: bool,
) -> Result<ExitCode, OpsError> {
    let key = key.ok_or_else(|| {
        OpsError::invalid(
            "public-key",
            "checkpoints are checked against the log's public key: give --public-key",
        )
    })?;
    let r = idemgate_ops::verify_extension_files(old, new, key)?;
    if json {
        output::pretty(out, &r)?;
    } else if r.ok {
        writeln!(
            out,
            "ok: the tree of {} events signed by {} extends the tree of {}",
            r.size.unwrap_or_default(),
            key.name(),
            r.old.unwrap_or_default()
        )?;
    } else {
        writeln!(
            out,
            "FAILED: {}",
            r.problem
                .as_deref()
                .unwrap_or("the trees are not consistent")
        )?;
    }
    out.flush().ok();
    Ok(if r.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    })
}

/// `verify --proof`: exits 0 when the proof checks, 3 when it does not.
fn verify_proof(
    out: &mut output::Out,
    file: &Path,
    key: Option<&PublicKey>,
    json: bool,
) -> Result<ExitCode, OpsError> {
    let key = key.ok_or_else(|| {
        OpsError::invalid(
            "public-key",
            "a proof is checked against the log's public key: give --public-key",
        )
    })?;
    let r = idemgate_ops::verify_proof_file(file, key)?;
    if json {
        output::pretty(out, &r)?;
    } else if r.ok {
        let what = r
            .event
            .get("seq")
            .map_or_else(|| "the record".to_owned(), |seq| format!("event {seq}"));
        let when = r
            .signed_at
            .as_deref()
            .filter(|t| !t.is_empty())
            .map(|t| format!(" at {t}"))
            .unwrap_or_default();
        writeln!(
            out,
            "ok: {what} (leaf {}) is in the tree of {} events signed by {}{when} (root {})",
            r.index,
            r.size.unwrap_or_default(),
            key.name(),
            r.root.as_deref().unwrap_or_default()
        )?;
    } else {
        writeln!(
            out,
            "FAILED: {}",
            r.problem.as_deref().unwrap_or("the proof does not check")
        )?;
    }
    out.flush().ok();
    Ok(if r.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    })
}
