//! An operation's arguments as a host hands them over: the desktop console's JSON as it is, the
//! admin API's path and query parameters as text beside its JSON body, each read as the
//! operation's request type asks (`limit=10` as a number, `stuck=true` as a boolean).

use serde::de::value::{MapDeserializer, StringDeserializer};
use serde::de::{DeserializeOwned, IntoDeserializer, Visitor};
use serde::{Deserializer, Serialize};
use serde_json::Value;

use crate::{OpsError, OpsResult};

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
