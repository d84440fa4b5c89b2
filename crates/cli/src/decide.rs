//! The commands that decide entries from the CLI: `resolve` one, `purge` some. Everything is
//! read and checked before the ledger is opened.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use idemgate_ops::ledger::{EntryFilter, ResponseRecord};
use idemgate_ops::{op, Ops, OpsError, PurgeCmd, PurgeTarget, ResolveCmd, ReviewCmd};

use crate::{interrupt, output, stopped, with_progress, ActorArgs, AsArg, LedgerArg};

/// The arguments of `idemgate resolve`.
#[derive(Args, Debug)]
pub(crate) struct ResolveArgs {
    #[command(flatten)]
    ledger: LedgerArg,
    /// The entry (`idemgate entries --stuck` lists the stuck ones).
    entry_id: i64,
    /// What happened upstream.
    #[arg(long = "as", value_enum)]
    as_: AsArg,
    /// Body of the response retries will get (completed or failed).
    #[arg(long)]
    response_file: Option<PathBuf>,
    /// Status of that response: 200-599, 200 when not given; a failed entry's is the
    /// upstream's error, 400-599, and must be given.
    #[arg(long, requires = "response_file")]
    status: Option<u16>,
    /// Content type of that response (default: application/json when the body is JSON, else
    /// text/plain; charset=utf-8).
    #[arg(long, requires = "response_file")]
    content_type: Option<String>,
    /// A reference to the effect upstream (e.g. the charge id you found).
    #[arg(long)]
    external_ref: Option<String>,
    #[command(flatten)]
    actor: ActorArgs,
    /// Print the result as JSON on stdout instead of text.
    #[arg(long)]
    json: bool,
}

/// The arguments of `idemgate review`.
#[derive(Args, Debug)]
pub(crate) struct ReviewArgs {
    #[command(flatten)]
    ledger: LedgerArg,
    /// The incident's first entry (`idemgate incidents` lists them).
    entry_id: i64,
    /// Why: what you found; recorded in the log.
    #[arg(long)]
    reason: String,
    /// Who: your name as it should appear in the log.
    #[arg(long, env = "IDEMGATE_OPERATOR")]
    operator: String,
    /// Print the result as JSON on stdout instead of text.
    #[arg(long)]
    json: bool,
}

pub(crate) fn review(out: &mut output::Out, a: ReviewArgs) -> Result<ExitCode, OpsError> {
    let cmd = ReviewCmd {
        entry_id: a.entry_id,
        operator: a.operator,
        reason: a.reason,
    };
    let ops = Ops::open_existing(&a.ledger.ledger)?;
    let r = op::run::<op::review_incident::Op>(&ops, cmd, op::Host::none(), &mut |_| true)?;
    if a.json {
        serde_json::to_writer_pretty(&mut *out, &r).map_err(std::io::Error::other)?;
        writeln!(out)?;
    } else {
        writeln!(
            out,
            "incident {} reviewed through entry {} by {}",
            a.entry_id, r.through, r.operator
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn resolve(out: &mut output::Out, a: ResolveArgs) -> Result<ExitCode, OpsError> {
    let ResolveArgs {
        ledger,
        entry_id,
        as_,
        response_file,
        status,
        content_type,
        external_ref,
        actor,
        json,
    } = a;
    // Everything is read and checked before the ledger is opened.
    let response = match response_file {
        Some(_) if status.is_none() && matches!(as_, AsArg::Failed) => {
            return Err(OpsError::invalid(
                "status",
                "a failed entry's response needs --status, the upstream's error (400-599)",
            ));
        }
        Some(f) => {
            // No more than one byte over what a response may hold: the check refuses it.
            let limit = idemgate_ops::ledger::MAX_RESPONSE_BODY as u64 + 1;
            let mut body = Vec::new();
            std::fs::File::open(&f)
                .and_then(|file| file.take(limit).read_to_end(&mut body))
                .map_err(|e| {
                    OpsError::invalid("response-file", &format!("{}: {e}", f.display()))
                })?;
            Some(ResponseRecord {
                status: status.unwrap_or(200),
                headers: content_type
                    .map(|ct| vec![("content-type".into(), ct)])
                    .unwrap_or_default(),
                body,
            })
        }
        None => None,
    };
    let cmd = ResolveCmd {
        entry_id,
        as_: as_.into(),
        response,
        external_ref,
        operator: actor.operator,
        reason: actor.reason,
        confirm_destructive: actor.confirm_destructive,
    };
    cmd.check()?;
    let ops = Ops::open_existing(&ledger.ledger)?;
    let e = op::run::<op::resolve::Op>(&ops, cmd, op::Host::none(), &mut |_| true)?;
    output::resolved(out, &e, json)?;
    out.flush().ok();
    Ok(ExitCode::SUCCESS)
}

/// The arguments of `idemgate purge`.
#[derive(Args, Debug)]
pub(crate) struct PurgeArgs {
    #[command(flatten)]
    ledger: LedgerArg,
    /// The entries to purge (`idemgate entries` lists them).
    #[arg(required_unless_present = "expired", conflicts_with = "expired")]
    entry_ids: Vec<i64>,
    /// Every expired entry (narrow with --route / --scope).
    #[arg(long)]
    expired: bool,
    /// Only expired entries of this route.
    #[arg(long, requires = "expired")]
    route: Option<String>,
    /// Only expired entries of this scope.
    #[arg(long, requires = "expired")]
    scope: Option<String>,
    /// Show what would be purged and change nothing.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    actor: ActorArgs,
    /// Print the result as JSON on stdout instead of text.
    #[arg(long)]
    json: bool,
}

pub(crate) fn purge(out: &mut output::Out, a: PurgeArgs) -> Result<ExitCode, OpsError> {
    let PurgeArgs {
        ledger,
        entry_ids,
        expired,
        route,
        scope,
        dry_run,
        actor,
        json,
    } = a;
    let target = if expired {
        PurgeTarget::Expired {
            filter: EntryFilter {
                route,
                scope,
                ..Default::default()
            },
        }
    } else {
        PurgeTarget::Ids { ids: entry_ids }
    };
    let cmd = PurgeCmd {
        target,
        operator: actor.operator,
        reason: actor.reason,
        confirm_destructive: actor.confirm_destructive,
    };
    idemgate_ops::validate_actor(&cmd.operator, &cmd.reason)?;
    let ops = Ops::open_existing(&ledger.ledger)?;
    let preview =
        op::run::<op::preview_purge::Op>(&ops, cmd.target.clone(), op::Host::none(), &mut |_| {
            true
        })?;
    if dry_run {
        output::preview(out, &preview, json)?;
        return Ok(ExitCode::SUCCESS);
    }
    let total = preview.count as u64;
    let report = with_progress("purging", "entries", Some(total), |p| {
        op::run::<op::purge::Op>(&ops, cmd, op::Host::none(), p)
    })?;
    output::purged(out, &report, json)?;
    if let (true, Some(stop)) = (report.cancelled, interrupt::asked()) {
        out.flush().ok();
        // Entries may have expired since the preview: the purge can take more than it counted.
        let left = total.saturating_sub(report.purged.len() as u64);
        return Ok(stopped(
            stop,
            "purge",
            &format!(
                "purged {} of {total}; the other {left} are as they were (purge again to take them)",
                report.purged.len()
            ),
        ));
    }
    out.flush().ok();
    Ok(ExitCode::SUCCESS)
}
