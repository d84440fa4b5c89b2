//! One call by name: how a host runs any operation ([`crate::op`]) without a function of its
//! own per operation. The desktop console hands its JSON arguments over as they are; the admin
//! API hands over its path and query parameters as text beside its JSON body, and each is read
//! as the operation's request type asks (`limit=10` as a number, `stuck=true` as a boolean).

use idemgate_ledger::Progress;
use idemgate_proxy::Engine;
use serde::de::value::{MapDeserializer, StringDeserializer};
use serde::de::{DeserializeOwned, IntoDeserializer, Visitor};
use serde::{Deserializer, Serialize};
use serde_json::Value;

use crate::op::Cx;
pub use crate::op::{spec, Kind, Spec, SPECS};
use crate::{desktop_operator, OpsError, OpsResult};

/// An operation's arguments: named values, from JSON or from text (a path or query parameter).
#[derive(Debug, Clone, Default)]
pub struct Args(Vec<(String, Field)>);

#[derive(Debug, Clone)]
enum Field {
    Json(Value),
    /// Its name (for a message that says which parameter is wrong), its value.
    Text(String, String),
}

impl Args {
    /// The members of a JSON object; refused for any other JSON.
    pub fn json(name: &str, v: Value) -> OpsResult<Args> {
        match v {
            Value::Object(m) => Ok(Args(
                m.into_iter().map(|(k, v)| (k, Field::Json(v))).collect(),
            )),
            Value::Null => Ok(Args::default()),
            other => Err(OpsError::invalid(
                name,
                &format!("the arguments are a JSON object, not {other}"),
            )),
        }
    }

    /// Adds a parameter given as text, read as the request's field asks.
    pub fn text(&mut self, name: impl Into<String>, value: impl Into<String>) {
        let name = name.into();
        self.0.push((name.clone(), Field::Text(name, value.into())));
    }

    /// Adds a parameter given as JSON.
    pub fn value(&mut self, name: impl Into<String>, value: Value) {
        self.0.push((name.into(), Field::Json(value)));
    }

    /// Whether a parameter of this name is given.
    pub fn has(&self, name: &str) -> bool {
        self.0.iter().any(|(n, _)| n == name)
    }

    pub(crate) fn decode<T: DeserializeOwned>(self, name: &str) -> OpsResult<T> {
        let bad = |e: &dyn std::fmt::Display| OpsError::invalid(name, &e.to_string());
        if self.0.iter().all(|(_, f)| matches!(f, Field::Json(_))) {
            let m = self.0.into_iter().map(|(k, f)| match f {
                Field::Json(v) => (k, v),
                Field::Text(_, t) => (k, Value::String(t)),
            });
            return serde_json::from_value(Value::Object(m.collect())).map_err(|e| bad(&e));
        }
        let d = MapDeserializer::<_, serde::de::value::Error>::new(self.0.into_iter());
        T::deserialize(d).map_err(|e| bad(&e))
    }
}

impl<'de, E: serde::de::Error> IntoDeserializer<'de, E> for Field {
    type Deserializer = FieldDeserializer<E>;
    fn into_deserializer(self) -> Self::Deserializer {
        FieldDeserializer(self, std::marker::PhantomData)
    }
}

#[derive(Debug)]
struct FieldDeserializer<E>(Field, std::marker::PhantomData<E>);

/// A text parameter read as a number or a boolean: parsed, then visited as one.
macro_rules! parsed {
    ($($method:ident $t:ty => $visit:ident, $what:literal),* $(,)?) => {$(
        fn $method<V: Visitor<'de>>(self, v: V) -> Result<V::Value, E> {
            match self.0 {
                Field::Json(j) => j.$method(v).map_err(E::custom),
                Field::Text(name, t) => match t.parse::<$t>() {
                    Ok(n) => v.$visit(n),
                    Err(_) => Err(E::custom(format_args!("{name}={t:?}: not {}", $what))),
                },
            }
        }
    )*};
}

/// Everything else: JSON as JSON, text as a string.
macro_rules! as_given {
    ($($method:ident $(($($arg:ident : $at:ty),*))?),* $(,)?) => {$(
        fn $method<V: Visitor<'de>>(self, $($($arg: $at,)*)? v: V) -> Result<V::Value, E> {
            match self.0 {
                Field::Json(j) => j.$method($($($arg,)*)? v).map_err(E::custom),
                Field::Text(_, t) => StringDeserializer::<E>::new(t).$method($($($arg,)*)? v),
            }
        }
    )*};
}

impl<'de, E: serde::de::Error> Deserializer<'de> for FieldDeserializer<E> {
    type Error = E;

    parsed! {
        deserialize_bool bool => visit_bool, "true or false",
        deserialize_i8 i8 => visit_i8, "a whole number",
        deserialize_i16 i16 => visit_i16, "a whole number",
        deserialize_i32 i32 => visit_i32, "a whole number",
        deserialize_i64 i64 => visit_i64, "a whole number",
        deserialize_u8 u8 => visit_u8, "a whole number, 0 or more",
        deserialize_u16 u16 => visit_u16, "a whole number, 0 or more",
        deserialize_u32 u32 => visit_u32, "a whole number, 0 or more",
        deserialize_u64 u64 => visit_u64, "a whole number, 0 or more",
        deserialize_f32 f32 => visit_f32, "a number",
        deserialize_f64 f64 => visit_f64, "a number",
    }

    as_given! {
        deserialize_any, deserialize_char, deserialize_str, deserialize_string, deserialize_bytes,
        deserialize_byte_buf, deserialize_unit, deserialize_seq, deserialize_map,
        deserialize_identifier, deserialize_ignored_any,
        deserialize_unit_struct(name: &'static str),
        deserialize_newtype_struct(name: &'static str),
        deserialize_tuple(len: usize),
        deserialize_tuple_struct(name: &'static str, len: usize),
        deserialize_struct(name: &'static str, fields: &'static [&'static str]),
        deserialize_enum(name: &'static str, variants: &'static [&'static str]),
    }

    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, E> {
        match self.0 {
            Field::Json(j) => j.deserialize_option(v).map_err(E::custom),
            Field::Text(..) => v.visit_some(self),
        }
    }
}

pub(crate) fn answer<T: Serialize>(r: OpsResult<T>) -> OpsResult<Value> {
    serde_json::to_value(r?).map_err(|e| OpsError::Internal(e.to_string()))
}

/// Runs the operation `name` with `args`. All but [`Kind::Upstream`] operations block (call
/// them off the async threads); `progress` hears long work; `upstream` is the data plane a
/// [`Kind::UpstreamJob`] may need.
pub fn run(
    ops: &crate::Ops,
    upstream: Option<&Engine>,
    name: &str,
    args: Args,
    progress: Progress<'_>,
) -> OpsResult<Value> {
    match spec(name).map(|s| s.kind) {
        Some(Kind::Upstream) => Err(crate::op::refuse(name)),
        _ => crate::op::call(ops, name, args, Cx { upstream, progress })
            .unwrap_or_else(|| Err(no_such(name))),
    }
}

/// Runs the [`Kind::Upstream`] operation `name` with `args`, through `engine`.
pub async fn run_upstream(
    ops: &crate::Ops,
    engine: &Engine,
    name: &str,
    args: Args,
) -> OpsResult<Value> {
    match spec(name).map(|s| s.kind) {
        Some(Kind::Upstream) => crate::op::call_upstream(ops, engine, name, args)
            .await
            .unwrap_or_else(|| Err(no_such(name))),
        Some(_) => Err(crate::op::refuse(name)),
        None => Err(no_such(name)),
    }
}

fn no_such(name: &str) -> OpsError {
    OpsError::invalid("command", &format!("{name:?}: no such operation"))
}

/// How `name` runs, when it is an operation.
pub fn kind(name: &str) -> Option<Kind> {
    spec(name).map(|s| s.kind)
}

/// An action's arguments as the desktop console records them: the operator's name typed, with
/// the OS user beside it ([`desktop_operator`]). Only `operator` names who acts.
pub fn as_desktop(name: &str, args: &mut Value, os_user: &str) {
    if !spec(name).is_some_and(|s| s.acts) {
        return;
    }
    if let Some(Value::String(op)) = args.get_mut("operator") {
        *op = desktop_operator(op, os_user);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Ops;

    fn ledger() -> (tempfile::TempDir, Ops) {
        let dir = tempfile::tempdir().expect("tempdir");
        let ops =
            Ops::open_or_create(&dir.path().join("l.db").display().to_string()).expect("ledger");
        (dir, ops)
    }

    #[test]
    fn a_call_runs_its_operation_and_refuses_what_it_does_not_know() {
        let (_dir, ops) = ledger();
        let json = |v| Args::json("stats", v).expect("object");
        let stats = run(
            &ops,
            None,
            "stats",
            json(serde_json::json!({"hours": 1})),
            &mut |_| true,
        )
        .expect("stats");
        assert!(stats.get("stuck").is_some(), "{stats}");
        for (name, a, field) in [
            (
                "stats",
                serde_json::json!({"hours": 1, "extra": 1}),
                "stats",
            ),
            ("stats", serde_json::json!({"hours": "1"}), "stats"),
            ("nothing", serde_json::json!({}), "command"),
            ("replay", serde_json::json!({}), "command"),
        ] {
            match run(&ops, None, name, json(a), &mut |_| true) {
                Err(OpsError::Invalid { field: f, .. }) => assert_eq!(f, field, "{name}"),
                other => panic!("{name}: {other:?}"),
            }
        }
        assert!(Args::json("stats", serde_json::json!([1])).is_err());
        let mut a = serde_json::json!({"entry_id": 1, "operator": "alice", "reason": "r"});
        as_desktop("replay", &mut a, "ada");
        assert_eq!(a["operator"], "alice (OS user ada)");
        let mut a = serde_json::json!({"operator": "alice"});
        as_desktop("log", &mut a, "ada");
        assert_eq!(
            a["operator"], "alice",
            "a filter by operator is not an action"
        );
    }

    #[test]
    fn text_parameters_are_read_as_the_request_asks() {
        let (_dir, ops) = ledger();
        let mut a = Args::default();
        for (k, v) in [
            ("state", "pending"),
            ("stuck", "true"),
            ("limit", "10"),
            ("route", "42"),
        ] {
            a.text(k, v);
        }
        let page = run(&ops, None, "entries", a, &mut |_| true).expect("entries");
        assert_eq!(page["entries"], serde_json::json!([]));
        for (k, v, says) in [
            (
                "limit",
                "ten",
                "limit=\"ten\": not a whole number, 0 or more",
            ),
            ("stuck", "yes", "stuck=\"yes\": not true or false"),
            ("state", "lost", "unknown variant `lost`"),
            ("colour", "red", "unknown field `colour`"),
        ] {
            let mut a = Args::default();
            a.text(k, v);
            match run(&ops, None, "entries", a, &mut |_| true) {
                Err(OpsError::Invalid { message, .. }) => {
                    assert!(message.contains(says), "{k}: {message}")
                }
                other => panic!("{k}: {other:?}"),
            }
        }
        let mut a = Args::json("log", serde_json::json!({"limit": 5})).expect("object");
        a.text("since", "2026-01-01");
        a.text("entry_id", "3");
        let page = run(&ops, None, "log", a, &mut |_| true).expect("log");
        assert_eq!(page["events"], serde_json::json!([]));
    }
}
