//! The executor end to end over the `local` connection: plans built in Rust (not parsed),
//! hosts that are all this machine (`connection: local`), every file in a temporary
//! folder. Halting, continue_on_error, timeouts, stdin, conditions, forks, connection
//! failures, and dry runs whose predictions are what the real run then does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use bosun_plans::connection::ConnectOptions;
use bosun_plans::exec::{self, Event, ExecError, HostStatus, RunOptions, RunReport, RunStatus};
use bosun_plans::model::{
    ConnectionKind, CopySource, Host, InputDef, Inventory, LineInFileArgs, Location, Module, Plan,
    SourceMap, Step, Targets,
};
use bosun_plans::modules::FileState;
use serde_json::json;

mod common;
use common::Counting;

fn local(name: &str) -> Host {
    Host {
        name: name.into(),
        address: "localhost".into(),
        port: 22,
        connection: ConnectionKind::Local,
        ..Host::default()
    }
}

fn inventory(hosts: Vec<Host>) -> Inventory {
    Inventory {
        environments: BTreeMap::new(),
        hosts,
    }
}

fn step(name: &str, module: Module) -> Step {
    Step {
        name: name.into(),
        module,
        when: None,
        sudo: false,
        continue_on_error: false,
        timeout: None,
        notify: Vec::new(),
        location: Location::default(),
    }
}

fn shell(name: &str, cmd: &str) -> Step {
    step(name, Module::Shell { cmd: cmd.into() })
}

/// A plan targeting every host of `inv`.
fn plan(inv: &Inventory, steps: Vec<Step>) -> Plan {
    Plan {
        name: "test".into(),
        targets: Targets {
            hosts: inv.hosts.iter().map(|h| h.name.clone()).collect(),
            ..Targets::default()
        },
        concurrent_runs: false,
        strict_vars: false,
        inputs: BTreeMap::new(),
        vars: BTreeMap::new(),
        schedule: None,
        on_stack_change: None,
        steps,
        handlers: Vec::new(),
        force_handlers: false,
        rollout: Default::default(),
        locations: SourceMap::default(),
    }
}

fn opts(dry_run: bool) -> RunOptions {
    RunOptions {
        dry_run,
        forks: 10,
        ..RunOptions::default()
    }
}

async fn run(plan: &Plan, inv: &Inventory, options: RunOptions) -> RunReport {
    exec::run(plan, inv, options, |_| {}).await.unwrap()
}

fn d(dir: &Path) -> String {
    dir.to_str().unwrap().to_string()
}

fn lineinfile(path: &str, regexp: Option<&str>, line: &str) -> Module {
    Module::LineInFile(LineInFileArgs {
        path: path.into(),
        line: Some(line.into()),
        regexp: regexp.map(Into::into),
        ..LineInFileArgs::default()
    })
}

fn copy(path: &str, content: &str, mode: Option<&str>) -> Module {
    Module::Copy {
        path: path.into(),
        source: CopySource::Content(content.into()),
        mode: mode.map(Into::into),
        owner: None,
    }
}

#[tokio::test]
async fn a_run_halts_at_the_first_failed_step() {
    let dir = tempfile::tempdir().unwrap();
    let dir_s = d(dir.path());
    let inv = inventory(vec![local("a"), local("b"), local("c")]);
    let p = plan(
        &inv,
        vec![
            shell("one", &format!("touch {dir_s}/{{{{ host.name }}}}.1")),
            // b fails at once; a and c are still working on the step when it does.
            shell(
                "two",
                &format!(
                    "if [ {{{{ host.name }}}} = b ]; then echo boom >&2; exit 3; fi; \
                     sleep 1; touch {dir_s}/{{{{ host.name }}}}.2"
                ),
            ),
            shell("three", &format!("touch {dir_s}/{{{{ host.name }}}}.3")),
        ],
    );
    let mut events = Vec::new();
    let report = exec::run(&p, &inv, opts(false), |e| events.push(e))
        .await
        .unwrap();

    assert_eq!(report.status, RunStatus::Failed);
    let halt = report.halted.as_ref().unwrap();
    assert_eq!((halt.step, halt.hosts.clone()), (2, vec!["b".to_string()]));
    for h in ["a", "b", "c"] {
        assert_eq!(report.result(1, h).unwrap().status, HostStatus::Changed);
        assert!(dir.path().join(format!("{h}.1")).exists());
        // Step 3 is skipped everywhere and never ran.
        let r3 = report.result(3, h).unwrap();
        assert_eq!(r3.status, HostStatus::Skipped);
        assert!(r3.message.contains("halted at step 2"), "{}", r3.message);
        assert!(!dir.path().join(format!("{h}.3")).exists());
    }
    let b = report.result(2, "b").unwrap();
    assert_eq!(b.status, HostStatus::Failed);
    assert_eq!(b.exit_code, Some(3));
    assert_eq!(b.stderr, "boom\n");
    assert!(b.message.contains("exit code 3"), "{}", b.message);
    // Hosts already running step 2 finished it.
    for h in ["a", "c"] {
        assert_eq!(report.result(2, h).unwrap().status, HostStatus::Changed);
        assert!(dir.path().join(format!("{h}.2")).exists());
    }
    assert_eq!(report.steps[1].results.len(), 3);
    let summary = report.summary();
    assert_eq!(summary[1].failed, 1);
    assert_eq!(summary[1].skipped, 1);
    assert!(events
        .iter()
        .any(|e| matches!(e, Event::Halted(h) if h.step == 2)));
    let finished = events
        .iter()
        .filter(|e| matches!(e, Event::HostFinished { .. }))
        .count();
    assert_eq!(finished, 9);
}

#[tokio::test]
async fn hosts_not_yet_started_on_a_failed_step_do_not_start_it() {
    let dir = tempfile::tempdir().unwrap();
    let dir_s = d(dir.path());
    let inv = inventory(vec![local("a"), local("b"), local("c")]);
    let p = plan(
        &inv,
        vec![shell(
            "fails on a",
            &format!("touch {dir_s}/{{{{ host.name }}}}; [ {{{{ host.name }}}} != a ]"),
        )],
    );
    let report = run(
        &p,
        &inv,
        RunOptions {
            forks: 1,
            ..opts(false)
        },
    )
    .await;
    assert_eq!(report.status, RunStatus::Failed);
    assert_eq!(report.result(1, "a").unwrap().status, HostStatus::Failed);
    for h in ["b", "c"] {
        assert_eq!(report.result(1, h).unwrap().status, HostStatus::Skipped);
        assert!(!dir.path().join(h).exists());
    }
}

#[tokio::test]
async fn continue_on_error_tolerates_a_failure() {
    let dir = tempfile::tempdir().unwrap();
    let dir_s = d(dir.path());
    let inv = inventory(vec![local("a"), local("b")]);
    let mut tolerated = shell("may fail", "echo nope >&2; exit 1");
    tolerated.continue_on_error = true;
    let p = plan(
        &inv,
        vec![
            tolerated,
            shell("after", &format!("touch {dir_s}/{{{{ host.name }}}}")),
        ],
    );
    let report = run(&p, &inv, opts(false)).await;
    assert_eq!(report.status, RunStatus::Succeeded);
    assert!(report.halted.is_none());
    for h in ["a", "b"] {
        let r = report.result(1, h).unwrap();
        assert_eq!(r.status, HostStatus::Failed);
        assert!(r.ignored);
        assert_eq!(r.exit_code, Some(1));
        assert_eq!(report.result(2, h).unwrap().status, HostStatus::Changed);
        assert!(dir.path().join(h).exists());
    }
    assert_eq!(report.summary()[0].ignored, 1);
}

#[tokio::test]
async fn a_step_timeout_fails_the_step_as_timed_out() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("late");
    let inv = inventory(vec![local("a")]);
    let mut slow = shell(
        "slow",
        &format!("(sleep 2; touch {}) & sleep 30", marker.display()),
    );
    slow.timeout = Some(Duration::from_millis(500));
    let p = plan(&inv, vec![slow, shell("next", "true")]);
    let started = Instant::now();
    let report = run(&p, &inv, opts(false)).await;
    assert!(started.elapsed() < Duration::from_secs(10));
    let r = report.result(1, "a").unwrap();
    assert_eq!(r.status, HostStatus::TimedOut);
    assert_eq!(r.exit_code, None);
    assert_eq!(r.message, "timed out after 500ms");
    assert_eq!(report.status, RunStatus::Failed);
    assert_eq!(report.result(2, "a").unwrap().status, HostStatus::Skipped);
    // The whole process group went with it.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(!marker.exists());
}

#[tokio::test]
async fn a_timed_out_step_with_continue_on_error_lets_the_run_go_on() {
    let inv = inventory(vec![local("a")]);
    let mut slow = shell("slow", "sleep 30");
    slow.timeout = Some(Duration::from_millis(200));
    slow.continue_on_error = true;
    let p = plan(&inv, vec![slow, shell("next", "true")]);
    let report = run(&p, &inv, opts(false)).await;
    let r = report.result(1, "a").unwrap();
    assert_eq!((r.status, r.ignored), (HostStatus::TimedOut, true));
    assert_eq!(report.result(2, "a").unwrap().status, HostStatus::Changed);
    assert_eq!(report.status, RunStatus::Succeeded);
}

#[tokio::test]
async fn commands_run_with_stdin_closed() {
    let inv = inventory(vec![local("a")]);
    let mut cat = step(
        "cat",
        Module::Command {
            argv: vec!["cat".into()],
        },
    );
    cat.timeout = Some(Duration::from_secs(10));
    let mut read = shell("read", "read x; echo \"read exit $?, x=[$x]\"");
    read.timeout = Some(Duration::from_secs(10));
    let p = plan(&inv, vec![cat, read]);
    let started = Instant::now();
    let report = run(&p, &inv, opts(false)).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(report.status, RunStatus::Succeeded);
    assert_eq!(report.result(1, "a").unwrap().stdout, "");
    assert_eq!(report.result(2, "a").unwrap().stdout, "read exit 1, x=[]\n");
}

#[tokio::test]
async fn conditions_skip_run_or_fail_open_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let dir_s = d(dir.path());
    let mut a = local("a");
    a.labels = vec!["web".into()];
    let inv = inventory(vec![a, local("b")]);
    let mut only_a = shell("only a", &format!("touch {dir_s}/{{{{ host.name }}}}.only"));
    only_a.when = Some(r#"host.name == "a""#.into());
    let mut web = shell("web", &format!("touch {dir_s}/{{{{ host.name }}}}.web"));
    web.when = Some(r#""web" in host.labels"#.into());
    let mut broken = shell(
        "broken",
        &format!("touch {dir_s}/{{{{ host.name }}}}.broken"),
    );
    broken.when = Some("host.name ==".into());
    let p = plan(&inv, vec![only_a, web, broken]);
    let report = run(&p, &inv, opts(false)).await;
    assert_eq!(report.status, RunStatus::Succeeded);
    assert_eq!(report.result(1, "a").unwrap().status, HostStatus::Changed);
    let skipped = report.result(1, "b").unwrap();
    assert_eq!(skipped.status, HostStatus::Skipped);
    assert!(skipped.message.contains("condition is false"));
    assert_eq!(report.result(2, "a").unwrap().status, HostStatus::Changed);
    assert_eq!(report.result(2, "b").unwrap().status, HostStatus::Skipped);
    assert!(dir.path().join("a.only").exists() && !dir.path().join("b.only").exists());
    // A malformed condition runs the step everywhere, with a warning on the run.
    for h in ["a", "b"] {
        let r = report.result(3, h).unwrap();
        assert_eq!(r.status, HostStatus::Changed);
        assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
        assert!(dir.path().join(format!("{h}.broken")).exists());
    }
    let warnings: Vec<_> = report
        .warnings
        .iter()
        .filter(|w| w.step == Some(3))
        .collect();
    assert_eq!(warnings.len(), 2);
    assert!(
        warnings[0].message.contains("fails open") && warnings[0].message.contains("host.name =="),
        "{}",
        warnings[0].message
    );
}

#[tokio::test]
async fn at_most_forks_hosts_work_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let dir_s = d(dir.path());
    std::fs::create_dir(dir.path().join("running")).unwrap();
    let hosts: Vec<Host> = (0..20).map(|i| local(&format!("h{i:02}"))).collect();
    let inv = inventory(hosts);
    let p = plan(
        &inv,
        vec![shell(
            "count",
            &format!(
                "touch {dir_s}/running/$$; ls {dir_s}/running | wc -l >> {dir_s}/counts; \
                 sleep 0.3; rm {dir_s}/running/$$"
            ),
        )],
    );
    let report = run(
        &p,
        &inv,
        RunOptions {
            forks: 5,
            ..opts(false)
        },
    )
    .await;
    assert_eq!(report.status, RunStatus::Succeeded);
    let counts: Vec<usize> = std::fs::read_to_string(dir.path().join("counts"))
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(counts.len(), 20);
    let max = counts.iter().copied().max().unwrap();
    assert!(
        max <= 5,
        "{max} hosts worked at once with forks 5: {counts:?}"
    );
    assert!(max >= 2, "no parallelism at all: {counts:?}");
}

#[tokio::test]
async fn a_host_that_cannot_connect_fails_its_first_step() {
    let unreachable = Host {
        name: "gone".into(),
        address: "127.0.0.1".into(),
        port: 1,
        connection: ConnectionKind::Ssh,
        ..Host::default()
    };
    let inv = inventory(vec![local("a"), unreachable]);
    let p = plan(&inv, vec![shell("one", "true"), shell("two", "true")]);
    let report = run(
        &p,
        &inv,
        RunOptions {
            connect: ConnectOptions {
                connect_timeout: Duration::from_secs(3),
            },
            ..opts(false)
        },
    )
    .await;
    assert_eq!(report.status, RunStatus::Failed);
    assert_eq!(report.result(1, "a").unwrap().status, HostStatus::Changed);
    let gone = report.result(1, "gone").unwrap();
    assert_eq!(gone.status, HostStatus::Failed);
    assert!(!gone.message.is_empty());
    assert_eq!(report.result(2, "a").unwrap().status, HostStatus::Skipped);
}

#[tokio::test]
async fn unknown_inputs_are_refused() {
    let inv = inventory(vec![local("a")]);
    let mut p = plan(&inv, vec![shell("one", "true")]);
    p.inputs.insert("release".into(), InputDef::default());
    let err = exec::run(
        &p,
        &inv,
        RunOptions {
            inputs: BTreeMap::from([("relase".to_string(), json!("2"))]),
            ..opts(false)
        },
        |_| {},
    )
    .await
    .unwrap_err();
    assert!(matches!(err, ExecError::UnknownInput { .. }));
    assert!(err.to_string().contains("release"), "{err}");
}

fn predicted_after(report: &RunReport, step: usize, host: &str) -> FileState {
    report
        .result(step, host)
        .unwrap()
        .prediction
        .as_ref()
        .unwrap()
        .after
        .clone()
}

fn content(state: &FileState) -> Vec<u8> {
    match state {
        FileState::File { content, .. } => content.clone(),
        other => panic!("not a file: {other:?}"),
    }
}

#[tokio::test]
async fn dry_run_predictions_are_what_the_real_run_does() {
    let dir = tempfile::tempdir().unwrap();
    let dir_s = d(dir.path());
    let app = format!("{dir_s}/app.conf");
    let fresh = format!("{dir_s}/fresh.conf");
    let new = format!("{dir_s}/new.conf");
    std::fs::write(&app, "# app\nrelease=0.9\nport=80\n").unwrap();
    std::fs::set_permissions(&app, std::fs::Permissions::from_mode(0o600)).unwrap();
    let inv = inventory(vec![local("a")]);
    let p = plan(
        &inv,
        vec![
            step("new file", copy(&new, "hello\nworld\n", Some("0640"))),
            step(
                "pin release",
                lineinfile(&app, Some("^release="), "release=1.0"),
            ),
            // A second lineinfile on the same path starts from the first one's result.
            step(
                "debug off",
                lineinfile(&app, Some("^debug="), "debug=false"),
            ),
            // A copy to a new path, then a lineinfile on that path.
            step("fresh", copy(&fresh, "a=1\n", None)),
            step("fresh b", lineinfile(&fresh, Some("^b="), "b=2")),
            step(
                "dir",
                Module::Directory {
                    path: format!("{dir_s}/sub/dir"),
                    mode: Some("0750".into()),
                    owner: None,
                },
            ),
        ],
    );

    let dry = run(&p, &inv, opts(true)).await;
    assert_eq!(dry.status, RunStatus::Succeeded, "{dry:#?}");
    // Nothing changed on the host.
    assert!(!Path::new(&new).exists() && !Path::new(&fresh).exists());
    assert!(!dir.path().join("sub").exists());
    assert_eq!(
        std::fs::read_to_string(&app).unwrap(),
        "# app\nrelease=0.9\nport=80\n"
    );
    for s in 1..=6 {
        let r = dry.result(s, "a").unwrap();
        assert_eq!(r.status, HostStatus::Changed, "step {s}: {r:#?}");
    }
    let diff = dry.result(2, "a").unwrap().diff.clone().unwrap();
    assert!(
        diff.starts_with(&format!("--- {app} (before)\n+++ {app} (after)\n")),
        "{diff}"
    );
    assert!(diff.contains("-release=0.9\n+release=1.0\n"), "{diff}");
    let diff3 = dry.result(3, "a").unwrap().diff.clone().unwrap();
    assert!(
        diff3.contains(" release=1.0\n") && diff3.contains("+debug=false\n"),
        "{diff3}"
    );
    assert!(dry
        .result(1, "a")
        .unwrap()
        .diff
        .as_ref()
        .unwrap()
        .contains("+hello\n"));

    let real = run(&p, &inv, opts(false)).await;
    assert_eq!(real.status, RunStatus::Succeeded, "{real:#?}");
    for s in 1..=6 {
        assert_eq!(real.result(s, "a").unwrap().status, HostStatus::Changed);
    }
    assert_eq!(
        content(&predicted_after(&dry, 1, "a")),
        std::fs::read(&new).unwrap()
    );
    assert_eq!(
        content(&predicted_after(&dry, 3, "a")),
        std::fs::read(&app).unwrap()
    );
    assert_eq!(
        content(&predicted_after(&dry, 5, "a")),
        std::fs::read(&fresh).unwrap()
    );
    assert_eq!(
        std::fs::read_to_string(&app).unwrap(),
        "# app\nrelease=1.0\nport=80\ndebug=false\n"
    );
    assert_eq!(std::fs::read_to_string(&fresh).unwrap(), "a=1\nb=2\n");
    let mode = |p: &str| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&new), 0o640);
    assert!(matches!(
        predicted_after(&dry, 1, "a"),
        FileState::File {
            mode: Some(0o640),
            ..
        }
    ));
    // The existing file kept its mode through the atomic replace.
    assert_eq!(mode(&app), 0o600);
    assert_eq!(mode(&format!("{dir_s}/sub/dir")), 0o750);
    // No temporary files left beside the targets.
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".bosun."))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // Run again: both modes agree on what is left to do — nothing, except the copy and
    // the lineinfile that fight over fresh.conf (the copy resets it, the lineinfile
    // adds its line again).
    let again = run(&p, &inv, opts(true)).await;
    let real_again = run(&p, &inv, opts(false)).await;
    for s in 1..=6 {
        let (d, r) = (
            again.result(s, "a").unwrap(),
            real_again.result(s, "a").unwrap(),
        );
        let expected = if s == 4 || s == 5 {
            HostStatus::Changed
        } else {
            HostStatus::Ok
        };
        assert_eq!(d.status, expected, "dry step {s}: {d:#?}");
        assert_eq!(d.diff.is_some(), expected == HostStatus::Changed);
        assert_eq!(r.status, expected, "real step {s}: {r:#?}");
    }
    assert_eq!(content(&predicted_after(&again, 4, "a")), b"a=1\n");
    assert_eq!(
        content(&predicted_after(&again, 5, "a")),
        std::fs::read(&fresh).unwrap()
    );
}

#[tokio::test]
async fn copy_from_a_local_source_and_mode_changes() {
    let dir = tempfile::tempdir().unwrap();
    let dir_s = d(dir.path());
    let src = dir.path().join("source.bin");
    std::fs::write(&src, [0u8, 159, 146, 150, 10]).unwrap();
    let target = format!("{dir_s}/target.bin");
    std::fs::write(&target, [0u8, 159, 146, 150, 10]).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).unwrap();
    let inv = inventory(vec![local("a")]);
    let p = plan(
        &inv,
        vec![step(
            "copy",
            Module::Copy {
                path: target.clone(),
                source: CopySource::Src(src.clone()),
                mode: Some("go-r".into()),
                owner: None,
            },
        )],
    );
    let dry = run(&p, &inv, opts(true)).await;
    let r = dry.result(1, "a").unwrap();
    assert_eq!(r.status, HostStatus::Changed);
    assert!(
        r.diff.as_ref().unwrap().contains("# mode 0644 → 0600"),
        "{r:#?}"
    );
    let real = run(&p, &inv, opts(false)).await;
    assert_eq!(real.result(1, "a").unwrap().status, HostStatus::Changed);
    let mode = std::fs::metadata(&target).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o600);
    let again = run(&p, &inv, opts(false)).await;
    assert_eq!(again.result(1, "a").unwrap().status, HostStatus::Ok);
}

#[tokio::test]
async fn absent_removes_and_scripts_run_with_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let dir_s = d(dir.path());
    std::fs::create_dir_all(dir.path().join("tree/deep")).unwrap();
    std::fs::write(dir.path().join("tree/deep/f"), "x").unwrap();
    let script = dir.path().join("hello.sh");
    std::fs::write(&script, "#!/bin/sh\necho \"hello $1 $2\"\ncat\n").unwrap();
    let inv = inventory(vec![local("a")]);
    let p = plan(
        &inv,
        vec![
            step(
                "script",
                Module::Script {
                    src: script.clone(),
                    args: vec!["big".into(), "world".into()],
                },
            ),
            step(
                "rm",
                Module::Absent {
                    path: format!("{dir_s}/tree"),
                },
            ),
        ],
    );
    let dry = run(&p, &inv, opts(true)).await;
    let s = dry.result(1, "a").unwrap();
    assert_eq!(s.status, HostStatus::Unknown);
    assert!(s.message.contains("cannot know"), "{}", s.message);
    let rm = dry.result(2, "a").unwrap();
    assert_eq!(rm.status, HostStatus::Changed);
    // After a raw command, a prediction says it may be inaccurate.
    assert!(
        rm.warnings.iter().any(|w| w.contains("may change this")),
        "{:?}",
        rm.warnings
    );
    assert!(dir.path().join("tree/deep/f").exists());

    let real = run(&p, &inv, opts(false)).await;
    assert_eq!(real.status, RunStatus::Succeeded, "{real:#?}");
    assert_eq!(real.result(1, "a").unwrap().stdout, "hello big world\n");
    assert!(!dir.path().join("tree").exists());
    let again = run(&p, &inv, opts(false)).await;
    assert_eq!(again.result(2, "a").unwrap().status, HostStatus::Ok);
}

#[tokio::test]
async fn dry_runs_list_unresolved_references_and_redact_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let dir_s = d(dir.path());
    let target = format!("{dir_s}/creds");
    let inv = inventory(vec![local("a"), local("b")]);
    let mut p = plan(
        &inv,
        vec![
            step(
                "creds",
                copy(
                    &target,
                    "token={{ vars.token }}\nuser={{ vars.missing }}\n",
                    None,
                ),
            ),
            shell("echo", "echo {{ inputs.nope }}"),
        ],
    );
    p.vars
        .insert("token".into(), json!("secret://prod/api-token"));

    let dry = run(&p, &inv, opts(true)).await;
    assert_eq!(dry.status, RunStatus::Succeeded);
    let r = dry.result(1, "a").unwrap();
    let diff = r.diff.as_ref().unwrap();
    assert!(diff.contains("+token=secret://[redacted]\n"), "{diff}");
    assert!(!diff.contains("api-token"), "{diff}");
    let refs: Vec<(String, usize, String)> = dry
        .unresolved
        .iter()
        .map(|u| (u.host.clone(), u.step, u.reference.clone()))
        .collect();
    assert_eq!(
        refs,
        vec![
            ("a".into(), 1, "vars.missing".into()),
            ("b".into(), 1, "vars.missing".into()),
            ("a".into(), 2, "inputs.nope".into()),
            ("b".into(), 2, "inputs.nope".into()),
        ]
    );

    // A real run refuses secret references before anything runs.
    let err = exec::run(&p, &inv, opts(false), |_| {}).await.unwrap_err();
    assert!(matches!(err, ExecError::SecretReferences { .. }));
    assert!(
        err.to_string()
            .contains("secret references need a Bosun server (plan exec has no secret store)"),
        "{err}"
    );
    assert!(!Path::new(&target).exists());
}

#[tokio::test]
async fn real_runs_substitute_given_secrets_and_mask_them_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let target = format!("{}/creds", d(dir.path()));
    let inv = inventory(vec![local("a")]);
    let mut p = plan(
        &inv,
        vec![
            step("creds", copy(&target, "token={{ vars.token }}\n", None)),
            shell(
                "echo",
                "echo got {{ vars.token }}; echo {{ vars.token }} >&2",
            ),
        ],
    );
    p.vars
        .insert("token".into(), json!("secret://prod/api-token"));
    let with_secret = |dry_run| RunOptions {
        secrets: [(
            "secret://prod/api-token".to_string(),
            "s3cr3t-value".to_string(),
        )]
        .into(),
        ..opts(dry_run)
    };

    // A dry run never substitutes: the diff shows the redacted reference.
    let dry = run(&p, &inv, with_secret(true)).await;
    let diff = dry.result(1, "a").unwrap().diff.clone().unwrap();
    assert!(diff.contains("+token=secret://[redacted]\n"), "{diff}");
    assert!(!Path::new(&target).exists());

    let mut events = Vec::new();
    let report = exec::run(&p, &inv, with_secret(false), |e| {
        events.push(format!("{e:?}"))
    })
    .await
    .unwrap();
    assert_eq!(report.status, RunStatus::Succeeded, "{report:#?}");
    // The host got the value …
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "token=s3cr3t-value\n"
    );
    // … and no text of the report or the progress shows it.
    let echoed = report.result(2, "a").unwrap();
    assert_eq!(echoed.stdout, "got ***\n");
    assert_eq!(echoed.stderr, "***\n");
    let all = format!("{report:?} {events:?}");
    assert!(!all.contains("s3cr3t-value"), "{all}");

    // A reference without a value is still refused before anything runs.
    p.vars.insert("token".into(), json!("secret://prod/other"));
    let err = exec::run(&p, &inv, with_secret(false), |_| {})
        .await
        .unwrap_err();
    assert!(matches!(err, ExecError::SecretReferences { .. }), "{err}");
}

#[tokio::test]
async fn strict_vars_fails_a_step_with_an_unresolved_reference() {
    let inv = inventory(vec![local("a")]);
    let mut p = plan(&inv, vec![shell("echo", "echo {{ vars.missing }}")]);
    p.strict_vars = true;
    let report = run(&p, &inv, opts(false)).await;
    assert_eq!(report.status, RunStatus::Failed);
    let r = report.result(1, "a").unwrap();
    assert_eq!(r.status, HostStatus::Failed);
    assert!(r.message.contains("vars.missing"), "{}", r.message);
    assert_eq!(report.unresolved.len(), 1);
}

#[tokio::test]
async fn a_failed_dry_run_step_halts_the_dry_run_too() {
    let dir = tempfile::tempdir().unwrap();
    let dir_s = d(dir.path());
    let inv = inventory(vec![local("a")]);
    // lineinfile on a missing file without `create` fails, as in Ansible.
    let p = plan(
        &inv,
        vec![
            step("missing", lineinfile(&format!("{dir_s}/nope"), None, "x=1")),
            step("after", copy(&format!("{dir_s}/after"), "x", None)),
        ],
    );
    let dry = run(&p, &inv, opts(true)).await;
    assert_eq!(dry.status, RunStatus::Failed);
    assert_eq!(dry.result(1, "a").unwrap().status, HostStatus::Failed);
    assert_eq!(dry.result(2, "a").unwrap().status, HostStatus::Skipped);
}

/// The same engine over real SSH (`bosun_testkit::sshd`, on this machine): file modules
/// whose scripts and contents travel through the remote shell's quoting, scripts with
/// awkward arguments, stdin closed, a timeout, and dry-run predictions equal to the
/// real result. Skipped loudly when sshd is not installed.
#[tokio::test]
async fn over_ssh_predictions_and_results_agree() {
    use bosun_testkit::sshd::{require_sshd, SshdFleet};
    if !require_sshd() {
        return;
    }
    let fleet = SshdFleet::start(2);
    let hosts: Vec<Host> = fleet
        .hosts()
        .iter()
        .enumerate()
        .map(|(i, s)| Host {
            name: format!("s{i}"),
            address: s.address().into(),
            port: s.port(),
            user: Some(s.user().into()),
            connection: ConnectionKind::Ssh,
            identity_file: Some(fleet.client_key_path().to_path_buf()),
            known_hosts: Some(fleet.known_hosts_path().to_path_buf()),
            ..Host::default()
        })
        .collect();
    let inv = inventory(hosts);
    let dir = tempfile::tempdir().unwrap();
    let dir_s = d(dir.path());
    let awkward = "it's \"quoted\" $HOME `x` \\ ünïcode\nno newline at the end";
    let script = dir.path().join("args.sh");
    std::fs::write(&script, "#!/bin/sh\nprintf '[%s]' \"$@\"\n").unwrap();
    let mut slow = shell("slow", "sleep 30");
    slow.timeout = Some(Duration::from_millis(500));
    slow.continue_on_error = true;
    let p = plan(
        &inv,
        vec![
            step(
                "dir",
                Module::Directory {
                    path: format!("{dir_s}/{{{{ host.name }}}}"),
                    mode: Some("0700".into()),
                    owner: None,
                },
            ),
            step(
                "awkward",
                copy(
                    &format!("{dir_s}/{{{{ host.name }}}}/awkward"),
                    awkward,
                    Some("0600"),
                ),
            ),
            step(
                "conf",
                copy(
                    &format!("{dir_s}/{{{{ host.name }}}}/app.conf"),
                    "a=1\nb=2\n",
                    None,
                ),
            ),
            step(
                "pin a",
                lineinfile(
                    &format!("{dir_s}/{{{{ host.name }}}}/app.conf"),
                    Some("^a="),
                    "a=10",
                ),
            ),
            step(
                "add c",
                lineinfile(
                    &format!("{dir_s}/{{{{ host.name }}}}/app.conf"),
                    None,
                    "c=3",
                ),
            ),
            step(
                "script",
                Module::Script {
                    src: script.clone(),
                    args: vec!["two words".into(), "it's".into(), "$HOME".into()],
                },
            ),
            shell("stdin", "cat; read x; echo read=$?"),
            slow,
        ],
    );
    let dry = run(&p, &inv, opts(true)).await;
    assert_eq!(dry.status, RunStatus::Succeeded, "{dry:#?}");
    assert!(!dir.path().join("s0").exists());
    let real = run(&p, &inv, opts(false)).await;
    assert_eq!(real.status, RunStatus::Succeeded, "{real:#?}");
    for h in ["s0", "s1"] {
        let base = dir.path().join(h);
        assert_eq!(
            std::fs::read_to_string(base.join("awkward")).unwrap(),
            awkward
        );
        assert_eq!(
            content(&predicted_after(&dry, 2, h)),
            std::fs::read(base.join("awkward")).unwrap()
        );
        assert_eq!(
            content(&predicted_after(&dry, 5, h)),
            std::fs::read(base.join("app.conf")).unwrap()
        );
        assert_eq!(
            std::fs::read_to_string(base.join("app.conf")).unwrap(),
            "a=10\nb=2\nc=3\n"
        );
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&base), 0o700);
        assert_eq!(mode(&base.join("awkward")), 0o600);
        assert_eq!(
            real.result(6, h).unwrap().stdout,
            "[two words][it's][$HOME]"
        );
        assert_eq!(real.result(7, h).unwrap().stdout, "read=1\n");
        let slow = real.result(8, h).unwrap();
        assert_eq!((slow.status, slow.ignored), (HostStatus::TimedOut, true));
    }
    // Idempotent where it should be.
    let again = run(&p, &inv, opts(false)).await;
    for s in [1, 2] {
        assert_eq!(
            again.result(s, "s0").unwrap().status,
            HostStatus::Ok,
            "step {s}"
        );
    }
}

/// Folders matter to predictions: a copy into a missing folder fails in both modes; a
/// lineinfile with `create` makes the folders above its file (as Ansible does), and a
/// later step in that folder is predicted to work; a folder an earlier step removes
/// takes its files with it.
#[tokio::test]
async fn dry_runs_follow_folders_created_and_removed_by_earlier_steps() {
    let dir = tempfile::tempdir().unwrap();
    let dir_s = d(dir.path());
    std::fs::create_dir(dir.path().join("old")).unwrap();
    std::fs::write(dir.path().join("old/keep.conf"), "x=1\n").unwrap();
    let inv = inventory(vec![local("a")]);
    let created = Module::LineInFile(LineInFileArgs {
        path: format!("{dir_s}/new/deep/app.env"),
        line: Some("A=1".into()),
        create: true,
        ..LineInFileArgs::default()
    });
    let p = plan(
        &inv,
        vec![
            step("create with parents", created),
            step(
                "copy beside it",
                copy(&format!("{dir_s}/new/deep/b"), "b\n", None),
            ),
            step(
                "made dir",
                Module::Directory {
                    path: format!("{dir_s}/made"),
                    mode: None,
                    owner: None,
                },
            ),
            step(
                "copy into made",
                copy(&format!("{dir_s}/made/c"), "c\n", None),
            ),
            step(
                "remove old",
                Module::Absent {
                    path: format!("{dir_s}/old"),
                },
            ),
            step(
                "edit removed",
                lineinfile(&format!("{dir_s}/old/keep.conf"), Some("^x="), "x=2"),
            ),
        ],
    );
    let dry = run(&p, &inv, opts(true)).await;
    for s in 1..=5 {
        assert_eq!(
            dry.result(s, "a").unwrap().status,
            HostStatus::Changed,
            "step {s}: {dry:#?}"
        );
    }
    // The file went with its folder, so the edit fails (no `create`), in both modes.
    let edit = dry.result(6, "a").unwrap();
    assert_eq!(edit.status, HostStatus::Failed, "{edit:#?}");
    assert_eq!(dry.status, RunStatus::Failed);
    let real = run(&p, &inv, opts(false)).await;
    for s in 1..=5 {
        assert_eq!(
            real.result(s, "a").unwrap().status,
            HostStatus::Changed,
            "step {s}: {real:#?}"
        );
    }
    assert_eq!(real.result(6, "a").unwrap().status, HostStatus::Failed);
    assert_eq!(real.result(6, "a").unwrap().message, edit.message);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("new/deep/app.env")).unwrap(),
        "A=1\n"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("made/c")).unwrap(),
        "c\n"
    );

    // A copy into a folder that does not exist fails, and the dry run says so first.
    let p = plan(
        &inv,
        vec![step(
            "orphan",
            copy(&format!("{dir_s}/nowhere/f"), "f", None),
        )],
    );
    let dry = run(&p, &inv, opts(true)).await;
    let real = run(&p, &inv, opts(false)).await;
    let (d1, r1) = (dry.result(1, "a").unwrap(), real.result(1, "a").unwrap());
    assert_eq!(
        (d1.status, r1.status),
        (HostStatus::Failed, HostStatus::Failed)
    );
    assert!(d1.message.contains("does not exist"), "{}", d1.message);
    assert_eq!(d1.message, r1.message);
}

/// A runner can spawn a run on a multi-threaded runtime: the future is `Send`.
#[test]
fn the_run_future_is_send() {
    fn assert_send<T: Send>(_: &T) {}
    let inv = inventory(vec![local("a")]);
    let p = plan(&inv, vec![shell("one", "true")]);
    let fut = exec::run(&p, &inv, opts(true), |_| {});
    assert_send(&fut);
}

// ---- file steps: one command each, predictions equal to what the real run does ------------

/// A path's state as the tests compare it: kind, bytes, mode, owner ids, inode.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    dir: bool,
    content: Vec<u8>,
    mode: u32,
    uid: u32,
    gid: u32,
    ino: u64,
}

fn seen(path: &Path) -> Option<Seen> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some(Seen {
        dir: m.is_dir(),
        content: if m.is_file() {
            std::fs::read(path).unwrap()
        } else {
            Vec::new()
        },
        mode: m.mode() & 0o7777,
        uid: m.uid(),
        gid: m.gid(),
        ino: m.ino(),
    })
}

/// Every path under `dir` with its state (to show a dry run changed nothing).
fn snapshot(dir: &Path) -> BTreeMap<String, Seen> {
    let mut all = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let s = seen(&p).unwrap();
            if s.dir {
                todo.push(p.clone());
            }
            all.insert(p.display().to_string(), s);
        }
    }
    all
}

fn file_with(path: &Path, content: &str, mode: u32) {
    std::fs::write(path, content).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn dir_with(path: &Path, mode: u32) {
    std::fs::create_dir_all(path).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// One file step on its own path, with the result both modes must report.
struct Case {
    name: &'static str,
    path: String,
    module: Module,
    status: HostStatus,
    message: String,
    /// The real run must leave the file's inode as it was (mode or owner changed in place).
    same_inode: bool,
}

fn running_as_root(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(dir).unwrap().uid() == 0
}

/// The cases, with their starting state made under `dir`: for `file.copy`, created,
/// unchanged, content changed (other size and same size), mode only (octal and
/// symbolic), content and symbolic mode, owner (changed only as root), a missing folder
/// above and a directory in the way; for `file.directory` and `file.absent` the same
/// kinds; `file.lineinfile` changing only the mode.
fn file_cases(dir: &Path) -> Vec<Case> {
    let root = running_as_root(dir);
    let me = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(dir).unwrap().uid()
    };
    let p = |name: &str| format!("{}/{name}", d(dir));
    let case = |name: &'static str, module: Module, status, message: String| Case {
        name,
        path: p(name),
        module,
        status,
        message,
        same_inode: false,
    };
    let copy_m =
        |name: &str, content: &str, mode: Option<&str>, owner: Option<&str>| Module::Copy {
            path: p(name),
            source: CopySource::Content(content.into()),
            mode: mode.map(Into::into),
            owner: owner.map(Into::into),
        };
    let dir_m = |name: &str, mode: Option<&str>, owner: Option<&str>| Module::Directory {
        path: p(name),
        mode: mode.map(Into::into),
        owner: owner.map(Into::into),
    };
    let at = |name: &str| dir.join(name);
    let mut cases = Vec::new();

    cases.push(case(
        "c_created",
        copy_m("c_created", "hello\n", Some("0640"), None),
        HostStatus::Changed,
        "file created".into(),
    ));
    file_with(&at("c_unchanged"), "same\n", 0o644);
    cases.push(case(
        "c_unchanged",
        copy_m("c_unchanged", "same\n", Some("0644"), None),
        HostStatus::Ok,
        "unchanged".into(),
    ));
    file_with(&at("c_content"), "old\n", 0o600);
    cases.push(case(
        "c_content",
        copy_m("c_content", "newer\n", None, None),
        HostStatus::Changed,
        "content replaced".into(),
    ));
    file_with(&at("c_same_size"), "abc\n", 0o644);
    cases.push(case(
        "c_same_size",
        copy_m("c_same_size", "xyz\n", None, None),
        HostStatus::Changed,
        "content replaced".into(),
    ));
    file_with(&at("c_mode"), "m\n", 0o644);
    cases.push(Case {
        same_inode: true,
        ..case(
            "c_mode",
            copy_m("c_mode", "m\n", Some("0600"), None),
            HostStatus::Changed,
            "mode 0644 → 0600".into(),
        )
    });
    file_with(&at("c_symbolic"), "s\n", 0o644);
    cases.push(Case {
        same_inode: true,
        ..case(
            "c_symbolic",
            copy_m("c_symbolic", "s\n", Some("go-r"), None),
            HostStatus::Changed,
            "mode 0644 → 0600".into(),
        )
    });
    file_with(&at("c_symbolic_content"), "s\n", 0o640);
    cases.push(case(
        "c_symbolic_content",
        copy_m("c_symbolic_content", "t2\n", Some("u+x"), None),
        HostStatus::Changed,
        "content replaced, mode 0640 → 0740".into(),
    ));
    file_with(&at("c_owner_same"), "o\n", 0o644);
    cases.push(case(
        "c_owner_same",
        copy_m("c_owner_same", "o\n", None, Some(&me.to_string())),
        HostStatus::Ok,
        "unchanged".into(),
    ));
    if root {
        file_with(&at("c_owner"), "o\n", 0o644);
        cases.push(Case {
            same_inode: true,
            ..case(
                "c_owner",
                copy_m("c_owner", "o\n", None, Some("65534:65534")),
                HostStatus::Changed,
                "owner set to 65534:65534".into(),
            )
        });
        file_with(&at("c_owner_content"), "o\n", 0o4755);
        cases.push(case(
            "c_owner_content",
            copy_m("c_owner_content", "o2\n", Some("4755"), Some("65534")),
            HostStatus::Changed,
            "content replaced, owner set to 65534".into(),
        ));
        cases.push(case(
            "c_owner_new",
            copy_m("c_owner_new", "n\n", Some("0600"), Some("65534:65534")),
            HostStatus::Changed,
            "file created".into(),
        ));
    }
    cases.push(case(
        "c_noparent",
        copy_m("c_missing/f", "f\n", None, None),
        HostStatus::Failed,
        format!("destination directory {} does not exist", p("c_missing")),
    ));
    cases.last_mut().unwrap().path = p("c_missing/f");
    dir_with(&at("c_isdir"), 0o755);
    cases.push(case(
        "c_isdir",
        copy_m("c_isdir", "f\n", None, None),
        HostStatus::Failed,
        format!(
            "{} is a directory; file.copy works on regular files",
            p("c_isdir")
        ),
    ));

    cases.push(case(
        "d_created",
        dir_m("d_created/a/b", Some("0750"), None),
        HostStatus::Changed,
        "directory created".into(),
    ));
    cases.last_mut().unwrap().path = p("d_created/a/b");
    cases.push(case(
        "d_created_symbolic",
        dir_m("d_created_symbolic", Some("g+s"), None),
        HostStatus::Changed,
        "directory created".into(),
    ));
    dir_with(&at("d_exists"), 0o755);
    cases.push(case(
        "d_exists",
        dir_m("d_exists", Some("0755"), None),
        HostStatus::Ok,
        "directory exists".into(),
    ));
    dir_with(&at("d_mode"), 0o755);
    cases.push(Case {
        same_inode: true,
        ..case(
            "d_mode",
            dir_m("d_mode", Some("0700"), None),
            HostStatus::Changed,
            "mode 0755 → 0700".into(),
        )
    });
    dir_with(&at("d_symbolic"), 0o755);
    cases.push(Case {
        same_inode: true,
        ..case(
            "d_symbolic",
            dir_m("d_symbolic", Some("g+w,o-rx"), None),
            HostStatus::Changed,
            "mode 0755 → 0770".into(),
        )
    });
    if root {
        dir_with(&at("d_owner"), 0o755);
        cases.push(Case {
            same_inode: true,
            ..case(
                "d_owner",
                dir_m("d_owner", None, Some("65534:65534")),
                HostStatus::Changed,
                "owner set to 65534:65534".into(),
            )
        });
    }
    file_with(&at("d_isfile"), "f\n", 0o644);
    cases.push(case(
        "d_isfile",
        dir_m("d_isfile", Some("0755"), None),
        HostStatus::Failed,
        format!("{} exists and is a file, not a directory", p("d_isfile")),
    ));

    file_with(&at("a_file"), "x\n", 0o644);
    cases.push(case(
        "a_file",
        Module::Absent { path: p("a_file") },
        HostStatus::Changed,
        "removed".into(),
    ));
    dir_with(&at("a_dir/inner"), 0o755);
    file_with(&at("a_dir/inner/f"), "x\n", 0o644);
    cases.push(case(
        "a_dir",
        Module::Absent { path: p("a_dir") },
        HostStatus::Changed,
        "directory removed (with everything in it)".into(),
    ));
    cases.push(case(
        "a_absent",
        Module::Absent {
            path: p("a_absent"),
        },
        HostStatus::Ok,
        "already absent".into(),
    ));

    file_with(&at("l_mode"), "x=1\n", 0o644);
    cases.push(Case {
        same_inode: true,
        ..case(
            "l_mode",
            Module::LineInFile(LineInFileArgs {
                path: p("l_mode"),
                regexp: Some("^x=".into()),
                line: Some("x=1".into()),
                mode: Some("0600".into()),
                ..LineInFileArgs::default()
            }),
            HostStatus::Changed,
            "mode 0644 → 0600".into(),
        )
    });
    file_with(&at("l_edit"), "x=1\ny=2\n", 0o640);
    cases.push(case(
        "l_edit",
        lineinfile(&p("l_edit"), Some("^x="), "x=5"),
        HostStatus::Changed,
        "line replaced".into(),
    ));
    cases
}

/// Whether the predicted state `after` is what the real run left at `path`.
fn agrees(after: &FileState, real: Option<&Seen>) -> Result<(), String> {
    let owner_ok = |owner: &Option<bosun_plans::modules::Ownership>, s: &Seen| match owner {
        None => true,
        Some(o) => {
            let uid = o.uid.or_else(|| o.user.parse().ok());
            let gid = o.gid.or_else(|| o.group.parse().ok());
            uid.is_none_or(|u| u == s.uid) && gid.is_none_or(|g| g == s.gid)
        }
    };
    match (after, real) {
        (FileState::Absent, None) => Ok(()),
        (
            FileState::File {
                content,
                mode,
                owner,
            },
            Some(s),
        ) if !s.dir
            && &s.content == content
            && mode.is_none_or(|m| m == s.mode)
            && owner_ok(owner, s) =>
        {
            Ok(())
        }
        (FileState::Directory { mode, owner }, Some(s))
            if s.dir && mode.is_none_or(|m| m == s.mode) && owner_ok(owner, s) =>
        {
            Ok(())
        }
        _ => Err(format!("predicted {after:?}, found {real:?}")),
    }
}

/// Dry run (changes nothing), real run (the same statuses and messages, predictions
/// equal to the files), then both again (nothing left to do).
async fn check_file_cases(inv: &Inventory, host: &str, dir: &Path) {
    let cases = file_cases(dir);
    let steps = cases
        .iter()
        .map(|c| Step {
            continue_on_error: true,
            ..step(c.name, c.module.clone())
        })
        .collect();
    let p = plan(inv, steps);
    let before = snapshot(dir);
    let dry = run(&p, inv, opts(true)).await;
    assert_eq!(snapshot(dir), before, "the dry run changed files");
    let real = run(&p, inv, opts(false)).await;
    for (i, c) in cases.iter().enumerate() {
        let (dr, rr) = (
            dry.result(i + 1, host).unwrap(),
            real.result(i + 1, host).unwrap(),
        );
        assert_eq!(
            (dr.status, rr.status),
            (c.status, c.status),
            "{}: dry {dr:#?} real {rr:#?}",
            c.name
        );
        assert_eq!(dr.message, c.message, "{} (dry)", c.name);
        assert_eq!(rr.message, c.message, "{} (real)", c.name);
        let now = seen(Path::new(&c.path));
        if let Some(pred) = &dr.prediction {
            agrees(&pred.after, now.as_ref()).unwrap_or_else(|e| panic!("{}: {e}", c.name));
        } else {
            assert!(c.status.is_failure(), "{}: no prediction", c.name);
        }
        if c.same_inode {
            let was = &before[&c.path];
            assert_eq!(now.as_ref().map(|s| s.ino), Some(was.ino), "{}", c.name);
        }
    }
    let leftovers: Vec<_> = snapshot(dir)
        .into_keys()
        .filter(|p| p.contains(".bosun."))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // Symbolic modes on directories made with the host's default mode: checked here.
    let made = seen(&dir.join("d_created_symbolic")).unwrap();
    assert_eq!(made.mode & 0o2000, 0o2000);

    let settled = snapshot(dir);
    let dry2 = run(&p, inv, opts(true)).await;
    let real2 = run(&p, inv, opts(false)).await;
    for (i, c) in cases.iter().enumerate() {
        let (dr, rr) = (
            dry2.result(i + 1, host).unwrap(),
            real2.result(i + 1, host).unwrap(),
        );
        let want = if c.status.is_failure() {
            c.status
        } else {
            HostStatus::Ok
        };
        assert_eq!((dr.status, rr.status), (want, want), "{} again", c.name);
        assert_eq!(dr.message, rr.message, "{} again", c.name);
    }
    // A run with nothing to do rewrites nothing.
    assert_eq!(snapshot(dir), settled);
}

/// An inventory host named `name` for `sshd` (see [`common::host_for`]).
fn ssh_host(name: &str, sshd: &bosun_testkit::sshd::SshdHost) -> Host {
    Host {
        name: name.into(),
        ..common::host_for(sshd)
    }
}

#[tokio::test]
async fn file_steps_over_local_predictions_and_results_agree() {
    let dir = tempfile::tempdir().unwrap();
    let inv = inventory(vec![local("a")]);
    check_file_cases(&inv, "a", dir.path()).await;
}

#[tokio::test]
async fn file_steps_over_ssh_predictions_and_results_agree() {
    use bosun_testkit::sshd::{require_sshd, SshdHost};
    if !require_sshd() {
        return;
    }
    let sshd_dir = tempfile::tempdir().unwrap();
    let sshd = SshdHost::start(sshd_dir.path());
    let inv = inventory(vec![ssh_host("s", &sshd)]);
    let dir = tempfile::tempdir().unwrap();
    check_file_cases(&inv, "s", dir.path()).await;
}

/// How many remote commands each file step takes: one for `file.copy`, `file.template`,
/// `file.directory` and `file.absent` whatever they find; `file.lineinfile` one to read
/// and one more only when it writes; a dry run one probe per path.
#[tokio::test]
async fn file_steps_take_one_remote_command_each() {
    use bosun_plans::modules::{self, mode, Overlay, Remote, RenderedModule, RenderedSource};
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| format!("{}/{n}", d(dir.path()));
    let conn = Counting {
        inner: bosun_plans::connection::local::LocalConnection::new(),
        commands: Default::default(),
    };
    let remote = Remote {
        conn: &conn,
        sudo: false,
        deadline: None,
        live: None,
    };
    let copy = |path: String, content: &str, m: Option<&str>| RenderedModule::Copy {
        path,
        source: RenderedSource::Content(content.into()),
        mode: m.map(|m| mode::parse(m).unwrap()),
        owner: None,
    };
    let line = |path: String, l: &str| RenderedModule::LineInFile {
        path,
        params: bosun_plans::lineinfile::Params {
            line: Some(l.into()),
            regexp: Some("^x=".into()),
            ..Default::default()
        },
        mode: None,
        owner: None,
    };
    let directory = |path: String| RenderedModule::Directory {
        path,
        mode: Some(mode::parse("0750").unwrap()),
        owner: None,
    };
    let rendered = |path: String, content: &str| RenderedModule::Template {
        path,
        content: content.into(),
        mode: None,
        owner: None,
    };
    file_with(&dir.path().join("conf"), "x=1\n", 0o644);
    let cases: Vec<(&str, RenderedModule, bool, usize)> = vec![
        ("copy creates", copy(p("f"), "a\n", Some("0600")), true, 1),
        ("copy unchanged", copy(p("f"), "a\n", Some("0600")), true, 1),
        ("copy content", copy(p("f"), "bb\n", None), true, 1),
        ("copy mode", copy(p("f"), "bb\n", Some("0640")), true, 1),
        ("copy no folder", copy(p("none/f"), "a\n", None), false, 1),
        (
            "copy onto a folder",
            copy(d(dir.path()), "a\n", None),
            false,
            1,
        ),
        ("template creates", rendered(p("t"), "t=1\n"), true, 1),
        ("template unchanged", rendered(p("t"), "t=1\n"), true, 1),
        ("template content", rendered(p("t"), "t=2\n"), true, 1),
        ("directory creates", directory(p("d/e")), true, 1),
        ("directory exists", directory(p("d/e")), true, 1),
        (
            "absent removes",
            RenderedModule::Absent { path: p("d") },
            true,
            1,
        ),
        (
            "absent already",
            RenderedModule::Absent { path: p("d") },
            true,
            1,
        ),
        ("lineinfile unchanged", line(p("conf"), "x=1"), true, 1),
        ("lineinfile changes", line(p("conf"), "x=2"), true, 2),
    ];
    for (what, module, ok, want) in cases {
        conn.commands.store(0, std::sync::atomic::Ordering::SeqCst);
        let result = modules::apply(&module, &remote).await;
        assert_eq!(result.is_ok(), ok, "{what}: {result:?}");
        assert_eq!(
            conn.commands.load(std::sync::atomic::Ordering::SeqCst),
            want,
            "{what}"
        );
        // A dry run probes once (the folder above an absent path in the same command).
        conn.commands.store(0, std::sync::atomic::Ordering::SeqCst);
        let _ = modules::predict(&module, &remote, &mut Overlay::new(), "s").await;
        assert_eq!(
            conn.commands.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "{what} (dry run)"
        );
    }
}

/// What a raw command prints reaches `progress` while the command runs: each host's
/// command prints a line, then waits for a file the progress callback creates only
/// when it has seen that host's line — a run that reported output only at the end of the
/// step would never finish it (the command gives up after 60 s; the test after 30 s).
/// The lines come before their host's result, masked, and past the live budget one note
/// says the rest is not shown (the result keeps all of it). File steps and dry runs
/// show nothing.
#[tokio::test]
async fn raw_commands_output_is_reported_while_they_run() {
    use bosun_plans::live::{LineKind, LIVE_BYTES};
    let dir = tempfile::tempdir().unwrap();
    let dir_s = d(dir.path());
    let inv = inventory(vec![local("a"), local("b")]);
    let big = LIVE_BYTES / 100 + 50;
    let p = plan(
        &inv,
        vec![
            shell(
                "talk",
                &format!(
                    "echo 'ready {{{{ host.name }}}} pw=hunter2'; echo warm >&2; i=0; \
                     while [ ! -e {dir_s}/{{{{ host.name }}}}.go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; \
                     printf 'done {{{{ host.name }}}}'"
                ),
            ),
            step("file", copy(&format!("{dir_s}/{{{{ host.name }}}}.conf"), "secret-ish\n", None)),
            shell(
                "flood",
                &format!("for i in $(seq {big}); do printf '%099d\\n' $i; done"),
            ),
        ],
    );
    let options = RunOptions {
        masker: Some(std::sync::Arc::new(|s: &str| s.replace("hunter2", "***"))),
        ..opts(false)
    };
    let go = dir.path().to_path_buf();
    let mut events = Vec::new();
    let report = tokio::time::timeout(
        Duration::from_secs(30),
        exec::run(&p, &inv, options, |e| {
            if let Event::Output(line) = &e {
                if line.text.starts_with("ready ") {
                    std::fs::write(go.join(format!("{}.go", line.host)), "").unwrap();
                }
            }
            events.push(e);
        }),
    )
    .await
    .expect("the first lines were reported while the commands waited for them")
    .unwrap();
    assert_eq!(report.status, RunStatus::Succeeded, "{report:#?}");

    for h in ["a", "b"] {
        let mine: Vec<String> = events
            .iter()
            .filter_map(|e| match e {
                Event::Output(l) if l.host == h && l.step == 1 => Some(l.display()),
                Event::HostFinished {
                    step: 1, result, ..
                } if result.host == h => Some("FINISHED".into()),
                _ => None,
            })
            .collect();
        assert_eq!(
            mine,
            [
                format!("[{h}] ready {h} pw=***"),
                format!("[{h} stderr] warm"),
                format!("[{h}] done {h}"),
                "FINISHED".to_string()
            ],
            "{events:#?}"
        );
        // The flood: whole lines within the budget, then one note; the result has it all.
        let flood: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                Event::Output(l) if l.host == h && l.step == 3 => Some(l),
                _ => None,
            })
            .collect();
        let (note, lines) = flood.split_last().unwrap();
        assert_eq!(note.kind, LineKind::Cut, "{note:?}");
        assert!(lines
            .iter()
            .all(|l| l.text.len() == 99 && l.kind == LineKind::Stdout));
        assert_eq!(lines.len(), LIVE_BYTES / 100);
        assert_eq!(report.result(3, h).unwrap().stdout.len(), big * 100);
        assert_eq!(
            report.result(1, h).unwrap().stdout,
            format!("ready {h} pw=***\ndone {h}")
        );
    }
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, Event::Output(l) if l.step == 2)),
        "a file step shows nothing live"
    );

    let mut events = Vec::new();
    exec::run(&p, &inv, opts(true), |e| events.push(e))
        .await
        .unwrap();
    assert!(
        !events.iter().any(|e| matches!(e, Event::Output(_))),
        "a dry run runs no command"
    );
}

/// A step's result keeps the head of each stream, and says it was cut and how much there
/// was: a runaway command cannot make a run's report (or its stored results) unbounded.
#[tokio::test]
async fn a_result_keeps_the_head_of_a_long_output_and_says_it_was_cut() {
    use bosun_plans::exec::RESULT_OUTPUT_BYTES;
    let inv = inventory(vec![local("a")]);
    let p = plan(
        &inv,
        vec![shell(
            "long",
            "head -c 200000 /dev/zero | tr '\\000' 'o'; head -c 70000 /dev/zero | tr '\\000' 'e' >&2",
        )],
    );
    let report = run(&p, &inv, opts(false)).await;
    assert_eq!(report.status, RunStatus::Succeeded, "{report:#?}");
    let result = report.result(1, "a").unwrap();
    let (head, note) = result.stdout.split_at(RESULT_OUTPUT_BYTES);
    assert!(head.bytes().all(|b| b == b'o'));
    assert_eq!(note, "\n… [truncated: 200000 bytes in all]");
    assert!(result
        .stderr
        .ends_with("\n… [truncated: 70000 bytes in all]"));
    assert!(result.stderr.starts_with('e'));
}

// ---- file.template ---------------------------------------------------------------------------

fn template(path: &str, source: CopySource, mode: Option<&str>, owner: Option<&str>) -> Module {
    Module::Template {
        path: path.into(),
        source,
        mode: mode.map(Into::into),
        owner: owner.map(Into::into),
    }
}

/// A template file (with a loop, so not just substitutions) and the text it renders to
/// on `host` with [`template_plan`]'s vars and inputs.
const APP_TEMPLATE: &str = "# {{ host.name }} at {{ host.address }}\nport={{ vars.port }}\nrelease={{ inputs.release }}\n{% for u in vars.upstreams %}\nupstream={{ u }}\n{% endfor %}\n";

fn app_rendered(host: &str, address: &str) -> String {
    format!("# {host} at {address}\nport=8080\nrelease=2.0\nupstream=10.0.0.1\nupstream=10.0.0.2\n")
}

/// Two `file.template` steps in `dir/out` (a `src` template with mode and owner, and an
/// inline one replacing an existing file), with vars and a declared input.
fn template_plan(inv: &Inventory, dir: &Path, owner: &str) -> Plan {
    let src = dir.join("app.conf.j2");
    std::fs::write(&src, APP_TEMPLATE).unwrap();
    std::fs::create_dir(dir.join("out")).unwrap();
    file_with(&dir.join("out/motd"), "old\n", 0o644);
    let out = format!("{}/out", d(dir));
    let mut p = plan(
        inv,
        vec![
            step(
                "config",
                template(
                    &format!("{out}/app.conf"),
                    CopySource::Src(src),
                    Some("0640"),
                    Some(owner),
                ),
            ),
            step(
                "motd",
                template(
                    &format!("{out}/motd"),
                    CopySource::Content("welcome to {{ host.name }}\n".into()),
                    None,
                    None,
                ),
            ),
        ],
    );
    p.vars.insert("port".into(), json!(8080));
    p.vars
        .insert("upstreams".into(), json!(["10.0.0.1", "10.0.0.2"]));
    p.inputs.insert(
        "release".into(),
        InputDef {
            default: Some(json!("1.0")),
            description: None,
        },
    );
    p
}

fn with_release(dry_run: bool) -> RunOptions {
    RunOptions {
        inputs: [("release".to_string(), json!("2.0"))].into(),
        ..opts(dry_run)
    }
}

/// A dry run predicts with a diff and changes nothing; the real run writes the rendered
/// text with mode and owner; then both find nothing to do. Every result names the module
/// `file.template`.
async fn check_template_run(inv: &Inventory, host: &str, dir: &Path) {
    use std::os::unix::fs::MetadataExt;
    let (uid, gid) = if running_as_root(dir) {
        (65534, 65534)
    } else {
        let m = std::fs::metadata(dir).unwrap();
        (m.uid(), m.gid())
    };
    let p = template_plan(inv, dir, &format!("{uid}:{gid}"));
    let address = &inv.hosts[0].address;
    let conf = dir.join("out/app.conf");
    let conf_s = d(&conf);
    let want = app_rendered(host, address);

    let before = snapshot(dir);
    let dry = run(&p, inv, with_release(true)).await;
    assert_eq!(snapshot(dir), before, "the dry run changed files");
    assert_eq!(dry.status, RunStatus::Succeeded, "{dry:#?}");
    assert_eq!(
        dry.steps.iter().map(|s| s.module).collect::<Vec<_>>(),
        ["file.template", "file.template"]
    );
    let r = dry.result(1, host).unwrap();
    assert_eq!(
        (r.status, r.message.as_str()),
        (HostStatus::Changed, "file created")
    );
    let diff = r.diff.as_deref().unwrap();
    assert!(diff.contains(&format!("+++ {conf_s} (after)")), "{diff}");
    for line in want.lines() {
        assert!(diff.contains(&format!("+{line}\n")), "{line:?} in {diff}");
    }
    assert!(!diff.contains("{{"), "{diff}");
    assert_eq!(content(&predicted_after(&dry, 1, host)), want.as_bytes());
    let r = dry.result(2, host).unwrap();
    assert_eq!(
        (r.status, r.message.as_str()),
        (HostStatus::Changed, "content replaced")
    );
    let diff = r.diff.as_deref().unwrap();
    assert!(diff.contains("-old\n"), "{diff}");
    assert!(diff.contains(&format!("+welcome to {host}\n")), "{diff}");

    let real = run(&p, inv, with_release(false)).await;
    assert_eq!(real.status, RunStatus::Succeeded, "{real:#?}");
    assert_eq!(real.steps[0].module, "file.template");
    assert_eq!(real.result(1, host).unwrap().status, HostStatus::Changed);
    assert_eq!(real.result(2, host).unwrap().status, HostStatus::Changed);
    let made = seen(&conf).unwrap();
    assert_eq!(String::from_utf8(made.content).unwrap(), want);
    assert_eq!((made.mode, made.uid, made.gid), (0o640, uid, gid));
    assert_eq!(
        std::fs::read_to_string(dir.join("out/motd")).unwrap(),
        format!("welcome to {host}\n")
    );
    let leftovers: Vec<_> = snapshot(dir)
        .into_keys()
        .filter(|p| p.contains(".bosun."))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // Idempotent: nothing left to do, in either mode, and nothing rewritten.
    let settled = snapshot(dir);
    let dry2 = run(&p, inv, with_release(true)).await;
    let again = run(&p, inv, with_release(false)).await;
    for s in [1, 2] {
        for (what, report) in [("dry", &dry2), ("real", &again)] {
            let r = report.result(s, host).unwrap();
            assert_eq!(
                (r.status, r.message.as_str(), r.diff.as_deref()),
                (HostStatus::Ok, "unchanged", None),
                "step {s} ({what}) again"
            );
        }
    }
    assert_eq!(snapshot(dir), settled);
}

#[tokio::test]
async fn templates_render_then_write_like_copies_over_local() {
    let dir = tempfile::tempdir().unwrap();
    let inv = inventory(vec![local("a")]);
    check_template_run(&inv, "a", dir.path()).await;
}

#[tokio::test]
async fn templates_render_then_write_like_copies_over_ssh() {
    use bosun_testkit::sshd::{require_sshd, SshdHost};
    if !require_sshd() {
        return;
    }
    let sshd_dir = tempfile::tempdir().unwrap();
    let sshd = SshdHost::start(sshd_dir.path());
    let inv = inventory(vec![ssh_host("s", &sshd)]);
    let dir = tempfile::tempdir().unwrap();
    check_template_run(&inv, "s", dir.path()).await;
}

/// An unresolved reference in a template file is a warning (the file is written with it
/// empty), listed with the run's unresolved references — or, under `strict_vars`, fails
/// the step before anything is written.
#[tokio::test]
async fn unresolved_references_in_a_template_warn_or_fail_under_strict_vars() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("t.j2");
    std::fs::write(
        &src,
        "a={{ vars.present }}\nb={{ vars.missing }}\nc={{ vars.guarded | default('d') }}\n",
    )
    .unwrap();
    let target = dir.path().join("out.conf");
    let inv = inventory(vec![local("a")]);
    let mut p = plan(
        &inv,
        vec![step(
            "t",
            template(&d(&target), CopySource::Src(src), None, None),
        )],
    );
    p.vars.insert("present".into(), json!(1));

    for dry_run in [true, false] {
        let report = run(&p, &inv, opts(dry_run)).await;
        assert_eq!(report.status, RunStatus::Succeeded, "{report:#?}");
        let r = report.result(1, "a").unwrap();
        assert_eq!(r.status, HostStatus::Changed);
        assert_eq!(
            r.warnings,
            ["unresolved reference(s) rendered empty: vars.missing"],
            "dry run: {dry_run}"
        );
        let refs: Vec<(usize, &str)> = report
            .unresolved
            .iter()
            .map(|u| (u.step, u.reference.as_str()))
            .collect();
        assert_eq!(refs, [(1, "vars.missing")]);
    }
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "a=1\nb=\nc=d\n");

    std::fs::remove_file(&target).unwrap();
    p.strict_vars = true;
    for dry_run in [true, false] {
        let report = run(&p, &inv, opts(dry_run)).await;
        assert_eq!(report.status, RunStatus::Failed);
        let r = report.result(1, "a").unwrap();
        assert_eq!(r.status, HostStatus::Failed);
        assert_eq!(
            r.message,
            "unresolved reference(s) with strict_vars: vars.missing"
        );
        assert_eq!(report.unresolved.len(), 1);
    }
    assert!(!target.exists());
}

/// A template file over 1 MiB, not UTF-8, missing, or with a syntax error fails its step
/// (dry or real) with a message naming the file and why, and writes nothing; a file of
/// exactly 1 MiB is rendered.
#[tokio::test]
async fn template_files_that_cannot_be_used_are_refused_naming_the_path() {
    use bosun_plans::modules::TEMPLATE_MAX_BYTES;
    let dir = tempfile::tempdir().unwrap();
    let at = |name: &str| dir.path().join(name);
    std::fs::write(at("big.j2"), vec![b'x'; TEMPLATE_MAX_BYTES + 1]).unwrap();
    std::fs::write(at("latin1.j2"), b"caf\xe9={{ host.name }}\n").unwrap();
    std::fs::write(at("broken.j2"), "line one\n{{ vars.x \nsecret-ish text\n").unwrap();
    let inv = inventory(vec![local("a")]);
    let cases = [
        (
            "big.j2",
            format!(
                "template {} is refused: it is larger than 1 MiB (1048576 bytes)",
                d(&at("big.j2"))
            ),
        ),
        (
            "latin1.j2",
            format!(
                "template {} is refused: it is not UTF-8 text (invalid bytes at offset 3)",
                d(&at("latin1.j2"))
            ),
        ),
        (
            "missing.j2",
            format!(
                "cannot read local file {}: No such file or directory",
                d(&at("missing.j2"))
            ),
        ),
        (
            "broken.j2",
            format!("template {}: syntax error", d(&at("broken.j2"))),
        ),
    ];
    for (name, says) in &cases {
        let target = at(&format!("{name}.out"));
        let p = plan(
            &inv,
            vec![step(
                "t",
                template(&d(&target), CopySource::Src(at(name)), None, None),
            )],
        );
        for dry_run in [true, false] {
            let report = run(&p, &inv, opts(dry_run)).await;
            let r = report.result(1, "a").unwrap();
            assert_eq!(r.status, HostStatus::Failed, "{name}: {r:#?}");
            assert!(
                r.message.starts_with(says.as_str()),
                "{name}: {}",
                r.message
            );
            assert!(!r.message.contains("secret-ish"), "{}", r.message);
            assert_eq!(report.steps[0].module, "file.template");
        }
        assert!(!target.exists(), "{name}");
    }

    // At the limit exactly, the template is used.
    std::fs::write(at("limit.j2"), vec![b'y'; TEMPLATE_MAX_BYTES]).unwrap();
    let target = at("limit.out");
    let p = plan(
        &inv,
        vec![step(
            "t",
            template(&d(&target), CopySource::Src(at("limit.j2")), None, None),
        )],
    );
    let report = run(&p, &inv, opts(false)).await;
    assert_eq!(
        report.status,
        RunStatus::Succeeded,
        "{:?}",
        report.result(1, "a").unwrap().message
    );
    assert_eq!(
        std::fs::metadata(&target).unwrap().len(),
        TEMPLATE_MAX_BYTES as u64
    );
}

/// A template's text is rendered like any step string: a `secret://` reference it gets
/// from a variable is substituted in a real run given its value (and masked), and one
/// the run has no value for refuses the run before anything is written.
#[tokio::test]
async fn secret_references_in_a_template_are_substituted_or_refused() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("creds.j2");
    std::fs::write(&src, "token={{ vars.token }}\n").unwrap();
    let target = dir.path().join("creds");
    let inv = inventory(vec![local("a")]);
    let mut p = plan(
        &inv,
        vec![step(
            "creds",
            template(&d(&target), CopySource::Src(src.clone()), None, None),
        )],
    );
    p.vars
        .insert("token".into(), json!("secret://prod/api-token"));
    let with_secret = RunOptions {
        secrets: [(
            "secret://prod/api-token".to_string(),
            "s3cr3t-value".to_string(),
        )]
        .into(),
        ..opts(false)
    };
    let report = run(&p, &inv, with_secret.clone()).await;
    assert_eq!(report.status, RunStatus::Succeeded, "{report:#?}");
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "token=s3cr3t-value\n"
    );
    assert!(!format!("{report:?}").contains("s3cr3t-value"));

    // Written in the template file itself, a reference the run has no value for.
    std::fs::remove_file(&target).unwrap();
    std::fs::write(&src, "token=secret://prod/other\n").unwrap();
    let err = exec::run(&p, &inv, with_secret, |_| {}).await.unwrap_err();
    assert!(matches!(err, ExecError::SecretReferences { .. }), "{err}");
    // The refusal says why a server has no value for it, and what to do instead.
    let said = err.to_string();
    assert!(
        said.contains(&format!("inside the template file {}", src.display()))
            && said.contains("set it in a variable"),
        "{said}"
    );
    assert!(!target.exists());
}

// ---- host facts ----------------------------------------------------------------------

/// What `uname FLAG` prints on this machine.
fn uname(flag: &str) -> String {
    let out = std::process::Command::new("uname")
        .arg(flag)
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A key of this machine's `/etc/os-release`, unquoted (empty when missing).
fn os_release(key: &str) -> String {
    let text = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .map(|v| v.trim().trim_matches('"').trim_matches('\'').to_string())
        .unwrap_or_default()
}

/// The OS family this machine should report, from its own `/etc/os-release`.
fn expected_family() -> String {
    let id = os_release("ID");
    let like = os_release("ID_LIKE");
    std::iter::once(id.as_str())
        .chain(like.split_whitespace())
        .find_map(bosun_plans::facts::family_of)
        .unwrap_or("unknown")
        .to_string()
}

fn when(mut s: Step, expr: &str) -> Step {
    s.when = Some(expr.into());
    s
}

/// `host.facts.*` in `when:` conditions, step strings, `file.copy` content and a
/// `file.template` `src` file, over local hosts: what this machine says of itself
/// (`uname`, `/etc/os-release`). A dry run gathers them too and predicts with them.
#[tokio::test]
async fn host_facts_drive_conditions_and_templates() {
    let dir = tempfile::tempdir().unwrap();
    let dir_s = d(dir.path());
    let family = expected_family();
    let (id, version) = (os_release("ID"), os_release("VERSION_ID"));
    let id = if id.is_empty() { "unknown".into() } else { id };
    let src = dir.path().join("facts.j2");
    std::fs::write(
        &src,
        "{{ host.facts.os_family }}/{{ host.facts.distribution }}/{{ host.facts.version }}\n",
    )
    .unwrap();
    let inv = inventory(vec![local("a"), local("b")]);
    let p = plan(
        &inv,
        vec![
            when(
                shell(
                    "same family",
                    &format!("touch {dir_s}/{{{{ host.name }}}}.same"),
                ),
                &format!("host.facts.os_family == \"{family}\""),
            ),
            when(
                shell(
                    "other family",
                    &format!("touch {dir_s}/{{{{ host.name }}}}.other"),
                ),
                &format!("host.facts.os_family != \"{family}\""),
            ),
            step(
                "arch",
                copy(
                    &format!("{dir_s}/{{{{ host.name }}}}.arch"),
                    "{{ host.facts.arch }} {{ host.facts.hostname }}\n",
                    None,
                ),
            ),
            step(
                "template",
                template(
                    &format!("{dir_s}/{{{{ host.name }}}}.os"),
                    CopySource::Src(src),
                    None,
                    None,
                ),
            ),
        ],
    );
    let arch_line = format!("{} {}\n", uname("-m"), uname("-n"));
    let os_line = format!("{family}/{id}/{version}\n");

    let dry = run(&p, &inv, opts(true)).await;
    assert_eq!(dry.status, RunStatus::Succeeded, "{dry:#?}");
    assert!(dry.unresolved.is_empty(), "{dry:#?}");
    for h in ["a", "b"] {
        assert_eq!(dry.result(1, h).unwrap().status, HostStatus::Unknown);
        assert_eq!(dry.result(2, h).unwrap().status, HostStatus::Skipped);
        let arch = dry.result(3, h).unwrap();
        assert!(
            arch.diff
                .as_deref()
                .unwrap_or("")
                .contains(&format!("+{arch_line}")),
            "{arch:#?}"
        );
        let os = dry.result(4, h).unwrap();
        assert!(
            os.diff
                .as_deref()
                .unwrap_or("")
                .contains(&format!("+{os_line}")),
            "{os:#?}"
        );
    }
    assert!(!dir.path().join("a.arch").exists());

    let report = run(&p, &inv, opts(false)).await;
    assert_eq!(report.status, RunStatus::Succeeded, "{report:#?}");
    assert!(report.warnings.is_empty(), "{report:#?}");
    for h in ["a", "b"] {
        assert_eq!(report.result(1, h).unwrap().status, HostStatus::Changed);
        let skipped = report.result(2, h).unwrap();
        assert_eq!(skipped.status, HostStatus::Skipped);
        assert!(
            skipped.message.contains("condition is false"),
            "{skipped:#?}"
        );
        assert!(dir.path().join(format!("{h}.same")).exists());
        assert!(!dir.path().join(format!("{h}.other")).exists());
        let read = |ext: &str| std::fs::read_to_string(dir.path().join(format!("{h}.{ext}")));
        assert_eq!(read("arch").unwrap(), arch_line);
        assert_eq!(read("os").unwrap(), os_line);
    }
}

/// An unknown fact is an unresolved reference: a warning (rendered empty), or a failed
/// step under `strict_vars`.
#[tokio::test]
async fn an_unknown_fact_warns_or_fails_under_strict_vars() {
    let inv = inventory(vec![local("a")]);
    let mut p = plan(
        &inv,
        vec![shell(
            "echo",
            "echo [{{ host.facts.nope }}] {{ host.facts.arch }}",
        )],
    );
    let report = run(&p, &inv, opts(false)).await;
    assert_eq!(report.status, RunStatus::Succeeded, "{report:#?}");
    let r = report.result(1, "a").unwrap();
    assert_eq!(r.stdout, format!("[] {}\n", uname("-m")));
    assert_eq!(
        r.warnings,
        ["unresolved reference(s) rendered empty: host.facts.nope"]
    );
    assert_eq!(report.unresolved.len(), 1);
    assert_eq!(report.unresolved[0].reference, "host.facts.nope");

    p.strict_vars = true;
    let report = run(&p, &inv, opts(false)).await;
    assert_eq!(report.status, RunStatus::Failed);
    let r = report.result(1, "a").unwrap();
    assert_eq!(r.status, HostStatus::Failed);
    assert!(r.message.contains("host.facts.nope"), "{}", r.message);
}

/// Gathering is one command on the host's connection.
#[tokio::test]
async fn gathering_facts_is_one_remote_command() {
    let conn = Counting {
        inner: bosun_plans::connection::local::LocalConnection::new(),
        commands: Default::default(),
    };
    let facts = bosun_plans::facts::gather(&conn).await.unwrap();
    assert_eq!(conn.commands.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(facts.arch, uname("-m"));
    assert_eq!(facts.hostname, uname("-n"));
    assert_eq!(facts.os_family, expected_family());
    assert_eq!(facts.version, os_release("VERSION_ID"));
}

/// An sshd host whose sessions find a stand-in `uname` first on their `PATH`, which
/// logs each call (its arguments, one line) to `<dir>/uname.log` and then runs the real
/// one; with `real_uname: false` the `PATH` has a shell and nothing else.
fn sshd_logging_uname(dir: &Path, real_uname: bool) -> (bosun_testkit::sshd::SshdHost, Host) {
    use bosun_testkit::sshd::{SshdHost, SshdOptions};
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let path = if real_uname {
        let real = which("uname");
        let stand_in = bin.join("uname");
        std::fs::write(
            &stand_in,
            format!(
                "#!/bin/sh\nprintf '%s\\n' \"$*\" >> {}\nexec {real} \"$@\"\n",
                dir.join("uname.log").display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&stand_in, std::fs::Permissions::from_mode(0o755)).unwrap();
        format!("{}:/usr/bin:/bin", bin.display())
    } else {
        std::os::unix::fs::symlink("/bin/sh", bin.join("sh")).unwrap();
        bin.display().to_string()
    };
    let sshd = SshdHost::start_with(
        &dir.join("sshd"),
        SshdOptions {
            session_env: vec![("PATH".into(), path)],
            ..SshdOptions::default()
        },
    );
    let host = ssh_host(dir.file_name().unwrap().to_str().unwrap(), &sshd);
    (sshd, host)
}

fn which(program: &str) -> String {
    let out = std::process::Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The calls a stand-in `uname` logged.
fn uname_calls(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("uname.log"))
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

/// Over real sshd hosts: facts referred to by several steps (conditions, a copy's
/// content, shell commands) are gathered once per host — one `uname -m` and one
/// `uname -n` each, at the first step that needs them — and a plan that does not refer
/// to them (even with a variable named `facts…`) runs no such command at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_facts_are_gathered_once_per_host_and_only_when_referenced() {
    if !bosun_testkit::sshd::require_sshd() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let dirs: Vec<std::path::PathBuf> = ["s1", "s2"].iter().map(|n| root.path().join(n)).collect();
    let mut sshds = Vec::new();
    let mut hosts = Vec::new();
    for dir in &dirs {
        std::fs::create_dir_all(dir).unwrap();
        let (sshd, host) = sshd_logging_uname(dir, true);
        sshds.push(sshd);
        hosts.push(host);
    }
    let inv = inventory(hosts);
    let out = root.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let out_s = d(&out);
    let family = expected_family();
    let with_facts = plan(
        &inv,
        vec![
            shell("plain", "echo {{ host.name }}"),
            when(
                shell("on the family", "echo {{ host.facts.hostname }}"),
                &format!("host.facts.os_family == \"{family}\""),
            ),
            step(
                "arch",
                copy(
                    &format!("{out_s}/{{{{ host.name }}}}.arch"),
                    "{{ host.facts.arch }}\n",
                    None,
                ),
            ),
            shell("again", "echo {{ host.facts.distribution }}"),
            when(
                shell("not the family", "echo no"),
                &format!("host.facts.os_family != \"{family}\""),
            ),
        ],
    );
    let report = run(&with_facts, &inv, opts(false)).await;
    assert_eq!(report.status, RunStatus::Succeeded, "{report:#?}");
    for (dir, host) in dirs.iter().zip(&inv.hosts) {
        let mut calls = uname_calls(dir);
        calls.sort();
        assert_eq!(calls, ["-m", "-n"], "{}", host.name);
        assert_eq!(
            report.result(2, &host.name).unwrap().stdout,
            format!("{}\n", uname("-n"))
        );
        assert_eq!(
            report.result(5, &host.name).unwrap().status,
            HostStatus::Skipped
        );
        assert_eq!(
            std::fs::read_to_string(out.join(format!("{}.arch", host.name))).unwrap(),
            format!("{}\n", uname("-m"))
        );
        std::fs::remove_file(dir.join("uname.log")).unwrap();
    }

    let mut without = plan(
        &inv,
        vec![
            shell("plain", "echo {{ host.name }} {{ vars.facts_dir }}"),
            when(shell("cond", "echo facts"), "host.name != \"\""),
            step(
                "copy",
                copy(
                    &format!("{out_s}/{{{{ host.name }}}}.plain"),
                    "facts\n",
                    None,
                ),
            ),
        ],
    );
    without.vars.insert("facts_dir".into(), json!("/srv/facts"));
    for dry_run in [true, false] {
        let report = run(&without, &inv, opts(dry_run)).await;
        assert_eq!(report.status, RunStatus::Succeeded, "{report:#?}");
        for dir in &dirs {
            assert_eq!(uname_calls(dir), Vec::<String>::new(), "dry run: {dry_run}");
        }
    }
}

/// A host whose facts cannot be gathered (here: no `uname` on its `PATH`) fails like a
/// host that cannot connect: the step that needed them fails saying why, and so does
/// every later step the host reaches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_whose_facts_cannot_be_gathered_fails_like_one_that_cannot_connect() {
    if !bosun_testkit::sshd::require_sshd() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("bare");
    std::fs::create_dir_all(&dir).unwrap();
    let (_sshd, host) = sshd_logging_uname(&dir, false);
    let inv = inventory(vec![host]);
    let mut first = shell("facts", "echo {{ host.facts.arch }}");
    first.continue_on_error = true;
    let p = plan(&inv, vec![first, shell("plain", "echo hi")]);
    let report = run(&p, &inv, opts(false)).await;
    assert_eq!(report.status, RunStatus::Failed, "{report:#?}");
    for n in [1, 2] {
        let r = report.result(n, "bare").unwrap();
        assert_eq!(r.status, HostStatus::Failed, "step {n}: {r:#?}");
        assert_eq!(
            r.message, "cannot gather host facts: `uname -m` printed nothing",
            "step {n}"
        );
    }
}
