//! `idemgate show`: one entry, and what each operator action would make of it.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use idemgate_config::Config;
use idemgate_ops::{op, Ops, OpsError};

use crate::output;
use crate::serve::CmdError;

#[derive(Args, Debug)]
pub(crate) struct ShowArgs {
    /// The ledger: a SQLite file path, or a PostgreSQL URL (the configuration's, unless given).
    #[arg(long, env = "IDEMGATE_LEDGER", value_name = "PATH|URL")]
    ledger: Option<String>,
    /// The configuration the entry's server runs under: replay and reconcile are judged by its
    /// routes too (the entry's route must be there, and a reconcile needs the route's probe).
    #[arg(long, env = "IDEMGATE_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// The name you act under (`--operator` of the actions): a held call's policy's approvers
    /// are judged by it too, besides your OS account.
    #[arg(long, env = "IDEMGATE_OPERATOR", value_name = "NAME")]
    operator: Option<String>,
    /// The entry (`idemgate entries` lists them).
    entry_id: i64,
    /// Print the result as JSON on stdout instead of text.
    #[arg(long)]
    json: bool,
}

/// Runs `idemgate show`.
pub(crate) fn run(out: &mut output::Out, a: ShowArgs) -> Result<ExitCode, CmdError> {
    let (cfg, ledger) = crate::serve::config_and_ledger(
        a.config.as_deref(),
        a.ledger,
        Config::load_without_secrets,
    )?;
    let ops = Ops::open_existing(&ledger)?;
    let me = idemgate_ops::os_user();
    let host = cfg
        .as_deref()
        .map_or(op::Host::none(), op::Host::routes)
        .by(idemgate_ops::dispatch::Decider::account(&me).named(a.operator.as_deref()));
    let req = op::common::EntryRef {
        entry_id: a.entry_id,
    };
    let entry = op::run::<op::show::Op>(&ops, req, host, &mut |_| true)?;
    output::show(out, &entry, a.json)?;
    out.flush().map_err(OpsError::from)?;
    Ok(ExitCode::SUCCESS)
}
