//! The MCP calls this process is running for clients, so that a client's cancel of one is held
//! back.

use serde_json::Value;

/// The calls this process is running for clients, by session and request id: a client's
/// `notifications/cancelled` for one of them is not passed on.
#[derive(Debug, Default)]
pub struct Calls(std::sync::Mutex<std::collections::HashMap<String, usize>>);

impl Calls {
    fn name(session: &str, id: &Value) -> String {
        format!("{session}\n{id}")
    }

    /// Notes a call as running until the guard drops.
    pub(super) fn start(&self, session: &str, id: &Value) -> Running<'_> {
        let name = Calls::name(session, id);
        if let Ok(mut m) = self.0.lock() {
            *m.entry(name.clone()).or_default() += 1;
        }
        Running { calls: self, name }
    }

    /// Whether a call of `session` runs.
    pub(super) fn in_session(&self, session: &str) -> bool {
        let prefix = format!("{session}\n");
        self.0
            .lock()
            .is_ok_and(|m| m.keys().any(|k| k.starts_with(&prefix)))
    }

    pub(super) fn running(&self, session: &str, id: &Value) -> bool {
        let name = Calls::name(session, id);
        self.0.lock().is_ok_and(|m| m.contains_key(&name))
    }
}

/// A call noted as running ([`Calls::start`]).
pub(super) struct Running<'c> {
    calls: &'c Calls,
    name: String,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if let Ok(mut m) = self.calls.0.lock() {
            if let Some(n) = m.get_mut(&self.name) {
                *n -= 1;
                if *n == 0 {
                    m.remove(&self.name);
                }
            }
        }
    }
}
