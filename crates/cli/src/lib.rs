//! `idemgate`: the command-line door to the operations API. The binary is `main.rs`, one line;
//! everything is here so the workspace tests can build the very same program.
//!
//! Exit codes: 0 success; 1 an operation failed (the message says why and the ledger is unchanged);
//! 2 bad usage (nothing was opened); 3 verification found a problem; 130 (SIGINT) or 143 (SIGTERM)
//! long work stopped when asked (see `interrupt`).

mod approvals;
mod archival;
mod audit;
mod bulk;
mod call;
mod decide;
mod output;
mod proofs;
mod serve;
mod setup;
mod show;
mod token;
mod witness;

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand, ValueEnum};
use idemgate_ops::ledger::{EntryFilter, EventKind, Progress, State};
use idemgate_ops::{op, Ops, OpsError, ResolveAs};

#[derive(Parser, Debug)]
#[command(
    name = "idemgate",
    version,
    about = "Exactly-once side effects for retrying clients: the idemgate ledger and its operations",
    long_about = "idemgate keeps an idempotency ledger in front of side-effecting APIs so a retried call \
                  is answered from the ledger instead of running twice. `idemgate serve` runs the proxy; \
                  the other commands inspect and operate the ledger: list and show entries, read the \
                  hash-chained log, resolve, replay or reconcile stuck entries, purge, export audit \
                  trails and verify them.\n\n\
                  Exit codes: 0 ok, 1 the operation failed (ledger unchanged), 2 bad usage, 3 verification failed, \
                  130 or 143 stopped by Ctrl-C or SIGTERM (purge, export, verify, copy, bulk: see their help).",
    after_help = "The ledger is a SQLite file or a PostgreSQL URL (postgres://user@host/db): \
                  --ledger PATH|URL or IDEMGATE_LEDGER. A keyed log needs IDEMGATE_CHAIN_KEY or \
                  IDEMGATE_CHAIN_KEY_FILE."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Args, Debug, Clone)]
struct LedgerArg {
    /// The ledger: a SQLite file path, or a PostgreSQL URL (postgres://user@host:port/database).
    #[arg(long, env = "IDEMGATE_LEDGER", value_name = "PATH|URL")]
    ledger: String,
}

#[derive(Args, Debug, Clone)]
struct ActorArgs {
    /// Why: recorded in the log with the action. Required and non-empty.
    #[arg(long)]
    reason: String,
    /// Who: your name as it should appear in the log.
    #[arg(long, env = "IDEMGATE_OPERATOR")]
    operator: String,
    /// Needed when the action touches an entry on a `destructive` route.
    #[arg(long)]
    confirm_destructive: bool,
}

/// An entry state on the command line: the ledger's own names, all of them, so what `--status`
/// takes and `--help` lists follows the states the ledger has.
fn state_arg() -> impl TypedValueParser<Value = State> {
    PossibleValuesParser::new(State::ALL.map(State::as_str))
        .try_map(|s: String| State::parse(&s).ok_or("not an entry state"))
}

/// An event kind on the command line, likewise the ledger's own names, all of them.
fn kind_arg() -> impl TypedValueParser<Value = EventKind> {
    PossibleValuesParser::new(EventKind::ALL.map(EventKind::as_str))
        .try_map(|s: String| EventKind::parse(&s).ok_or("not an event kind"))
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum AsArg {
    /// The effect happened: retries get the response given (--response-file), or one naming
    /// the external reference.
    Completed,
    /// It failed for good: retries get the failure, and the key does not run again.
    Failed,
    /// It did not happen: the key may run again.
    Released,
}

impl From<AsArg> for ResolveAs {
    fn from(a: AsArg) -> ResolveAs {
        match a {
            AsArg::Completed => ResolveAs::Completed,
            AsArg::Failed => ResolveAs::Failed,
            AsArg::Released => ResolveAs::Released,
        }
    }
}

/// Which entries: the filters `entries` and `bulk` share.
#[derive(Args, Debug, Clone)]
struct FilterArgs {
    /// Entries in this state.
    #[arg(long, value_parser = state_arg())]
    status: Option<State>,
    /// PENDING whose lease has passed or whose outcome is unknown.
    #[arg(long)]
    stuck: bool,
    /// Keys that arrived again with a different request.
    #[arg(long)]
    collisions: bool,
    /// Past their TTL.
    #[arg(long)]
    expired: bool,
    /// Duplicate suspects: the same effect completed under different keys.
    #[arg(long)]
    duplicates: bool,
    /// Entries of this route.
    #[arg(long)]
    route: Option<String>,
    /// Entries of this scope (the caller, by the route's scope header).
    #[arg(long)]
    scope: Option<String>,
    /// Entries with this idempotency key.
    #[arg(long)]
    key: Option<String>,
    /// Entries of this MCP tool (`tools/call` through an MCP route).
    #[arg(long)]
    tool: Option<String>,
    /// Entries with this subject: `NAME=VALUE` (`customer=cus_123`), or a VALUE under any name.
    #[arg(long)]
    subject: Option<String>,
    /// Entries whose key, or a subject's value, is this: what the console's search box finds.
    #[arg(long)]
    search: Option<String>,
}

impl From<FilterArgs> for EntryFilter {
    fn from(f: FilterArgs) -> EntryFilter {
        EntryFilter {
            state: f.status,
            stuck: f.stuck,
            collisions: f.collisions,
            expired: f.expired,
            duplicates: f.duplicates,
            route: f.route,
            scope: f.scope,
            key: f.key,
            tool: f.tool,
            subject: f.subject,
            search: f.search,
            expiring_within: None,
        }
    }
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum FormatArg {
    /// One JSON object per line.
    Ndjson,
    /// A header row, then one row per event.
    Csv,
}

#[derive(Args, Debug, Clone)]
struct ProxyActionArgs {
    /// The configuration naming the entry's route and upstream (its ledger is used unless --ledger).
    #[arg(long, env = "IDEMGATE_CONFIG", value_name = "FILE")]
    config: PathBuf,
    /// The ledger, when not the one the configuration names.
    #[arg(long, env = "IDEMGATE_LEDGER", value_name = "PATH|URL")]
    ledger: Option<String>,
    /// The entry (`idemgate entries --stuck` lists the stuck ones).
    entry_id: i64,
    #[command(flatten)]
    actor: ActorArgs,
    /// Print the result as JSON on stdout instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run the proxy (and the admin API and /metrics) from a configuration file.
    Serve {
        /// The configuration file (`idemgate init` writes one).
        #[arg(long, env = "IDEMGATE_CONFIG", value_name = "FILE")]
        config: PathBuf,
        /// Log format on stderr (level: IDEMGATE_LOG, default info).
        #[arg(long, value_enum, default_value = "text", env = "IDEMGATE_LOG_FORMAT")]
        log_format: LogFormat,
        /// Check the configuration and exit without serving: every field, the secrets it names,
        /// the admin token. Exit 0 and the routes in the order they match, or the first error.
        /// The ledger is not opened.
        #[arg(long)]
        check: bool,
    },
    /// Re-drive a stuck, released or failed entry's stored request upstream (logged).
    Replay(ProxyActionArgs),
    /// Ask the upstream, through the route's reconcile probe, whether a stuck entry's effect happened,
    /// and resolve it accordingly (logged).
    Reconcile(ProxyActionArgs),
    /// Seed a new ledger with realistic traffic and incidents, for a first look.
    Demo {
        #[command(flatten)]
        ledger: LedgerArg,
        /// At least this many log events.
        #[arg(long, default_value_t = 10_000)]
        events: u64,
        /// Random seed (the same seed gives the same ledger shape).
        #[arg(long, default_value_t = 7)]
        seed: u64,
    },
    /// List entries (all matches, newest first, unless --limit).
    Entries {
        #[command(flatten)]
        ledger: LedgerArg,
        #[command(flatten)]
        filter: FilterArgs,
        /// At most this many entries, the newest (the oldest with --oldest-first).
        #[arg(long, value_parser = at_least_one)]
        limit: Option<usize>,
        /// In the order they came in: the oldest first.
        #[arg(long)]
        oldest_first: bool,
        /// One JSON array on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Resolve, replay or reconcile every entry a filter matches (or the --id ones of them), one
    /// at a time, each logged. --dry-run shows what it would touch.
    ///
    /// An entry that fails is reported and the rest go on (exit 1 when any failed). Ctrl-C or
    /// SIGTERM stops it between two entries: what was done stays done, and the command exits 130
    /// (143).
    Bulk(bulk::BulkArgs),
    /// Operator tokens for the admin API (`token new --name alice --role operator`).
    #[command(subcommand)]
    Token(token::TokenCmd),
    /// Write a commented starter configuration (and its admin token, when missing), checked as
    /// `serve --check` checks it.
    Init(setup::InitArgs),
    /// Print the manual page (roff) on stdout: `idemgate man > idemgate.1`.
    Man,
    /// Print shell completions on stdout: `idemgate completions bash > /etc/bash_completion.d/idemgate`.
    Completions {
        /// The shell to write completions for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Show one entry: request, response, state, its whole timeline, and the operator actions
    /// it takes.
    Show(show::ShowArgs),
    /// Read the append-only log, newest first.
    Log(LogArgs),
    /// Record an operator's decision on a stuck, released or failed entry.
    Resolve(decide::ResolveArgs),
    /// Incidents, newest first: an entry and the entries flagged as its duplicates (the same
    /// request, or the route's `duplicate_on` values), with their subjects and review.
    Incidents {
        #[command(flatten)]
        ledger: LedgerArg,
        /// Only those not reviewed (or with a suspect since the review).
        #[arg(long)]
        open: bool,
        /// At most this many incidents, the newest.
        #[arg(long, default_value_t = 50, value_parser = at_least_one)]
        limit: usize,
        /// Print the result as JSON on stdout instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Mark an incident (its first entry) reviewed, with why; a later suspect opens it again.
    Review(decide::ReviewArgs),
    /// Calls held for approval, newest first: the policy each matched, who approved it so far,
    /// when it expires.
    Approvals(approvals::ListArgs),
    /// Approve a call held for approval; the last approval its policy needs releases it (a
    /// running server forwards it, or the next one to start).
    Approve(approvals::DecideArgs),
    /// Reject a call held for approval: it never runs, and its client is told why.
    Reject(approvals::DecideArgs),
    /// Delete entries (the log keeps their events). Pending entries must be resolved, and held
    /// ones decided, first.
    ///
    /// Entries go in chunks of 1,000, each atomic. Ctrl-C or SIGTERM stops the purge between two:
    /// what is purged stays purged and logged, the command says how many are left and exits 130
    /// (143), and purging again takes the rest.
    Purge(decide::PurgeArgs),
    /// Export the log (a time range of it) with a manifest holding the chain head and file sha256.
    ///
    /// The file is written beside its name and renamed into place when whole. Ctrl-C or SIGTERM
    /// stops the export with no file left behind, and exits 130 (143).
    Export(audit::ExportArgs),
    /// Copy a whole ledger into a new, empty one — e.g. SQLite to PostgreSQL: entries (so completed
    /// keys still replay), the log verbatim (same hashes) and counters. Stop the proxies first: the
    /// source's write lock is held for the copy.
    Copy(audit::CopyArgs),
    /// Recompute the hash chain of a ledger (optionally against an export manifest), of an export,
    /// or of an archive with the live log after it; with --public-key, check signed checkpoints.
    /// Or check, with the public key alone, an event's proof (--proof) or that one signed tree of
    /// the log extends another (--consistency OLD --to NEW).
    Verify(audit::VerifyArgs),
    /// Write the proof that an event is in the log, for an auditor: a C2SP tlog-proof (the event,
    /// its Merkle inclusion path, and the newest checkpoint of the log's tree the server kept that
    /// covers it, else one signed now with --signing-key) that `idemgate verify --proof FILE
    /// --public-key KEY` checks with nothing else. With --consistency, the proof that the tree
    /// extends an older checkpoint.
    Prove(proofs::ProveArgs),
    /// Run any operation by name, as the admin API and the console run it: its request as
    /// NAME=VALUE parameters, its answer as JSON (`idemgate call OPERATION --help`).
    Call(call::Call),
    /// Write a new Ed25519 key pair for signed checkpoints: PREFIX.key (secret) and PREFIX.pub.
    Keygen(archival::KeygenArgs),
    /// A transparency-log witness, run by an auditor apart from the log it watches.
    #[command(subcommand)]
    Witness(witness::WitnessCmd),
    /// Move the events logged before a time into sealed, compressed segments in a directory, then
    /// remove them from the live ledger (verify --archive checks the whole history).
    ///
    /// Each segment is written, synced and renamed into place, then recorded by the ledger, and
    /// only then are its events deleted: a crash at any point loses nothing, and running it again
    /// finishes the work. Ctrl-C or SIGTERM stops it between two segments.
    Archive(archival::ArchiveArgs),
    /// Apply a configuration's retention policy (`retention run --config FILE`).
    #[command(subcommand)]
    Retention(archival::RetentionCmd),
}

/// A count of rows: 1 or more (0 would show nothing and say that nothing matched).
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

fn init_logging(default_level: &str, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("IDEMGATE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    // A line that cannot be written is dropped. By default tracing-subscriber reports it with
    // `eprintln!`, which panics when stderr cannot be written either: with the log on a full disk,
    // the ledger writer's first error line took the writer thread down, and every write after it
    // failed as `ledger-closed` until a restart.
    // Colours for a terminal only: a file, a pipe or journald would keep the escape codes.
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .log_internal_errors(false);
    match format {
        LogFormat::Json => b.json().init(),
        LogFormat::Text => b.init(),
    }
}

/// Runs `idemgate` with the process's arguments.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match &cli.cmd {
        Cmd::Serve { log_format, .. } => init_logging("info", *log_format),
        _ => init_logging("warn", LogFormat::Text),
    }
    let result = match cli.cmd {
        Cmd::Serve {
            config,
            check: true,
            ..
        } => serve::check(&config),
        Cmd::Serve { config, .. } => serve::serve(&config),
        Cmd::Replay(a) => serve::operator_action(serve::Action::Replay, a),
        Cmd::Reconcile(a) => serve::operator_action(serve::Action::Reconcile, a),
        Cmd::Bulk(a) => bulk::run(a),
        Cmd::Token(t) => token::run(t),
        Cmd::Call(c) => call::run(&mut output::Out::stdout(), c),
        Cmd::Show(a) => show::run(&mut output::Out::stdout(), a),
        Cmd::Approvals(a) => approvals::list(&mut output::Out::stdout(), a).map_err(Into::into),
        Cmd::Approve(a) => {
            approvals::decide(&mut output::Out::stdout(), a, true).map_err(Into::into)
        }
        Cmd::Reject(a) => {
            approvals::decide(&mut output::Out::stdout(), a, false).map_err(Into::into)
        }
        other => run(other).map_err(serve::CmdError::from),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            let from_env = serve::config_named_by_env(e.code());
            eprintln!("idemgate: error[{}]: {e}{from_env}", e.code());
            ExitCode::from(1)
        }
    }
}

/// Ctrl-C (SIGINT) or SIGTERM while long work runs (purge, export, verify, copy, bulk) asks it to stop
/// where it safely can: a purge between two of its atomic chunks, an export with its partial file
/// removed, a verify with what it checked so far, a copy rolled back. A second signal ends the
/// process at once, as without these handlers. The command then exits `128 + signal`.
mod interrupt {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Once;

    use signal_hook::consts::{SIGINT, SIGTERM};
    use signal_hook::flag;

    static ASKED: AtomicBool = AtomicBool::new(false);
    static SIGNAL: AtomicUsize = AtomicUsize::new(0);

    /// Catches both signals from now on. Without handlers (they could not be made) the signals
    /// keep their default action: the work ends at once, and each unit of it is atomic.
    pub fn catch() {
        static ONCE: Once = Once::new();
        ONCE.call_once(|| {
            for sig in [SIGINT, SIGTERM] {
                // The order matters: the default action first, armed only by a signal before.
                let r = flag::register_conditional_default(sig, &ASKED)
                    .and_then(|_| flag::register_usize(sig, &SIGNAL, sig as usize))
                    .and_then(|_| flag::register(sig, &ASKED));
                if let Err(e) = r {
                    eprintln!("idemgate: Ctrl-C will end this command at once: {e}");
                }
            }
        });
    }

    /// The signal that asked the work to stop, if one did.
    pub fn asked() -> Option<Stop> {
        ASKED
            .load(Ordering::SeqCst)
            .then(|| Stop(SIGNAL.load(Ordering::SeqCst) as i32))
    }

    /// A stop asked for by a signal.
    #[derive(Clone, Copy, Debug)]
    pub struct Stop(i32);

    impl Stop {
        pub fn name(self) -> &'static str {
            if self.0 == SIGTERM {
                "SIGTERM"
            } else {
                "Ctrl-C"
            }
        }

        /// The shell's convention: 128 + the signal's number.
        pub fn exit_code(self) -> std::process::ExitCode {
            std::process::ExitCode::from(128 + self.0.clamp(1, 127) as u8)
        }
    }
}

/// Runs `f` with a progress callback that draws a bar on stderr (see `progress_bar`), cleared when
/// `f` returns, and that tells `f` to stop once Ctrl-C or SIGTERM asks (see `interrupt`).
fn with_progress<T>(
    what: &str,
    unit: &str,
    total: Option<u64>,
    f: impl FnOnce(Progress<'_>) -> T,
) -> T {
    let pb = progress_bar(what, unit, total);
    interrupt::catch();
    let r = f(&mut |n| {
        if let Some(pb) = &pb {
            pb.set_position(n);
        }
        interrupt::asked().is_none()
    });
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    r
}

/// A progress bar on stderr when it is a terminal; silent otherwise.
fn progress_bar(what: &str, unit: &str, total: Option<u64>) -> Option<indicatif::ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let (pb, template) = match total {
        Some(t) => (
            indicatif::ProgressBar::new(t),
            format!("{what} {{bar:40}} {{pos}}/{{len}} {unit} ({{per_sec}}, {{eta}})"),
        ),
        None => (
            indicatif::ProgressBar::new_spinner(),
            format!("{what} {{spinner}} {{pos}} {unit} ({{per_sec}})"),
        ),
    };
    let style = indicatif::ProgressStyle::with_template(&template)
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    pb.set_style(style);
    Some(pb)
}

/// Says on stderr that `what` stopped when asked, and what that left.
fn stopped(stop: interrupt::Stop, what: &str, left: &str) -> ExitCode {
    eprintln!("idemgate: {what} stopped ({}): {left}", stop.name());
    stop.exit_code()
}

/// `idemgate log`: which events, how many, and how they are printed.
#[derive(Args, Debug)]
pub(crate) struct LogArgs {
    #[command(flatten)]
    ledger: LedgerArg,
    /// Only events of this entry.
    #[arg(long, value_name = "ENTRY_ID")]
    entry: Option<i64>,
    /// Only events at or after this time: RFC 3339, a date (2026-11-20), a duration ago (90m,
    /// 2h, 7d) or Unix ms.
    #[arg(long, value_parser = idemgate_ops::parse_time)]
    since: Option<i64>,
    /// Only events before this time, in the forms --since takes.
    #[arg(long, value_parser = idemgate_ops::parse_time)]
    until: Option<i64>,
    /// Only events of this route.
    #[arg(long)]
    route: Option<String>,
    /// Only events of this scope.
    #[arg(long)]
    scope: Option<String>,
    /// Only events of this idempotency key.
    #[arg(long)]
    key: Option<String>,
    /// Only events of this kind.
    #[arg(long, value_parser = kind_arg())]
    kind: Option<EventKind>,
    /// Only the actions of this operator (as the log records the name).
    #[arg(long)]
    operator: Option<String>,
    /// Substring search over key, route, scope, operator, reason and detail.
    #[arg(long)]
    search: Option<String>,
    /// At most this many events, the newest (stderr says when older ones match too).
    #[arg(long, default_value_t = 100, value_parser = at_least_one)]
    limit: usize,
    /// Print the result as JSON on stdout instead of text.
    #[arg(long)]
    json: bool,
}

impl LogArgs {
    fn run(self, out: &mut output::Out) -> Result<(), OpsError> {
        let req = op::log::LogRequest {
            entry_id: self.entry,
            route: self.route,
            scope: self.scope,
            key: self.key,
            kind: self.kind,
            operator: self.operator,
            since: self.since.map(op::common::Time),
            until: self.until.map(op::common::Time),
            search: self.search,
            before: None,
            limit: None,
        };
        let ops = Ops::open_existing(&self.ledger.ledger)?;
        output::log(out, &ops, req, self.limit, self.json)?;
        Ok(())
    }
}

/// `idemgate demo`: a new ledger seeded with realistic incidents; an existing one is left alone.
fn demo(
    out: &mut output::Out,
    ledger: &str,
    options: idemgate_ops::DemoOptions,
) -> Result<(), OpsError> {
    if !idemgate_ops::ledger::is_postgres(ledger) && std::path::Path::new(ledger).exists() {
        return Err(OpsError::Conflict(format!(
            "{ledger} exists; the demo only seeds a new ledger (remove it or pick another path)"
        )));
    }
    let ops = Ops::open_or_create(ledger)?;
    let report = ops.seed_demo(options)?;
    output::demo(out, &ops.location(), &report)?;
    Ok(())
}

/// `idemgate incidents`: the newest `limit`, only the open ones with `open`.
fn incidents(
    out: &mut output::Out,
    ledger: &str,
    open: bool,
    limit: usize,
    json: bool,
) -> Result<(), OpsError> {
    let ops = Ops::open_existing(ledger)?;
    let req = op::incidents::IncidentsRequest {
        before: None,
        limit: Some(limit),
    };
    let mut list = op::run::<op::incidents::Op>(&ops, req, op::Host::none(), &mut |_| true)?;
    list.retain(|i| i.open || !open);
    output::incidents(out, &list, json)
}

fn run(cmd: Cmd) -> Result<ExitCode, OpsError> {
    let mut out = output::Out::stdout();
    match cmd {
        Cmd::Demo {
            ledger,
            events,
            seed,
        } => demo(
            &mut out,
            &ledger.ledger,
            idemgate_ops::DemoOptions { events, seed },
        )?,
        Cmd::Entries {
            ledger,
            filter,
            limit,
            oldest_first,
            json,
        } => {
            let filter = EntryFilter::from(filter);
            let ops = Ops::open_existing(&ledger.ledger)?;
            let page = output::Listing {
                limit,
                oldest_first,
                json,
            };
            output::entries(&mut out, &ops, &filter, page)?;
        }
        Cmd::Log(a) => a.run(&mut out)?,
        Cmd::Resolve(a) => return decide::resolve(&mut out, a),
        Cmd::Review(a) => return decide::review(&mut out, a),
        Cmd::Incidents {
            ledger,
            open,
            limit,
            json,
        } => incidents(&mut out, &ledger.ledger, open, limit, json)?,
        Cmd::Purge(a) => return decide::purge(&mut out, a),
        Cmd::Export(a) => return audit::export(&mut out, a),
        Cmd::Init(a) => return setup::init(&a),
        Cmd::Man => return setup::man(),
        Cmd::Completions { shell } => return setup::completions(shell),
        Cmd::Serve { .. }
        | Cmd::Replay(_)
        | Cmd::Reconcile(_)
        | Cmd::Bulk(_)
        | Cmd::Token(_)
        | Cmd::Call(_)
        | Cmd::Show(_)
        | Cmd::Approvals(_)
        | Cmd::Approve(_)
        | Cmd::Reject(_) => unreachable!("handled in main"),
        Cmd::Copy(a) => return audit::copy(&mut out, a),
        Cmd::Verify(a) => return audit::verify(&mut out, a),
        Cmd::Prove(a) => return proofs::prove(&mut out, a),
        Cmd::Keygen(a) => return archival::keygen(&mut out, a),
        Cmd::Witness(c) => return witness::run(c),
        Cmd::Archive(a) => return archival::archive(&mut out, a),
        Cmd::Retention(c) => return archival::retention(&mut out, c),
    }
    out.flush().ok();
    Ok(ExitCode::SUCCESS)
}
