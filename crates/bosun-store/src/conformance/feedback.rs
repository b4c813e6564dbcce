//! Conformance cases for the GitHub feedback outbox: which runs get a check row and a
//! pull-request comment row, how a run's changes mark them due, how reports settle them,
//! and refusals.

use super::*;

/// Due within the next two seconds: after the debounce of a run still moving.
async fn due_check(store: &dyn Store, run: &str) -> Option<DueCheck> {
    store
        .due_checks(Utc::now() + Duration::seconds(2), 100)
        .await
        .unwrap()
        .into_iter()
        .find(|d| d.check.run_id == run)
}

async fn due_comment(store: &dyn Store, pr: i64) -> Option<DuePrComment> {
    store
        .due_pr_comments(Utc::now() + Duration::seconds(2), 100)
        .await
        .unwrap()
        .into_iter()
        .find(|d| d.comment.pull_request == pr)
}

pub async fn feedback_rows_follow_runs_of_github_stacks(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    seed_stack(&*store, "app").await;
    store
        .create_stack(
            "acme",
            &StackSpec::from_input(StackInput {
                id: "plain".into(),
                repository: "https://git.example.com/infra.git".into(),
                ..Default::default()
            })
            .unwrap(),
            &audit(Some("acme"), "stack.create", "plain"),
        )
        .await
        .unwrap();

    // A proposed run of a pull request: a check row and the PR's comment, both due.
    store
        .create_run(&pr_run("p1", "net", RunKind::Proposed, Some(7)), None)
        .await
        .unwrap();
    let due = due_check(&*store, "p1").await.expect("p1 is due");
    assert_eq!(
        (
            due.check.repository.as_str(),
            due.check.head_sha.as_str(),
            due.check.pull_request,
            due.check.checks,
            due.check.comment,
            due.check.check_run_id,
            due.check.changes,
            due.check.synced,
        ),
        (
            "acme/infra",
            "a".repeat(40).as_str(),
            Some(7),
            true,
            true,
            None,
            1,
            0
        )
    );
    assert_eq!(due.run.id, "p1");
    let comment = due_comment(&*store, 7)
        .await
        .expect("PR 7's comment is due");
    assert_eq!(
        (
            comment.comment.org.as_str(),
            comment.comment.repository.as_str()
        ),
        ("acme", "acme/infra")
    );
    assert_eq!(
        comment
            .runs
            .iter()
            .map(|r| r.id.as_str())
            .collect::<Vec<_>>(),
        ["p1"]
    );

    // A push's tracked run: a check row, no comment. A plain git stack, a drift run, a
    // run with no commit yet: nothing.
    store
        .create_run(&pr_run("t1", "app", RunKind::Tracked, None), None)
        .await
        .unwrap();
    let t1 = due_check(&*store, "t1").await.expect("t1 is due");
    assert!(t1.check.checks && !t1.check.comment);
    store
        .create_run(&pr_run("g1", "plain", RunKind::Tracked, None), None)
        .await
        .unwrap();
    store
        .create_run(&pr_run("d1", "net", RunKind::Drift, None), None)
        .await
        .unwrap();
    store
        .create_run(&new_run("m1", "app", RunKind::Tracked), None)
        .await
        .unwrap();
    for id in ["g1", "d1", "m1"] {
        assert!(due_check(&*store, id).await.is_none(), "{id}");
    }

    // Reported: not due any more, GitHub's id kept.
    store
        .record_check_report("p1", &FeedbackReport::reported(1, 1001))
        .await
        .unwrap();
    assert!(due_check(&*store, "p1").await.is_none());
    store
        .record_pr_comment_report("acme", "acme/infra", 7, &FeedbackReport::reported(1, 5001))
        .await
        .unwrap();
    assert!(due_comment(&*store, 7).await.is_none());

    // A change of the run marks both due again; the ids stay.
    store
        .cancel_run("p1", &audit(Some("acme"), "run.cancel", "run:p1"))
        .await
        .unwrap();
    // At rest (ended): due at once, no debounce; and so is the comment.
    assert!(store
        .due_checks(Utc::now(), 100)
        .await
        .unwrap()
        .iter()
        .any(|d| d.check.run_id == "p1"));
    assert!(store
        .due_pr_comments(Utc::now(), 100)
        .await
        .unwrap()
        .iter()
        .any(|d| d.comment.pull_request == 7));
    let due = due_check(&*store, "p1")
        .await
        .expect("p1 is due after its cancel");
    assert_eq!(
        (due.check.changes, due.check.synced, due.check.check_run_id),
        (2, 1, Some(1001))
    );
    assert_eq!(due.run.state, RunState::Canceled);
    let comment = due_comment(&*store, 7)
        .await
        .expect("PR 7's comment is due");
    assert_eq!(comment.comment.comment_id, Some(5001));
    assert!(!comment.comment.create_started);
    store
        .mark_pr_comment_creating("acme", "acme/infra", 7)
        .await
        .unwrap();
    assert!(
        due_comment(&*store, 7)
            .await
            .unwrap()
            .comment
            .create_started
    );

    // A report of an older change leaves the row due for the newer one.
    store
        .record_check_report("p1", &FeedbackReport::reported(1, 1001))
        .await
        .unwrap();
    assert_eq!(due_check(&*store, "p1").await.unwrap().check.synced, 1);

    // A failure waits for its retry time, counting attempts.
    let later = Utc::now() + Duration::seconds(60);
    store
        .record_check_report(
            "t1",
            &FeedbackReport::failed(1, "HTTP 502".into(), Some(later)),
        )
        .await
        .unwrap();
    assert!(due_check(&*store, "t1").await.is_none());
    // A change while backing off does not cut the wait short.
    store
        .cancel_run("t1", &audit(Some("acme"), "run.cancel", "run:t1"))
        .await
        .unwrap();
    assert!(due_check(&*store, "t1").await.is_none());
    let at_retry = store
        .due_checks(later + Duration::seconds(1), 100)
        .await
        .unwrap();
    let row = at_retry.iter().find(|d| d.check.run_id == "t1").unwrap();
    assert_eq!(
        (
            row.check.attempts,
            row.check.last_error.as_deref(),
            row.check.changes
        ),
        (1, Some("HTTP 502"), 2)
    );
    // Given up: due never again.
    store
        .record_check_report("t1", &FeedbackReport::failed(2, "refused".into(), None))
        .await
        .unwrap();
    assert!(store
        .due_checks(later + Duration::days(1), 100)
        .await
        .unwrap()
        .iter()
        .all(|d| d.check.run_id != "t1"));
    store
        .create_run(&pr_run("p2", "net", RunKind::Proposed, Some(7)), None)
        .await
        .unwrap();

    // The comment shows each stack's latest run of the PR, and what the PR's latest
    // delivery did not trigger.
    let mut sync = delivery("guid-pr7", "pull_request");
    sync.pull_request = Some(7);
    sync.runs = vec![pr_run("p3", "net", RunKind::Proposed, Some(7))];
    sync.decisions = vec![
        decision("net", Some("p3"), "main.tf changed"),
        decision("app", None, "no watched path changed"),
        decision("plain", None, "not on this repository"),
    ];
    let (delivery_id, _, _) = recorded(store.record_delivery(&sync).await.unwrap());
    let comment = due_comment(&*store, 7)
        .await
        .expect("due after the delivery");
    assert_eq!(comment.comment.delivery_id, Some(delivery_id));
    assert_eq!(
        comment
            .runs
            .iter()
            .map(|r| r.id.as_str())
            .collect::<Vec<_>>(),
        ["p3"]
    );
    assert_eq!(
        comment.not_triggered,
        [
            pair("app", "no watched path changed"),
            pair("plain", "not on this repository")
        ]
    );

    // The rows of a commit, for a re-run requested on GitHub.
    let of_commit = store
        .checks_of_commit("ACME/Infra", &"a".repeat(40))
        .await
        .unwrap();
    assert_eq!(
        of_commit
            .iter()
            .map(|c| c.run_id.as_str())
            .collect::<Vec<_>>(),
        ["p1", "t1", "p2", "p3"]
    );
    assert!(store
        .checks_of_commit("acme/infra", &"b".repeat(40))
        .await
        .unwrap()
        .is_empty());
}

pub async fn feedback_refusals_are_kept_per_repository_and_kind(store: Arc<dyn Store>) {
    let until = Utc::now() + Duration::hours(1);
    store
        .set_feedback_refusal("Acme/Infra", "checks", Some(("lacks checks: write", until)))
        .await
        .unwrap();
    store
        .set_feedback_refusal(
            "acme/infra",
            "comment",
            Some(("lacks pull_requests: write", until)),
        )
        .await
        .unwrap();
    let refusals = store.feedback_refusals("acme/INFRA").await.unwrap();
    assert_eq!(
        refusals
            .iter()
            .map(|r| (r.kind.as_str(), r.message.as_str()))
            .collect::<Vec<_>>(),
        [
            ("checks", "lacks checks: write"),
            ("comment", "lacks pull_requests: write")
        ]
    );
    assert_eq!(
        refusals[0].until.timestamp_millis(),
        until.timestamp_millis()
    );
    store
        .set_feedback_refusal("acme/infra", "checks", None)
        .await
        .unwrap();
    let refusals = store.feedback_refusals("acme/infra").await.unwrap();
    assert_eq!(refusals.len(), 1);
    assert_eq!(refusals[0].kind, "comment");
    assert!(store
        .feedback_refusals("acme/other")
        .await
        .unwrap()
        .is_empty());
}
