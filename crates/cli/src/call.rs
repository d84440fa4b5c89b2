//! `idemgate call OPERATION`: every declared operation ([`idemgate_ops::op`]) as a subcommand,
//! made from its declaration (its name, its doc as the help, its example), and run through the
//! dispatch the admin API and the console use. Its request is `NAME=VALUE` parameters, each read
//! as the operation's request asks (`limit=10` a number), or `NAME:=JSON` for a structured one;
//! its answer is the operation's JSON.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Arg, ArgAction, ArgMatches, Command, FromArgMatches};
use idemgate_config::Config;
use idemgate_ops::dispatch::{self, Args, Decider, Host, Kind, Spec};
use idemgate_ops::{Ops, OpsError};
use idemgate_server::parameters::Parameter;
use serde_json::Value;

use crate::serve::CmdError;
use crate::{interrupt, output, stopped, with_progress};

/// One operation to run, and what it runs on.
#[derive(Debug)]
pub(crate) struct Call {
    spec: &'static Spec,
    ledger: Option<String>,
    config: Option<PathBuf>,
    operator: Option<String>,
    params: Vec<String>,
}

impl FromArgMatches for Call {
    fn from_arg_matches(m: &ArgMatches) -> Result<Call, clap::Error> {
        let missing = || clap::Error::new(clap::error::ErrorKind::MissingSubcommand);
        let (name, m) = m.subcommand().ok_or_else(missing)?;
        let spec = dispatch::spec(name).ok_or_else(missing)?;
        Ok(Call {
            spec,
            ledger: m.get_one::<String>("ledger").cloned(),
            config: m.get_one::<PathBuf>("config").cloned(),
            operator: m.get_one::<String>("operator").cloned(),
            params: m
                .get_many::<String>("params")
                .into_iter()
                .flatten()
                .cloned()
                .collect(),
        })
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Call::from_arg_matches(m)?;
        Ok(())
    }
}

impl clap::Args for Call {
    fn augment_args(cmd: Command) -> Command {
        cmd.subcommand_required(true)
            .subcommand_value_name("OPERATION")
            .subcommands(
                dispatch::SPECS
                    .iter()
                    .filter(|s| !s.server_only)
                    .map(command),
            )
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Call::augment_args(cmd)
    }
}

/// The subcommand of one operation: its help is its doc, then an example made from its own.
fn command(spec: &'static Spec) -> Command {
    let (about, rest) = spec.summary();
    let mut long = about.clone();
    if !rest.is_empty() {
        long = format!("{long}\n\n{rest}");
    }
    long = format!(
        "{long}\n\nExample:\n  idemgate call {}{}",
        spec.name,
        example(spec)
    );
    let mut c = Command::new(spec.name)
        .about(about)
        .long_about(long)
        .arg(
            Arg::new("ledger")
                .long("ledger")
                .env("IDEMGATE_LEDGER")
                .value_name("PATH|URL")
                .help("The ledger, when not the one the configuration names"),
        )
        .arg(
            Arg::new("config")
                .long("config")
                .env("IDEMGATE_CONFIG")
                .value_name("FILE")
                .value_parser(clap::value_parser!(PathBuf))
                .help("The configuration: its routes and upstreams, signing key and archive"),
        )
        .arg(
            Arg::new("params")
                .value_name("NAME=VALUE")
                .action(ArgAction::Append)
                .help("The request's parameters (below); NAME:=JSON for a structured one"),
        );
    if let Some(params) = idemgate_server::parameters::parameters(spec.name) {
        c = c.after_help(parameters_help(&params));
    }
    // An entry's view and the inbox say whether the one who asks may decide on a held call, and
    // a policy may name its approvers: the name is judged as the action under it would be.
    let who = if spec.acts {
        "Who: your name as it should appear in the log"
    } else {
        "The name you act under (approve --operator): a held call's approvers are judged by it"
    };
    c.arg(
        Arg::new("operator")
            .long("operator")
            .env("IDEMGATE_OPERATOR")
            .value_name("NAME")
            .help(who),
    )
}

/// The request's parameters as the help lists them; the operator is `--operator`'s.
fn parameters_help(params: &[Parameter]) -> String {
    let mut out = String::from("Parameters (NAME=VALUE; NAME:=JSON for a JSON list or object):");
    let listed: Vec<&Parameter> = params.iter().filter(|p| p.name != "operator").collect();
    if listed.is_empty() {
        return "Parameters: none".to_owned();
    }
    for p in listed {
        let required = if p.required { ", required" } else { "" };
        out.push_str(&format!("\n  {}  {}{required}", p.name, p.kind));
        if !p.doc.is_empty() {
            out.push_str(&format!("\n          {}", p.doc.replace('\n', " ")));
        }
    }
    out
}

/// The operation's example request as parameters: `entry_id=42 reason='…'`.
fn example(spec: &Spec) -> String {
    let Ok(Value::Object(m)) = serde_json::from_str::<Value>(spec.example) else {
        return String::new();
    };
    let mut out = String::new();
    for (k, v) in m {
        out.push(' ');
        match v {
            Value::String(s) => out.push_str(&format!("{k}={}", quoted(&s))),
            Value::Number(_) | Value::Bool(_) => out.push_str(&format!("{k}={v}")),
            other => out.push_str(&format!("{k}:={}", quoted(&other.to_string()))),
        }
    }
    if spec.acts {
        out.push_str(" --operator alice");
    }
    out
}

/// `s` as one shell word.
fn quoted(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.:/@".contains(c))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// The request's parameters: `NAME=VALUE` as text, `NAME:=JSON` as JSON, the operator where the
/// operation acts under one (with the OS account beside the name).
fn request(c: &Call) -> Result<Args, OpsError> {
    let mut args = Args::default();
    for p in &c.params {
        let bad = |why: &str| OpsError::invalid("parameter", &format!("{p:?}: {why}"));
        let (name, json) = match (p.find(":="), p.find('=')) {
            (Some(i), Some(j)) if i < j => (&p[..i], Some(&p[i + 2..])),
            (_, Some(j)) => (&p[..j], None),
            _ => return Err(bad("give NAME=VALUE, or NAME:=JSON")),
        };
        if name.is_empty() {
            return Err(bad("no name before the ="));
        }
        if args.has(name) {
            return Err(bad("given twice"));
        }
        match json {
            Some(j) => {
                let v = serde_json::from_str(j).map_err(|e| bad(&format!("not JSON: {e}")))?;
                args.value(name, v);
            }
            None if name == "operator" && c.spec.acts => {
                args.text(name, as_local(&p[name.len() + 1..]));
            }
            None => args.text(name, &p[name.len() + 1..]),
        }
    }
    if let Some(who) = c.operator.as_ref().filter(|_| c.spec.acts) {
        if args.has("operator") {
            return Err(OpsError::invalid(
                "operator",
                "given twice: by --operator and as a parameter",
            ));
        }
        args.text("operator", as_local(who));
    }
    Ok(args)
}

/// Who acts, as a command that opens the ledger itself records them: the name typed, and the OS
/// account beside it, which the system vouches for (one account is one approver).
fn as_local(typed: &str) -> String {
    idemgate_ops::desktop_operator(typed, &idemgate_ops::os_user())
}

/// Runs the operation, printing its answer as JSON. Only a request that may reach the upstream
/// reads the configuration's upstream credentials, and only it gets the data plane; a request
/// the operation refuses is refused before anything is read.
pub(crate) fn run(out: &mut output::Out, c: Call) -> Result<ExitCode, CmdError> {
    let args = request(&c)?;
    let forwards = dispatch::reaches_upstream(c.spec.name, &args)?;
    let (cfg, ledger) = crate::serve::config_and_ledger(
        c.config.as_deref(),
        c.ledger.clone(),
        if forwards {
            Config::load_for_operations
        } else {
            Config::load_without_secrets
        },
    )?;
    let mut ops = Ops::open_existing(&ledger)?;
    if let Some(cfg) = &cfg {
        ops = ops.configured_by(cfg);
    }
    let name = c.spec.name;
    // A runtime only for the data plane: the ledger's operations block.
    let rt = cfg
        .as_ref()
        .filter(|_| forwards)
        .map(|_| crate::serve::runtime())
        .transpose()?;
    let _in = rt.as_ref().map(tokio::runtime::Runtime::enter);
    let engine = cfg
        .clone()
        .filter(|_| forwards)
        .map(|cfg| ops.upstream(cfg));
    let host = || match (&engine, &cfg) {
        (Some(engine), _) => Host::upstream(engine),
        (None, Some(cfg)) => Host::routes(cfg),
        (None, None) => Host::none(),
    };
    let answer = match (c.spec.kind, rt.as_ref().zip(engine.as_ref())) {
        (Kind::Upstream, Some((rt, engine))) => {
            rt.block_on(dispatch::run_upstream(&ops, engine, name, args))?
        }
        (Kind::Upstream, None) => {
            return Err(OpsError::invalid(
                "config",
                &format!(
                    "{name} reaches the upstream: name its configuration with --config or \
                     IDEMGATE_CONFIG"
                ),
            )
            .into())
        }
        (Kind::Job | Kind::UpstreamJob, _) => {
            let r = with_progress(name, "", None, |p| {
                dispatch::run(&ops, host(), name, args, p)
            });
            if let Some(stop) = interrupt::asked() {
                return Ok(stopped(stop, name, "what was done stays done"));
            }
            r?
        }
        (Kind::Ledger, _) => {
            let me = idemgate_ops::os_user();
            let host = host().by(Decider::account(&me).named(c.operator.as_deref()));
            dispatch::run(&ops, host, name, args, &mut |_| true)?
        }
    };
    output::pretty(out, &answer)?;
    out.flush().map_err(OpsError::from)?;
    Ok(ExitCode::SUCCESS)
}
