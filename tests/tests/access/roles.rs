//! Operators and roles on the admin API: every route of the OpenAPI document against every role,
//! the operator the log records, the shared admin token, and the backoff after bad tokens.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};

use idemgate_ops::commands::{self, Role};

use super::*;

/// An operator made by `idemgate token new --json`.
struct Op {
    name: String,
    token: String,
}

fn token_new(name: &str, role: &str) -> (Op, String) {
    let v = idemgate_json(&["token", "new", "--name", name, "--role", role, "--json"]);
    assert_eq!(v["name"], name);
    assert_eq!(v["role"], role);
    let token = v["token"].as_str().expect("token").to_owned();
    let hash = v["token_hash"].as_str().expect("token_hash").to_owned();
    assert!(hash.starts_with("sha256:") && !hash.contains(&token));
    let lines =
        format!("[[operators]]\nname = \"{name}\"\nrole = \"{role}\"\ntoken_hash = \"{hash}\"\n");
    (
        Op {
            name: name.to_owned(),
            token,
        },
        lines,
    )
}

/// `idemgate serve` on a demo ledger with a viewer, an operator and an admin besides the shared
/// admin token; the viewer's line is in a file `server.operators_file` names.
fn serve_with_operators() -> (tempfile::TempDir, Proxy, [Op; 3]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ledger = dir.path().join("ledger.db");
    idemgate(&[
        "demo",
        "--ledger",
        ledger.to_str().expect("utf-8"),
        "--events",
        "2000",
    ]);
    let (vic, vic_lines) = token_new("vic", "viewer");
    let (olga, olga_lines) = token_new("olga", "operator");
    let (ada, ada_lines) = token_new("ada", "admin");
    let ops_file = dir.path().join("operators.toml");
    std::fs::write(&ops_file, vic_lines).expect("operators file");
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\nledger = \"{}\"\n\
         operators_file = \"{}\"\n\n{olga_lines}\n{ada_lines}",
        ledger.display(),
        ops_file.display()
    );
    let proxy = Proxy::start(dir.path(), &toml, &ledger);
    (dir, proxy, [vic, olga, ada])
}

fn call(admin: SocketAddr, token: &str, method: &str, path: &str, body: &str) -> Resp {
    let auth = format!("Bearer {token}");
    request(
        admin,
        method,
        path,
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
        body.as_bytes(),
    )
}

fn head_seq(proxy: &Proxy) -> i64 {
    proxy.admin_get("/admin/v1/stats").json()["head"]["seq"]
        .as_i64()
        .expect("head seq")
}

#[test]
fn each_role_gets_exactly_the_routes_the_command_table_gives_it() {
    let (_dir, proxy, ops) = serve_with_operators();
    let admin = proxy.admin.expect("admin");
    let doc = proxy.admin_get("/admin/v1/openapi.json").json();
    let seq_before = head_seq(&proxy);
    let mut documented = BTreeSet::new();
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("operations") {
            let method = method.to_ascii_uppercase();
            if path == "/healthz" || path == "/readyz" {
                assert!(op.get("x-idemgate-role").is_none(), "{path}: no token");
                continue;
            }
            // The document's role is the table's, and the table knows every documented route.
            let cmd = commands::for_route(&method, path)
                .unwrap_or_else(|| panic!("{method} {path} is in no command of the table"));
            assert_eq!(
                op["x-idemgate-role"].as_str(),
                Some(cmd.role.as_str()),
                "{method} {path}"
            );
            documented.insert((method.clone(), path.clone()));
            // An id that matches nothing and a body that says nothing: an allowed role reaches
            // the operation (which refuses it), a lower one is stopped before it.
            let concrete = path
                .replace("{entry_id}", "99999999")
                .replace("{id}", "none");
            let body = if method == "POST" { "{}" } else { "" };
            for (op_, role) in ops.iter().zip(Role::ALL) {
                let r = call(admin, &op_.token, &method, &concrete, body);
                if role >= cmd.role {
                    assert!(
                        r.status != 401 && r.status != 403 && r.status != 429,
                        "{} ({role}) {method} {path}: {} {}",
                        op_.name,
                        r.status,
                        r.text()
                    );
                    // The router serves it: its own 404 and 405 are for routes it does not have.
                    let problem = r
                        .header("content-type")
                        .is_some_and(|c| c.starts_with("application/problem+json"));
                    assert!(
                        !(problem
                            && ["not-found", "method-not-allowed"].contains(&r.code().as_str())),
                        "{method} {path} is documented but not served: {}",
                        r.text()
                    );
                } else {
                    assert_eq!(r.status, 403, "{} ({role}) {method} {path}", op_.name);
                    assert_eq!(r.code(), "forbidden");
                    assert!(r.text().contains(cmd.role.as_str()), "{}", r.text());
                }
                checked += 1;
            }
        }
    }
    // Every route of the table is documented, and the other way round.
    let table: BTreeSet<(String, String)> = commands::all()
        .flat_map(|c| {
            c.http
                .iter()
                .map(|h| (h.method.to_owned(), h.path.to_owned()))
        })
        .collect();
    assert_eq!(documented, table);
    assert!(checked >= 3 * 25, "{checked} calls");
    assert_eq!(
        head_seq(&proxy),
        seq_before,
        "a refused or empty call changes nothing"
    );
    let metrics = proxy.admin_get("/metrics").text();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("idemgate_admin_denied_total{reason=\"role\"}")),
        "{metrics}"
    );
    // Each token says whose it is.
    for (op_, role) in ops.iter().zip(Role::ALL) {
        let me = call(admin, &op_.token, "GET", "/admin/v1/whoami", "").json();
        assert_eq!(
            me,
            json!({"name": op_.name, "role": role.as_str(), "shared": false})
        );
    }
    let me = proxy.admin_get("/admin/v1/whoami").json();
    assert_eq!(
        me,
        json!({"name": "admin", "role": "admin", "shared": true})
    );
    // No token and no hash reaches the process log.
    let logs = proxy.logs();
    for o in &ops {
        assert!(!logs.contains(&o.token), "{}'s token in the log", o.name);
    }
    assert!(!logs.contains("sha256:"), "a token hash in the log");
}

#[test]
fn an_action_is_logged_under_the_tokens_operator_and_a_viewer_cannot_act() {
    let (_dir, proxy, [vic, olga, ada]) = serve_with_operators();
    let admin = proxy.admin.expect("admin");
    let stuck = proxy
        .admin_get("/admin/v1/entries?stuck=true&limit=10")
        .json();
    let ids: Vec<i64> = stuck["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter(|e| e["effect"] != "destructive")
        .map(|e| e["id"].as_i64().expect("id"))
        .collect();
    assert!(ids.len() >= 3, "the demo ledger has stuck entries: {stuck}");
    let release = |token: &str, id: i64, operator: Option<&str>| {
        let mut b = json!({"as": "released", "reason": "the processor says it never ran"});
        if let Some(o) = operator {
            b["operator"] = json!(o);
        }
        call(
            admin,
            token,
            "POST",
            &format!("/admin/v1/entries/{id}/resolve"),
            &b.to_string(),
        )
    };
    let state = |id: i64| {
        proxy.admin_get(&format!("/admin/v1/entries/{id}")).json()["entry"]["state"].clone()
    };
    let seq = head_seq(&proxy);
    // A viewer is refused, and nothing changes.
    let r = release(&vic.token, ids[0], None);
    assert_eq!(
        (r.status, r.code().as_str()),
        (403, "forbidden"),
        "{}",
        r.text()
    );
    // Naming someone else is refused rather than rewritten.
    let r = release(&olga.token, ids[0], Some("ada"));
    assert_eq!(
        (r.status, r.code().as_str()),
        (400, "operator-mismatch"),
        "{}",
        r.text()
    );
    assert_eq!(state(ids[0]), "pending");
    assert_eq!(head_seq(&proxy), seq);
    // Left out, or the token's own name: the log says olga.
    assert_eq!(release(&olga.token, ids[0], None).status, 200);
    assert_eq!(release(&ada.token, ids[1], Some("ada")).status, 200);
    // The shared admin token names no one: a name typed is recorded as the claim it is.
    let r = release(ADMIN_TOKEN, ids[2], Some("oncall"));
    assert_eq!(r.status, 200, "{}", r.text());
    let log = proxy
        .admin_get("/admin/v1/events?kind=resolve&limit=10")
        .json();
    let by: Vec<(i64, String)> = log["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| {
            (
                e["entry_id"].as_i64().expect("id"),
                e["operator"].as_str().expect("operator").to_owned(),
            )
        })
        .collect();
    for (id, who) in [
        (ids[0], "olga"),
        (ids[1], "ada"),
        (ids[2], "oncall (shared admin token)"),
    ] {
        assert!(by.contains(&(id, who.to_owned())), "{id} by {who}: {by:?}");
        assert_eq!(state(id), "released");
    }
    // An operator resolves but does not purge.
    let r = call(
        admin,
        &olga.token,
        "POST",
        "/admin/v1/purge",
        &json!({"target": "ids", "ids": [ids[0]], "reason": "r"}).to_string(),
    );
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(state(ids[0]), "released");
    let r = call(
        admin,
        &ada.token,
        "POST",
        "/admin/v1/purge",
        &json!({"target": "ids", "ids": [ids[0]], "reason": "r"}).to_string(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let purged = proxy
        .admin_get("/admin/v1/events?kind=purge&limit=1")
        .json();
    assert_eq!(purged["events"][0]["operator"], "ada");
}

#[test]
fn bad_tokens_from_one_address_are_slowed_and_the_right_one_then_waits_too() {
    let (_dir, proxy, [vic, ..]) = serve_with_operators();
    let admin = proxy.admin.expect("admin");
    let from = |ip: [u8; 4]| IpAddr::from(ip);
    let get = |ip: IpAddr, token: &str| {
        let auth = format!("Bearer {token}");
        request_from(
            ip,
            admin,
            "GET",
            "/admin/v1/stats",
            &[("authorization", &auth)],
            b"",
        )
    };
    let guesser = from([127, 0, 3, 1]);
    let mut statuses = Vec::new();
    for i in 0..6 {
        statuses.push(get(guesser, &format!("igt_guess{i}")).status);
    }
    assert_eq!(statuses, [401; 6]);
    // Five free mistakes, and the sixth starts the backoff: no token is looked at meanwhile, not
    // even the right one, so a lucky guess cannot be told from the others.
    let r = get(guesser, &vic.token);
    assert_eq!((r.status, r.code().as_str()), (429, "too-many-attempts"));
    let wait: u64 = r
        .header("retry-after")
        .and_then(|s| s.parse().ok())
        .expect("Retry-After");
    assert!((1..=60).contains(&wait), "{wait}");
    // Another address is not held up by this one.
    assert_eq!(get(from([127, 0, 3, 2]), &vic.token).status, 200);
    // Once the wait is over, the right token gets in.
    std::thread::sleep(Duration::from_secs(wait));
    assert_eq!(get(guesser, &vic.token).status, 200);
    let metrics = proxy.admin_get("/metrics").text();
    for reason in ["invalid", "throttled"] {
        assert!(
            metrics.lines().any(|l| l.starts_with(&format!(
                "idemgate_admin_denied_total{{reason=\"{reason}\"}}"
            ))),
            "{reason}: {metrics}"
        );
    }
}
