//! Each tool's effect: the route's configuration when it names the tool, else the tool's
//! annotations as the upstream last listed them, else destructive (the spec's defaults, and the
//! safe side for a tool not seen yet). A list that passes through any instance is stored in the
//! ledger; each instance keeps what it learnt or read for [`FRESH`], then reads the ledger again,
//! so a restarted instance or another one on the same ledger knows the tools too.

use std::collections::HashMap;
use std::sync::RwLock;
use std::time::{Duration, Instant};

use idemgate_ledger::Effect;
use serde_json::Value;

use crate::config::Route;

/// How long an instance believes what it knows of a tool before it reads the ledger again: how
/// long a list through another instance that changes a tool's annotations may go unseen here.
pub const FRESH: Duration = Duration::from_secs(5);

/// The effects of one MCP route's tools, as learnt from its `tools/list` answers (this
/// instance's or, through the ledger, another's).
#[derive(Debug, Default)]
pub struct Tools(RwLock<HashMap<String, Known>>);

#[derive(Debug, Clone, Copy)]
struct Known {
    effect: Effect,
    since: Instant,
}

/// Where a tool's effect came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Config,
    Annotations,
    /// What this instance knows is older than [`FRESH`]: read the ledger, and fall back on it.
    Stale,
    /// Neither: the tool was not listed yet, here (read the ledger).
    Unseen,
}

impl Tools {
    /// The effect of a call of `name` on `route`, as far as this instance knows.
    pub fn effect(&self, route: &Route, name: &str) -> (Effect, Source) {
        if let Some(e) = route.tools.get(name).and_then(|t| t.effect) {
            return (e, Source::Config);
        }
        match self.0.read().ok().and_then(|m| m.get(name).copied()) {
            Some(k) if k.since.elapsed() < FRESH => (k.effect, Source::Annotations),
            Some(k) => (k.effect, Source::Stale),
            None => (Effect::Destructive, Source::Unseen),
        }
    }

    /// Learns the tools of a `tools/list` result (one page of it); the answer is those whose
    /// effect this instance did not know, or knew otherwise: what the ledger is told.
    pub fn learn(&self, result: &Value) -> Vec<(String, Effect)> {
        let Some(tools) = result.get("tools").and_then(Value::as_array) else {
            return Vec::new();
        };
        let Ok(mut m) = self.0.write() else {
            return Vec::new();
        };
        let since = Instant::now();
        let mut changed = Vec::new();
        for t in tools {
            if let Some(name) = t.get("name").and_then(Value::as_str) {
                let effect = from_annotations(t.get("annotations"));
                let known = Known { effect, since };
                if m.insert(name.to_owned(), known).map(|k| k.effect) != Some(effect) {
                    changed.push((name.to_owned(), effect));
                }
            }
        }
        changed
    }

    /// Remembers what the ledger says of `name`, fresh from now.
    pub fn remember(&self, name: &str, effect: Effect) {
        if let Ok(mut m) = self.0.write() {
            let since = Instant::now();
            m.insert(name.to_owned(), Known { effect, since });
        }
    }
}

/// A tool's effect by its annotations: `readOnlyHint` → read; else `idempotentHint` → idempotent;
/// else `destructiveHint: false` → write; else destructive (the spec's defaults: not read-only,
/// destructive, not idempotent).
pub fn from_annotations(a: Option<&Value>) -> Effect {
    let hint = |n: &str| a.and_then(|a| a.get(n)).and_then(Value::as_bool);
    if hint("readOnlyHint") == Some(true) {
        Effect::Read
    } else if hint("idempotentHint") == Some(true) {
        Effect::Idempotent
    } else if hint("destructiveHint") == Some(false) {
        Effect::Write
    } else {
        Effect::Destructive
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn annotations_map_to_effects_with_the_spec_s_defaults() {
        let e = |a: Value| from_annotations(Some(&a));
        assert_eq!(
            e(json!({"readOnlyHint": true, "destructiveHint": true})),
            Effect::Read
        );
        assert_eq!(e(json!({"idempotentHint": true})), Effect::Idempotent);
        assert_eq!(e(json!({"destructiveHint": false})), Effect::Write);
        assert_eq!(e(json!({"readOnlyHint": false})), Effect::Destructive);
        assert_eq!(from_annotations(None), Effect::Destructive);
    }

    #[test]
    fn configuration_wins_an_unseen_tool_is_destructive_and_knowledge_goes_stale() {
        let cfg = crate::config::Config::parse(
            "[server]\nledger = \"x.db\"\n[[routes]]\nname = \"tools\"\npath = \"/mcp\"\n\
             upstream = \"http://127.0.0.1:9\"\nprotocol = \"mcp\"\n\
             [routes.tools.\"lookup\"]\neffect = \"write\"\n",
        )
        .expect("config");
        let r = &cfg.routes[0];
        let t = Tools::default();
        assert_eq!(t.effect(r, "get"), (Effect::Destructive, Source::Unseen));
        let changed = t.learn(&json!({"tools": [
            {"name": "get", "annotations": {"readOnlyHint": true}},
            {"name": "lookup", "annotations": {"readOnlyHint": true}},
        ]}));
        assert_eq!(changed.len(), 2, "{changed:?}");
        assert_eq!(t.effect(r, "get"), (Effect::Read, Source::Annotations));
        assert_eq!(t.effect(r, "lookup"), (Effect::Write, Source::Config));
        // The same list again tells the ledger nothing new; a later list that changes a tool's
        // annotations is believed, and is what the ledger is told.
        let same = json!({"tools": [{"name": "get", "annotations": {"readOnlyHint": true}}]});
        assert_eq!(t.learn(&same), Vec::new());
        assert_eq!(
            t.learn(&json!({"tools": [{"name": "get"}]})),
            vec![("get".to_owned(), Effect::Destructive)]
        );
        assert_eq!(
            t.effect(r, "get"),
            (Effect::Destructive, Source::Annotations)
        );
        // What it knows goes stale: the caller reads the ledger again, and falls back on it.
        let past = Instant::now()
            .checked_sub(FRESH)
            .expect("an instant that long ago");
        t.0.write().expect("lock").insert(
            "get".into(),
            Known {
                effect: Effect::Read,
                since: past,
            },
        );
        assert_eq!(t.effect(r, "get"), (Effect::Read, Source::Stale));
        t.remember("get", Effect::Write);
        assert_eq!(t.effect(r, "get"), (Effect::Write, Source::Annotations));
    }
}
