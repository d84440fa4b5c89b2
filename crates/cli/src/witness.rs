//! `idemgate witness serve`: a C2SP tlog-witness for idemgate logs (or any tlog with Ed25519
//! checkpoints), which an auditor runs apart from the log it watches.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Subcommand};
use idemgate_ops::ledger::PublicKey;
use idemgate_ops::OpsError;
use idemgate_witness::{Cosigner, Witness};

/// `idemgate witness …`.
#[derive(Subcommand, Debug)]
pub(crate) enum WitnessCmd {
    /// Serve the tlog-witness `add-checkpoint` endpoint: cosign each log's checkpoint that a
    /// consistency proof shows extends the tree last cosigned of it, refuse a fork or a
    /// rollback. Prints `listening on ADDR` once it accepts requests.
    Serve(ServeArgs),
}

#[derive(Args, Debug)]
pub(crate) struct ServeArgs {
    /// The witness's key (`idemgate keygen --witness`).
    #[arg(long, value_name = "FILE")]
    key: PathBuf,
    /// A log to witness: its origin and its public key's file. Repeat for each log.
    #[arg(long = "log", value_name = "ORIGIN=PUBLIC_KEY_FILE", required = true)]
    logs: Vec<String>,
    /// Where the witness keeps the tree it last cosigned of each log (created when missing).
    #[arg(long, value_name = "FILE")]
    state: PathBuf,
    /// Where to listen: ADDR:PORT (loopback unless you mean otherwise).
    #[arg(long, default_value = "127.0.0.1:7380", value_name = "ADDR")]
    listen: String,
}

pub(crate) fn run(cmd: WitnessCmd) -> Result<ExitCode, OpsError> {
    let WitnessCmd::Serve(a) = cmd;
    let text = std::fs::read_to_string(&a.key)
        .map_err(|e| OpsError::invalid("key", &format!("{}: {e}", a.key.display())))?;
    let cosigner = Cosigner::parse(&text).map_err(|e| OpsError::invalid("key", &e.to_string()))?;
    let mut logs = Vec::new();
    for l in &a.logs {
        let (origin, file) = l
            .split_once('=')
            .ok_or_else(|| OpsError::invalid("log", &format!("{l:?}: expected ORIGIN=FILE")))?;
        let key = PublicKey::from_file(std::path::Path::new(file))
            .map_err(|e| OpsError::invalid("log", &e.to_string()))?;
        if key.name() != origin {
            return Err(OpsError::invalid(
                "log",
                &format!("{file} is the key of {:?}, not of {origin:?}", key.name()),
            ));
        }
        logs.push(key);
    }
    let witness =
        Witness::open(cosigner, logs, &a.state).map_err(|e| OpsError::invalid("state", &e))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| OpsError::Internal(e.to_string()))?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&a.listen)
            .await
            .map_err(|e| OpsError::invalid("listen", &format!("{}: {e}", a.listen)))?;
        let addr = listener
            .local_addr()
            .map_err(|e| OpsError::Internal(e.to_string()))?;
        println!("listening on {addr}");
        let stop = async {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("a SIGTERM handler");
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        };
        idemgate_witness::serve(Arc::new(witness), listener, stop)
            .await
            .map_err(|e| OpsError::Internal(e.to_string()))
    })?;
    Ok(ExitCode::SUCCESS)
}
