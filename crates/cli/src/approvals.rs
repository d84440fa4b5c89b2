//! The approvals inbox on the CLI: `approvals` lists the calls held for operators, `approve` and
//! `reject` decide one. The CLI opens the ledger file, so the name typed is not an identity: the
//! decision is recorded with the OS account beside it, and one account is one approver.

use std::io::Write;
use std::process::ExitCode;

use clap::Args;
use idemgate_ops::dispatch::Decider;
use idemgate_ops::{
    desktop_operator, op, os_user, ApprovalsRequest, DecideCmd, HeldCall, Ops, OpsError,
};

use crate::{output, LedgerArg};

/// The arguments of `idemgate approvals`.
#[derive(Args, Debug)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    ledger: LedgerArg,
    /// Only the calls still waiting for a decision.
    #[arg(long)]
    open: bool,
    /// At most this many calls, the newest.
    #[arg(long, default_value_t = 50, value_parser = crate::at_least_one)]
    limit: usize,
    /// The name you decide under (`approve --operator`): whether a policy's approvers name you is
    /// judged too, besides your OS account.
    #[arg(long, env = "IDEMGATE_OPERATOR", value_name = "NAME")]
    operator: Option<String>,
    /// Print the result as JSON on stdout instead of text.
    #[arg(long)]
    json: bool,
}

/// The arguments of `idemgate approve` and `idemgate reject`.
#[derive(Args, Debug)]
pub(crate) struct DecideArgs {
    #[command(flatten)]
    ledger: LedgerArg,
    /// The held call's entry (`idemgate approvals --open` lists them).
    entry_id: i64,
    /// Why: recorded in the log with the decision.
    #[arg(long)]
    reason: String,
    /// Who: your name as it should appear in the log (your OS account is recorded beside it).
    #[arg(long, env = "IDEMGATE_OPERATOR")]
    operator: String,
    /// Print the result as JSON on stdout instead of text.
    #[arg(long)]
    json: bool,
}

pub(crate) fn list(out: &mut output::Out, a: ListArgs) -> Result<ExitCode, OpsError> {
    let ops = Ops::open_existing(&a.ledger.ledger)?;
    let req = ApprovalsRequest {
        open: Some(a.open),
        before: None,
        limit: Some(a.limit),
    };
    let me = os_user();
    let host = op::Host::none().by(Decider::account(&me).named(a.operator.as_deref()));
    let list = op::run::<op::approvals::Op>(&ops, req, host, &mut |_| true)?;
    if a.json {
        output::pretty(out, &list)?;
        return Ok(ExitCode::SUCCESS);
    }
    if list.is_empty() {
        writeln!(out, "no calls held for approval")?;
    }
    // Columns as wide as the list's widest title and key, so every standing starts in one place.
    let widths = list.iter().fold((0, 0), |(h, k), e| {
        let chars = |t: &str| t.chars().count();
        (
            h.max(chars(&e.entry.headline)),
            k.max(chars(&e.entry.summary.key)),
        )
    });
    for e in &list {
        writeln!(out, "{}", line(e, widths))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// One held call: its entry, what it is in the business's terms, its key, where its approval
/// stands, and why the one who runs the command may not approve it while it waits; its title
/// and key padded to `widths`.
fn line(held: &HeldCall, (title, key): (usize, usize)) -> String {
    let e = &held.entry;
    let s = &e.summary;
    let standing = e
        .approval
        .as_ref()
        .map(output::approval_standing)
        .unwrap_or_default();
    let waits = e.approval.as_ref().is_some_and(|a| a.end.is_none());
    let not_me = match &held.decision.approve {
        Some(why) if waits => format!("; not for you to approve: {why}"),
        _ => String::new(),
    };
    format!(
        "{:>6}  {:<title$}  {:<key$}  {standing}{not_me}",
        s.id, e.headline, s.key
    )
}

pub(crate) fn decide(
    out: &mut output::Out,
    a: DecideArgs,
    approve: bool,
) -> Result<ExitCode, OpsError> {
    let cmd = DecideCmd {
        entry_id: a.entry_id,
        operator: desktop_operator(&a.operator, &os_user()),
        reason: a.reason,
        fingerprint: None,
    };
    let ops = Ops::open_existing(&a.ledger.ledger)?;
    let r = if approve {
        op::run::<op::approve::Op>(&ops, cmd, op::Host::none(), &mut |_| true)?
    } else {
        op::run::<op::reject::Op>(&ops, cmd, op::Host::none(), &mut |_| true)?
    };
    if a.json {
        output::pretty(out, &r)?;
        return Ok(ExitCode::SUCCESS);
    }
    let what = match r.end {
        Some(end) => end.as_str().to_owned(),
        None => format!("approved {}/{}", r.approved_by.len(), r.needed),
    };
    writeln!(out, "entry {}: {what}", a.entry_id)?;
    Ok(ExitCode::SUCCESS)
}
