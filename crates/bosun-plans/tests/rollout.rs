//! Handlers and rolling batches, end to end: plans parsed from YAML, run on
//! `connection: local` hosts (and once over a real sshd). Every step and handler appends
//! a line to one log file, so the order things ran in is read back from it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Instant;

use bosun_plans::exec::{
    self, BatchStatus, Event, HostStatus, RunOptions, RunReport, RunStatus, StepKind,
};
use bosun_plans::model::{parse_inventory, parse_plan, Inventory, Plan};

mod common;

fn inventory(hosts: &[&str]) -> Inventory {
    let mut text = String::from("hosts:\n");
    for h in hosts {
        text.push_str(&format!("  {h}: {{ connection: local }}\n"));
    }
    parse_inventory(Path::new("inventory.yaml"), &text).unwrap()
}

fn plan(yaml: &str) -> Plan {
    parse_plan(Path::new("plan.yaml"), yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"))
}

fn plan_error(yaml: &str) -> String {
    parse_plan(Path::new("plan.yaml"), yaml)
        .err()
        .unwrap_or_else(|| panic!("parsed:\n{yaml}"))
        .to_string()
}

fn opts(dry_run: bool) -> RunOptions {
    RunOptions {
        dry_run,
        forks: 10,
        ..RunOptions::default()
    }
}

async fn run_with_events(p: &Plan, inv: &Inventory, dry_run: bool) -> (RunReport, Vec<Event>) {
    let mut events = Vec::new();
    let report = exec::run(p, inv, opts(dry_run), |e| events.push(e))
        .await
        .unwrap();
    (report, events)
}

async fn run(p: &Plan, inv: &Inventory, dry_run: bool) -> RunReport {
    run_with_events(p, inv, dry_run).await.0
}

/// The lines of the shared log, in the order they were written.
fn log(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// The log lines of one host, without the host's name.
fn log_of(dir: &Path, host: &str) -> Vec<String> {
    log(dir)
        .into_iter()
        .filter_map(|l| l.strip_prefix(&format!("{host} ")).map(str::to_string))
        .collect()
}

/// A shell step (or handler) body that logs `what` for its host.
fn logs(dir: &Path, what: &str) -> String {
    format!(
        "shell: echo \"{{{{ host.name }}}} {what}\" >> {}/log",
        dir.display()
    )
}

/// A plan over hosts a, b, c: a file step that changes a and b (c already has the
/// content) notifying `restart` and `reload` (declared reload first), a second file step
/// notifying `reload` again on a only, then a step that logs.
fn notify_plan(dir: &Path, extra: &str) -> String {
    let d = dir.display();
    format!(
        r#"name: handlers
targets: {{ hosts: [a, b, c] }}
{extra}
steps:
  - name: config
    file.copy: {{ path: "{d}/{{{{ host.name }}}}.conf", content: "v1\n" }}
    notify: [restart, reload]
  - name: extra config
    file.copy: {{ path: "{d}/{{{{ host.name }}}}.extra", content: "x\n" }}
    when: host.name == "a"
    notify: reload
  - name: after
    {after}
handlers:
  - name: reload
    {reload}
  - name: restart
    {restart}
"#,
        after = logs(dir, "after"),
        reload = logs(dir, "reload"),
        restart = logs(dir, "restart"),
    )
}

#[tokio::test]
async fn handlers_run_once_per_host_at_the_end_where_a_notifying_step_changed_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("c.conf"), "v1\n").unwrap();
    let inv = inventory(&["a", "b", "c"]);
    let p = plan(&notify_plan(dir.path(), ""));

    let report = run(&p, &inv, false).await;
    assert_eq!(report.status, RunStatus::Succeeded, "{report:#?}");
    // Once each (a was notified twice for reload), in declaration order, after the steps.
    assert_eq!(log_of(dir.path(), "a"), ["after", "reload", "restart"]);
    assert_eq!(log_of(dir.path(), "b"), ["after", "reload", "restart"]);
    assert_eq!(log_of(dir.path(), "c"), ["after"]);

    // The report: the steps (numbers 1–3), then the two handlers numbered after them.
    let order: Vec<(usize, &str, StepKind)> = report
        .steps
        .iter()
        .map(|s| (s.number, s.name.as_str(), s.kind))
        .collect();
    assert_eq!(
        order,
        [
            (1, "config", StepKind::Step),
            (2, "extra config", StepKind::Step),
            (3, "after", StepKind::Step),
            (4, "reload", StepKind::Handler),
            (5, "restart", StepKind::Handler),
        ]
    );
    let reload = report.handler("reload", None).unwrap();
    assert_eq!(reload.results.len(), 3);
    assert_eq!(reload.result("a").unwrap().status, HostStatus::Changed);
    assert_eq!(reload.result("b").unwrap().status, HostStatus::Changed);
    let c = reload.result("c").unwrap();
    assert_eq!(
        (c.status, c.message.as_str()),
        (HostStatus::Skipped, "not notified")
    );
    assert_eq!(report.summary()[2].skipped, 3, "{:?}", report.summary());

    // Nothing changes the second time: no handler runs.
    std::fs::remove_file(dir.path().join("log")).unwrap();
    let again = run(&p, &inv, false).await;
    assert_eq!(again.status, RunStatus::Succeeded);
    for h in ["a", "b", "c"] {
        assert_eq!(log_of(dir.path(), h), ["after"], "{h}");
    }
    assert!(again.steps.iter().all(|s| s.kind == StepKind::Step));
}

#[tokio::test]
async fn a_flush_step_runs_the_notified_handlers_there_and_not_again_at_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let inv = inventory(&["a", "b"]);
    let p = plan(&format!(
        r#"name: flush
targets: {{ hosts: [a, b] }}
steps:
  - name: config
    file.copy: {{ path: "{d}/{{{{ host.name }}}}.conf", content: "v1\n" }}
    notify: reload
  - flush: handlers
  - name: after
    {after}
handlers:
  - name: reload
    {reload}
"#,
        after = logs(dir.path(), "after"),
        reload = logs(dir.path(), "reload"),
    ));
    let report = run(&p, &inv, false).await;
    assert_eq!(report.status, RunStatus::Succeeded, "{report:#?}");
    for h in ["a", "b"] {
        assert_eq!(log_of(dir.path(), h), ["reload", "after"], "{h}");
    }
    // Shown where it ran: after step 1, at the flush (step 2, which has no entry).
    let order: Vec<(usize, &str)> = report
        .steps
        .iter()
        .map(|s| (s.number, s.name.as_str()))
        .collect();
    assert_eq!(order, [(1, "config"), (4, "reload"), (3, "after")]);
    assert_eq!(report.handler("reload", Some(2)).unwrap().results.len(), 2);
    assert!(report.handler("reload", None).is_none());
}

#[tokio::test]
async fn a_dry_run_shows_which_handlers_would_run_where_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("c.conf"), "v1\n").unwrap();
    let inv = inventory(&["a", "b", "c"]);
    let p = plan(&notify_plan(dir.path(), ""));
    let report = run(&p, &inv, true).await;
    assert_eq!(report.status, RunStatus::Succeeded, "{report:#?}");
    assert!(log(dir.path()).is_empty(), "the dry run ran a command");
    assert!(!dir.path().join("a.conf").exists());
    for name in ["reload", "restart"] {
        let h = report.handler(name, None).unwrap();
        // a and b: the handler would run (a shell command: what it does cannot be known).
        for host in ["a", "b"] {
            let r = h.result(host).unwrap();
            assert_eq!(r.status, HostStatus::Unknown, "{name} on {host}: {r:?}");
        }
        assert_eq!(h.result("c").unwrap().status, HostStatus::Skipped);
        assert_eq!(h.result("c").unwrap().message, "not notified");
    }

    // A notifying step that cannot be predicted: the handler may run, and says why.
    let p = plan(&format!(
        r#"name: maybe
targets: {{ hosts: [a] }}
steps:
  - name: migrate
    shell: "true"
    notify: reload
handlers:
  - name: reload
    {reload}
"#,
        reload = logs(dir.path(), "reload"),
    ));
    let report = run(&p, &inventory(&["a"]), true).await;
    let r = report.handler("reload", None).unwrap().result("a").unwrap();
    assert_eq!(r.status, HostStatus::Unknown);
    assert!(
        r.message.contains("may run: notified by step 1"),
        "{}",
        r.message
    );
    assert!(log(dir.path()).is_empty());
}

#[tokio::test]
async fn a_failed_run_flushes_handlers_only_with_force_handlers() {
    for force in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        let inv = inventory(&["a", "b"]);
        let p = plan(&format!(
            r#"name: fails
targets: {{ hosts: [a, b] }}
force_handlers: {force}
steps:
  - name: config
    file.copy: {{ path: "{d}/{{{{ host.name }}}}.conf", content: "v1\n" }}
    notify: reload
  - name: breaks on b
    shell: test {{{{ host.name }}}} != b
  - name: after
    {after}
handlers:
  - name: reload
    {reload}
"#,
            after = logs(dir.path(), "after"),
            reload = logs(dir.path(), "reload"),
        ));
        let report = run(&p, &inv, false).await;
        assert_eq!(report.status, RunStatus::Failed);
        assert_eq!(report.halted.as_ref().unwrap().step, 2);
        if force {
            // Both hosts changed before the failure, the failed one included.
            assert_eq!(log_of(dir.path(), "a"), ["reload"]);
            assert_eq!(log_of(dir.path(), "b"), ["reload"]);
            let h = report.handler("reload", None).unwrap();
            assert_eq!(h.result("b").unwrap().status, HostStatus::Changed);
        } else {
            assert!(log(dir.path()).is_empty(), "{:?}", log(dir.path()));
            assert!(report.handler("reload", None).is_none());
            let w = report
                .warnings
                .iter()
                .find(|w| w.message.contains("handler \"reload\""))
                .unwrap_or_else(|| panic!("no warning: {:?}", report.warnings));
            assert!(w.message.contains("a, b"), "{}", w.message);
            assert!(w.message.contains("force_handlers"), "{}", w.message);
        }
    }
}

#[tokio::test]
async fn a_failed_handler_halts_the_run_like_a_step() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let inv = inventory(&["a"]);
    let p = plan(&format!(
        r#"name: bad handler
targets: {{ hosts: [a] }}
steps:
  - name: config
    file.copy: {{ path: "{d}/a.conf", content: "v1\n" }}
    notify: reload
  - flush: handlers
  - name: after
    {after}
handlers:
  - name: reload
    shell: exit 7
"#,
        after = logs(dir.path(), "after"),
    ));
    let report = run(&p, &inv, false).await;
    assert_eq!(report.status, RunStatus::Failed);
    let halt = report.halted.as_ref().unwrap();
    assert_eq!((halt.step, halt.step_name.as_str()), (4, "reload"));
    assert!(halt.reason.starts_with("handler 4"), "{}", halt.reason);
    assert!(log(dir.path()).is_empty());
    assert_eq!(report.result(3, "a").unwrap().status, HostStatus::Skipped);
}

#[test]
fn handler_mistakes_are_refused_where_they_are_written() {
    let cases = [
        (
            "steps:\n  - shell: 'true'\n    notify: [nope]\nhandlers:\n  - name: reload\n    shell: 'true'\n",
            "plan.yaml:5:14: no handler is named \"nope\" (handlers: reload)",
        ),
        (
            "steps:\n  - shell: 'true'\n    notify: reload\n",
            "no handler is named \"reload\" (handlers: none; declare them under `handlers:`)",
        ),
        (
            "steps:\n  - shell: 'true'\nhandlers:\n  - name: r\n    shell: 'true'\n    notify: s\n",
            "a handler cannot notify other handlers",
        ),
        (
            "steps:\n  - shell: 'true'\nhandlers:\n  - name: r\n    shell: 'true'\n  - name: r\n    shell: 'false'\n",
            "two handlers are named \"r\"",
        ),
        (
            "steps:\n  - shell: 'true'\nhandlers:\n  - shell: 'true'\n",
            "a handler needs a `name`",
        ),
        (
            "steps:\n  - flush: handlers\n",
            "the plan has no `handlers:` to flush",
        ),
        (
            "steps:\n  - flush: everything\nhandlers:\n  - name: r\n    shell: 'true'\n",
            "write `flush: handlers`",
        ),
        (
            "steps:\n  - flush: handlers\n    sudo: true\nhandlers:\n  - name: r\n    shell: 'true'\n",
            "a `flush: handlers` step takes only a `name`, not `sudo`",
        ),
        (
            "steps:\n  - shell: 'true'\n    notify: 3\n",
            "notify names a handler, or a list of handlers",
        ),
        (
            "steps:\n  - shell: 'true'\n    retries: 3\n",
            "`retries` belongs to `health_check:` only",
        ),
    ];
    for (body, want) in cases {
        let text = format!("name: p\ntargets: {{ hosts: [a] }}\n{body}");
        let e = plan_error(&text);
        assert!(e.contains(want), "{body}\n→ {e}\nwanted: {want}");
    }
}

/// Five hosts, `serial: [1, "50%"]`: batches of 1, 2, 2. Each host logs two steps.
#[tokio::test]
async fn batches_run_the_whole_plan_on_one_batch_before_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let hosts = ["h1", "h2", "h3", "h4", "h5"];
    let inv = inventory(&hosts);
    let p = plan(&format!(
        r#"name: rolling
targets: {{ hosts: [h1, h2, h3, h4, h5] }}
serial: [1, "50%"]
steps:
  - name: one
    {one}
  - name: two
    {two}
"#,
        one = logs(dir.path(), "one"),
        two = logs(dir.path(), "two"),
    ));
    let (report, events) = run_with_events(&p, &inv, false).await;
    assert_eq!(report.status, RunStatus::Succeeded, "{report:#?}");
    let batches: Vec<Vec<String>> = report.batches.iter().map(|b| b.hosts.clone()).collect();
    assert_eq!(batches, [vec!["h1"], vec!["h2", "h3"], vec!["h4", "h5"]]);
    assert!(report
        .batches
        .iter()
        .all(|b| b.status == BatchStatus::Succeeded));
    // Every line of a batch comes before any line of the next.
    let batch_of = |host: &str| batches.iter().position(|b| b.iter().any(|h| h == host));
    let order: Vec<usize> = log(dir.path())
        .iter()
        .map(|l| batch_of(l.split(' ').next().unwrap()).unwrap())
        .collect();
    assert_eq!(order.len(), 10);
    assert!(
        order.windows(2).all(|w| w[0] <= w[1]),
        "{:?}",
        log(dir.path())
    );
    let started: Vec<(usize, usize)> = events
        .iter()
        .filter_map(|e| match e {
            Event::BatchStarted { batch, batches, .. } => Some((*batch, *batches)),
            _ => None,
        })
        .collect();
    assert_eq!(started, [(1, 3), (2, 3), (3, 3)]);
    // Each step's entry still has every host, in inventory order.
    let one: Vec<&str> = report.steps[0]
        .results
        .iter()
        .map(|r| r.host.as_str())
        .collect();
    assert_eq!(one, hosts);
}

#[tokio::test]
async fn the_first_failure_halts_the_rollout_across_batches() {
    let dir = tempfile::tempdir().unwrap();
    let inv = inventory(&["a", "b", "c"]);
    let p = plan(&format!(
        r#"name: halts
targets: {{ hosts: [a, b, c] }}
serial: 1
steps:
  - name: breaks on b
    shell: test {{{{ host.name }}}} != b
  - name: after
    {after}
"#,
        after = logs(dir.path(), "after"),
    ));
    let report = run(&p, &inv, false).await;
    assert_eq!(report.status, RunStatus::Failed);
    assert_eq!(log_of(dir.path(), "a"), ["after"]);
    assert!(log_of(dir.path(), "c").is_empty());
    let statuses: Vec<BatchStatus> = report.batches.iter().map(|b| b.status).collect();
    assert_eq!(
        statuses,
        [
            BatchStatus::Succeeded,
            BatchStatus::Failed,
            BatchStatus::NotRun
        ]
    );
    let c = report.result(1, "c").unwrap();
    assert_eq!(c.status, HostStatus::Skipped);
    assert!(
        c.message
            .contains("the rollout stopped before batch 3 (step 1 (\"breaks on b\") failed on b)"),
        "{}",
        c.message
    );
}

#[tokio::test]
async fn max_fail_percentage_lets_a_batch_go_on_until_too_many_fail() {
    // Batches of 2; b fails in batch 1 (50%).
    for (max, stops) in [(50, false), (49, true)] {
        let dir = tempfile::tempdir().unwrap();
        let inv = inventory(&["a", "b", "c", "d"]);
        let p = plan(&format!(
            r#"name: tolerant
targets: {{ hosts: [a, b, c, d] }}
serial: 2
max_fail_percentage: {max}
steps:
  - name: breaks on b
    shell: test {{{{ host.name }}}} != b
  - name: after
    {after}
"#,
            after = logs(dir.path(), "after"),
        ));
        let report = run(&p, &inv, false).await;
        assert_eq!(report.status, RunStatus::Failed, "max {max}");
        // a goes on past b's failure; b stops alone.
        assert_eq!(log_of(dir.path(), "a"), ["after"]);
        let b = report.result(2, "b").unwrap();
        assert_eq!(b.status, HostStatus::Skipped);
        assert!(
            b.message.contains("the host failed step 1"),
            "{}",
            b.message
        );
        assert_eq!(report.batches[0].failed, ["b"]);
        if stops {
            let halt = report.halted.as_ref().unwrap();
            assert!(
                halt.reason.contains(
                    "batch 1 had 1 of 2 hosts fail (50%), more than max_fail_percentage 49%"
                ),
                "{}",
                halt.reason
            );
            assert_eq!(report.batches[1].status, BatchStatus::NotRun);
            assert!(log_of(dir.path(), "c").is_empty());
        } else {
            assert!(report.halted.is_none());
            assert_eq!(log_of(dir.path(), "c"), ["after"]);
            assert_eq!(log_of(dir.path(), "d"), ["after"]);
            assert_eq!(report.batches[1].status, BatchStatus::Succeeded);
        }
    }
}

#[tokio::test]
async fn a_health_check_gates_the_next_batch_with_retries() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let inv = inventory(&["a", "b", "c"]);
    // a: healthy at once; b: never healthy; c would be next.
    std::fs::write(dir.path().join("a.healthy"), "").unwrap();
    let p = plan(&format!(
        r#"name: gated
targets: {{ hosts: [a, b, c] }}
serial: 1
health_check:
  name: is it up
  shell: echo try >> {d}/{{{{ host.name }}}}.tries; test -f {d}/{{{{ host.name }}}}.healthy
  retries: 2
  delay: 10ms
steps:
  - name: deploy
    {deploy}
"#,
        deploy = logs(dir.path(), "deploy"),
    ));
    let report = run(&p, &inv, false).await;
    assert_eq!(report.status, RunStatus::Failed);
    let tries = |h: &str| {
        std::fs::read_to_string(dir.path().join(format!("{h}.tries")))
            .unwrap_or_default()
            .lines()
            .count()
    };
    assert_eq!((tries("a"), tries("b"), tries("c")), (1, 3, 0));
    assert!(log_of(dir.path(), "c").is_empty(), "batch 3 ran");
    let check = report
        .steps
        .iter()
        .find(|s| s.kind == StepKind::HealthCheck)
        .unwrap();
    assert_eq!(check.name, "is it up");
    assert_eq!(check.result("a").unwrap().status, HostStatus::Changed);
    let b = check.result("b").unwrap();
    assert_eq!(b.status, HostStatus::Failed);
    assert!(
        b.warnings.iter().any(|w| w.contains("attempt 3 of 3")),
        "{:?}",
        b.warnings
    );
    let halt = report.halted.as_ref().unwrap();
    assert!(
        halt.reason
            .contains("the health check failed on b: the rollout stops"),
        "{}",
        halt.reason
    );
    assert_eq!(report.batches[2].status, BatchStatus::NotRun);
}

#[tokio::test]
async fn a_health_check_that_passes_on_a_retry_lets_the_rollout_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let inv = inventory(&["a", "b"]);
    // Fails the first time on each host, passes the second.
    let p = plan(&format!(
        r#"name: warming
targets: {{ hosts: [a, b] }}
serial: 1
health_check:
  shell: if [ -f {d}/{{{{ host.name }}}}.warm ]; then exit 0; fi; touch {d}/{{{{ host.name }}}}.warm; exit 1
  retries: 1
  delay: 0
steps:
  - name: deploy
    {deploy}
"#,
        deploy = logs(dir.path(), "deploy"),
    ));
    let report = run(&p, &inv, false).await;
    assert_eq!(report.status, RunStatus::Succeeded, "{report:#?}");
    assert_eq!(log_of(dir.path(), "b"), ["deploy"]);
    let check = report.steps.last().unwrap();
    assert_eq!(check.kind, StepKind::HealthCheck);
    assert!(check.result("b").unwrap().warnings[0].contains("attempt 2 of 2"));
}

#[tokio::test]
async fn a_pause_between_batches_waits_in_real_runs_only() {
    let dir = tempfile::tempdir().unwrap();
    let inv = inventory(&["a", "b"]);
    let p = plan(&format!(
        r#"name: paced
targets: {{ hosts: [a, b] }}
serial: 1
pause_between_batches: 300ms
steps:
  - name: deploy
    {deploy}
"#,
        deploy = logs(dir.path(), "deploy"),
    ));
    let mut seen: Vec<(Instant, String)> = Vec::new();
    let report = exec::run(&p, &inv, opts(false), |e| match e {
        Event::Pausing { .. } => seen.push((Instant::now(), "pausing".into())),
        Event::BatchStarted { batch, .. } => seen.push((Instant::now(), format!("batch {batch}"))),
        _ => {}
    })
    .await
    .unwrap();
    assert_eq!(report.status, RunStatus::Succeeded);
    let names: Vec<&str> = seen.iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(names, ["batch 1", "pausing", "batch 2"]);
    let waited = seen[2].0 - seen[1].0;
    assert!(waited.as_millis() >= 300, "{waited:?}");

    let (report, events) = run_with_events(&p, &inv, true).await;
    assert_eq!(report.status, RunStatus::Succeeded);
    assert!(!events.iter().any(|e| matches!(e, Event::Pausing { .. })));
}

#[test]
fn rollout_mistakes_are_refused_where_they_are_written() {
    let cases = [
        ("serial: 0\n", "plan.yaml:3:9: bad batch size 0"),
        ("serial: \"150%\"\n", "a share is 1% to 100% of the hosts"),
        ("serial: []\n", "the list is empty"),
        ("serial: [1, x]\n", "plan.yaml:3:13: bad batch size \"x\""),
        ("max_fail_percentage: 101\n", "bad percentage 101"),
        ("pause_between_batches: soon\n", "bad pause `soon`"),
        ("pause_between_batches: 2d\n", "the pause is at most 24h"),
        (
            "health_check: { shell: 'true', delay: 2h }\n",
            "the delay is at most 1h",
        ),
        (
            "health_check: { shell: 'true', retries: -1 }\n",
            "retries is a whole number from 0 to 100",
        ),
        (
            "health_check: { shell: 'true', notify: x }\n",
            "a health check cannot notify handlers",
        ),
        (
            "health_check: { flush: handlers }\nhandlers: [{ name: r, shell: 'true' }]\n",
            "a health check runs a module",
        ),
    ];
    for (body, want) in cases {
        let text = format!("name: p\ntargets: {{ hosts: [a] }}\n{body}steps:\n  - shell: 'true'\n");
        let e = plan_error(&text);
        assert!(e.contains(want), "{body}\n→ {e}\nwanted: {want}");
    }
    let p = plan(
        "name: p\ntargets: { hosts: [a] }\nserial: [1, \"10%\", 50%]\nmax_fail_percentage: \"20%\"\nsteps:\n  - shell: 'true'\n",
    );
    assert_eq!(p.rollout.max_fail_percentage, Some(20));
    let sizes: Vec<usize> = p.rollout.batches(45).iter().map(|r| r.len()).collect();
    // 1 host, then 10% of 45 (4), then 50% (22) until none are left.
    assert_eq!(sizes, [1, 4, 22, 18]);
}

/// Handlers and batches over a real sshd: two inventory hosts on one loopback sshd.
#[tokio::test]
async fn handlers_and_batches_over_ssh() {
    let Some((_tmp, sshd)) = common::sshd() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let mut one = common::host_for(&sshd);
    one.name = "one".into();
    let mut two = common::host_for(&sshd);
    two.name = "two".into();
    let inv = Inventory {
        hosts: vec![one, two],
        ..Inventory::default()
    };
    let p = plan(&format!(
        r#"name: over ssh
targets: {{ hosts: [one, two] }}
serial: 1
steps:
  - name: config
    file.copy: {{ path: "{d}/{{{{ host.name }}}}.conf", content: "v1\n" }}
    notify: reload
handlers:
  - name: reload
    {reload}
"#,
        reload = logs(dir.path(), "reload"),
    ));
    let report = run(&p, &inv, false).await;
    assert_eq!(
        report.status,
        RunStatus::Succeeded,
        "{report:#?}\n{}",
        sshd.log()
    );
    assert_eq!(log(dir.path()), ["one reload", "two reload"]);
    assert_eq!(report.batches.len(), 2);
    let again = run(&p, &inv, false).await;
    assert!(again.handler("reload", None).is_none());
    assert_eq!(log(dir.path()).len(), 2);
}

#[test]
fn lint_reads_handlers_and_the_health_check_too() {
    let p = plan(
        "name: p\ntargets: { hosts: [a] }\nhealth_check:\n  shell: echo {{ vars.nope_check }}\nsteps:\n  - shell: 'true'\n    notify: r\nhandlers:\n  - name: r\n    shell: echo {{ vars.nope_handler }}\n",
    );
    let report = bosun_plans::model::lint(&p, None);
    let found: Vec<(usize, bool)> = report
        .findings
        .iter()
        .map(|f| (f.location.line, f.message.contains("vars.nope_")))
        .collect();
    assert_eq!(found, [(10, true), (4, true)], "{:?}", report.findings);
}
