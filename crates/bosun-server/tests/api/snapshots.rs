//! Snapshots of the API's JSON shapes: a change to the wire format shows up as a diff.

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::harness::TestServer;

#[tokio::test]
async fn stack_and_error_shapes() {
    let t = TestServer::start().await;
    t.create_stack(json!({"id": "net", "repository": "github:acme/infra"}))
        .await;
    let r = t
        .create_stack(json!({
            "id": "app",
            "name": "Application",
            "repository": "file:///srv/git/infra",
            "path": "stacks/app",
            "watch_paths": ["modules"],
            "variables": {"TF_VAR_region": "eu-west-1", "TOKEN": "secret://ci/token"},
            "depends_on": [{"stack": "net", "outputs": {"vpc_id": "vpc"}}],
            "drift_detection": {"schedule": "0 3 * * *"},
            "labels": ["team-app", "prod"]
        }))
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    // The drift schedule's next check and age are the scheduler's, which may arm it
    // before the answer is read.
    insta::assert_json_snapshot!("stack", r.body, {
        ".created_at" => "[time]",
        ".updated_at" => "[time]",
        ".drift_status.next_check_at" => "[scheduler]",
        ".drift_status.age_seconds" => "[scheduler]",
    });
    let r = t
        .call(
            Method::PATCH,
            "/api/v1/orgs/default/stacks/app",
            Some(&t.admin),
            Some(json!({"path": "../x"})),
        )
        .await;
    insta::assert_json_snapshot!("validation_error", r.body);
    let r = t.call(Method::GET, "/api/v1/whoami", None, None).await;
    insta::assert_json_snapshot!("unauthenticated_error", r.body);
}
