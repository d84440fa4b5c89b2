//! An operation's parameters as the admin API's OpenAPI document ([`crate::OPENAPI`]) describes
//! them: its path and query parameters and its JSON body's members, each with its kind and its
//! doc. The document is made from the operations' declarations, so what a host lists from it
//! (the CLI's `call OPERATION --help`) follows them.

use std::sync::OnceLock;

use serde_json::Value;

/// One parameter of an operation's request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parameter {
    pub name: String,
    /// What it takes: `integer`, `boolean`, `string`, the values it may be (`a|b|c`), or JSON.
    pub kind: String,
    pub required: bool,
    pub doc: String,
}

/// The parameters of the operation named `operation` (its `operationId`): the required ones
/// first, each group in the document's order; `None` when the document has no such operation.
pub fn parameters(operation: &str) -> Option<Vec<Parameter>> {
    // Read once a process: the CLI asks for every operation's parameters each time it starts.
    static DOC: OnceLock<Option<Value>> = OnceLock::new();
    let doc = DOC
        .get_or_init(|| serde_json::from_str(crate::OPENAPI).ok())
        .as_ref()?;
    let read = Reader { doc };
    let routed = doc["paths"]
        .as_object()?
        .values()
        .filter_map(Value::as_object)
        .flat_map(|item| item.values())
        .find(|op| op["operationId"] == operation);
    let Some(op) = routed else {
        // An operation with no route: its request, as a body would be.
        let request = doc["x-idemgate-local-operations"].get(operation)?;
        let mut out = Vec::new();
        read.members(request, &mut out);
        out.sort_by_key(|p| !p.required);
        return Some(out);
    };
    let mut out: Vec<Parameter> = op["parameters"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| Parameter {
            name: text(&p["name"]),
            kind: read.kind(&p["schema"]),
            required: p["required"] == true,
            doc: read.doc(p, &p["schema"]),
        })
        .collect();
    let body = &op["requestBody"]["content"]["application/json"]["schema"];
    read.members(body, &mut out);
    out.sort_by_key(|p| !p.required);
    Some(out)
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

struct Reader<'a> {
    doc: &'a Value,
}

impl Reader<'_> {
    /// The doc of a parameter (or member) `p` whose schema is `schema`, and that of the named
    /// scalar it takes (what a time may be written as).
    fn doc(&self, p: &Value, schema: &Value) -> String {
        let own = text(&p["description"]);
        match self.named_scalar(schema) {
            Some((_, more)) if !more.is_empty() => format!("{own} {more}").trim().to_owned(),
            _ => own,
        }
    }

    /// What `$ref` names, or `s` itself.
    fn resolve<'s>(&'s self, s: &'s Value) -> &'s Value {
        match s["$ref"].as_str().and_then(|r| r.strip_prefix("#/")) {
            Some(path) => path.split('/').fold(self.doc, |v, k| &v[k]),
            None => s,
        }
    }

    /// The members of object schema `s`; those of its alternatives (`oneOf`) too, required
    /// only when every alternative requires them, their kinds and docs joined.
    fn members(&self, s: &Value, out: &mut Vec<Parameter>) {
        let s = self.resolve(s);
        let needed = |name: &str| {
            s["required"]
                .as_array()
                .is_some_and(|r| r.iter().any(|n| n == name))
        };
        for (name, p) in s["properties"].as_object().into_iter().flatten() {
            out.push(Parameter {
                name: name.clone(),
                kind: self.kind(p),
                required: needed(name),
                doc: self.doc(p, p),
            });
        }
        let Some(forms) = s["oneOf"].as_array() else {
            return;
        };
        let mut each: Vec<Vec<Parameter>> = Vec::new();
        for form in forms {
            let mut members = Vec::new();
            self.members(form, &mut members);
            // A member that only names the form (`"target": "ids"`) is documented by the form.
            for m in &mut members {
                if m.doc.is_empty() && !m.kind.contains('|') {
                    m.doc = format!("{}: {}", m.kind, text(&self.resolve(form)["description"]));
                }
            }
            each.push(members);
        }
        let mut joined: Vec<Parameter> = Vec::new();
        for m in each.iter().flatten() {
            match joined.iter_mut().find(|j| j.name == m.name) {
                Some(j) => {
                    if j.kind != m.kind {
                        j.kind = format!("{}|{}", j.kind, m.kind);
                    }
                    if j.doc != m.doc {
                        j.doc = format!("{} {}", j.doc, m.doc);
                    }
                }
                None => joined.push(m.clone()),
            }
        }
        for j in &mut joined {
            j.required = each
                .iter()
                .all(|f| f.iter().any(|m| m.name == j.name && m.required));
        }
        out.extend(joined);
    }

    /// A named scalar schema `s` refers to (a time), with its doc: its name is its kind.
    fn named_scalar(&self, s: &Value) -> Option<(String, String)> {
        let s = match s["allOf"].as_array().map(Vec::as_slice) {
            Some([one]) => one,
            _ => s,
        };
        let name = s["$ref"].as_str()?.rsplit('/').next()?;
        let target = self.resolve(s);
        let scalar = target["enum"].is_null()
            && target["properties"].is_null()
            && !target["oneOf"].is_array()
            && target["type"] != "object";
        scalar.then(|| (name.to_lowercase(), text(&target["description"])))
    }

    /// What schema `s` takes, in a few words.
    fn kind(&self, s: &Value) -> String {
        if let Some((name, _)) = self.named_scalar(s) {
            return name;
        }
        let s = self.resolve(s);
        if let Some(values) = s["enum"].as_array() {
            return values
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join("|");
        }
        for alternatives in ["allOf", "oneOf", "anyOf"] {
            if let Some(list) = s[alternatives].as_array() {
                let kinds: Vec<String> = list
                    .iter()
                    .filter(|a| a["enum"] != serde_json::json!([null]))
                    .map(|a| self.kind(a))
                    .collect();
                let all_values = list.iter().all(|a| self.resolve(a)["enum"].is_array());
                return kinds.join(if all_values { "|" } else { " or " });
            }
        }
        match s["type"].as_str() {
            Some("array") => "JSON list".to_owned(),
            Some("object") | None => "JSON object".to_owned(),
            Some(t) => t.to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(op: &str, name: &str) -> Parameter {
        parameters(op)
            .expect("operation")
            .into_iter()
            .find(|p| p.name == name)
            .unwrap_or_else(|| panic!("{op} has no {name}"))
    }

    #[test]
    fn the_parameters_of_a_path_a_query_and_a_body() {
        let id = of("resolve", "entry_id");
        assert_eq!((id.kind.as_str(), id.required), ("integer", true));
        assert_eq!(id.doc, "The entry.");
        let as_ = of("resolve", "as");
        assert_eq!(
            (as_.kind.as_str(), as_.required),
            ("completed|failed|released", true)
        );
        assert!(!of("resolve", "external_ref").required);
        assert_eq!(
            of("entries", "state").kind,
            "pending|completed|released|failed|awaiting_approval"
        );
        let since = of("log", "since");
        assert_eq!(since.kind, "time");
        assert!(
            since
                .doc
                .starts_with("At or after this time. A time: RFC 3339"),
            "{}",
            since.doc
        );
        assert_eq!(of("bulk", "target").kind, "JSON object");
        assert!(parameters("no_such_operation").is_none());
        // An operation with no route: a host runs it on a ledger it opens.
        let dir = of("archive", "dir");
        assert_eq!((dir.kind.as_str(), dir.required), ("string", true));
    }

    #[test]
    fn the_forms_of_a_body_are_joined() {
        let target = of("purge", "target");
        assert_eq!(
            (target.kind.as_str(), target.required),
            ("ids|expired", true)
        );
        assert!(target.doc.contains("ids: These entries"), "{}", target.doc);
        assert!(
            target.doc.contains("expired: Every expired entry"),
            "{}",
            target.doc
        );
        let ids = of("purge", "ids");
        assert_eq!((ids.kind.as_str(), ids.required), ("JSON list", false));
        assert!(of("purge", "reason").required);
    }
}
