//! `bosun plan exec`, `bosun plan lint` and `bosun host check` end to end: the real
//! binary on YAML plan and inventory files (`exec`'s output read as it is printed where
//! that matters), with `connection: local` hosts working in a
//! temporary folder. No server: these commands must not need BOSUN_URL or BOSUN_TOKEN.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;
use tempfile::TempDir;

const BIN: &str = env!("CARGO_BIN_EXE_bosun");

/// Runs `bosun` with `args` in `dir`, pointing the client options at nothing usable.
fn bosun(dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .env("BOSUN_URL", "http://127.0.0.1:9")
        .env_remove("BOSUN_TOKEN")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn describe(out: &Output) -> String {
    let (o, e) = text(out);
    format!("status: {:?}\nstdout:\n{o}\nstderr:\n{e}", out.status)
}

/// A folder with `inventory.yaml` (local hosts a and b) and a `work/` folder.
fn setup() -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("work")).unwrap();
    std::fs::write(
        dir.path().join("inventory.yaml"),
        "environments:\n  staging: { vars: { port: 8080 } }\nhosts:\n  a: { connection: local, environment: staging, labels: [web] }\n  b: { connection: local, environment: staging }\n",
    )
    .unwrap();
    dir
}

fn write_plan(dir: &Path, name: &str, body: &str) {
    let work = dir.join("work");
    std::fs::write(dir.join(name), body.replace("WORK", work.to_str().unwrap())).unwrap();
}

const APP_PLAN: &str = r#"name: app-config
targets:
  environments: [staging]
inputs:
  release: { default: "1.0" }
vars:
  app: shop
steps:
  - name: config
    file.copy:
      path: "WORK/{{ host.name }}.conf"
      content: "app={{ vars.app }}\nport={{ vars.port }}\n"
      mode: "0640"
  - name: pin release
    file.lineinfile:
      path: "WORK/{{ host.name }}.env"
      regexp: "^RELEASE="
      line: "RELEASE={{ inputs.release }}"
      create: true
  - name: greet web
    command: ["sh", "-c", "echo hello > WORK/{{ host.name }}.greeted"]
    when: '"web" in host.labels'
"#;

#[test]
fn exec_runs_a_plan_on_local_hosts() {
    let dir = setup();
    write_plan(dir.path(), "plan.yaml", APP_PLAN);
    let out = bosun(
        dir.path(),
        &[
            "plan",
            "exec",
            "plan.yaml",
            "--inventory",
            "inventory.yaml",
            "--input",
            "release=2.0",
        ],
    );
    assert!(out.status.success(), "{}", describe(&out));
    let (stdout, _) = text(&out);
    let work = dir.path().join("work");
    for h in ["a", "b"] {
        assert_eq!(
            std::fs::read_to_string(work.join(format!("{h}.conf"))).unwrap(),
            "app=shop\nport=8080\n"
        );
        assert_eq!(
            std::fs::read_to_string(work.join(format!("{h}.env"))).unwrap(),
            "RELEASE=2.0\n"
        );
        // Live progress: one line per host and step.
        assert!(
            stdout.contains(&format!("[1/3 config] {h}: changed")),
            "{stdout}"
        );
    }
    assert!(work.join("a.greeted").exists());
    assert!(!work.join("b.greeted").exists());
    assert!(stdout.contains("[3/3 greet web] b: skipped"), "{stdout}");
    // The summary table and the verdict.
    assert!(
        stdout.contains("HOST  OK  CHANGED  FAILED  IGNORED  SKIPPED"),
        "{stdout}"
    );
    assert!(
        stdout.contains("Run of \"app-config\" succeeded."),
        "{stdout}"
    );

    // A second run changes nothing but the raw command.
    let out = bosun(
        dir.path(),
        &[
            "plan",
            "exec",
            "plan.yaml",
            "-i",
            "inventory.yaml",
            "--input",
            "release=2.0",
            "--json",
        ],
    );
    assert!(out.status.success(), "{}", describe(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["status"], "succeeded");
    assert_eq!(report["steps"][0]["results"][0]["status"], "ok");
    assert_eq!(report["steps"][1]["results"][1]["status"], "ok");
    assert_eq!(report["steps"][2]["results"][0]["status"], "changed");
}

#[test]
fn a_failed_run_exits_non_zero_and_skips_later_steps() {
    let dir = setup();
    write_plan(
        dir.path(),
        "fail.yaml",
        r#"name: failing
targets: { hosts: [a, b] }
steps:
  - name: one
    shell: "touch WORK/{{ host.name }}.1"
  - name: two
    shell: "if [ {{ host.name }} = b ]; then echo broken >&2; exit 4; fi"
  - name: three
    shell: "touch WORK/{{ host.name }}.3"
"#,
    );
    let out = bosun(
        dir.path(),
        &["plan", "exec", "fail.yaml", "-i", "inventory.yaml"],
    );
    assert!(!out.status.success(), "{}", describe(&out));
    let (stdout, _) = text(&out);
    assert!(
        stdout.contains("Run of \"failing\" failed at step 2 (\"two\") on b."),
        "{stdout}"
    );
    assert!(stdout.contains("exit code 4: broken"), "{stdout}");
    let work = dir.path().join("work");
    assert!(work.join("a.1").exists() && work.join("b.1").exists());
    assert!(!work.join("a.3").exists() && !work.join("b.3").exists());
}

/// A rolling plan with a handler: the progress names each batch and the handler, the
/// report ends with the batches, and a health check that fails stops the rollout with
/// its reason.
#[test]
fn exec_shows_batches_handlers_and_a_stopped_rollout() {
    let dir = setup();
    write_plan(
        dir.path(),
        "rolling.yaml",
        r#"name: rolling
targets: { hosts: [a, b] }
serial: 1
health_check:
  shell: "test -f WORK/{{ host.name }}.conf"
steps:
  - name: config
    file.copy: { path: "WORK/{{ host.name }}.conf", content: "v1\n" }
    notify: reload
handlers:
  - name: reload
    shell: "touch WORK/{{ host.name }}.reloaded"
"#,
    );
    let out = bosun(
        dir.path(),
        &["plan", "exec", "rolling.yaml", "-i", "inventory.yaml"],
    );
    assert!(out.status.success(), "{}", describe(&out));
    let (stdout, _) = text(&out);
    for want in [
        "batch 1/2: a",
        "batch 2/2: b",
        "[handler reload] a: changed",
        "[health check] b: changed",
        "Batches:\n  1: a — succeeded\n  2: b — succeeded",
    ] {
        assert!(stdout.contains(want), "{want:?} in:\n{stdout}");
    }
    let work = dir.path().join("work");
    assert!(work.join("a.reloaded").exists() && work.join("b.reloaded").exists());

    // b's config is not where the health check looks: the rollout stops after batch 1.
    std::fs::remove_dir_all(&work).unwrap();
    std::fs::create_dir(&work).unwrap();
    write_plan(
        dir.path(),
        "stops.yaml",
        r#"name: stops
targets: { hosts: [a, b] }
serial: 1
health_check:
  shell: "test -f WORK/ok"
steps:
  - name: config
    file.copy: { path: "WORK/{{ host.name }}.conf", content: "v1\n" }
"#,
    );
    let out = bosun(
        dir.path(),
        &["plan", "exec", "stops.yaml", "-i", "inventory.yaml"],
    );
    assert!(!out.status.success(), "{}", describe(&out));
    let (stdout, _) = text(&out);
    assert!(
        stdout
            .contains("Run of \"stops\" failed: the health check failed on a: the rollout stops."),
        "{stdout}"
    );
    assert!(stdout.contains("  2: b — not run"), "{stdout}");
    assert!(!work.join("b.conf").exists());
}

/// What a step's command prints is on the terminal while the step runs, each line
/// prefixed by its host: every host's command prints a line, then waits for a file the
/// test creates only once `bosun plan exec` has printed that host's line (a run that
/// printed output only at the end of the step would never end it; the commands give up
/// after 60 s, the test after 30 s). A host's lines come before its result.
#[test]
fn exec_prints_what_commands_print_while_they_run() {
    use std::io::BufRead as _;
    use std::time::{Duration, Instant};
    let dir = setup();
    write_plan(
        dir.path(),
        "talk.yaml",
        r#"name: talk
targets: { hosts: [a, b] }
steps:
  - name: talk
    shell: 'echo "ready {{ host.name }}"; echo "warming {{ host.name }}" >&2; i=0; while [ ! -e WORK/{{ host.name }}.go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; echo "done {{ host.name }}"'
"#,
    );
    let mut child = Command::new(BIN)
        .args(["plan", "exec", "talk.yaml", "-i", "inventory.yaml"])
        .current_dir(dir.path())
        .env("BOSUN_URL", "http://127.0.0.1:9")
        .env_remove("BOSUN_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let work = dir.path().join("work");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen: Vec<String> = Vec::new();
    for h in ["a", "b"] {
        let want = format!("[{h}] ready {h}");
        while !seen.contains(&want) {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) => seen.push(line),
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "{want:?} was not printed while the step waited:\n{}",
                        seen.join("\n")
                    );
                }
            }
        }
        std::fs::write(work.join(format!("{h}.go")), "").unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => seen.push(line),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the run did not end:\n{}", seen.join("\n"));
            }
        }
    }
    let status = child.wait().unwrap();
    let out = seen.join("\n");
    assert!(status.success(), "{out}");
    for h in ["a", "b"] {
        assert!(out.contains(&format!("[{h} stderr] warming {h}")), "{out}");
        let done = out.find(&format!("[{h}] done {h}")).expect(&out);
        let finished = out.find(&format!("[1/1 talk] {h}: changed")).expect(&out);
        assert!(
            done < finished,
            "a host's lines come before its result:\n{out}"
        );
    }
}

#[test]
fn dry_run_shows_diffs_and_lists_unresolved_variables_at_the_bottom() {
    let dir = setup();
    let work = dir.path().join("work");
    std::fs::write(work.join("a.conf"), "app=shop\nrelease=0.9\nport=8080\n").unwrap();
    write_plan(
        dir.path(),
        "dry.yaml",
        r#"name: dry
targets: { hosts: [a] }
vars: { token: "secret://prod/api-key" }
steps:
  - name: pin release
    file.lineinfile:
      path: "WORK/a.conf"
      regexp: "^release="
      line: "release={{ vars.missing }}1.0"
  - name: again
    file.lineinfile:
      path: "WORK/a.conf"
      line: "token={{ vars.token }}"
  - name: restart
    command: ["systemctl", "restart", "shop"]
"#,
    );
    let out = bosun(
        dir.path(),
        &[
            "plan",
            "exec",
            "dry.yaml",
            "-i",
            "inventory.yaml",
            "--dry-run",
        ],
    );
    assert!(out.status.success(), "{}", describe(&out));
    let (stdout, _) = text(&out);
    let conf = work.join("a.conf");
    let conf_s = conf.to_str().unwrap();
    assert!(
        stdout.contains(&format!("--- {conf_s} (before)")),
        "{stdout}"
    );
    assert!(stdout.contains("-release=0.9"), "{stdout}");
    assert!(stdout.contains("+release=1.0"), "{stdout}");
    // The second step starts from the first one's prediction.
    assert!(stdout.contains(" release=1.0"), "{stdout}");
    assert!(stdout.contains("+token=secret://[redacted]"), "{stdout}");
    assert!(!stdout.contains("api-key"), "{stdout}");
    assert!(stdout.contains("cannot know"), "{stdout}");
    // Nothing changed.
    assert_eq!(
        std::fs::read_to_string(&conf).unwrap(),
        "app=shop\nrelease=0.9\nport=8080\n"
    );
    // The unresolved references are the last thing printed.
    let tail = stdout
        .rsplit_once("Unresolved variables (rendered empty):\n")
        .map(|(_, t)| t)
        .unwrap_or_else(|| panic!("no unresolved section:\n{stdout}"));
    assert_eq!(tail, "  vars.missing — step 1 \"pin release\" on a\n");

    // For real, the secret reference is refused before anything runs.
    let out = bosun(
        dir.path(),
        &["plan", "exec", "dry.yaml", "-i", "inventory.yaml"],
    );
    assert!(!out.status.success());
    let (_, stderr) = text(&out);
    assert!(
        stderr.contains("secret references need a Bosun server (plan exec has no secret store)"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(&conf).unwrap(),
        "app=shop\nrelease=0.9\nport=8080\n"
    );
}

#[test]
fn bad_files_and_inputs_are_reported() {
    let dir = setup();
    write_plan(dir.path(), "plan.yaml", APP_PLAN);
    let out = bosun(
        dir.path(),
        &[
            "plan",
            "exec",
            "plan.yaml",
            "-i",
            "inventory.yaml",
            "--input",
            "relase=2",
        ],
    );
    assert!(!out.status.success());
    assert!(
        text(&out).1.contains("unknown input \"relase\""),
        "{}",
        describe(&out)
    );

    std::fs::write(dir.path().join("broken.yaml"), "name: x\nsteps: [\n").unwrap();
    let out = bosun(
        dir.path(),
        &["plan", "exec", "broken.yaml", "-i", "inventory.yaml"],
    );
    assert!(!out.status.success());
    assert!(text(&out).1.contains("broken.yaml"), "{}", describe(&out));
}

#[test]
fn lint_reports_malformed_conditions() {
    let dir = setup();
    write_plan(dir.path(), "plan.yaml", APP_PLAN);
    let out = bosun(
        dir.path(),
        &["plan", "lint", "plan.yaml", "-i", "inventory.yaml"],
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert!(text(&out).0.contains("no problems found"));

    write_plan(
        dir.path(),
        "bad.yaml",
        "name: bad\ntargets: { hosts: [a] }\nsteps:\n  - shell: echo hi\n    when: 'vars.x =='\n",
    );
    let out = bosun(dir.path(), &["plan", "lint", "bad.yaml"]);
    assert!(!out.status.success(), "{}", describe(&out));
    let (stdout, _) = text(&out);
    assert!(stdout.contains("bad.yaml:5:"), "{stdout}");
    assert!(stdout.contains("malformed condition"), "{stdout}");
    let out = bosun(dir.path(), &["plan", "lint", "bad.yaml", "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["findings"][0]["line"], 5);
}

#[test]
fn host_check_reports_stages() {
    let dir = setup();
    let out = bosun(dir.path(), &["host", "check", "a", "-i", "inventory.yaml"]);
    assert!(out.status.success(), "{}", describe(&out));
    let (stdout, _) = text(&out);
    for stage in ["resolve", "connect", "host key", "authenticate", "sudo"] {
        assert!(stdout.contains(stage), "{stdout}");
    }
    let out = bosun(
        dir.path(),
        &["host", "check", "a", "-i", "inventory.yaml", "--json"],
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["host"], "a");
    assert_eq!(v["stages"][0]["stage"], "resolve");

    let out = bosun(
        dir.path(),
        &["host", "check", "nope", "-i", "inventory.yaml"],
    );
    assert!(!out.status.success());
    assert!(
        text(&out).1.contains("no host \"nope\""),
        "{}",
        describe(&out)
    );
}

/// `bosun host check` of a host behind a bastion: the bastion's stages first, named after
/// it, in the table and the JSON; a bastion whose key is wrong fails the check, and the
/// verdict names it.
#[test]
fn host_check_shows_the_bastion_s_stages_and_names_the_hop_that_broke() {
    use bosun_testkit::sshd::{keygen, require_sshd, KeyType, SshdFleet};
    if !require_sshd() {
        return;
    }
    let fleet = SshdFleet::start(2);
    let dir = tempfile::tempdir().unwrap();
    let stranger = keygen(&dir.path().join("stranger"), KeyType::Ed25519).public_key();
    let inventory = |bastion_extra: &str| {
        let [bastion, target] = fleet.hosts() else {
            unreachable!()
        };
        let line = |name: &str, h: &bosun_testkit::SshdHost, extra: &str| {
            format!(
                "  {name}: {{ address: {}, port: {}, user: {}{extra} }}\n",
                h.address(),
                h.port(),
                h.user()
            )
        };
        let text = format!(
            "defaults: {{ identity_file: {}, known_hosts: {} }}\nhosts:\n{}{}",
            fleet.client_key_path().display(),
            fleet.known_hosts_path().display(),
            line("edge", bastion, bastion_extra),
            line("app", target, ", proxy_jump: edge"),
        );
        std::fs::write(dir.path().join("inventory.yaml"), text).unwrap();
    };

    inventory("");
    let out = bosun(
        dir.path(),
        &["host", "check", "app", "-i", "inventory.yaml"],
    );
    assert!(out.status.success(), "{}", describe(&out));
    let (stdout, _) = text(&out);
    let rows: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.split("  ").next())
        .collect();
    // The bastion's stages, then the host's own, each named after its host.
    let mut expected = Vec::new();
    for host in ["edge", "app"] {
        for stage in ["resolve", "connect", "host key", "authenticate"] {
            expected.push(format!("{host}: {stage}"));
        }
    }
    expected.push("app: sudo".into());
    let named: Vec<&str> = rows
        .iter()
        .map(|r| r.trim())
        .filter(|r| r.starts_with("edge: ") || r.starts_with("app: "))
        .collect();
    // (The last is the verdict: ok, or with warnings where this machine's sudo asks.)
    assert_eq!(named[..named.len() - 1], expected, "{stdout}");
    let through = stdout
        .lines()
        .find(|l| l.starts_with("app: connect "))
        .unwrap_or_else(|| panic!("no row for the host's connect: {stdout}"));
    assert!(through.contains("through bastion \"edge\""), "{stdout}");
    let out = bosun(
        dir.path(),
        &["host", "check", "app", "-i", "inventory.yaml", "--json"],
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["stages"][0]["bastion"], "edge", "{v:#}");
    assert_eq!(v["stages"][0]["stage"], "resolve", "{v:#}");
    assert_eq!(v["stages"][4]["bastion"], Value::Null, "{v:#}");

    inventory(&format!(", host_key: '{stranger}'"));
    let out = bosun(
        dir.path(),
        &["host", "check", "app", "-i", "inventory.yaml"],
    );
    assert!(!out.status.success(), "{}", describe(&out));
    let (stdout, _) = text(&out);
    assert!(
        stdout.contains("app: cannot be managed (bastion \"edge\" failed at host key)"),
        "{stdout}"
    );
}

/// The whole plan flow over real SSH: three loopback sshd hosts with their own host keys,
/// known_hosts verification, a malformed condition that fails open, an unresolved
/// variable, continue_on_error, halting at the first failed step, and a host whose key
/// changed refused before anything runs on it.
#[test]
fn exec_over_ssh_halts_tolerates_and_refuses_changed_host_keys() {
    use bosun_testkit::sshd::{require_sshd, SshdFleet};
    if !require_sshd() {
        return;
    }
    let fleet = SshdFleet::start(3);
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let mut inv = String::from("hosts:\n");
    for (i, h) in fleet.hosts().iter().enumerate() {
        inv.push_str(&format!(
            "  h{i}: {{ address: {}, port: {}, user: {}, identity_file: {}, known_hosts: {}, labels: [fleet] }}\n",
            h.address(),
            h.port(),
            h.user(),
            fleet.client_key_path().display(),
            fleet.known_hosts_path().display()
        ));
    }
    std::fs::write(dir.path().join("inventory.yaml"), &inv).unwrap();
    let plan = format!(
        r#"name: fleet
targets: {{ labels: [fleet] }}
steps:
  - name: conf
    file.lineinfile:
      path: "{w}/{{{{ host.name }}}}.conf"
      line: "owner={{{{ vars.owner }}}}"
      create: true
  - name: guarded
    shell: "touch {w}/{{{{ host.name }}}}.guarded"
    when: 'vars.x =='
  - name: tolerated
    shell: "exit 3"
    continue_on_error: true
  - name: fails on h1
    shell: 'test "{{{{ host.name }}}}" != h1'
  - name: never
    shell: "touch {w}/{{{{ host.name }}}}.never"
"#,
        w = work.display()
    );
    std::fs::write(dir.path().join("plan.yaml"), plan).unwrap();
    let out = bosun(
        dir.path(),
        &[
            "plan",
            "exec",
            "plan.yaml",
            "--inventory",
            "inventory.yaml",
            "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", describe(&out)));
    assert_eq!(report["status"], "failed", "{report:#}");
    for i in 0..3 {
        // The unresolved variable rendered empty; the malformed guard failed open.
        assert_eq!(
            std::fs::read_to_string(work.join(format!("h{i}.conf"))).unwrap(),
            "owner=\n"
        );
        assert!(work.join(format!("h{i}.guarded")).exists());
        assert!(
            !work.join(format!("h{i}.never")).exists(),
            "halted before the last step"
        );
    }
    let json_text = report.to_string();
    assert!(
        json_text.contains("vars.owner"),
        "unresolved reference listed: {report:#}"
    );
    assert!(
        json_text.contains("vars.x"),
        "the malformed condition is warned about: {report:#}"
    );

    // A host whose key changed is refused, naming the problem; the others still run.
    let known = std::fs::read_to_string(fleet.known_hosts_path()).unwrap();
    let other = fleet.hosts()[1].host_public_key().to_string();
    let first_line = known.lines().next().unwrap().to_string();
    let (pattern, _) = first_line.split_once(' ').unwrap();
    let tampered = known.replacen(&first_line, &format!("{pattern} {other}"), 1);
    std::fs::write(fleet.known_hosts_path(), tampered).unwrap();
    std::fs::write(
        dir.path().join("small.yaml"),
        format!(
            "name: small\ntargets: {{ labels: [fleet] }}\nsteps:\n  - name: touch\n    shell: \"touch {w}/{{{{ host.name }}}}.small\"\n",
            w = work.display()
        ),
    )
    .unwrap();
    let out = bosun(
        dir.path(),
        &[
            "plan",
            "exec",
            "small.yaml",
            "--inventory",
            "inventory.yaml",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let (stdout, stderr) = text(&out);
    assert!(
        format!("{stdout}{stderr}").contains("does not match"),
        "the changed key is named: {}",
        describe(&out)
    );
    assert!(
        !work.join("h0.small").exists(),
        "nothing ran on the host with the changed key"
    );
}

/// sudo for real, over a real sshd, as non-root users: one whose sudoers rule asks for a
/// password — its `sudo: true` steps fail at once saying so, and `bosun host check`
/// warns under the sudo stage — and one with a NOPASSWD rule, whose steps run as root
/// (a command, and a file step's one command).
#[test]
fn sudo_over_ssh_with_a_real_sudoers_rule() {
    use bosun_testkit::sshd::{
        ensure_sudo_user, require_sshd, require_sudo_users, SshdHost, SshdOptions,
    };
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if !require_sshd() || !require_sudo_users() {
        return;
    }
    ensure_sudo_user("bosun-test-pw", "ALL=(ALL) ALL");
    ensure_sudo_user("bosun-test-np", "ALL=(ALL) NOPASSWD: ALL");
    let dir = tempfile::tempdir().unwrap();
    // The users' sshd read their authorized keys from below here.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let start = |user: &str| {
        SshdHost::start_with(
            &dir.path().join(user),
            SshdOptions {
                login_user: Some(user.into()),
                ..SshdOptions::default()
            },
        )
    };
    let hosts = [
        ("pw", start("bosun-test-pw")),
        ("np", start("bosun-test-np")),
    ];
    let mut inv = String::from("hosts:\n");
    for (name, h) in &hosts {
        inv.push_str(&format!(
            "  {name}: {{ address: {}, port: {}, user: {}, identity_file: {}, known_hosts: {}, labels: [sudo] }}\n",
            h.address(),
            h.port(),
            h.user(),
            h.client_key_path().display(),
            h.known_hosts_path().display()
        ));
    }
    std::fs::write(dir.path().join("inventory.yaml"), &inv).unwrap();
    let plan = format!(
        r#"name: sudo
targets: {{ labels: [sudo] }}
steps:
  - name: who
    command: ["id", "-un"]
  - name: as root
    command: ["id", "-un"]
    sudo: true
    continue_on_error: true
  - name: root file
    file.copy:
      path: "{w}/{{{{ host.name }}}}.conf"
      content: "made by root\n"
      mode: "0600"
    sudo: true
"#,
        w = work.display()
    );
    std::fs::write(dir.path().join("plan.yaml"), plan).unwrap();
    let started = std::time::Instant::now();
    let out = bosun(
        dir.path(),
        &[
            "plan",
            "exec",
            "plan.yaml",
            "--inventory",
            "inventory.yaml",
            "--json",
        ],
    );
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", describe(&out)));
    let result = |step: usize, host: &str| -> Value {
        report["steps"][step]["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["host"] == host)
            .cloned()
            .unwrap_or_else(|| panic!("no result for {host} in step {step}: {report:#}"))
    };
    // The sessions really are the non-root users.
    assert_eq!(result(0, "pw")["stdout"], "bosun-test-pw\n", "{report:#}");
    assert_eq!(result(0, "np")["stdout"], "bosun-test-np\n", "{report:#}");
    // NOPASSWD: the command and the file step run as root.
    let np = result(1, "np");
    assert_eq!(
        (&np["status"], &np["stdout"]),
        (&json_str("changed"), &json_str("root\n"))
    );
    assert_eq!(result(2, "np")["status"], "changed", "{report:#}");
    let conf = work.join("np.conf");
    assert_eq!(std::fs::read_to_string(&conf).unwrap(), "made by root\n");
    let meta = std::fs::metadata(&conf).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o7777), (0, 0o600));
    // A password rule: both sudo steps fail fast, saying why; nothing is written.
    for step in [1, 2] {
        let pw = result(step, "pw");
        assert_eq!(pw["status"], "failed", "{report:#}");
        let message = pw["message"].as_str().unwrap();
        assert!(
            message.starts_with("sudo needs a password on this host"),
            "{message}"
        );
        assert!(pw["duration_ms"].as_u64().unwrap() < 10_000, "{pw:#}");
    }
    assert_eq!(result(1, "pw")["ignored"], true);
    assert!(!work.join("pw.conf").exists());
    assert!(took < std::time::Duration::from_secs(30), "took {took:?}");

    // The host check: a warning under the sudo stage for the password rule, ok for NOPASSWD.
    for (host, status) in [("pw", "warning"), ("np", "ok")] {
        let out = bosun(
            dir.path(),
            &["host", "check", host, "-i", "inventory.yaml", "--json"],
        );
        assert!(out.status.success(), "{}", describe(&out));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let sudo = v["stages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["stage"] == "sudo")
            .cloned()
            .unwrap();
        assert_eq!(sudo["status"], status, "{v:#}");
        for s in v["stages"].as_array().unwrap() {
            if s["stage"] != "sudo" {
                assert_eq!(s["status"], "ok", "{v:#}");
            }
        }
        if host == "pw" {
            assert!(
                sudo["detail"]
                    .as_str()
                    .unwrap()
                    .starts_with("sudo asks for a password"),
                "{v:#}"
            );
            // And in the table, on the sudo stage's row.
            let out = bosun(dir.path(), &["host", "check", host, "-i", "inventory.yaml"]);
            let (stdout, _) = text(&out);
            let row = stdout
                .lines()
                .find(|l| l.trim_start().starts_with("sudo"))
                .unwrap_or_else(|| panic!("no sudo row: {stdout}"));
            assert!(
                row.contains("warning") && row.contains("sudo asks for a password"),
                "{stdout}"
            );
            assert!(stdout.contains("pw: reachable, with warnings"), "{stdout}");
        }
    }
}

fn json_str(s: &str) -> Value {
    Value::String(s.into())
}

/// The example plan that ships in `examples/plans` runs as its comments say: a dry run
/// changes nothing, a run writes the config (with the environment's port), and a second
/// run changes nothing more.
#[test]
fn the_shipped_example_plan_runs_as_documented() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let plan = root.join("examples/plans/hello.yaml");
    let inventory = root.join("examples/plans/inventory.yaml");
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("hello");
    let input = format!("dir={}", dir.display());
    let args = |extra: &[&'static str]| -> Vec<String> {
        let mut a: Vec<String> = vec![
            "plan".into(),
            "exec".into(),
            plan.display().to_string(),
            "-i".into(),
            inventory.display().to_string(),
            "--input".into(),
            input.clone(),
        ];
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let run = |extra: &[&'static str]| {
        let a = args(extra);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        bosun(work.path(), &a)
    };

    let dry = run(&["--dry-run"]);
    assert!(dry.status.success(), "{}", describe(&dry));
    assert!(!dir.exists(), "a dry run created {}", dir.display());

    let real = run(&[]);
    assert!(real.status.success(), "{}", describe(&real));
    assert_eq!(
        std::fs::read_to_string(dir.join("app.conf")).unwrap(),
        "port=8081\nrelease=1.0\n"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("hosts")).unwrap(),
        "127.0.0.1 app.internal\n"
    );

    let again = run(&["--json"]);
    assert!(again.status.success(), "{}", describe(&again));
    let report: Value = serde_json::from_slice(&again.stdout).unwrap();
    let steps = report["steps"].as_array().cloned().unwrap_or_default();
    assert_eq!(steps.len(), 4, "{report}");
    let mut changed = Vec::new();
    for step in &steps {
        let result = &step["results"][0];
        assert_eq!(result["host"], "localhost", "{step}");
        if step["module"] == "command" {
            // The last step shows the config it wrote.
            assert_eq!(result["stdout"], "port=8081\nrelease=1.0\n", "{step}");
        } else if result["status"] != "ok" {
            changed.push(step.clone());
        }
    }
    assert!(changed.is_empty(), "a second run changed {changed:?}");
}

/// `file.template` end to end: its `src` is read beside the plan file (not in the working
/// directory), rendered per host with the environment's vars and the run's inputs, shown
/// as a diff by a dry run that writes nothing, written by the run, and left alone by a
/// second run; output and report name the module `file.template`.
#[test]
fn exec_renders_a_template_file_beside_the_plan() {
    let dir = setup();
    let plans = dir.path().join("plans");
    std::fs::create_dir_all(plans.join("templates")).unwrap();
    std::fs::write(
        plans.join("templates/app.conf.j2"),
        "# {{ host.name }}\nport={{ vars.port }}\nrelease={{ inputs.release }}\n",
    )
    .unwrap();
    let work = dir.path().join("work");
    std::fs::write(
        plans.join("plan.yaml"),
        format!(
            r#"name: templated
targets: {{ environments: [staging] }}
inputs:
  release: {{ default: "1.0" }}
steps:
  - name: config
    file.template:
      path: "{}/{{{{ host.name }}}}.conf"
      src: templates/app.conf.j2
      mode: "0600"
"#,
            work.display()
        ),
    )
    .unwrap();
    let exec = |extra: &[&str]| {
        let mut args = vec![
            "plan",
            "exec",
            "plans/plan.yaml",
            "-i",
            "inventory.yaml",
            "--input",
            "release=2.0",
        ];
        args.extend(extra);
        bosun(dir.path(), &args)
    };

    let dry = exec(&["--dry-run"]);
    assert!(dry.status.success(), "{}", describe(&dry));
    let (stdout, _) = text(&dry);
    assert!(
        stdout.contains("step 1 \"config\" (file.template)"),
        "{stdout}"
    );
    assert!(stdout.contains("+port=8080"), "{stdout}");
    assert!(stdout.contains("+release=2.0"), "{stdout}");
    assert!(!work.join("a.conf").exists());

    let real = exec(&["--json"]);
    assert!(real.status.success(), "{}", describe(&real));
    let report: Value = serde_json::from_slice(&real.stdout).unwrap();
    assert_eq!(report["steps"][0]["module"], "file.template", "{report}");
    for h in ["a", "b"] {
        let conf = work.join(format!("{h}.conf"));
        assert_eq!(
            std::fs::read_to_string(&conf).unwrap(),
            format!("# {h}\nport=8080\nrelease=2.0\n")
        );
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&conf).unwrap().permissions(),
        ) & 0o7777;
        assert_eq!(mode, 0o600);
    }

    let again = exec(&["--json"]);
    assert!(again.status.success(), "{}", describe(&again));
    let report: Value = serde_json::from_slice(&again.stdout).unwrap();
    for r in report["steps"][0]["results"].as_array().unwrap() {
        assert_eq!(
            (&r["status"], &r["message"]),
            (&json_str("ok"), &json_str("unchanged")),
            "{report}"
        );
    }
}
