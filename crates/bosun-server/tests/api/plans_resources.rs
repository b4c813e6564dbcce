//! Hosts, environments with grants, plan files and inventory imports over the API: what
//! is stored, what is refused (and why, naming the field), and what members may do.

use bosun_core::Role;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::harness::{Reply, TestServer};

const ED25519: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDxkfIaTBCx7IfHK+Wz8o2Dcw6j7I5l2ia0Ez+Lk3WlN";

async fn patch(t: &TestServer, path: &str, token: &str, body: Value) -> Reply {
    t.call(Method::PATCH, path, Some(token), Some(body)).await
}

async fn delete(t: &TestServer, path: &str, token: &str) -> Reply {
    t.call(Method::DELETE, path, Some(token), None).await
}

async fn put(t: &TestServer, path: &str, token: &str) -> Reply {
    t.call(Method::PUT, path, Some(token), None).await
}

fn field(r: &Reply) -> &str {
    r.body["error"]["field"].as_str().unwrap_or("")
}

/// Asserts a 400 naming `expected_field`, with `needle` in its message.
fn refused(r: &Reply, expected_field: &str, needle: &str) {
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
    assert_eq!(field(r), expected_field, "{:?}", r.body);
    assert!(
        r.message().contains(needle),
        "{needle:?} not in {:?}",
        r.body
    );
}

async fn create_env(t: &TestServer, body: Value) {
    let r = t
        .post("/api/v1/orgs/default/environments", &t.admin, body)
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
}

async fn create_host(t: &TestServer, body: Value) -> Reply {
    t.post("/api/v1/orgs/default/hosts", &t.admin, body).await
}

#[tokio::test]
async fn hosts_roundtrip_defaults_patch_and_refusals() {
    let t = TestServer::start().await;
    create_env(&t, json!({"id": "prod", "vars": {"app_port": 80}})).await;
    let r = create_host(
        &t,
        json!({
            "name": "web-1", "address": "10.1.0.11", "port": 2222, "user": "deploy",
            "labels": ["web", "eu"], "vars": {"weight": 3}, "environment": "prod",
            "identity_file": "~/.ssh/id_ed25519", "host_key": ED25519,
            "known_hosts": "/etc/ssh/ssh_known_hosts",
        }),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    for (k, v) in [
        ("address", json!("10.1.0.11")),
        ("port", json!(2222)),
        ("user", json!("deploy")),
        ("connection", json!("ssh")),
        ("labels", json!(["web", "eu"])),
        ("vars", json!({"weight": 3})),
        ("environment", json!("prod")),
        ("identity_file", json!("~/.ssh/id_ed25519")),
        ("host_key", json!(ED25519)),
        ("known_hosts", json!("/etc/ssh/ssh_known_hosts")),
    ] {
        assert_eq!(r.body[k], v, "{k}");
    }
    // Defaults: the address is the name, port 22, ssh.
    let r = create_host(&t, json!({"name": "build"})).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    assert_eq!(
        (&r.body["address"], &r.body["port"], &r.body["connection"]),
        (&json!("build"), &json!(22), &json!("ssh"))
    );
    let r = create_host(&t, json!({"name": "build"})).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "already_exists")
    );

    // Every refusal names its field.
    for (body, f, needle) in [
        (json!({"name": "Web 1"}), "name", "lowercase"),
        (json!({"name": "w", "port": 0}), "port", "1 to 65535"),
        (json!({"name": "w", "port": 70000}), "port", "1 to 65535"),
        (json!({"name": "w", "address": "w:22"}), "address", "port"),
        (
            json!({"name": "w", "connection": "telnet"}),
            "connection",
            "ssh",
        ),
        (
            json!({"name": "w", "labels": ["web", "Web"]}),
            "labels[1]",
            "lowercase",
        ),
        (json!({"name": "w", "vars": [1, 2]}), "vars", "object"),
        (
            json!({"name": "w", "vars": {"1x": 1}}),
            "vars.1x",
            "variable names",
        ),
        (
            json!({"name": "w", "host_key": "ssh-dss AAAA"}),
            "host_key",
            "ssh-dss",
        ),
        (
            json!({"name": "w", "environment": "staging"}),
            "environment",
            "does not exist",
        ),
    ] {
        let r = create_host(&t, body.clone()).await;
        refused(&r, f, needle);
    }
    let r = create_host(&t, json!({"name": "w", "colour": "red"})).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
    assert!(r.message().contains("colour"), "{:?}", r.body);

    // PATCH changes only what it names; null clears.
    let r = patch(
        &t,
        "/api/v1/orgs/default/hosts/web-1",
        &t.admin,
        json!({"port": 22, "host_key": null, "environment": null, "labels": ["web"]}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["port"], 22);
    assert_eq!(r.body["host_key"], Value::Null);
    assert_eq!(r.body["environment"], Value::Null);
    assert_eq!(r.body["labels"], json!(["web"]));
    assert_eq!(r.body["user"], "deploy");
    assert_eq!(r.body["identity_file"], "~/.ssh/id_ed25519");
    let r = patch(
        &t,
        "/api/v1/orgs/default/hosts/web-1",
        &t.admin,
        json!({"connection": "carrier-pigeon"}),
    )
    .await;
    refused(&r, "connection", "carrier-pigeon");
    let r = patch(&t, "/api/v1/orgs/default/hosts/ghost", &t.admin, json!({})).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);

    let r = t.get("/api/v1/orgs/default/hosts", &t.admin).await;
    let names: Vec<&str> = r.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["build", "web-1"]);

    // Members read; only admins change.
    let viewer = t.user_token("vera", Some(Role::Viewer)).await;
    let operator = t.user_token("otto", Some(Role::Operator)).await;
    assert_eq!(
        t.get("/api/v1/orgs/default/hosts/web-1", &viewer)
            .await
            .status,
        StatusCode::OK
    );
    let r = t
        .post(
            "/api/v1/orgs/default/hosts",
            &operator,
            json!({"name": "sneaky"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{:?}", r.body);
    assert!(r.message().contains("admin"), "{:?}", r.body);

    let before = t.audit_total().await;
    let r = delete(&t, "/api/v1/orgs/default/hosts/build", &t.admin).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let r = delete(&t, "/api/v1/orgs/default/hosts/build", &t.admin).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(t.audit_total().await, before + 1);
}

#[tokio::test]
async fn environments_grants_and_refused_delete() {
    let t = TestServer::start().await;
    create_env(
        &t,
        json!({"id": "prod", "requires_approval": true, "protected": true, "vars": {"app_port": 80}}),
    )
    .await;
    let r = t
        .post(
            "/api/v1/orgs/default/environments",
            &t.admin,
            json!({"id": "Prod"}),
        )
        .await;
    refused(&r, "id", "lowercase");
    let r = create_host(&t, json!({"name": "web-2", "environment": "prod"})).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let r = create_host(&t, json!({"name": "web-1", "environment": "prod"})).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);

    let r = t
        .get("/api/v1/orgs/default/environments/prod", &t.admin)
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["hosts"], json!(["web-1", "web-2"]));
    assert_eq!(r.body["vars"], json!({"app_port": 80}));
    assert_eq!(
        (
            r.body["requires_approval"].as_bool(),
            r.body["protected"].as_bool()
        ),
        (Some(true), Some(true))
    );

    // Grants go to operators and admins of the org; others are refused saying why.
    t.user_token("olga", Some(Role::Operator)).await;
    t.user_token("vic", Some(Role::Viewer)).await;
    t.user_token("stranger", None).await;
    let grants = "/api/v1/orgs/default/environments/prod/grants";
    let r = put(&t, &format!("{grants}/olga"), &t.admin).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["grants"], json!(["olga"]));
    let r = put(&t, &format!("{grants}/olga"), &t.admin).await;
    assert_eq!(
        (r.status, &r.body["grants"]),
        (StatusCode::OK, &json!(["olga"]))
    );
    let r = put(&t, &format!("{grants}/vic"), &t.admin).await;
    refused(&r, "user", "operator or above");
    let r = put(&t, &format!("{grants}/stranger"), &t.admin).await;
    refused(&r, "user", "not a member");
    let r = put(
        &t,
        "/api/v1/orgs/default/environments/qa/grants/olga",
        &t.admin,
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);

    // PATCH keeps the grants.
    let r = patch(
        &t,
        "/api/v1/orgs/default/environments/prod",
        &t.admin,
        json!({"requires_approval": false}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["requires_approval"], false);
    assert_eq!(r.body["protected"], true);
    assert_eq!(r.body["grants"], json!(["olga"]));

    // Deleting an environment hosts are in is refused, naming them.
    let r = delete(&t, "/api/v1/orgs/default/environments/prod", &t.admin).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "environment_in_use"),
        "{:?}",
        r.body
    );
    assert!(r.message().contains("web-1, web-2"), "{:?}", r.body);

    let r = delete(&t, &format!("{grants}/olga"), &t.admin).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let r = delete(&t, &format!("{grants}/olga"), &t.admin).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);

    for h in ["web-1", "web-2"] {
        let r = patch(
            &t,
            &format!("/api/v1/orgs/default/hosts/{h}"),
            &t.admin,
            json!({"environment": null}),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK);
    }
    let r = delete(&t, "/api/v1/orgs/default/environments/prod", &t.admin).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    let r = t.get("/api/v1/orgs/default/environments", &t.admin).await;
    assert_eq!(r.body, json!({"items": [], "next_cursor": null}));
}

const PLAN: &str = r#"name: app-config
targets:
  labels: [web]
  hosts: [db-9]
inputs:
  release: { default: "1.0" }
vars:
  app: shop
steps:
  - name: pin release
    file.lineinfile:
      path: "/srv/{{ vars.app }}/app.conf"
      regexp: "^release="
      line: "release={{ inputs.release }}"
  - name: restart
    command: ["systemctl", "restart", "{{ vars.app }}"]
    sudo: true
    when: 'vars.restart == '
"#;

#[tokio::test]
async fn plans_upload_versions_lint_show_and_delete() {
    let t = TestServer::start().await;
    create_env(&t, json!({"id": "prod"})).await;
    for (name, labels) in [
        ("web-1", json!(["web"])),
        ("web-2", json!(["web"])),
        ("db-1", json!(["db"])),
    ] {
        let r = create_host(
            &t,
            json!({"name": name, "labels": labels, "environment": "prod"}),
        )
        .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    }

    let r = t
        .post(
            "/api/v1/orgs/default/plans",
            &t.admin,
            json!({"source": PLAN, "file": "app.yaml"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    assert_eq!(
        (r.body["name"].as_str(), r.body["version"].as_i64()),
        (Some("app-config"), Some(1))
    );
    assert_eq!(r.body["created"], true);
    assert_eq!(r.body["source"], PLAN);
    let s = &r.body["summary"];
    assert_eq!(s["hosts"], json!(["web-1", "web-2"]));
    assert_eq!(s["inputs"], json!({"release": "1.0"}));
    assert_eq!(s["steps"][0]["module"], "file.lineinfile");
    assert_eq!(s["steps"][1]["sudo"], true);
    // Lint findings come back as warnings, with where they are: the unknown target host
    // and the malformed condition.
    let warnings = r.body["warnings"].as_array().unwrap();
    let unknown = warnings
        .iter()
        .find(|w| w["message"].as_str().unwrap().contains("db-9"))
        .unwrap_or_else(|| panic!("no warning about db-9: {warnings:?}"));
    assert_eq!(
        (unknown["file"].as_str(), unknown["line"].as_i64()),
        (Some("app.yaml"), Some(4))
    );
    assert!(
        warnings.iter().any(|w| w["line"] == 18
            && w["message"]
                .as_str()
                .unwrap()
                .contains("malformed condition")),
        "no warning on the malformed condition (line 18): {warnings:?}"
    );

    // The same name again: a new version.
    let v2 = PLAN.replace("'vars.restart == '", "'vars.restart == \"yes\"'");
    let r = t
        .post(
            "/api/v1/orgs/default/plans",
            &t.admin,
            json!({"source": v2}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(
        (r.body["version"].as_i64(), r.body["created"].as_bool()),
        (Some(2), Some(false))
    );
    let warnings = r.body["warnings"].as_array().unwrap();
    assert!(
        !warnings
            .iter()
            .any(|w| w["message"].as_str().unwrap().contains("malformed")),
        "{warnings:?}"
    );

    // A file that does not parse: 400 naming file, line and column; nothing stored.
    let broken = "name: broken\nsteps:\n  - name: x\n    comand: [ls]\n";
    let r = t
        .post(
            "/api/v1/orgs/default/plans",
            &t.admin,
            json!({"source": broken, "file": "broken.yaml"}),
        )
        .await;
    refused(&r, "source", "broken.yaml:4:");
    assert_eq!(
        t.get("/api/v1/orgs/default/plans/broken", &t.admin)
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    let r = t
        .post(
            "/api/v1/orgs/default/plans",
            &t.admin,
            json!({"source": PLAN.replace("app-config", "App Config")}),
        )
        .await;
    refused(&r, "source", "plan.yaml:1:");
    let r = t
        .post(
            "/api/v1/orgs/default/plans",
            &t.admin,
            json!({"source": PLAN.replace("name: app-config", "name: lint")}),
        )
        .await;
    refused(&r, "source", "reserved");

    // Lint stores nothing, and viewers may lint.
    let viewer = t.user_token("vera", Some(Role::Viewer)).await;
    let other = PLAN.replace("app-config", "other-plan");
    let r = t
        .post(
            "/api/v1/orgs/default/plans/lint",
            &viewer,
            json!({"source": other}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["name"], "other-plan");
    assert!(!r.body["warnings"].as_array().unwrap().is_empty());
    assert_eq!(
        t.get("/api/v1/orgs/default/plans/other-plan", &t.admin)
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    let r = t
        .post(
            "/api/v1/orgs/default/plans",
            &viewer,
            json!({"source": other}),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);

    // Show: the source as stored, and the hosts it targets now.
    let r = create_host(&t, json!({"name": "web-3", "labels": ["web"]})).await;
    assert_eq!(r.status, StatusCode::CREATED);
    let r = t
        .get("/api/v1/orgs/default/plans/app-config", &viewer)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["version"], 2);
    assert_eq!(r.body["source"], v2);
    assert_eq!(
        r.body["summary"]["hosts"],
        json!(["web-1", "web-2", "web-3"])
    );
    assert!(r.body.get("created").is_none());

    let r = t.get("/api/v1/orgs/default/plans", &viewer).await;
    assert_eq!(r.body["items"].as_array().unwrap().len(), 1);
    assert_eq!(r.body["items"][0]["version"], 2);
    let r = delete(&t, "/api/v1/orgs/default/plans/app-config", &t.admin).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let r = delete(&t, "/api/v1/orgs/default/plans/app-config", &t.admin).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn secret_references_are_the_orgs_own_and_reveal_nothing_of_another_org() {
    let t = TestServer::start().await;
    let r = t
        .post("/api/v1/orgs", &t.admin, json!({"id": "other"}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    for (org, ns) in [("other", "theirs"), ("default", "ours")] {
        let r = t
            .call(
                Method::PUT,
                &format!("/api/v1/orgs/{org}/secrets/{ns}/db-password"),
                Some(&t.admin),
                Some(json!({"value": "hunter2"})),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    }
    let r = create_host(&t, json!({"name": "web-1", "labels": ["web"]})).await;
    assert_eq!(r.status, StatusCode::CREATED);
    let plan = |ns: &str| {
        format!(
            "name: uses-secret-{ns}\ntargets: {{ labels: [web] }}\nsteps:\n  - name: x\n    command: [\"echo\", \"secret://{ns}/db-password\"]\n"
        )
    };
    // A reference names the org's own namespace: one that only another org has is
    // answered exactly like one nobody has — upload and lint alike.
    let mut answers = Vec::new();
    for ns in ["ours", "theirs", "unclaimed"] {
        let r = t
            .post(
                "/api/v1/orgs/default/plans",
                &t.admin,
                json!({"source": plan(ns)}),
            )
            .await;
        assert!(r.status.is_success(), "{ns}: {:?}", r.body);
        let lint = t
            .post(
                "/api/v1/orgs/default/plans/lint",
                &t.admin,
                json!({"source": plan(ns)}),
            )
            .await;
        assert!(lint.status.is_success(), "{ns}: {:?}", lint.body);
        answers.push((
            r.status,
            r.body["warnings"].to_string().replace(ns, "NS"),
            lint.body.to_string().replace(ns, "NS"),
        ));
    }
    assert_eq!(answers[1], answers[2], "{answers:?}");
    // Host and environment variables too.
    let r = create_host(
        &t,
        json!({"name": "web-2", "vars": {"pw": "secret://theirs/db-password"}}),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let r = t
        .post(
            "/api/v1/orgs/default/environments",
            &t.admin,
            json!({"id": "prod", "vars": {"pw": {"nested": "secret://theirs/x"}}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
}

const INVENTORY: &str = r#"environments:
  staging: { vars: { app_port: 8080 } }
  prod:    { requires_approval: true, protected: true, vars: { app_port: 80 } }
defaults:
  user: deploy
  identity_file: ~/.ssh/id_ed25519
hosts:
  web-1: { address: 10.1.0.11, environment: prod, labels: [web], vars: { weight: 3 } }
  web-2: { address: 10.1.0.12, port: 2222, environment: prod, labels: [web] }
  build: { connection: local, environment: staging }
"#;

#[tokio::test]
async fn inventory_import_creates_updates_and_is_all_or_nothing() {
    let t = TestServer::start().await;
    create_env(&t, json!({"id": "staging"})).await;
    let r = create_host(&t, json!({"name": "web-1", "address": "old.example"})).await;
    assert_eq!(r.status, StatusCode::CREATED);

    let r = t
        .post(
            "/api/v1/orgs/default/inventory",
            &t.admin,
            json!({"source": INVENTORY}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(
        r.body,
        json!({
            "environments_created": ["prod"], "environments_updated": ["staging"],
            "hosts_created": ["web-2", "build"], "hosts_updated": ["web-1"],
        })
    );
    let web1 = t
        .get("/api/v1/orgs/default/hosts/web-1", &t.admin)
        .await
        .body;
    assert_eq!(web1["address"], "10.1.0.11");
    assert_eq!(web1["user"], "deploy");
    assert_eq!(web1["environment"], "prod");
    // `~` stays as written: it is the runner's home, not the server's.
    assert_eq!(web1["identity_file"], "~/.ssh/id_ed25519");
    let build = t
        .get("/api/v1/orgs/default/hosts/build", &t.admin)
        .await
        .body;
    assert_eq!(build["connection"], "local");
    let prod = t
        .get("/api/v1/orgs/default/environments/prod", &t.admin)
        .await
        .body;
    assert_eq!(
        (
            prod["requires_approval"].as_bool(),
            prod["protected"].as_bool()
        ),
        (Some(true), Some(true))
    );
    assert_eq!(prod["hosts"], json!(["web-1", "web-2"]));

    // Importing it again changes nothing but says what it replaced.
    let r = t
        .post(
            "/api/v1/orgs/default/inventory",
            &t.admin,
            json!({"source": INVENTORY}),
        )
        .await;
    assert_eq!(r.body["hosts_created"], json!([]));

    // A host breaking a rule refuses the whole file, naming it; nothing is written.
    let before = t.audit_total().await;
    let bad = "environments:\n  qa: {}\nhosts:\n  new-1: { environment: qa }\n  new-2: { labels: [Web] }\n";
    let r = t
        .post(
            "/api/v1/orgs/default/inventory",
            &t.admin,
            json!({"source": bad}),
        )
        .await;
    refused(&r, "hosts.new-2.labels[0]", "lowercase");
    let r = t
        .post(
            "/api/v1/orgs/default/inventory",
            &t.admin,
            json!({"source": "hosts:\n  x: { port: 0 }\n", "file": "inv.yml"}),
        )
        .await;
    refused(&r, "source", "inv.yml:2:");
    assert_eq!(t.audit_total().await, before);
    assert_eq!(
        t.get("/api/v1/orgs/default/environments/qa", &t.admin)
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        t.get("/api/v1/orgs/default/hosts/new-1", &t.admin)
            .await
            .status,
        StatusCode::NOT_FOUND
    );

    // Operators may not import.
    let operator = t.user_token("otto", Some(Role::Operator)).await;
    let r = t
        .post(
            "/api/v1/orgs/default/inventory",
            &operator,
            json!({"source": INVENTORY}),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
}

async fn import(t: &TestServer, source: &str) -> Reply {
    t.post(
        "/api/v1/orgs/default/inventory",
        &t.admin,
        json!({"source": source}),
    )
    .await
}

async fn host_of(t: &TestServer, name: &str) -> Value {
    let r = t
        .get(&format!("/api/v1/orgs/default/hosts/{name}"), &t.admin)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{name}: {:?}", r.body);
    r.body
}

/// Bastions (`proxy_jump`) kept by the server: imported (naming a host of the file or
/// one already stored, before or after it, or through `defaults`), shown by `GET`, set,
/// changed and cleared through the API; a bastion that is no host of the org, a `local`
/// one and a cycle refused naming the `proxy_jump` at fault, with nothing of the file
/// stored; a host others jump through neither deleted nor made `local` (409, naming
/// them).
#[tokio::test]
async fn bastions_import_show_patch_clear_and_refusals() {
    let t = TestServer::start().await;
    let r = import(
        &t,
        "defaults: { proxy_jump: edge }\nhosts:\n  app: {}\n  db: { proxy_jump: app }\n  edge: {}\n  laptop: { connection: local }\n  direct: { proxy_jump: none }\n",
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    for (name, bastion) in [
        ("app", json!("edge")),
        ("db", json!("app")),
        ("edge", Value::Null),
        ("laptop", Value::Null),
        ("direct", Value::Null),
    ] {
        assert_eq!(host_of(&t, name).await["proxy_jump"], bastion, "{name}");
    }
    let listed = t.get("/api/v1/orgs/default/hosts", &t.admin).await.body;
    let app = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["name"] == "app")
        .unwrap();
    assert_eq!(app["proxy_jump"], "edge", "{listed:#}");
    // A later file may name a bastion the org already has.
    let r = import(&t, "hosts:\n  cache: { proxy_jump: db }\n").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(host_of(&t, "cache").await["proxy_jump"], "db");

    // Refused imports name the proxy_jump at fault and store nothing.
    let before = t.audit_total().await;
    for (source, f, needle) in [
        (
            "hosts:\n  new-1: {}\n  new-2: { proxy_jump: ghost }\n",
            "hosts.new-2.proxy_jump",
            "names no host of this inventory or of the org: `ghost`",
        ),
        (
            "hosts:\n  new-1: { proxy_jump: laptop }\n",
            "hosts.new-1.proxy_jump",
            "`laptop`, which has `connection: local`",
        ),
        (
            "defaults: { proxy_jump: laptop }\nhosts:\n  new-1: {}\n",
            "defaults.proxy_jump",
            "`laptop`, which has `connection: local`",
        ),
        // edge → cache → db → app → edge: the stored chain closed by the file.
        (
            "hosts:\n  new-1: {}\n  edge: { proxy_jump: cache }\n",
            "hosts.edge.proxy_jump",
            "cycle: ",
        ),
        (
            "hosts:\n  new-1: { proxy_jump: new-2 }\n  new-2: { proxy_jump: new-1 }\n",
            "hosts.new-2.proxy_jump",
            "cycle: new-1 → new-2 → new-1",
        ),
    ] {
        let r = import(&t, source).await;
        refused(&r, f, needle);
        assert_eq!(
            t.get("/api/v1/orgs/default/hosts/new-1", &t.admin)
                .await
                .status,
            StatusCode::NOT_FOUND,
            "{source}"
        );
    }
    assert_eq!(host_of(&t, "edge").await["proxy_jump"], Value::Null);
    // Making a bastion local in a file: those behind it are named.
    let r = import(&t, "hosts:\n  new-1: {}\n  edge: { connection: local }\n").await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "host_in_use"),
        "{:?}",
        r.body
    );
    assert!(r.message().contains("app"), "{:?}", r.body);
    assert_eq!(t.audit_total().await, before);

    // The hosts API: set, change, clear; the same refusals, at `proxy_jump`.
    let r = create_host(&t, json!({"name": "web-1", "proxy_jump": "edge"})).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    assert_eq!(r.body["proxy_jump"], "edge");
    for (body, needle) in [
        (
            json!({"name": "w", "proxy_jump": "ghost"}),
            "names no host of this org: `ghost`",
        ),
        (
            json!({"name": "w", "proxy_jump": "laptop"}),
            "which has `connection: local`",
        ),
        (json!({"name": "w", "proxy_jump": "w"}), "itself"),
        (json!({"name": "w", "proxy_jump": "none"}), "`none`"),
        (json!({"name": "w", "proxy_jump": "Edge"}), "lowercase"),
        (
            json!({"name": "w", "connection": "local", "proxy_jump": "edge"}),
            "connection: local",
        ),
    ] {
        let r = create_host(&t, body.clone()).await;
        refused(&r, "proxy_jump", needle);
    }
    let web1 = "/api/v1/orgs/default/hosts/web-1";
    let r = patch(&t, web1, &t.admin, json!({"proxy_jump": "db"})).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(host_of(&t, "web-1").await["proxy_jump"], "db");
    // Another field changed: the bastion stays.
    let r = patch(&t, web1, &t.admin, json!({"port": 2222})).await;
    assert_eq!(r.body["proxy_jump"], "db", "{:?}", r.body);
    let r = patch(
        &t,
        "/api/v1/orgs/default/hosts/edge",
        &t.admin,
        json!({"proxy_jump": "web-1"}),
    )
    .await;
    refused(&r, "proxy_jump", "cycle: app → edge → web-1 → db → app");
    let r = patch(
        &t,
        "/api/v1/orgs/default/hosts/edge",
        &t.admin,
        json!({"connection": "local"}),
    )
    .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "host_in_use"),
        "{:?}",
        r.body
    );

    // A bastion in use is not deleted: the hosts behind it are named.
    let r = delete(&t, "/api/v1/orgs/default/hosts/db", &t.admin).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "host_in_use"),
        "{:?}",
        r.body
    );
    assert!(r.message().contains("cache, web-1"), "{:?}", r.body);
    host_of(&t, "db").await;
    // Cleared (`null`), it is free to go once nothing else jumps through it.
    let r = patch(&t, web1, &t.admin, json!({"proxy_jump": null})).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["proxy_jump"], Value::Null);
    let r = delete(&t, "/api/v1/orgs/default/hosts/cache", &t.admin).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    let r = delete(&t, "/api/v1/orgs/default/hosts/db", &t.admin).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
}

/// Writes a state of stack `stack` whose outputs are `outputs` (locking around it as
/// terraform does).
async fn state_with_outputs(t: &TestServer, stack: &str, serial: u64, outputs: Value) {
    let url = format!("/api/v1/orgs/default/stacks/{stack}/state");
    let lock = json!({"ID": "L", "Operation": "OperationTypeApply", "Info": "", "Who": "t",
        "Version": "1.0.3", "Created": "2026-11-30T10:00:00.000000Z", "Path": ""});
    let doc = json!({"version": 4, "terraform_version": "1.0.3", "serial": serial,
        "lineage": "L-1", "outputs": outputs, "resources": []});
    for (method, path, body) in [
        (
            Method::from_bytes(b"LOCK").unwrap(),
            url.clone(),
            lock.clone(),
        ),
        (Method::POST, format!("{url}?ID=L"), doc),
        (Method::from_bytes(b"UNLOCK").unwrap(), url.clone(), lock),
    ] {
        let r = t.call(method, &path, Some(&t.admin), Some(body)).await;
        assert!(r.status.is_success(), "{path}: {:?}", r.body);
    }
}

#[tokio::test]
async fn hosts_from_is_bounded_and_the_hosts_it_gives_are_the_stacks_to_change() {
    let t = TestServer::start().await;
    // Malformed sources are refused naming the field, and nothing is created.
    let many: Vec<Value> = (0..17)
        .map(|_| json!({"stack": "s", "output": "o", "name": "n", "address": "a"}))
        .collect();
    for (bad, field) in [
        (json!({"stack": "s"}), "hosts_from"),
        (json!(many), "hosts_from"),
        (
            json!([{"stack": "s", "output": "o", "name": "n"}]),
            "hosts_from[0]",
        ),
        (
            json!([{"stack": "Not A Stack", "output": "o", "name": "n", "address": "a"}]),
            "hosts_from[0].stack",
        ),
        (
            json!([{"stack": "s", "output": "o", "name": "{% for x in y %}{% endfor %}", "address": "a"}]),
            "hosts_from[0].name",
        ),
        (
            json!([{"stack": "s", "output": "o", "name": "x".repeat(2000), "address": "a"}]),
            "hosts_from[0].name",
        ),
    ] {
        let r = t
            .post(
                "/api/v1/orgs/default/environments",
                &t.admin,
                json!({"id": "web", "hosts_from": bad}),
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {:?}", r.body);
        assert_eq!(r.body["error"]["field"], field, "{:?}", r.body);
    }
    let r = t.get("/api/v1/orgs/default/environments", &t.admin).await;
    assert_eq!(r.body["items"], json!([]));

    // A stack whose state lists two hosts; an environment takes them.
    let r = t
        .create_stack(json!({"id": "fleet", "repository": "file:///srv/git/infra"}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    state_with_outputs(
        &t,
        "fleet",
        1,
        json!({"hosts": {"value": [{"n": "w-1", "ip": "10.0.0.1"}, {"n": "w-2", "ip": "10.0.0.2"}],
            "type": ["list", "dynamic"]},
            "secret_hosts": {"value": [{"n": "s-1", "ip": "10.9.9.9"}], "type": ["list", "dynamic"],
            "sensitive": true}}),
    )
    .await;
    let sources = json!([{"stack": "fleet", "output": "hosts", "name": "{{ item.n }}",
        "address": "{{ item.ip }}", "labels": ["web"]}]);
    let r = t
        .post(
            "/api/v1/orgs/default/environments",
            &t.admin,
            json!({"id": "web", "hosts_from": sources}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let shown = t
        .get("/api/v1/orgs/default/environments/web", &t.admin)
        .await;
    let preview = &shown.body["hosts_from_preview"][0];
    assert_eq!(preview["version"], 1, "{:?}", shown.body);
    assert_eq!(preview["hosts"][1]["address"], "10.0.0.2");
    // A plan run's start keeps them as the environment's hosts.
    let plan = "name: web-config\ntargets: { labels: [web] }\nsteps:\n  - command: [\"true\"]\n";
    let r = t
        .post(
            "/api/v1/orgs/default/plans",
            &t.admin,
            json!({"source": plan}),
        )
        .await;
    assert!(r.status.is_success(), "{:?}", r.body);
    let r = t
        .post(
            "/api/v1/orgs/default/plans/web-config/runs",
            &t.admin,
            json!({"dry_run": true}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    assert_eq!(r.body["hosts"], json!(["w-1", "w-2"]));
    assert_eq!(r.body["sources"][0]["hosts"], json!(["w-1", "w-2"]));
    let host = t.get("/api/v1/orgs/default/hosts/w-1", &t.admin).await;
    assert_eq!(
        host.body["source"],
        json!({"environment": "web", "stack": "fleet", "output": "hosts", "version": 1})
    );
    assert_eq!(host.body["environment"], "web");
    // They are the stack's to change: neither the API nor an inventory replaces them.
    let r = patch(
        &t,
        "/api/v1/orgs/default/hosts/w-1",
        &t.admin,
        json!({"port": 2222}),
    )
    .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);
    assert_eq!(r.body["error"]["code"], "host_from_stack");
    let r = delete(&t, "/api/v1/orgs/default/hosts/w-1", &t.admin).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);
    let r = t
        .post(
            "/api/v1/orgs/default/inventory",
            &t.admin,
            json!({"source": "hosts:\n  w-2: { address: 10.5.5.5 }\n"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);
    assert_eq!(
        t.get("/api/v1/orgs/default/hosts/w-2", &t.admin).await.body["address"],
        "10.0.0.2"
    );
    // A sensitive output is never read; the run is refused naming it.
    let r = patch(
        &t,
        "/api/v1/orgs/default/environments/web",
        &t.admin,
        json!({"hosts_from": [{"stack": "fleet", "output": "secret_hosts",
            "name": "{{ item.n }}", "address": "{{ item.ip }}"}]}),
    )
    .await;
    assert!(r.status.is_success(), "{:?}", r.body);
    let r = t
        .post(
            "/api/v1/orgs/default/plans/web-config/runs",
            &t.admin,
            json!({"dry_run": true}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);
    assert_eq!(r.body["error"]["code"], "host_source_unresolved");
    let message = r.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("\"secret_hosts\" of stack \"fleet\" is sensitive"),
        "{message}"
    );
    assert!(!message.contains("10.9.9.9"));
    let hosts = t.get("/api/v1/orgs/default/hosts", &t.admin).await;
    assert!(
        !hosts.body.to_string().contains("10.9.9.9"),
        "a sensitive value never becomes a host"
    );
    // Taking no more hosts from stacks removes those it took.
    let r = patch(
        &t,
        "/api/v1/orgs/default/environments/web",
        &t.admin,
        json!({"hosts_from": []}),
    )
    .await;
    assert!(r.status.is_success(), "{:?}", r.body);
    assert_eq!(r.body["hosts"], json!([]), "{:?}", r.body);
    let hosts = t.get("/api/v1/orgs/default/hosts", &t.admin).await;
    assert_eq!(hosts.body["items"], json!([]));
}
