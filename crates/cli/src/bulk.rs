//! `idemgate bulk`: one action on every entry a filter matches. A command of its own, so that an
//! action on many entries is always asked for by name: a single-entry command whose id was left
//! out never widens to a whole filter.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, ValueEnum};
use idemgate_config::Config;
use idemgate_ops::ledger::EntryFilter;
use idemgate_ops::op::Declared as _;
use idemgate_ops::{op, BulkCmd, BulkKind, BulkTarget, Ops, ResolveAs};

use crate::serve::CmdError;
use crate::{interrupt, output, stopped, with_progress, ActorArgs, AsArg, FilterArgs};

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BulkArg {
    /// Resolve each entry (--as completed, failed or released).
    Resolve,
    /// Send each entry's stored request upstream again (needs --config).
    Replay,
    /// Ask each entry's route probe whether its effect happened (needs --config).
    Reconcile,
}

#[derive(Args, Debug)]
pub(crate) struct BulkArgs {
    /// What to do to each entry.
    #[arg(value_enum)]
    action: BulkArg,
    /// The ledger (for replay and reconcile: the configuration's, unless given).
    #[arg(long, env = "IDEMGATE_LEDGER", value_name = "PATH|URL")]
    ledger: Option<String>,
    /// The configuration naming the entries' routes and upstreams (replay and reconcile).
    #[arg(long, env = "IDEMGATE_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(flatten)]
    filter: FilterArgs,
    /// Only these entries of those the filter matches.
    #[arg(long = "id", value_name = "ENTRY_ID")]
    ids: Vec<i64>,
    /// A resolve's outcome.
    #[arg(long = "as", value_enum)]
    as_: Option<AsArg>,
    /// A resolve's reference to the effect upstream (e.g. the charge id you found).
    #[arg(long)]
    external_ref: Option<String>,
    /// Show what it would touch and change nothing.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    actor: ActorArgs,
    /// Print the result as JSON on stdout instead of text.
    #[arg(long)]
    json: bool,
}

/// Runs `idemgate bulk`: previews, then acts entry by entry; Ctrl-C or SIGTERM stops it between
/// two entries.
pub(crate) fn run(a: BulkArgs) -> Result<ExitCode, CmdError> {
    let action = match a.action {
        BulkArg::Resolve => BulkKind::Resolve,
        BulkArg::Replay => BulkKind::Replay,
        BulkArg::Reconcile => BulkKind::Reconcile,
    };
    let cmd = BulkCmd {
        action,
        target: BulkTarget {
            filter: EntryFilter::from(a.filter),
            ids: (!a.ids.is_empty()).then_some(a.ids),
        },
        as_: a.as_.map(ResolveAs::from),
        response: None,
        external_ref: a.external_ref,
        operator: a.actor.operator,
        reason: a.actor.reason,
        confirm_destructive: a.actor.confirm_destructive,
    };
    // Everything is read and checked before the ledger is opened.
    cmd.check()?;
    let cfg = match (&a.config, op::bulk::Op::reaches_upstream(&cmd)) {
        (Some(c), true) => Some(Arc::new(Config::load_for_operations(
            &c.display().to_string(),
        )?)),
        (Some(c), false) => Some(Arc::new(Config::load_without_secrets(
            &c.display().to_string(),
        )?)),
        (None, true) => return Err(idemgate_ops::OpsError::NoConfig.into()),
        (None, false) => None,
    };
    let ledger = match (a.ledger, &cfg) {
        (Some(l), _) => l,
        (None, Some(c)) => c.ledger.clone(),
        (None, None) => {
            return Err(idemgate_ops::OpsError::invalid(
                "ledger",
                "name the ledger: --ledger PATH|URL or IDEMGATE_LEDGER",
            )
            .into())
        }
    };
    let ops = Ops::open_existing(&ledger)?;
    let mut out = output::Out::stdout();
    let req = op::preview_bulk::BulkPreviewRequest {
        action,
        as_: cmd.as_,
        target: cmd.target.clone(),
    };
    let host = cfg.as_deref().map_or(op::Host::none(), op::Host::routes);
    let preview = op::run::<op::preview_bulk::Op>(&ops, req, host, &mut |_| true)?;
    if a.dry_run {
        output::preview(&mut out, &preview, a.json)?;
        return Ok(ExitCode::SUCCESS);
    }
    let rt = crate::serve::runtime()?;
    let _in = rt.enter();
    let upstream = cfg.map(|c| ops.upstream(c));
    let total = preview.count as u64;
    let report = with_progress(action.as_str(), "entries", Some(total), |p| {
        let host = upstream
            .as_ref()
            .map_or(op::Host::none(), op::Host::upstream);
        op::run::<op::bulk::Op>(&ops, cmd, host, p)
    })?;
    output::bulk(&mut out, &report, a.json)?;
    if let (true, Some(stop)) = (report.cancelled, interrupt::asked()) {
        out.flush().ok();
        return Ok(stopped(
            stop,
            action.as_str(),
            &format!(
                "acted on {} of {}; the rest are as they were",
                report.attempted, report.total
            ),
        ));
    }
    Ok(if report.failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
