//! Each tool's effect: the route's configuration when it names the tool, else the tool's
//! annotations as the upstream last listed them, else destructive (the spec's defaults, and the
//! safe side for a tool not seen yet).

use std::collections::HashMap;
use std::sync::RwLock;

use idemgate_ledger::Effect;
use serde_json::Value;

use crate::config::Route;

/// The effects of one MCP route's tools, as learnt from its `tools/list` answers.
#[derive(Debug, Default)]
pub struct Tools(RwLock<HashMap<String, Effect>>);

/// Where a tool's effect came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Config,
    Annotations,
    /// Neither: the tool was not listed yet.
    Unseen,
}

impl Tools {
    /// The effect of a call of `name` on `route`.
    pub fn effect(&self, route: &Route, name: &str) -> (Effect, Source) {
        if let Some(e) = route.tools.get(name).and_then(|t| t.effect) {
            return (e, Source::Config);
        }
        match self.0.read().ok().and_then(|m| m.get(name).copied()) {
            Some(e) => (e, Source::Annotations),
            None => (Effect::Destructive, Source::Unseen),
        }
    }

    /// Learns the tools of a `tools/list` result (one page of it).
    pub fn learn(&self, result: &Value) {
        let Some(tools) = result.get("tools").and_then(Value::as_array) else {
            return;
        };
        let Ok(mut m) = self.0.write() else { return };
        for t in tools {
            if let Some(name) = t.get("name").and_then(Value::as_str) {
                m.insert(name.to_owned(), from_annotations(t.get("annotations")));
            }
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
    fn configuration_wins_and_an_unseen_tool_is_destructive() {
        let cfg = crate::config::Config::parse(
            "[server]\nledger = \"x.db\"\n[[routes]]\nname = \"tools\"\npath = \"/mcp\"\n\
             upstream = \"http://127.0.0.1:9\"\nprotocol = \"mcp\"\n\
             [routes.tools.\"lookup\"]\neffect = \"write\"\n",
        )
        .expect("config");
        let r = &cfg.routes[0];
        let t = Tools::default();
        assert_eq!(t.effect(r, "get"), (Effect::Destructive, Source::Unseen));
        t.learn(&json!({"tools": [
            {"name": "get", "annotations": {"readOnlyHint": true}},
            {"name": "lookup", "annotations": {"readOnlyHint": true}},
        ]}));
        assert_eq!(t.effect(r, "get"), (Effect::Read, Source::Annotations));
        assert_eq!(t.effect(r, "lookup"), (Effect::Write, Source::Config));
        // A later list that changes a tool's annotations is believed.
        t.learn(&json!({"tools": [{"name": "get"}]}));
        assert_eq!(
            t.effect(r, "get"),
            (Effect::Destructive, Source::Annotations)
        );
    }
}
