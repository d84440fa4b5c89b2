//! `idemgate serve`, `replay` and `reconcile`: the commands that need a route configuration.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use idemgate_config::{Approval, Config, ConfigError, LoopGuard};
use idemgate_ops::{op, ActionCmd, Code, Ops, OpsError};
use idemgate_server::{Reload, Server};

use crate::ProxyActionArgs;

/// Errors of these commands carry their own codes; they print like the others.
#[derive(Debug, thiserror::Error)]
pub enum CmdError {
    #[error(transparent)]
    Serve(#[from] idemgate_server::ServeError),
    #[error(transparent)]
    Config(#[from] idemgate_config::ConfigError),
    #[error(transparent)]
    Ops(#[from] OpsError),
    #[error("{0}")]
    Runtime(std::io::Error),
}

impl CmdError {
    pub fn code(&self) -> Code {
        match self {
            CmdError::Serve(e) => e.code(),
            CmdError::Config(e) => e.code(),
            CmdError::Ops(e) => e.code(),
            CmdError::Runtime(_) => Code::Runtime,
        }
    }
}

/// The configuration `--config` (or `IDEMGATE_CONFIG`) names, read by `load` (the secrets the
/// command needs, and only those), and the ledger: `--ledger` (or `IDEMGATE_LEDGER`), else the
/// configuration's.
pub(crate) fn config_and_ledger(
    config: Option<&Path>,
    ledger: Option<String>,
    load: fn(&str) -> Result<Config, ConfigError>,
) -> Result<(Option<Arc<Config>>, String), CmdError> {
    let cfg = config
        .map(|p| load(&p.display().to_string()).map(Arc::new))
        .transpose()?;
    let ledger = ledger
        .or_else(|| cfg.as_ref().map(|c| c.ledger.clone()))
        .ok_or_else(|| {
            OpsError::invalid(
                "ledger",
                "name it: --ledger PATH|URL, IDEMGATE_LEDGER, or --config or IDEMGATE_CONFIG",
            )
        })?;
    Ok((cfg, ledger))
}

/// What a configuration error adds when `IDEMGATE_CONFIG` named the file, which the command line
/// does not show (clap reads the variable only when `--config` is absent).
pub(crate) fn config_named_by_env(code: Code) -> String {
    let flag = std::env::args_os().skip(1).any(|a| {
        let a = a.to_string_lossy();
        a == "--config" || a.starts_with("--config=")
    });
    match std::env::var_os("IDEMGATE_CONFIG") {
        Some(file) if code == Code::BadConfig && !flag => format!(
            " (the configuration IDEMGATE_CONFIG names: {})",
            file.to_string_lossy()
        ),
        _ => String::new(),
    }
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, CmdError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(CmdError::Runtime)
}

/// SIGTERM or SIGINT (Ctrl-C): the stop that drains requests in flight. Caught from before the
/// listeners open, not from the first time `serve` waits on it: a stop that came between the
/// "listening" line and that wait (a supervisor stopping a service it just started, a rolling
/// update) would otherwise meet the default action, which ends the process at once, cutting off
/// requests already claimed and forwarded.
fn shutdown_signal(
    rt: &tokio::runtime::Runtime,
) -> Result<impl std::future::Future<Output = ()>, CmdError> {
    use tokio::signal::unix::{signal, SignalKind};
    let _in = rt.enter();
    let mut term = signal(SignalKind::terminate()).map_err(CmdError::Runtime)?;
    let mut int = signal(SignalKind::interrupt()).map_err(CmdError::Runtime)?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

/// A write past the process's file-size limit (`ulimit -f`, systemd's `LimitFSIZE=`) raises
/// SIGXFSZ, whose default action kills the process. Caught, the write fails with `EFBIG`, and the
/// ledger treats it as it treats a full disk: the commit fails, its requests get `503` (or `502`
/// `outcome-unrecorded` after the effect), and writes succeed again once there is room, without a
/// restart. (PostgreSQL ignores the signal for the same reason.) Tokio's handler stays installed
/// for the life of the process; nothing waits on it.
fn survive_file_size_limit(rt: &tokio::runtime::Runtime) {
    let _in = rt.enter();
    let xfsz = tokio::signal::unix::SignalKind::from_raw(libc::SIGXFSZ);
    if let Err(e) = tokio::signal::unix::signal(xfsz) {
        tracing::warn!(error = %e, "could not catch SIGXFSZ");
    }
}

/// SIGHUP (`systemctl reload`, `kill -HUP`): each one asks the server to read its configuration
/// again. Caught from before the listeners open, as the stop is: the default action would end the
/// process at once, dropping the requests in flight.
fn hangups(rt: &tokio::runtime::Runtime) -> tokio::sync::mpsc::UnboundedReceiver<()> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let _in = rt.enter();
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(mut hup) => {
            rt.spawn(async move {
                while hup.recv().await.is_some() {
                    tracing::info!("SIGHUP: reloading the configuration");
                    if tx.send(()).is_err() {
                        return;
                    }
                }
            });
        }
        Err(e) => tracing::warn!(error = %e, "could not catch SIGHUP: no reload"),
    }
    rx
}

/// What a route (or an MCP tool) holds for operators and counts as a loop, in words.
fn guards(approval: Option<&Approval>, loop_guard: Option<&LoopGuard>) -> Vec<String> {
    let span = idemgate_ops::RetentionPolicy::span;
    let mut out = Vec::new();
    if let Some(a) = approval {
        let when = a.when.as_ref().map_or("every call".to_owned(), |c| {
            format!("calls where {}", c.source)
        });
        let by = a
            .approvers
            .as_ref()
            .map_or(String::new(), |who| format!(" from {}", who.join(", ")));
        out.push(format!(
            "held for approval: {when}; {} {}{by}, within {}",
            a.approvals,
            if a.approvals == 1 {
                "approval"
            } else {
                "approvals"
            },
            span(a.expires)
        ));
    }
    if let Some(g) = loop_guard {
        out.push(format!(
            "loop guard: more than {} calls of one request from one scope within {}: {}",
            g.max,
            span(g.window),
            if g.reject { "refused" } else { "flagged" }
        ));
    }
    out
}

/// `serve --check`: everything `serve` checks before it opens the ledger and binds.
pub fn check(config: &Path) -> Result<ExitCode, CmdError> {
    let cfg = Config::load(&config.display().to_string())?;
    let shared = idemgate_server::check(&cfg)?;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "{}: ok, {} (the first that takes a request serves it)",
        config.display(),
        crate::output::counted(cfg.routes.len() as u64, "route", "routes")
    );
    for r in &cfg.routes {
        let _ = writeln!(
            out,
            "  {:<24} {:<7} {:<32} {:<11} -> {}",
            r.name,
            r.method,
            r.path,
            r.effect.as_str(),
            r.upstream
        );
        for line in guards(r.approval.as_ref(), r.loop_guard.as_ref()) {
            let _ = writeln!(out, "      {line}");
        }
        for (tool, rule) in &r.tools {
            let effect = rule.effect.map_or("as annotated", |e| e.as_str());
            let _ = writeln!(out, "      tool {tool}: {effect}");
            for line in guards(rule.approval.as_ref(), rule.loop_guard.as_ref()) {
                let _ = writeln!(out, "        {line}");
            }
        }
    }
    if let Some(r) = &cfg.retention {
        let _ = writeln!(
            out,
            "{} (every {})",
            idemgate_ops::RetentionPolicy::from_config(r).describe(),
            idemgate_ops::RetentionPolicy::span(r.interval)
        );
    }
    if let Some(sg) = &cfg.signing {
        let _ = writeln!(
            out,
            "checkpoints signed with {} every {}",
            sg.key_file.display(),
            idemgate_ops::RetentionPolicy::span(sg.interval)
        );
    }
    if let Some(addr) = cfg.admin_listen {
        let mut who: Vec<String> = cfg
            .operators
            .iter()
            .map(|o| format!("{} ({})", o.name, o.role))
            .collect();
        if shared.is_some() {
            who.push("admin (the shared admin token)".into());
        }
        let _ = writeln!(out, "admin API on {addr}, for {}", who.join(", "));
    }
    Ok(ExitCode::SUCCESS)
}

pub fn serve(config: &Path) -> Result<ExitCode, CmdError> {
    let cfg = Arc::new(Config::load(&config.display().to_string())?);
    let rt = runtime()?;
    let stop = shutdown_signal(&rt)?;
    survive_file_size_limit(&rt);
    let signals = hangups(&rt);
    let server = Server::open(cfg)?.reload_on(Reload {
        path: config.to_path_buf(),
        signals,
    });
    // Redacted: a PostgreSQL URL may carry a password.
    let ledger = server.ledger_location();
    rt.block_on(server.run(
        move |b| {
            // One line on stdout for scripts and tests: where it listens.
            let line = serde_json::json!({
                "listening": {"proxy": b.proxy.to_string(), "admin": b.admin.map(|a| a.to_string())},
                "ledger": ledger,
            });
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
            tracing::info!(proxy = %b.proxy, admin = ?b.admin, "idemgate serving");
        },
        stop,
    ))?;
    tracing::info!("stopped; every acknowledged outcome is in the ledger");
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Clone, Copy)]
pub enum Action {
    Replay,
    Reconcile,
}

pub fn operator_action(action: Action, a: ProxyActionArgs) -> Result<ExitCode, CmdError> {
    idemgate_ops::validate_actor(&a.actor.operator, &a.actor.reason)?;
    let cfg = Arc::new(Config::load_for_operations(
        &a.config.display().to_string(),
    )?);
    let ledger = a.ledger.clone().unwrap_or_else(|| cfg.ledger.clone());
    let ops = Ops::open_existing(&ledger)?;
    let engine = ops.upstream(cfg);
    let cmd = ActionCmd {
        entry_id: a.entry_id,
        operator: a.actor.operator,
        reason: a.actor.reason,
        confirm_destructive: a.actor.confirm_destructive,
    };
    let rt = runtime()?;
    let out = rt.block_on(async {
        match action {
            Action::Replay => op::run_upstream::<op::replay::Op>(&ops, &engine, cmd)
                .await
                .map(|r| serde_json::to_value(r).unwrap_or_default()),
            Action::Reconcile => op::run_upstream::<op::reconcile::Op>(&ops, &engine, cmd)
                .await
                .map(|r| serde_json::to_value(r).unwrap_or_default()),
        }
    });
    let v = out?;
    let mut stdout = std::io::stdout().lock();
    if a.json {
        let _ = writeln!(
            stdout,
            "{}",
            serde_json::to_string_pretty(&v).unwrap_or_default()
        );
    } else {
        let e = &v["entry"];
        let what = match action {
            Action::Replay => match (&v["status"], &v["problem"]) {
                (serde_json::Value::Number(s), _) => format!("upstream answered {s}"),
                (_, p) => p["detail"].as_str().unwrap_or("no final answer").to_owned(),
            },
            Action::Reconcile => format!(
                "probe: {}, decision: {}",
                v["probe_status"],
                v["decision"].as_str().unwrap_or("")
            ),
        };
        let _ = writeln!(
            stdout,
            "entry {} ({} {}) is now {}{}: {what}",
            e["id"],
            e["route"].as_str().unwrap_or(""),
            e["key"].as_str().unwrap_or(""),
            e["state"].as_str().unwrap_or(""),
            if e["stuck"] == true { " (stuck)" } else { "" }
        );
    }
    Ok(ExitCode::SUCCESS)
}
