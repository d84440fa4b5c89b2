//! `idemgate token new`: a new operator token, printed once, with the `[[operators]]` lines that
//! let it in. Only the token's hash goes into the configuration.

use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};
use idemgate_config::{new_token, Role, TokenHash};

use crate::serve::CmdError;

#[derive(Subcommand, Debug)]
pub(crate) enum TokenCmd {
    /// Make a token for an operator: print it once, and the configuration lines to add.
    New(NewArgs),
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RoleArg {
    /// Reads entries, the log, incidents, exports' status and metrics.
    Viewer,
    /// Also resolves, replays and reconciles entries (one or in bulk).
    Operator,
    /// Also purges, exports and verifies.
    Admin,
}

impl From<RoleArg> for Role {
    fn from(r: RoleArg) -> Role {
        match r {
            RoleArg::Viewer => Role::Viewer,
            RoleArg::Operator => Role::Operator,
            RoleArg::Admin => Role::Admin,
        }
    }
}

#[derive(Args, Debug)]
pub(crate) struct NewArgs {
    /// The operator's name, as the log will record their actions.
    #[arg(long)]
    name: String,
    /// What the operator may do.
    #[arg(long, value_enum)]
    role: RoleArg,
    /// One JSON object: name, role, token, token_hash.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(cmd: TokenCmd) -> Result<ExitCode, CmdError> {
    let TokenCmd::New(a) = cmd;
    let name = a.name.trim();
    if name.is_empty() || name.chars().count() > 200 || name.chars().any(char::is_control) {
        return Err(CmdError::Ops(idemgate_ops::OpsError::invalid(
            "name",
            "1 to 200 characters, no control characters",
        )));
    }
    let role = Role::from(a.role);
    let token = new_token();
    let hash = TokenHash::of(token.as_bytes()).to_config();
    if a.json {
        let v =
            serde_json::json!({ "name": name, "role": role, "token": token, "token_hash": hash });
        println!("{v}");
    } else {
        // TOML basic strings: the name is quoted as JSON quotes it, which TOML reads the same.
        let quoted = serde_json::to_string(name).unwrap_or_default();
        println!("token: {token}");
        println!("(shown this once: hand it to {name}; idemgate keeps only its hash)");
        println!();
        println!("# Add to the configuration, or to the file server.operators_file names:");
        println!("[[operators]]");
        println!("name = {quoted}");
        println!("role = \"{role}\"");
        println!("token_hash = \"{hash}\"");
    }
    Ok(ExitCode::SUCCESS)
}
