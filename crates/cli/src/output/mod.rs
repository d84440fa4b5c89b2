//! Human and `--json` rendering, a module per group of commands. JSON field names are stable
//! (docs/design.md, "CLI"); times are RFC 3339.

mod audit;
mod decide;
mod reads;

pub use audit::*;
pub use decide::*;
pub use reads::*;

use std::io::Write;

use idemgate_ops::ledger::{rfc3339, EntrySummary};
use idemgate_ops::OpsError;
use serde_json::Value;

/// Standard output, which its reader may close before the end (`idemgate log | head`). What
/// nobody reads any more is dropped, and the command ends as it would have, with its own exit
/// code: not `error[io]: Broken pipe` and exit 1, which also hid a verification's 3.
pub struct Out {
    inner: std::io::StdoutLock<'static>,
    closed: bool,
}

impl Out {
    pub fn stdout() -> Out {
        Out {
            inner: std::io::stdout().lock(),
            closed: false,
        }
    }

    fn closed_on_broken_pipe<T>(
        &mut self,
        r: std::io::Result<T>,
        dropped: T,
    ) -> std::io::Result<T> {
        match r {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(dropped)
            }
            r => r,
        }
    }
}

impl Write for Out {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.closed {
            return Ok(buf.len());
        }
        let r = self.inner.write(buf);
        self.closed_on_broken_pipe(r, buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.closed {
            return Ok(());
        }
        let r = self.inner.flush();
        self.closed_on_broken_pipe(r, ())
    }
}

type R = Result<(), OpsError>;

pub(super) fn opt_time(t: Option<i64>) -> Value {
    t.map_or(Value::Null, |t| Value::String(rfc3339(t)))
}

pub(super) fn subjects_json(s: &[(String, String)]) -> Value {
    Value::Object(
        s.iter()
            .map(|(n, v)| (n.clone(), Value::String(v.clone())))
            .collect(),
    )
}

/// Subjects as people read them: `customer=cus_123 amount=49.99`.
pub(super) fn subjects_text(s: &[(String, String)]) -> String {
    s.iter()
        .map(|(n, v)| format!("{n}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// An entry's route as people read it: `route · tool` for an MCP call.
pub(super) fn route_label(e: &EntrySummary) -> String {
    match &e.tool {
        Some(t) => format!("{} · {t}", e.route),
        None => e.route.clone(),
    }
}

pub(crate) fn pretty(out: &mut Out, v: &impl serde::Serialize) -> R {
    serde_json::to_writer_pretty(&mut *out, v).map_err(std::io::Error::other)?;
    writeln!(out)?;
    Ok(())
}

pub(super) fn short(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(n.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

pub(super) fn state_label(e: &EntrySummary) -> String {
    let mut s = e.state.to_string();
    if e.stuck {
        s.push_str(" (stuck)");
    }
    s
}

pub(super) fn body_text(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) => match serde_json::from_str::<Value>(s) {
            Ok(v) => serde_json::to_string_pretty(&v).unwrap_or_else(|_| s.to_owned()),
            Err(_) => s.to_owned(),
        },
        Err(_) => format!("<{} bytes, not UTF-8>", b.len()),
    }
}

/// The last line of a verify with more than the chain to check.
pub(crate) fn verdict(ok: bool, stopped: bool) -> &'static str {
    match (ok, stopped) {
        (true, _) => "OK",
        (false, true) => "STOPPED",
        (false, false) => "FAILED",
    }
}

/// "1 entry", "2 entries".
pub(crate) fn counted(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}
