//! Requests several operations share.

use idemgate_ledger::Millis;
use serde::{Deserialize, Deserializer};

/// No arguments.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

/// One entry, by its id.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntryRef {
    /// The entry's id.
    pub entry_id: i64,
}

/// A file or a directory of the host that runs the operation.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathArg {
    /// The path of a file or directory on the host that runs the operation.
    pub path: String,
}

/// A file or a directory of the host that runs the operation, and the key the signed
/// checkpoints it holds must verify under.
#[cfg_attr(
    feature = "ts",
    derive(ts_rs::TS, schemars::JsonSchema),
    ts(optional_fields = nullable)
)]
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyedPathArg {
    /// The path of a file or directory on the host that runs the operation.
    pub path: String,
    /// A verifier key in the Go note format (`name+hash+key`); given, each signed checkpoint
    /// must verify under it.
    #[serde(default)]
    pub public_key: Option<String>,
}

/// A time as the CLI takes it ([`crate::parse_time`]: RFC 3339, a date, a span back from now
/// such as `2h`, or epoch milliseconds), or epoch milliseconds as a JSON number.
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(type = "number | string"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Time(pub Millis);

/// Written as the epoch milliseconds it holds.
impl serde::Serialize for Time {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_i64(self.0)
    }
}

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Given {
            Millis(Millis),
            Text(String),
        }
        match Given::deserialize(d)? {
            Given::Millis(m) => Ok(Time(m)),
            Given::Text(t) => crate::parse_time(&t)
                .map(Time)
                .map_err(|e| serde::de::Error::custom(e.to_string())),
        }
    }
}

#[cfg(feature = "ts")]
impl schemars::JsonSchema for Time {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Time".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": concat!(
                "A time: RFC 3339, a date, a span back from now (`90m`, `2h`, `7d`), ",
                "or epoch milliseconds."
            ),
            "anyOf": [{ "type": "integer" }, { "type": "string" }]
        })
    }
}

/// A verifier key given as its text (the Go note format), read; a malformed one is refused by
/// the name of the field that gave it.
pub(crate) fn public_key(
    text: Option<&str>,
) -> crate::OpsResult<Option<idemgate_ledger::checkpoint::PublicKey>> {
    text.map(|t| {
        idemgate_ledger::checkpoint::PublicKey::parse(t.trim())
            .map_err(|e| crate::OpsError::invalid("public_key", &e.to_string()))
    })
    .transpose()
}
