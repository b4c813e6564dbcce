//! The double's issue comments (a pull request's conversation comments are issue
//! comments), as GitHub serves them to an App's installation token for the repository
//! carrying `pull_requests` or `issues` (`write` to post or edit, `read` to list):
//!
//! - `GET /repos/{owner}/{repo}/issues/{issue_number}/comments` — oldest first, paged by
//!   `per_page` (default 30, at most 100) and `page`, with a `Link` header (`next`, `last`,
//!   `first`, `prev`) when there is more than one page; `since` filters on `updated_at`.
//! - `POST /repos/{owner}/{repo}/issues/{issue_number}/comments` `{"body"}` — 201, by
//!   `bosun-test[bot]` (a `Bot`, `performed_via_github_app` the App).
//! - `GET`/`PATCH /repos/{owner}/{repo}/issues/comments/{comment_id}` — one comment; a
//!   `PATCH` `{"body"}` edits it (404 for an unknown id or one of another repository).
//!
//! A body longer than 65,536 characters, or an empty one, is GitHub's 422
//! `Validation Failed`.

use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::rest::{installation_token, json, timestamp, Call, Refusal};
use super::{Comment, Inner, APP_SLUG};

/// GitHub's longest comment body, in characters.
const MAX_BODY_CHARS: usize = 65_536;
const DEFAULT_PER_PAGE: usize = 30;
const MAX_PER_PAGE: usize = 100;
/// Who the App's comments are by.
fn bot_login() -> String {
    format!("{APP_SLUG}[bot]")
}

/// `GET /repos/{owner}/{repo}/issues/{issue_number}/comments`.
pub(super) fn list(
    inner: &Inner,
    owner: &str,
    repo: &str,
    issue: u64,
    call: &Call,
) -> Result<Response, Refusal> {
    let repository = format!("{owner}/{repo}");
    installation_token(
        inner,
        call,
        &repository,
        &["pull_requests", "issues"],
        "read",
    )?;
    let per_page = call
        .query_param("per_page")
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(DEFAULT_PER_PAGE)
        .min(MAX_PER_PAGE);
    let page = call
        .query_param("page")
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(1);
    let since = match call.query_param("since") {
        None => None,
        Some(s) => {
            let decoded = s.replace("%3A", ":").replace("%3a", ":");
            Some(
                DateTime::parse_from_rfc3339(&decoded)
                    .map(|t| t.with_timezone(&Utc))
                    .map_err(|_| Refusal::invalid(format!("since {s:?} is not a date-time")))?,
            )
        }
    };
    let all: Vec<&Comment> = inner
        .comments
        .iter()
        .filter(|c| c.repository.eq_ignore_ascii_case(&repository) && c.issue == issue)
        .filter(|c| since.is_none_or(|since| c.updated_at >= since))
        .collect();
    let pages = all.len().div_ceil(per_page).max(1);
    let body: Vec<Value> = all
        .iter()
        .skip((page - 1).saturating_mul(per_page))
        .take(per_page)
        .map(|c| view(inner, c))
        .collect();

    let mut response = json(StatusCode::OK, Value::Array(body));
    let link_to = |p: usize| {
        let mut url = format!(
            "{}/repos/{repository}/issues/{issue}/comments?per_page={per_page}&page={p}",
            inner.url
        );
        if let Some(since) = call.query_param("since") {
            url.push_str(&format!("&since={since}"));
        }
        url
    };
    let mut links = Vec::new();
    if page > 1 {
        links.push(format!(
            "<{}>; rel=\"prev\"",
            link_to((page - 1).min(pages))
        ));
    }
    if page < pages {
        links.push(format!("<{}>; rel=\"next\"", link_to(page + 1)));
        links.push(format!("<{}>; rel=\"last\"", link_to(pages)));
    }
    if page > 1 {
        links.push(format!("<{}>; rel=\"first\"", link_to(1)));
    }
    if !links.is_empty() {
        if let Ok(value) = HeaderValue::from_str(&links.join(", ")) {
            response.headers_mut().insert("link", value);
        }
    }
    Ok(response)
}

/// `POST /repos/{owner}/{repo}/issues/{issue_number}/comments`.
pub(super) fn create(
    inner: &mut Inner,
    owner: &str,
    repo: &str,
    issue: u64,
    call: &Call,
) -> Result<Response, Refusal> {
    let repository = format!("{owner}/{repo}");
    installation_token(
        inner,
        call,
        &repository,
        &["pull_requests", "issues"],
        "write",
    )?;
    let body = comment_body(call)?;
    let comment = inner.add_comment(&repository, issue, &bot_login(), true, &body);
    Ok(json(StatusCode::CREATED, view(inner, &comment)))
}

/// `GET /repos/{owner}/{repo}/issues/comments/{comment_id}`.
pub(super) fn get(
    inner: &Inner,
    owner: &str,
    repo: &str,
    id: i64,
    call: &Call,
) -> Result<Response, Refusal> {
    let repository = format!("{owner}/{repo}");
    installation_token(
        inner,
        call,
        &repository,
        &["pull_requests", "issues"],
        "read",
    )?;
    let i = find(inner, &repository, id)?;
    Ok(json(StatusCode::OK, view(inner, &inner.comments[i])))
}

/// `PATCH /repos/{owner}/{repo}/issues/comments/{comment_id}`.
pub(super) fn update(
    inner: &mut Inner,
    owner: &str,
    repo: &str,
    id: i64,
    call: &Call,
) -> Result<Response, Refusal> {
    let repository = format!("{owner}/{repo}");
    installation_token(
        inner,
        call,
        &repository,
        &["pull_requests", "issues"],
        "write",
    )?;
    let i = find(inner, &repository, id)?;
    let body = comment_body(call)?;
    let comment = &mut inner.comments[i];
    comment.body = body;
    comment.updated_at = Utc::now();
    comment.edits += 1;
    let comment = comment.clone();
    Ok(json(StatusCode::OK, view(inner, &comment)))
}

/// The index of comment `id` of `repository`; 404 otherwise.
fn find(inner: &Inner, repository: &str, id: i64) -> Result<usize, Refusal> {
    inner
        .comments
        .iter()
        .position(|c| c.id == id && c.repository.eq_ignore_ascii_case(repository))
        .ok_or_else(Refusal::not_found)
}

/// The request's `body`, within GitHub's limits.
fn comment_body(call: &Call) -> Result<String, Refusal> {
    let fields = call.fields()?;
    let Some(body) = fields.get("body").and_then(Value::as_str) else {
        return Err(Refusal::invalid("\"body\" wasn't supplied."));
    };
    if body.trim().is_empty() {
        return Err(Refusal::validation_failed(json!({
            "resource": "IssueComment",
            "code": "missing_field",
            "field": "body",
        })));
    }
    if body.chars().count() > MAX_BODY_CHARS {
        return Err(Refusal::validation_failed(json!({
            "resource": "IssueComment",
            "code": "unprocessable",
            "field": "data",
            "message": format!("Body is too long (maximum is {MAX_BODY_CHARS} characters)"),
        })));
    }
    Ok(body.to_string())
}

/// The comment as GitHub answers it.
fn view(inner: &Inner, comment: &Comment) -> Value {
    let api = format!("{}/repos/{}", inner.url, comment.repository);
    json!({
        "id": comment.id,
        "node_id": format!("IC_{}", comment.id),
        "url": format!("{api}/issues/comments/{}", comment.id),
        "html_url": format!(
            "{}/{}/issues/{}#issuecomment-{}",
            inner.url, comment.repository, comment.issue, comment.id
        ),
        "issue_url": format!("{api}/issues/{}", comment.issue),
        "body": comment.body,
        "user": {
            "login": comment.user,
            "type": if comment.via_app { "Bot" } else { "User" },
        },
        "created_at": timestamp(comment.created_at),
        "updated_at": timestamp(comment.updated_at),
        "author_association": "NONE",
        "performed_via_github_app": if comment.via_app {
            json!({"id": inner.app_id, "slug": APP_SLUG, "name": APP_SLUG})
        } else {
            Value::Null
        },
    })
}
