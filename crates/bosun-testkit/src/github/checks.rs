//! The double's Checks API, as GitHub serves it to an App's installation token (one for
//! the repository, carrying `checks: write`; `read` for `GET`):
//!
//! - `POST /repos/{owner}/{repo}/check-runs` — 201, a check run (ids from 1000; one check
//!   suite per repository and head SHA); `status` defaults to `queued`.
//! - `PATCH /repos/{owner}/{repo}/check-runs/{check_run_id}` — 200, the fields given merged
//!   over the check run; 404 for an unknown id or one of another repository.
//! - `GET /repos/{owner}/{repo}/check-runs/{check_run_id}` — 200.
//!
//! GitHub's rules beside the schema: a `conclusion` completes the run (`completed_at`
//! defaulting to now); `status: completed` or `completed_at` without a `conclusion` is 422;
//! only GitHub sets `stale`, and only GitHub Actions sets `waiting`, `requested` or
//! `pending`. The head SHA must look like a full commit SHA (the double keeps no commits to
//! look it up in).

use axum::http::StatusCode;
use axum::response::Response;
use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};

use super::rest::{installation_token, json, timestamp, Call, Refusal};
use super::{CheckRun, Inner, APP_SLUG};

/// The conclusions an App may set (`stale` is GitHub's own).
const CONCLUSIONS: &[&str] = &[
    "action_required",
    "cancelled",
    "failure",
    "neutral",
    "success",
    "skipped",
    "timed_out",
];

/// `POST /repos/{owner}/{repo}/check-runs`.
pub(super) fn create(
    inner: &mut Inner,
    owner: &str,
    repo: &str,
    call: &Call,
) -> Result<Response, Refusal> {
    let repository = format!("{owner}/{repo}");
    installation_token(inner, call, &repository, &["checks"], "write")?;
    let fields = call.fields()?;
    let text = |name: &str| -> Result<Option<String>, Refusal> {
        match fields.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(Refusal::invalid(format!(
                "For 'properties/{name}', {other} is not a string."
            ))),
        }
    };
    let missing: Vec<&str> = ["name", "head_sha"]
        .into_iter()
        .filter(|f| !fields.get(*f).is_some_and(Value::is_string))
        .collect();
    if !missing.is_empty() {
        return Err(Refusal::invalid(format!(
            "{} {} supplied.",
            missing
                .iter()
                .map(|f| format!("\"{f}\""))
                .collect::<Vec<_>>()
                .join(", "),
            if missing.len() == 1 {
                "wasn't"
            } else {
                "weren't"
            }
        )));
    }
    let name = text("name")?.unwrap_or_default();
    let head_sha = text("head_sha")?.unwrap_or_default();
    let is_sha =
        matches!(head_sha.len(), 40 | 64) && head_sha.chars().all(|c| c.is_ascii_hexdigit());
    if !is_sha {
        return Err(Refusal::validation_failed(json!({
            "resource": "CheckRun",
            "code": "invalid",
            "field": "head_sha",
            "message": format!("No commit found for SHA: {head_sha}"),
        })));
    }

    let now = Utc::now();
    let key = (repository.to_ascii_lowercase(), head_sha.clone());
    let next_suite = inner
        .check_suites
        .values()
        .map(|id| id + 1)
        .max()
        .unwrap_or(300);
    let check_suite = *inner.check_suites.entry(key).or_insert(next_suite);
    let id = inner
        .check_runs
        .iter()
        .map(|r| r.id + 1)
        .max()
        .unwrap_or(1000);
    let mut run = CheckRun {
        id,
        repository,
        name,
        head_sha,
        external_id: None,
        details_url: None,
        status: "queued".into(),
        conclusion: None,
        started_at: Some(now),
        completed_at: None,
        output_title: None,
        output_summary: None,
        output_text: None,
        annotations: 0,
        check_suite,
        updates: 0,
        created_at: now,
        updated_at: now,
    };
    apply(&mut run, fields, now)?;
    let body = view(inner, &run);
    inner.check_runs.push(run);
    Ok(json(StatusCode::CREATED, body))
}

/// `PATCH /repos/{owner}/{repo}/check-runs/{check_run_id}`.
pub(super) fn update(
    inner: &mut Inner,
    owner: &str,
    repo: &str,
    id: i64,
    call: &Call,
) -> Result<Response, Refusal> {
    let repository = format!("{owner}/{repo}");
    installation_token(inner, call, &repository, &["checks"], "write")?;
    let fields = call.fields()?;
    let i = find(inner, &repository, id)?;
    let now = Utc::now();
    let mut run = inner.check_runs[i].clone();
    apply(&mut run, fields, now)?;
    run.updates += 1;
    run.updated_at = now;
    let body = view(inner, &run);
    inner.check_runs[i] = run;
    Ok(json(StatusCode::OK, body))
}

/// `GET /repos/{owner}/{repo}/check-runs/{check_run_id}`.
pub(super) fn get(
    inner: &Inner,
    owner: &str,
    repo: &str,
    id: i64,
    call: &Call,
) -> Result<Response, Refusal> {
    let repository = format!("{owner}/{repo}");
    installation_token(inner, call, &repository, &["checks"], "read")?;
    let i = find(inner, &repository, id)?;
    Ok(json(StatusCode::OK, view(inner, &inner.check_runs[i])))
}

/// The index of check run `id` of `repository`; 404 otherwise.
fn find(inner: &Inner, repository: &str, id: i64) -> Result<usize, Refusal> {
    inner
        .check_runs
        .iter()
        .position(|r| r.id == id && r.repository.eq_ignore_ascii_case(repository))
        .ok_or_else(Refusal::not_found)
}

/// Merges the request's fields over `run`, by GitHub's rules (see the module docs).
fn apply(
    run: &mut CheckRun,
    fields: &Map<String, Value>,
    now: DateTime<Utc>,
) -> Result<(), Refusal> {
    let text = |name: &str| -> Result<Option<String>, Refusal> {
        match fields.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(Refusal::invalid(format!(
                "For 'properties/{name}', {other} is not a string."
            ))),
        }
    };
    let time = |name: &str| -> Result<Option<DateTime<Utc>>, Refusal> {
        text(name)?
            .map(|t| {
                DateTime::parse_from_rfc3339(&t)
                    .map(|t| t.with_timezone(&Utc))
                    .map_err(|_| {
                        Refusal::invalid(format!(
                            "For 'properties/{name}', \"{t}\" is not a date-time (YYYY-MM-DDTHH:MM:SSZ)."
                        ))
                    })
            })
            .transpose()
    };

    let status = text("status")?;
    let conclusion = text("conclusion")?;
    let completed_at = time("completed_at")?;
    let started_at = time("started_at")?;
    if let Some(status) = &status {
        match status.as_str() {
            "queued" | "in_progress" | "completed" => {}
            "waiting" | "requested" | "pending" => {
                return Err(Refusal::invalid(format!(
                    "Only GitHub Actions can set a status of {status:?}."
                )))
            }
            other => {
                return Err(Refusal::invalid(format!(
                    "For 'properties/status', \"{other}\" is not a possible value."
                )))
            }
        }
    }
    if let Some(conclusion) = &conclusion {
        if conclusion == "stale" {
            return Err(Refusal::invalid(
                "You cannot change a check run conclusion to stale, only GitHub can set this.",
            ));
        }
        if !CONCLUSIONS.contains(&conclusion.as_str()) {
            return Err(Refusal::invalid(format!(
                "For 'properties/conclusion', \"{conclusion}\" is not a possible value."
            )));
        }
    } else if status.as_deref() == Some("completed") || completed_at.is_some() {
        return Err(Refusal::invalid(
            "\"conclusion\" wasn't supplied: it is required when status is completed or completed_at is given.",
        ));
    }

    if let Some(v) = text("name")? {
        run.name = v;
    }
    if let Some(v) = text("details_url")? {
        run.details_url = Some(v);
    }
    if let Some(v) = text("external_id")? {
        run.external_id = Some(v);
    }
    if let Some(v) = started_at {
        run.started_at = Some(v);
    }
    if let Some(conclusion) = conclusion {
        run.status = "completed".into();
        run.conclusion = Some(conclusion);
        run.completed_at = Some(completed_at.unwrap_or(now));
    } else if let Some(status) = status {
        // Queued or in progress again: no longer concluded.
        run.status = status;
        run.conclusion = None;
        run.completed_at = None;
    }
    match fields.get("output") {
        None => {}
        Some(Value::Object(output)) => {
            let field = |name: &str| -> Result<Option<String>, Refusal> {
                match output.get(name) {
                    None => Ok(None),
                    Some(Value::String(s)) => Ok(Some(s.clone())),
                    Some(other) => Err(Refusal::invalid(format!(
                        "For 'properties/output/{name}', {other} is not a string."
                    ))),
                }
            };
            if let Some(v) = field("title")? {
                run.output_title = Some(v);
            }
            if let Some(v) = field("summary")? {
                run.output_summary = Some(v);
            }
            if let Some(v) = field("text")? {
                run.output_text = Some(v);
            }
            let annotations = output
                .get("annotations")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            run.annotations += u32::try_from(annotations).unwrap_or(u32::MAX);
        }
        Some(other) => {
            return Err(Refusal::invalid(format!(
                "For 'properties/output', {other} is not an object."
            )))
        }
    }
    Ok(())
}

/// The check run as GitHub answers it.
fn view(inner: &Inner, run: &CheckRun) -> Value {
    let url = format!(
        "{}/repos/{}/check-runs/{}",
        inner.url, run.repository, run.id
    );
    json!({
        "id": run.id,
        "node_id": format!("CR_{}", run.id),
        "name": run.name,
        "head_sha": run.head_sha,
        "external_id": run.external_id,
        "url": url,
        "html_url": format!("{}/{}/runs/{}", inner.url, run.repository, run.id),
        "details_url": run.details_url,
        "status": run.status,
        "conclusion": run.conclusion,
        "started_at": run.started_at.map(timestamp),
        "completed_at": run.completed_at.map(timestamp),
        "output": {
            "title": run.output_title,
            "summary": run.output_summary,
            "text": run.output_text,
            "annotations_count": run.annotations,
            "annotations_url": format!("{url}/annotations"),
        },
        "check_suite": {"id": run.check_suite},
        "app": {"id": inner.app_id, "slug": APP_SLUG, "name": APP_SLUG},
        "pull_requests": [],
    })
}
