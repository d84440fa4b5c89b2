//! `idemgate prove`: an event's inclusion proof for an auditor, as a C2SP tlog-proof file; and
//! its check, `idemgate verify --proof FILE --public-key KEY`, which needs nothing else.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use idemgate_ops::ledger::{PublicKey, WitnessKey};
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
    /// checkpoint signs (a checkpoint of this log, a proof file that carries one, or an export's
    /// or archive segment's manifest), as a C2SP tlog-witness `add-checkpoint` body.
    #[arg(long, value_name = "CHECKPOINT", conflicts_with = "event")]
    consistency: Option<PathBuf>,
    /// The archive (a directory, or s3://BUCKET/PREFIX) that holds the event when it has left
    /// the live log.
    #[arg(long, value_name = "DIR")]
    archive: Option<String>,
    /// The proof file (conventionally NAME.tlog-proof). An existing one is refused.
    #[arg(short = 'o', long = "output")]
    output: PathBuf,
    /// Sign the checkpoint the proof carries with this key (from `idemgate keygen`): needed by
    /// --consistency, and by --event when no checkpoint the log kept covers the event.
    #[arg(long, env = "IDEMGATE_SIGNING_KEY_FILE", value_name = "FILE")]
    signing_key: Option<PathBuf>,
    /// Print the result as JSON on stdout instead of text.
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
    let ops = Ops::open_existing(&a.ledger.ledger)?
        .with_signer(crate::archival::signer_from(a.signing_key.as_deref())?)
        .with_archive(a.archive);
    if let Some(checkpoint) = old {
        let req = op::prove_consistency::CheckpointArg { checkpoint };
        let p = op::run::<op::prove_consistency::Op>(&ops, req, op::Host::none(), &mut |_| true)?;
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
    let p = op::run::<op::prove::Op>(&ops, req, op::Host::none(), &mut |_| true)?;
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

/// `verify`'s checks that need no ledger: an event's proof, or a tree's extension.
#[derive(Args, Debug)]
pub(crate) struct ProofArgs {
    /// An event's inclusion proof (from `idemgate prove`, a C2SP tlog-proof): checked with
    /// --public-key alone; no ledger is read (IDEMGATE_LEDGER is ignored).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["against", "export", "archive"])]
    pub(crate) proof: Option<PathBuf>,
    /// An older checkpoint of the log's tree (or a proof file or an export's manifest carrying
    /// one): with --to, checks that the newer tree extends it, with --public-key alone.
    #[arg(
        long,
        value_name = "CHECKPOINT",
        requires = "to",
        conflicts_with_all = ["against", "export", "archive", "proof"]
    )]
    pub(crate) consistency: Option<PathBuf>,
    /// A witness's public key (`idemgate keygen --witness`) whose cosignature the --proof's
    /// checkpoint must carry. Repeat for each witness.
    #[arg(long = "witness-key", value_name = "FILE", requires = "proof")]
    witness_keys: Vec<PathBuf>,
    /// How many of the --witness-key witnesses must have cosigned (default: all).
    #[arg(long, value_name = "N", requires = "witness_keys")]
    witness_quorum: Option<usize>,
    /// The newer tree and the proof that it extends --consistency's (from `idemgate prove
    /// --consistency`).
    #[arg(long, value_name = "FILE", requires = "consistency")]
    to: Option<PathBuf>,
}

impl ProofArgs {
    /// Whether one of these checks was asked for.
    pub(crate) fn asked(&self) -> bool {
        self.proof.is_some() || self.consistency.is_some()
    }
}

/// The witnesses whose cosignatures a proof must carry, and how many of them.
struct Witnesses {
    keys: Vec<WitnessKey>,
    quorum: usize,
}

impl Witnesses {
    fn read(files: &[PathBuf], quorum: Option<usize>) -> Result<Witnesses, OpsError> {
        let keys = files
            .iter()
            .map(|f| {
                std::fs::read_to_string(f)
                    .map_err(|e| e.to_string())
                    .and_then(|t| WitnessKey::parse(&t).map_err(|e| e.to_string()))
                    .map_err(|e| OpsError::invalid("witness-key", &format!("{}: {e}", f.display())))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let quorum = quorum.unwrap_or(keys.len());
        if quorum > keys.len() {
            return Err(OpsError::invalid(
                "witness-quorum",
                &format!("{quorum} of {} witnesses can never be met", keys.len()),
            ));
        }
        Ok(Witnesses { keys, quorum })
    }
}

/// `verify --proof FILE`, or `verify --consistency OLD --to NEW`.
pub(crate) fn verify(
    out: &mut output::Out,
    a: ProofArgs,
    key: Option<&PublicKey>,
    json: bool,
) -> Result<ExitCode, OpsError> {
    let witnesses = Witnesses::read(&a.witness_keys, a.witness_quorum)?;
    match (a.proof, a.consistency.zip(a.to)) {
        (Some(file), _) => verify_proof(out, &file, key, &witnesses, json),
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
    witnesses: &Witnesses,
    json: bool,
) -> Result<ExitCode, OpsError> {
    let key = key.ok_or_else(|| {
        OpsError::invalid(
            "public-key",
            "a proof is checked against the log's public key: give --public-key",
        )
    })?;
    let r = idemgate_ops::verify_proof_file(file, key, &witnesses.keys, witnesses.quorum)?;
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
        let cosigned = if r.cosigned_by.is_empty() {
            String::new()
        } else {
            format!(", cosigned by {}", r.cosigned_by.join(", "))
        };
        writeln!(
            out,
            "ok: {what} (leaf {}) is in the tree of {} events signed by {}{when}{cosigned} (root {})",
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
