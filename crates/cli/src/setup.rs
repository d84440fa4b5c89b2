//! Getting from "installed" to "serving": `idemgate init` writes a commented starter
//! configuration and the admin token it names; `idemgate man` and `idemgate completions` print
//! the manual page and shell completions from the same definitions as the parser.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, CommandFactory};
use idemgate_config::Config;
use idemgate_ops::OpsError;

use crate::Cli;

/// The arguments of `idemgate init`.
#[derive(Args, Debug)]
pub(crate) struct InitArgs {
    /// The configuration file to write; an existing one is kept unless --force.
    #[arg(long, default_value = "idemgate.toml", value_name = "FILE")]
    config: PathBuf,
    /// Where the proxy listens.
    #[arg(long, default_value = "127.0.0.1:8700", value_name = "IP:PORT")]
    listen: String,
    /// Where the admin API listens, or "off".
    #[arg(long, default_value = "127.0.0.1:8701", value_name = "IP:PORT|off")]
    admin_listen: String,
    /// The tool's base URL, for every route (http:// or https://).
    #[arg(long, default_value = "http://127.0.0.1:9000", value_name = "URL")]
    upstream: String,
    /// A route: NAME=METHOD:PATH:EFFECT (EFFECT read, write, idempotent or destructive), e.g.
    /// charges=POST:/v1/charges:write. Repeat for more; without any, one example route.
    #[arg(long = "route", value_name = "NAME=METHOD:PATH:EFFECT")]
    routes: Vec<String>,
    /// The ledger: a SQLite file (beside the configuration unless absolute) or a postgres:// URL.
    #[arg(long, default_value = "idemgate.db", value_name = "PATH|URL")]
    ledger: String,
    /// The admin token's file (beside the configuration unless absolute): made with a new token,
    /// readable by its owner only, when it does not exist.
    #[arg(long, default_value = "admin-token", value_name = "FILE")]
    admin_token_file: PathBuf,
    /// Replace an existing configuration file.
    #[arg(long)]
    force: bool,
}

/// One `--route`, read.
struct RouteSpec {
    name: String,
    method: String,
    path: String,
    effect: String,
}

fn route_spec(s: &str) -> Result<RouteSpec, OpsError> {
    let bad = || {
        OpsError::invalid(
            "route",
            &format!("{s:?}: write NAME=METHOD:PATH:EFFECT, e.g. charges=POST:/v1/charges:write"),
        )
    };
    let (name, rest) = s.split_once('=').ok_or_else(bad)?;
    let mut parts = rest.splitn(3, ':');
    let (Some(method), Some(path), Some(effect)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(bad());
    };
    Ok(RouteSpec {
        name: name.trim().to_owned(),
        method: method.trim().to_ascii_uppercase(),
        path: path.trim().to_owned(),
        effect: effect.trim().to_owned(),
    })
}

/// A TOML basic string: JSON's quoting, which TOML reads the same for these values.
fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// `p`, absolute: as given, or in `dir`.
fn beside(dir: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        dir.join(p)
    }
}

/// The starter configuration's text.
fn starter(a: &InitArgs, ledger: &str, token_file: &Path, routes: &[RouteSpec]) -> String {
    let mut t = format!(
        "# idemgate's configuration, written by `idemgate init`. Check it with\n\
         #   idemgate serve --config FILE --check\n\
         # Every field is described in docs/configuration.md. Secrets never live here: only the\n\
         # names of the files or environment variables that hold them.\n\
         \n\
         [server]\n\
         listen = {}        # the proxy: agents call this instead of the tool\n\
         admin_listen = {}  # the admin API, /metrics and health; \"off\" for none\n\
         ledger = {}\n\
         # The shared admin token (the operator `admin`). Per-person tokens with roles:\n\
         #   idemgate token new --name NAME --role viewer|operator|admin\n\
         # then add the [[operators]] lines it prints.\n\
         admin_token_file = {}\n\
         \n\
         [defaults]\n\
         ttl = \"24h\"           # how long a completed call is answered from the ledger\n\
         lease = \"30s\"         # a call with no outcome this long is stuck, for an operator\n\
         in_flight = \"reject\"  # a retry while the first call runs: 409 (or \"wait\")\n",
        quoted(&a.listen),
        quoted(&a.admin_listen),
        quoted(ledger),
        quoted(&token_file.display().to_string()),
    );
    t.push_str(
        "\n# A request goes to the first route whose method matches and whose path starts with `path`.\n\
         # effect: read (passed through), write (run once per key), idempotent (safe to retry),\n\
         # destructive (never retried; operators confirm its actions twice).\n",
    );
    for r in routes {
        t.push_str(&format!(
            "\n[[routes]]\nname = {}\nmethod = {}\npath = {}\nupstream = {}\neffect = {}\n",
            quoted(&r.name),
            quoted(&r.method),
            quoted(&r.path),
            quoted(&a.upstream),
            quoted(&r.effect),
        ));
    }
    t
}

/// `idemgate init`: the configuration and, when missing, its admin token; checked as `serve
/// --check` checks it before anything is written.
pub(crate) fn init(a: &InitArgs) -> Result<ExitCode, OpsError> {
    let routes = if a.routes.is_empty() {
        vec![route_spec("example=POST:/v1/example:write")?]
    } else {
        a.routes
            .iter()
            .map(|r| route_spec(r))
            .collect::<Result<_, _>>()?
    };
    let dir = std::path::absolute(&a.config)
        .ok()
        .and_then(|c| c.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("."));
    let ledger = if idemgate_ops::ledger::is_postgres(&a.ledger) {
        a.ledger.clone()
    } else {
        beside(&dir, Path::new(&a.ledger)).display().to_string()
    };
    let token_file = beside(&dir, &a.admin_token_file);
    let text = starter(a, &ledger, &token_file, &routes);
    // The token file is made below, so it is not read here: the routes and fields are checked.
    Config::parse(&text).map_err(|e| OpsError::invalid("configuration", &e.to_string()))?;
    if a.config.exists() && !a.force {
        return Err(OpsError::Conflict(format!(
            "{} exists; keep it, or write a new one with --force",
            a.config.display()
        )));
    }
    let made_token = !token_file.exists();
    if made_token {
        let token = idemgate_config::new_token();
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&token_file)
            .map_err(|e| {
                OpsError::invalid(
                    "admin-token-file",
                    &format!("{}: {e}", token_file.display()),
                )
            })?;
        writeln!(f, "{token}")
            .map_err(|e| OpsError::invalid("admin-token-file", &e.to_string()))?;
    }
    std::fs::write(&a.config, text)
        .map_err(|e| OpsError::invalid("config", &format!("{}: {e}", a.config.display())))?;
    println!("wrote {}", a.config.display());
    if made_token {
        println!(
            "wrote {} (a new admin token, readable by you only)",
            token_file.display()
        );
    }
    println!(
        "next: idemgate serve --config {} --check, then idemgate serve --config {}",
        a.config.display(),
        a.config.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `idemgate man`: the manual page, in roff, on stdout.
pub(crate) fn man() -> Result<ExitCode, OpsError> {
    let mut out = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut out)
        .map_err(|e| OpsError::Internal(e.to_string()))?;
    std::io::stdout()
        .write_all(&out)
        .map_err(|e| OpsError::Internal(e.to_string()))?;
    Ok(ExitCode::SUCCESS)
}

/// `idemgate completions SHELL`: the completion script for `shell`, on stdout.
pub(crate) fn completions(shell: clap_complete::Shell) -> Result<ExitCode, OpsError> {
    clap_complete::generate(
        shell,
        &mut Cli::command(),
        "idemgate",
        &mut std::io::stdout(),
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every command and every argument of every command says what it is in `--help` (and so in
    /// the manual page): a user reading `idemgate log --help` meets no bare `--json`.
    #[test]
    fn every_argument_of_every_command_has_help() {
        fn walk(cmd: &clap::Command, path: &str, bare: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                let said = arg.get_help().or(arg.get_long_help()).is_some();
                if !said && !matches!(id, "help" | "version") {
                    bare.push(format!("{path} {id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                if sub.get_about().or(sub.get_long_about()).is_none() {
                    bare.push(format!("{path} {}", sub.get_name()));
                }
                walk(sub, &format!("{path} {}", sub.get_name()), bare);
            }
        }
        let mut bare = Vec::new();
        walk(&Cli::command(), "idemgate", &mut bare);
        assert!(bare.is_empty(), "without help: {bare:#?}");
    }
}
