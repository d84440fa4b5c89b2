//! The configuration a running server serves under, and its reload (`SIGHUP`, `systemctl
//! reload`).
//!
//! A reload reads and checks the file as `serve --check` does, then swaps in its routes (with
//! their policies and the request limits of `[server]`), its operators and its admin token at
//! once: each request reads the engine when it starts and keeps it to its end, so requests in
//! flight finish under the configuration they started with. What a running process cannot change
//! in place — where it listens, its ledger, its export spool, the console it serves, retention and
//! signing — must stay as it was: a file that changes one of them is refused whole, and the
//! configuration loaded before keeps serving.

use std::path::Path;
use std::sync::{Arc, RwLock};

use idemgate_config::Config;
use idemgate_proxy::Engine;
use metrics::{counter, Counter};

use crate::access::Access;
use crate::ServeError;

/// What the server serves under now.
#[derive(Debug)]
pub struct Live {
    engine: RwLock<Arc<Engine>>,
    access: Arc<Access>,
    applied: Counter,
    refused: Counter,
}

impl Live {
    pub fn new(engine: Arc<Engine>, access: Arc<Access>) -> Live {
        Live {
            engine: RwLock::new(engine),
            access,
            applied: counter!("idemgate_config_reloads_total", "result" => "applied"),
            refused: counter!("idemgate_config_reloads_total", "result" => "refused"),
        }
    }

    /// The engine a request that starts now runs under.
    pub fn engine(&self) -> Arc<Engine> {
        self.engine
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn access(&self) -> &Arc<Access> {
        &self.access
    }

    /// Reads `path` again and serves under it, or says why not and changes nothing.
    pub fn reload(&self, path: &Path) -> Result<Arc<Engine>, ServeError> {
        let r = self.try_reload(path);
        match &r {
            Ok(e) => {
                self.applied.increment(1);
                tracing::info!(
                    config = %path.display(),
                    routes = e.cfg.routes.len(),
                    operators = e.cfg.operators.len(),
                    "reloaded the configuration: new requests are served under it"
                );
            }
            Err(err) => {
                self.refused.increment(1);
                tracing::error!(
                    config = %path.display(),
                    code = %err.code().as_str(),
                    error = %err,
                    "refused to reload the configuration; the one loaded before keeps serving"
                );
            }
        }
        r
    }

    fn try_reload(&self, path: &Path) -> Result<Arc<Engine>, ServeError> {
        let cfg = Config::load(&path.display().to_string())?;
        let token = crate::check(&cfg)?;
        let current = self.engine();
        if let Some(what) = needs_restart(&current.cfg, &cfg) {
            return Err(ServeError::NeedsRestart(what));
        }
        let engine = Arc::new(current.reloaded(Arc::new(cfg)));
        // The engine first: an operator the new file adds may act on a route it adds.
        *self.engine.write().unwrap_or_else(|p| p.into_inner()) = engine.clone();
        self.access.replace(token.as_ref(), &engine.cfg.operators);
        Ok(engine)
    }
}

/// The first setting `new` changes that a running process cannot take in place.
fn needs_restart(old: &Config, new: &Config) -> Option<&'static str> {
    let signing = |c: &Config| c.signing.as_ref().map(|s| (s.key_file.clone(), s.interval));
    [
        ("server.listen", old.listen == new.listen),
        ("server.admin_listen", old.admin_listen == new.admin_listen),
        ("server.ledger", old.ledger == new.ledger),
        ("server.export_dir", old.export_dir == new.export_dir),
        ("server.console_dir", old.console_dir == new.console_dir),
        ("[retention]", old.retention == new.retention),
        ("the checkpoint signing", signing(old) == signing(new)),
        ("[telemetry]", old.telemetry == new.telemetry),
    ]
    .into_iter()
    .find(|(_, same)| !same)
    .map(|(what, _)| what)
}

#[cfg(test)]
mod tests {
    use super::needs_restart;
    use idemgate_config::Config;

    #[test]
    fn a_reload_that_moves_the_spans_takes_a_restart() {
        let base = "[server]\nledger = \"x.db\"\n";
        let parse = |extra: &str| Config::parse(&format!("{base}{extra}")).expect("config");
        let off = parse("");
        let on = parse("[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318\"\n");
        let elsewhere = parse("[telemetry]\notlp_endpoint = \"http://127.0.0.1:4319\"\n");
        assert_eq!(needs_restart(&off, &off), None);
        assert_eq!(needs_restart(&on, &on), None);
        assert_eq!(needs_restart(&off, &on), Some("[telemetry]"));
        assert_eq!(needs_restart(&on, &elsewhere), Some("[telemetry]"));
    }
}
