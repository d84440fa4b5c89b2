//! The admin API's OpenAPI document, generated: each operation's path item from its declaration
//! ([`idemgate_ops::op`]: route, doc, role, request and answer types, their JSON Schemas), and
//! the server's own routes (a done export's files, an upload's check, who the token is, metrics,
//! health) from theirs. The server serves the checked-in `openapi.json`;
//! `tests/openapi_document.rs` fails when it differs from what this writes.

use idemgate_ops::commands::{self, Role};
use idemgate_ops::dispatch::{Kind, Spec};
use idemgate_ops::op::{Answers, Http};
use idemgate_proxy::problem::Code;
use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, SchemaGenerator};
use serde_json::{json, Map, Value};

const DESCRIPTION: &str = "The ops operations over HTTP. Every endpoint but /healthz and /readyz \
needs Authorization: Bearer <token>: an operator's token ([[operators]] in the configuration; \
`idemgate token new` makes one) or the shared admin token (IDEMGATE_ADMIN_TOKEN, the operator \
`admin`). Each operation's x-idemgate-role is the least role it needs (viewer < operator < \
admin); a lower one gets 403, and repeated bad tokens from one address get 429 for a while. An \
action is logged under the token's operator. Errors are RFC 9457 problem+json with a stable code. \
A member of a JSON body or a query parameter that an endpoint does not know is refused (400 \
invalid-argument), never ignored.";

const LINES: &str = "With Accept: application/x-ndjson the answer comes as the work goes, one \
JSON document a line: a progress line each time it reports, then the result (what the \
application/json answer holds). A failure before its first report is an ordinary problem+json \
answer with its status; one after is the last line. A client that goes away stops the work at \
its next report.";

/// The whole document. The requests of the operations with no route (a host runs them on a
/// ledger it opens itself: an export to a path, an archive to a directory) are in it as well,
/// under `x-idemgate-local-operations`, so it describes every operation's parameters.
pub fn document() -> Value {
    let mut gen = SchemaSettings::openapi3().into_generator();
    let mut paths = Map::new();
    let mut local = Map::new();
    for (spec, request, answer) in idemgate_ops::op::schemas(&mut gen) {
        let Some(http) = spec.http else {
            local.insert(spec.name.into(), openapi3(&mut gen, request));
            continue;
        };
        let (request, answer) = (openapi3(&mut gen, request), openapi3(&mut gen, answer));
        let item = operation(&spec, &http, request, answer);
        put(&mut paths, http.path, http.method, item);
    }
    host_routes(&mut gen, &mut paths);
    let mut schemas = gen.take_definitions(true);
    schemas.insert("Problem".into(), problem_schema());
    json!({
        "openapi": "3.0.3",
        "info": { "title": "idemgate admin API", "version": "1", "description": DESCRIPTION },
        "servers": [{ "url": "http://127.0.0.1:8701" }],
        "security": [{ "bearer": [] }],
        "paths": paths,
        "x-idemgate-local-operations": local,
        "components": {
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" } },
            "schemas": schemas,
        },
    })
}

/// A schema given inline, in OpenAPI 3.0's dialect (as the generator writes its definitions).
fn openapi3(gen: &mut SchemaGenerator, mut schema: schemars::Schema) -> Value {
    for t in gen.transforms_mut() {
        t.transform(&mut schema);
    }
    schema.to_value()
}

/// A parameter is given or not: its schema without the `null` an optional member allows.
fn not_null(mut schema: Value) -> Value {
    if let Some(s) = schema.as_object_mut() {
        s.remove("nullable");
        s.remove("default");
        if let Some(Value::Array(any)) = s.get("anyOf") {
            let given: Vec<Value> = any
                .iter()
                .filter(|a| !(a["nullable"] == true && a["enum"] == json!([null])))
                .cloned()
                .collect();
            if given.len() == 1 {
                let mut only = given[0].clone();
                if let (Some(o), Some(d)) = (only.as_object_mut(), s.get("description")) {
                    o.insert("description".into(), d.clone());
                }
                return only;
            }
        }
    }
    schema
}

fn put(paths: &mut Map<String, Value>, path: &str, method: &str, item: Value) {
    let entry = paths.entry(path).or_insert_with(|| json!({}));
    entry[method.to_ascii_lowercase()] = item;
}

/// An operation's path item: its parameters from its request's members (the path's, then the
/// query's for `GET` and `DELETE`), or its request as the JSON body (less the path's).
fn operation(spec: &Spec, http: &Http, request: Value, answer: Value) -> Value {
    let (params, method): (Vec<&str>, _) = (http.params().collect(), http.method);
    let members = request["properties"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let required: Vec<&str> = request["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let example: Value = serde_json::from_str(spec.example).unwrap_or(Value::Null);
    let mut parameters: Vec<Value> = params
        .iter()
        .map(|p| parameter(p, "path", true, members.get(*p), example.get(*p)))
        .collect();
    let mut item = Map::new();
    let (first, rest) = spec.summary();
    item.insert("operationId".into(), json!(spec.name));
    item.insert("summary".into(), json!(first));
    let description = match (rest.is_empty(), spec.kind.is_job()) {
        (true, false) => String::new(),
        (false, false) => rest,
        (true, true) => LINES.to_owned(),
        (false, true) => format!("{rest}\n\n{LINES}"),
    };
    if !description.is_empty() {
        item.insert("description".into(), json!(description));
    }
    if method != "POST" {
        for (name, schema) in &members {
            if !params.contains(&name.as_str()) {
                parameters.push(parameter(
                    name,
                    "query",
                    required.contains(&name.as_str()),
                    Some(schema),
                    example.get(name),
                ));
            }
        }
    } else {
        let mut body = request.clone();
        if let Some(props) = body.get_mut("properties").and_then(Value::as_object_mut) {
            for p in &params {
                props.remove(*p);
            }
        }
        // The path gives its parameters; the token's operator stands in for a body that leaves
        // it out.
        if let Some(req) = body.get_mut("required").and_then(Value::as_array_mut) {
            let dropped =
                |r: &Value| params.iter().any(|p| r == p) || (spec.acts && r == "operator");
            req.retain(|r| !dropped(r));
        }
        let mut example = example.clone();
        if let Some(ex) = example.as_object_mut() {
            for p in &params {
                ex.remove(*p);
            }
        }
        item.insert(
            "requestBody".into(),
            json!({ "required": true, "content": { "application/json": {
                "schema": body, "example": example } } }),
        );
    }
    if !parameters.is_empty() {
        item.insert("parameters".into(), json!(parameters));
    }
    let mut responses = success(spec, answer);
    let post = method == "POST";
    for status in errors(spec, !params.is_empty(), post) {
        responses[status.to_string()] = problem(status, spec.role, spec.max_body);
    }
    item.insert("responses".into(), responses);
    item.insert("x-idemgate-role".into(), json!(spec.role.as_str()));
    Value::Object(item)
}

/// An operation's success response, as it declares it answers.
fn success(spec: &Spec, answer: Value) -> Value {
    let mut ok = json!({ "application/json": { "schema": answer } });
    if spec.kind.is_job() {
        ok["application/x-ndjson"] = json!({ "schema": lines_schema(&answer) });
    }
    match spec.answers {
        Answers::Json => json!({ "200": { "description": "OK", "content": ok } }),
        Answers::NoContent => json!({ "204": { "description": "Done: no content" } }),
        Answers::Accepted(path) => json!({ "202": {
            "description": "Accepted: the job, running",
            "content": ok,
            "headers": { "Location": {
                "description": format!("the job's URL ({path})"),
                "schema": { "type": "string" } } },
        } }),
    }
}

fn parameter(
    name: &str,
    place: &str,
    required: bool,
    schema: Option<&Value>,
    example: Option<&Value>,
) -> Value {
    let mut schema = not_null(
        schema
            .cloned()
            .unwrap_or_else(|| json!({ "type": "string" })),
    );
    let description = schema.as_object_mut().and_then(|s| s.remove("description"));
    let mut p = json!({ "name": name, "in": place, "required": required, "schema": schema });
    if let Some(d) = description {
        p["description"] = d;
    }
    if let Some(e) = example {
        p["example"] = e.clone();
    }
    p
}

/// The error statuses an operation may answer: what every route may, what a named entry or a
/// body may, and what an action may meet.
fn errors(spec: &Spec, named: bool, body: bool) -> Vec<u16> {
    let mut s = vec![400, 401, 403, 429, 503];
    if named || body {
        s.push(404);
    }
    if body && spec.role > Role::Viewer && !matches!(spec.kind, Kind::Ledger if !spec.acts) {
        s.push(409);
    }
    if body {
        s.extend([413, 415]);
    }
    s.extend(
        spec.also
            .iter()
            .filter(|a| !s.contains(a))
            .collect::<Vec<_>>(),
    );
    s.sort_unstable();
    s
}

fn problem(status: u16, role: Role, max_body: usize) -> Value {
    let description = match status {
        400 => "invalid argument".to_owned(),
        401 => "missing or wrong bearer token".to_owned(),
        403 => format!("the token's role is below {role} (x-idemgate-role)"),
        404 => "not-found: no such entry".to_owned(),
        409 => "the entry's state does not allow it (conflict), a destructive route needs \
                confirm_destructive (confirmation-required), the body names another operator \
                (operator-mismatch), or the server keeps no archive (no-archive)"
            .to_owned(),
        413 => format!("body-too-large: the body is over {} MiB", max_body >> 20),
        415 => "unsupported-media-type: the body is not sent as Content-Type: application/json"
            .to_owned(),
        429 => "too many bad tokens from this address lately: wait Retry-After seconds".to_owned(),
        503 => "ledger unavailable".to_owned(),
        _ => "error".to_owned(),
    };
    problem_response(&description)
}

/// An error response: problem+json, described.
fn problem_response(description: &str) -> Value {
    let problem = json!({ "$ref": "#/components/schemas/Problem" });
    json!({
        "description": description,
        "content": { "application/problem+json": { "schema": problem } },
    })
}

/// A job's answer as it goes: progress lines, then the result or the problem.
fn lines_schema(answer: &Value) -> Value {
    let line = |member: &str, schema: Value| {
        json!({
            "type": "object",
            "properties": { member: schema },
            "required": [member],
            "additionalProperties": false,
        })
    };
    json!({
        "description": "one of these a line",
        "oneOf": [
            line("progress", json!({ "type": "integer", "minimum": 0 })),
            line("result", answer.clone()),
            line("problem", json!({ "$ref": "#/components/schemas/Problem" })),
        ],
    })
}

fn problem_schema() -> Value {
    let codes: Vec<&str> = Code::ALL.iter().map(|c| c.as_str()).collect();
    json!({
        "type": "object",
        "properties": {
            "type": { "type": "string" },
            "title": { "type": "string" },
            "status": { "type": "integer" },
            "detail": { "type": "string" },
            "code": {
                "type": "string",
                "description": "stable; also the last part of type (urn:idemgate:problem:CODE)",
                "enum": codes,
            },
        },
        "required": ["type", "title", "status", "code"],
    })
}

/// The role the command table gives a host route.
fn role_of(method: &str, path: &str) -> Role {
    commands::for_route(method, path).map_or(Role::Admin, |c| c.role)
}

fn schema_of<T: JsonSchema>(gen: &mut SchemaGenerator) -> Value {
    gen.subschema_for::<T>().to_value()
}

/// One of the server's own routes, as the document describes it.
struct HostRoute {
    method: &'static str,
    path: &'static str,
    summary: &'static str,
    /// Its success status and response.
    ok: (u16, Value),
    errors: &'static [u16],
    /// Its parameters or its request body, when it has them.
    extra: Value,
}

/// The server's own routes: a done export's files, an upload's check, who it is, its metrics and
/// its health.
fn host_routes(gen: &mut SchemaGenerator, paths: &mut Map<String, Value>) {
    for r in host_table(gen) {
        let role = role_of(r.method, r.path);
        let mut responses = json!({ r.ok.0.to_string(): r.ok.1 });
        for s in r.errors {
            responses[s.to_string()] = problem(*s, role, idemgate_ops::op::DEFAULT_MAX_BODY);
        }
        if r.path.ends_with("/file") || r.path.ends_with("/manifest") {
            let content = responses["200"]["content"].clone();
            responses["206"] = json!({ "description": "the requested range", "content": content });
            responses["304"] = json!({ "description": "not modified" });
        }
        let mut item = json!({
            "summary": r.summary,
            "responses": responses,
            "x-idemgate-role": role.as_str(),
        });
        if let (Some(i), Some(e)) = (item.as_object_mut(), r.extra.as_object()) {
            i.extend(e.clone());
        }
        put(paths, r.path, r.method, item);
    }
    let text_ok = |d: &str| {
        let text = json!({ "schema": { "type": "string" } });
        json!({ "description": d, "content": { "text/plain": text } })
    };
    let health = [
        (
            "/healthz",
            "Liveness: 503 only when this process can never write again (its ledger writer has \
             stopped).",
            "alive",
            "ledger-writer-stopped: restart the process",
        ),
        (
            "/readyz",
            "Readiness: 503 while the ledger cannot take writes (a commit failed in the last 5 s, \
             or the writer has stopped).",
            "ready",
            "ledger-unavailable (Retry-After) or ledger-writer-stopped",
        ),
    ];
    for (path, summary, ok, unavailable) in health {
        let item = json!({
            "summary": summary,
            "security": [],
            "responses": { "200": text_ok(ok), "503": problem_response(unavailable) },
        });
        put(paths, path, "GET", item);
    }
}

/// A success response: `schema` as JSON.
fn json_ok(schema: Value) -> Value {
    json!({ "description": "OK", "content": { "application/json": { "schema": schema } } })
}

/// A download, named by `Content-Disposition`: `content` by media type.
fn download(what: &str, content: Value) -> Value {
    json!({
        "description": what,
        "headers": { "Content-Disposition": { "schema": { "type": "string" } } },
        "content": content,
    })
}

fn host_table(gen: &mut SchemaGenerator) -> Vec<HostRoute> {
    let mut routes = download_routes(gen);
    routes.push(upload_route(gen));
    routes.extend(info_routes(gen));
    routes
}

fn route(
    method: &'static str,
    path: &'static str,
    summary: &'static str,
    ok: (u16, Value),
    errors: &'static [u16],
    extra: Value,
) -> HostRoute {
    HostRoute {
        method,
        path,
        summary,
        ok,
        errors,
        extra,
    }
}

/// The path parameter of an export job.
fn export_id() -> Value {
    json!({ "parameters": [{
        "name": "id", "in": "path", "required": true,
        "description": "the export's id, as POST /admin/v1/exports gave it",
        "schema": { "type": "string" },
    }] })
}

/// A done export's file and manifest.
fn download_routes(gen: &mut SchemaGenerator) -> Vec<HostRoute> {
    let manifest = schema_of::<idemgate_ops::jobs::exports::ExportManifest>(gen);
    let export_id = export_id();
    let text = json!({ "schema": { "type": "string" } });
    vec![
        route(
            "GET",
            "/admin/v1/exports/{id}/file",
            "Download a done export's file (Range requests too), named by Content-Disposition \
             as its manifest's file.",
            (
                200,
                download(
                    "the export",
                    json!({ "application/x-ndjson": text, "text/csv": text }),
                ),
            ),
            &[400, 401, 403, 404, 409, 416, 429],
            export_id.clone(),
        ),
        route(
            "GET",
            "/admin/v1/exports/{id}/manifest",
            "Download a done export's manifest (what idemgate verify --export reads beside the \
             file).",
            (
                200,
                download(
                    "the manifest",
                    json!({ "application/json": { "schema": manifest } }),
                ),
            ),
            &[400, 401, 403, 404, 409, 416, 429],
            export_id,
        ),
    ]
}

/// The check of an export file the client uploads.
fn upload_route(gen: &mut SchemaGenerator) -> HostRoute {
    let report = schema_of::<idemgate_ops::ledger::ExportVerifyReport>(gen);
    route(
        "POST",
        "/admin/v1/verify/export",
        "Verify an export file the client uploads, with its manifest, as idemgate verify \
             --export does beside it: the file's sha256, the chain inside it, the manifest's \
             count and head, and its events as the leaves of the log's tree the manifest names. \
             The ledger is not read; the upload is removed once checked.",
        (200, json_ok(report)),
        &[400, 401, 403, 413, 415, 429, 500, 503],
        json!({ "requestBody": {
                "required": true,
                "content": { "multipart/form-data": { "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {
                        "file": { "type": "string", "format": "binary",
                                  "description": "the export file (NDJSON or CSV)" },
                        "manifest": { "type": "string", "format": "binary",
                                      "description": "its FILE.manifest.json" },
                    },
                } } },
            } }),
    )
}

/// Who the server and the token are, this document, and the metrics.
fn info_routes(gen: &mut SchemaGenerator) -> Vec<HostRoute> {
    let text = json!({ "schema": { "type": "string" } });
    vec![
        route(
            "GET",
            "/admin/v1/server",
            "The server: its version, where its proxy and admin API listen, and its ledger.",
            (200, json_ok(schema_of::<crate::admin::ServerInfo>(gen))),
            &[401, 403, 429],
            json!({}),
        ),
        route(
            "GET",
            "/admin/v1/whoami",
            "The operator the token names, their role, and whether it is the shared admin token.",
            (200, json_ok(schema_of::<crate::access::Identity>(gen))),
            &[401, 403, 429],
            json!({}),
        ),
        route(
            "GET",
            "/admin/v1/openapi.json",
            "This document.",
            (200, json_ok(json!({ "type": "object" }))),
            &[400, 401, 403, 429],
            json!({}),
        ),
        route(
            "GET",
            "/metrics",
            "Prometheus metrics.",
            (
                200,
                json!({ "description": "Prometheus text", "content": { "text/plain": text } }),
            ),
            &[401, 403, 429],
            json!({}),
        ),
    ]
}

/// The document's endpoints as a Markdown table (docs/admin-api.md holds it): each route, the
/// least role it needs, and its summary.
pub fn endpoints(doc: &Value) -> String {
    let mut s = String::from("| endpoint | role | what |\n|---|---|---|\n");
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        for (method, op) in item.as_object().into_iter().flatten() {
            let role = op["x-idemgate-role"].as_str().unwrap_or("none");
            let what = op["summary"].as_str().unwrap_or("").replace('|', "\\|");
            s.push_str(&format!(
                "| `{} {path}` | {role} | {what} |\n",
                method.to_ascii_uppercase()
            ));
        }
    }
    s
}
