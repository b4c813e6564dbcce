//! Plan and inventory files: the documented examples parse to the expected model; every
//! error names its line and column; lint findings.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bosun_plans::model::{
    lint, parse_inventory, parse_inventory_unresolved, parse_plan, resolve_jumps, ConnectionKind,
    CopySource, Environment, FileSchedule, Host, InputDef, Inventory, Jump, JumpError,
    LineInFileArgs, Location, Module, Plan, Targets, MAX_JUMPS,
};
use serde_json::json;

const EXAMPLE_PLAN: &str = r#"name: app-config
targets:                       # union of these
  hosts: [web-1]
  labels: [web]
  environments: [staging]
concurrent_runs: false         # default; see concurrency guard
inputs:                        # run overrides, with defaults
  release: { default: "1.0" }
vars:                          # plan defaults
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
    when: 'vars.restart == "yes"'
    continue_on_error: true
    timeout: 60s
"#;

const EXAMPLE_INVENTORY: &str = r#"environments:
  staging: { vars: { app_port: 8080 } }
  prod:    { requires_approval: true, protected: true, vars: { app_port: 80 } }
defaults:                      # applied to every host unless it says otherwise
  user: deploy
  identity_file: ~/.ssh/id_ed25519        # default: the agent, then ~/.ssh/id_*
  known_hosts: ~/.ssh/known_hosts         # default
hosts:
  web-1: { address: 10.1.0.11, environment: prod, labels: [web], vars: { weight: 3 } }
  web-2: { address: 10.1.0.12, port: 2222, environment: prod, labels: [web] }
  build: { connection: local, environment: staging }
"#;

fn loc(file: &str, line: usize, column: usize) -> Location {
    Location {
        file: file.into(),
        line,
        column,
    }
}

fn map(v: serde_json::Value) -> BTreeMap<String, serde_json::Value> {
    serde_json::from_value(v).unwrap()
}

fn plan(text: &str) -> Plan {
    parse_plan(Path::new("plans/p.yaml"), text).unwrap()
}

fn inventory(text: &str) -> Inventory {
    parse_inventory(Path::new("inv.yaml"), text).unwrap()
}

/// `line:column: message` of a plan's error.
fn plan_err(text: &str) -> String {
    let e = parse_plan(Path::new("p.yaml"), text).unwrap_err();
    assert_eq!(e.location.file, "p.yaml");
    format!("{}:{}: {}", e.location.line, e.location.column, e.message)
}

fn inv_err(text: &str) -> String {
    let e = parse_inventory(Path::new("i.yaml"), text).unwrap_err();
    assert_eq!(e.location.file, "i.yaml");
    format!("{}:{}: {}", e.location.line, e.location.column, e.message)
}

fn assert_err(got: String, at: &str, says: &str) {
    assert!(
        got.starts_with(&format!("{at}: ")) && got.contains(says),
        "expected {at}: …{says}…, got {got}"
    );
}

#[test]
fn the_spec_plan_parses_to_the_expected_model() {
    let p = plan(EXAMPLE_PLAN);
    let expected = Plan {
        name: "app-config".into(),
        targets: Targets {
            hosts: vec!["web-1".into()],
            labels: vec!["web".into()],
            environments: vec!["staging".into()],
            hosts_from: vec![],
        },
        concurrent_runs: false,
        strict_vars: false,
        inputs: BTreeMap::from([(
            "release".to_string(),
            InputDef {
                default: Some(json!("1.0")),
                description: None,
            },
        )]),
        vars: map(json!({"app": "shop"})),
        schedule: None,
        on_stack_change: None,
        steps: vec![
            bosun_plans::model::Step {
                name: "pin release".into(),
                module: Module::LineInFile(LineInFileArgs {
                    path: "/srv/{{ vars.app }}/app.conf".into(),
                    line: Some("release={{ inputs.release }}".into()),
                    regexp: Some("^release=".into()),
                    state: Some("present".into()),
                    ..LineInFileArgs::default()
                }),
                when: None,
                sudo: false,
                continue_on_error: false,
                timeout: None,
                notify: Vec::new(),
                location: loc("plans/p.yaml", 12, 5),
            },
            bosun_plans::model::Step {
                name: "restart".into(),
                module: Module::Command {
                    argv: vec![
                        "systemctl".into(),
                        "restart".into(),
                        "{{ vars.app }}".into(),
                    ],
                },
                when: Some(r#"vars.restart == "yes""#.into()),
                sudo: true,
                continue_on_error: true,
                timeout: Some(Duration::from_secs(60)),
                notify: Vec::new(),
                location: loc("plans/p.yaml", 17, 5),
            },
        ],
        handlers: Vec::new(),
        force_handlers: false,
        rollout: Default::default(),
        locations: p.locations.clone(),
    };
    assert_eq!(p, expected);
    // The source map places fields where they are written.
    assert_eq!(
        p.locations.get("targets.hosts[0]"),
        Some(&loc("plans/p.yaml", 3, 11))
    );
    assert_eq!(
        p.locations.get("steps[1].when"),
        Some(&loc("plans/p.yaml", 20, 11))
    );
    assert_eq!(
        p.locations.get("steps[0].file.lineinfile.path"),
        Some(&loc("plans/p.yaml", 14, 13))
    );
    assert_eq!(
        p.locations.locate("steps[1].nothing"),
        loc("plans/p.yaml", 17, 5)
    );
    assert!(lint(&p, None)
        .findings
        .iter()
        .all(|f| !f.message.contains("vars.app")));
}

#[test]
fn the_spec_inventory_parses_to_the_expected_model() {
    let inv = inventory(EXAMPLE_INVENTORY);
    let home = PathBuf::from(std::env::var("HOME").unwrap());
    let host = |name: &str, address: &str, port: u16, env: &str| Host {
        name: name.into(),
        address: address.into(),
        port,
        user: Some("deploy".into()),
        connection: ConnectionKind::Ssh,
        labels: vec!["web".into()],
        vars: BTreeMap::new(),
        environment: Some(env.into()),
        identity_file: Some(home.join(".ssh/id_ed25519")),
        known_hosts: Some(home.join(".ssh/known_hosts")),
        host_key: None,
        proxy_jump: None,
    };
    let expected = Inventory {
        environments: BTreeMap::from([
            (
                "staging".to_string(),
                Environment {
                    vars: map(json!({"app_port": 8080})),
                    requires_approval: false,
                    protected: false,
                },
            ),
            (
                "prod".to_string(),
                Environment {
                    vars: map(json!({"app_port": 80})),
                    requires_approval: true,
                    protected: true,
                },
            ),
        ]),
        hosts: vec![
            Host {
                vars: map(json!({"weight": 3})),
                ..host("web-1", "10.1.0.11", 22, "prod")
            },
            host("web-2", "10.1.0.12", 2222, "prod"),
            Host {
                connection: ConnectionKind::Local,
                labels: vec![],
                ..host("build", "build", 22, "staging")
            },
        ],
    };
    assert_eq!(inv, expected);
    // The plan's targets: web-1 by name, web-1 and web-2 by label, build by environment.
    let names: Vec<&str> = plan(EXAMPLE_PLAN)
        .target_hosts(&inv)
        .iter()
        .map(|h| h.name.as_str())
        .collect();
    assert_eq!(names, ["web-1", "web-2", "build"]);
}

#[test]
fn hosts_keep_file_order_and_defaults_apply_unless_overridden() {
    let inv = inventory(
        "defaults: { user: ops, port: 2200, connection: local, identity_file: /k, known_hosts: kh }
hosts:
  zeta:
  alpha: { user: root, port: 22, connection: ssh, identity_file: '~', host_key: 'ssh-ed25519 AAAAC3 comment' }
  mid: { address: mid.example }
",
    );
    let names: Vec<&str> = inv.hosts.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(names, ["zeta", "alpha", "mid"]);
    let zeta = &inv.hosts[0];
    assert_eq!(
        (
            zeta.address.as_str(),
            zeta.port,
            zeta.user.as_deref(),
            zeta.connection
        ),
        ("zeta", 2200, Some("ops"), ConnectionKind::Local)
    );
    assert_eq!(zeta.identity_file.as_deref(), Some(Path::new("/k")));
    // A relative path other than `~/…` is kept as written.
    assert_eq!(zeta.known_hosts.as_deref(), Some(Path::new("kh")));
    let alpha = &inv.hosts[1];
    assert_eq!(
        (alpha.port, alpha.user.as_deref(), alpha.connection),
        (22, Some("root"), ConnectionKind::Ssh)
    );
    assert_eq!(
        alpha.identity_file.as_deref(),
        Some(Path::new(&std::env::var("HOME").unwrap()))
    );
    assert_eq!(
        alpha.host_key.as_deref(),
        Some("ssh-ed25519 AAAAC3 comment")
    );
    assert_eq!(inv.hosts[2].address, "mid.example");
    assert_eq!(inv.hosts[2].environment, None);

    let bare = inventory("hosts:\n  h1: {}\n");
    assert_eq!((bare.hosts[0].port, bare.hosts[0].user.clone()), (22, None));
    assert_eq!(bare.hosts[0].connection, ConnectionKind::Ssh);
}

#[test]
fn every_module_and_step_field() {
    let p = plan(
        r#"name: all
strict_vars: true
concurrent_runs: true
schedule: "0 2 * * *"
inputs:
  release:
  level: { default: 3, description: how loud }
steps:
  - command: systemctl restart "my app" '{{ vars.unit }}' {{ vars.a | default("x y") }}
    timeout: 90
  - shell: "echo hi | tee /tmp/x"
    timeout: 1h30m
  - shell: { cmd: "exit 0" }
    timeout: 1.5
  - script: { src: scripts/setup.sh, args: ["--fast", "{{ host.name }}"] }
  - script: /abs/run.sh
  - script: { src: run.sh, args: "-v 'two words'" }
  - file.lineinfile:
      path: /etc/x
      search_string: "needle"
      state: absent
  - file.lineinfile: { path: /etc/y, line: "a=1", regexp: "^a=(.*)", backrefs: true, firstmatch: true, create: true, insertbefore: BOF, mode: 0644, owner: "root:root" }
  - file.copy: { path: /etc/motd, content: "hello {{ host.name }}\n", mode: "0600" }
  - file.copy: { path: /etc/app.conf, src: files/app.conf, owner: app }
  - file.directory: { path: /srv/app, mode: "2775" }
  - file.absent: { path: /tmp/junk }
"#,
    );
    assert!(p.strict_vars && p.concurrent_runs);
    assert_eq!(
        p.schedule,
        Some(FileSchedule {
            cron: "0 2 * * *".into(),
            timezone: None,
            inputs: BTreeMap::new(),
        })
    );
    assert_eq!(p.inputs["release"], InputDef::default());
    assert_eq!(
        p.inputs["level"],
        InputDef {
            default: Some(json!(3)),
            description: Some("how loud".into())
        }
    );
    let m: Vec<&Module> = p.steps.iter().map(|s| &s.module).collect();
    assert_eq!(
        m[0],
        &Module::Command {
            argv: vec![
                "systemctl".into(),
                "restart".into(),
                "my app".into(),
                "{{ vars.unit }}".into(),
                "{{ vars.a | default(\"x y\") }}".into()
            ]
        }
    );
    assert_eq!(
        p.steps[0].name, "command",
        "a step without a name is named after its module"
    );
    assert_eq!(p.steps[0].timeout, Some(Duration::from_secs(90)));
    assert_eq!(
        m[1],
        &Module::Shell {
            cmd: "echo hi | tee /tmp/x".into()
        }
    );
    assert_eq!(p.steps[1].timeout, Some(Duration::from_secs(5400)));
    assert_eq!(
        m[2],
        &Module::Shell {
            cmd: "exit 0".into()
        }
    );
    assert_eq!(p.steps[2].timeout, Some(Duration::from_millis(1500)));
    assert_eq!(
        m[3],
        &Module::Script {
            src: PathBuf::from("plans/scripts/setup.sh"),
            args: vec!["--fast".into(), "{{ host.name }}".into()]
        }
    );
    assert_eq!(
        m[4],
        &Module::Script {
            src: PathBuf::from("/abs/run.sh"),
            args: vec![]
        }
    );
    assert_eq!(
        m[5],
        &Module::Script {
            src: PathBuf::from("plans/run.sh"),
            args: vec!["-v".into(), "two words".into()]
        }
    );
    assert_eq!(
        m[6],
        &Module::LineInFile(LineInFileArgs {
            path: "/etc/x".into(),
            search_string: Some("needle".into()),
            state: Some("absent".into()),
            ..LineInFileArgs::default()
        })
    );
    assert_eq!(
        m[7],
        &Module::LineInFile(LineInFileArgs {
            path: "/etc/y".into(),
            line: Some("a=1".into()),
            regexp: Some("^a=(.*)".into()),
            state: Some("present".into()),
            insertbefore: Some("BOF".into()),
            backrefs: true,
            firstmatch: true,
            create: true,
            mode: Some("0644".into()),
            owner: Some("root:root".into()),
            ..LineInFileArgs::default()
        })
    );
    assert_eq!(
        m[8],
        &Module::Copy {
            path: "/etc/motd".into(),
            source: CopySource::Content("hello {{ host.name }}\n".into()),
            mode: Some("0600".into()),
            owner: None
        }
    );
    assert_eq!(
        m[9],
        &Module::Copy {
            path: "/etc/app.conf".into(),
            source: CopySource::Src(PathBuf::from("plans/files/app.conf")),
            mode: None,
            owner: Some("app".into())
        }
    );
    assert_eq!(
        m[10],
        &Module::Directory {
            path: "/srv/app".into(),
            mode: Some("2775".into()),
            owner: None
        }
    );
    assert_eq!(
        m[11],
        &Module::Absent {
            path: "/tmp/junk".into()
        }
    );
    // Malformed conditions and templates are kept: they fail open at run time.
    let q = plan("name: q\nsteps:\n  - shell: \"{{ oops\"\n    when: 'vars.a =='\n");
    assert_eq!(q.steps[0].when.as_deref(), Some("vars.a =="));
}

#[test]
fn a_schedule_is_a_cron_or_a_mapping_with_zone_and_declared_inputs() {
    let p = plan(
        "name: p\ninputs:\n  release: { default: \"1\" }\nschedule:\n  cron: \"0 2 * * 1-5\"\n  timezone: Europe/Berlin\n  inputs: { release: \"2.0\" }\nsteps:\n  - command: [true]\n",
    );
    assert_eq!(
        p.schedule,
        Some(FileSchedule {
            cron: "0 2 * * 1-5".into(),
            timezone: Some("Europe/Berlin".into()),
            inputs: map(json!({"release": "2.0"})),
        })
    );
    assert_eq!(p.locations.locate("schedule.timezone").line, 6);
    let s = |schedule: &str| format!("name: p\n{schedule}\nsteps:\n  - command: [true]\n");
    assert_err(
        plan_err(&s("schedule: \"  \"")),
        "2:11",
        "the schedule is empty",
    );
    assert_err(
        plan_err(&s("schedule:\n  timezone: UTC")),
        "3:3",
        "a schedule needs a `cron`",
    );
    assert_err(
        plan_err(&s("schedule: { cron: \"@daily\", timezone: \"\" }")),
        "2:39",
        "the time zone is empty (leave it out for UTC)",
    );
    assert_err(
        plan_err(&s("schedule:\n  cron: \"@daily\"\n  inputs: { nope: 1 }")),
        "4:13",
        "the plan has no input \"nope\" (it declares: none)",
    );
    assert_err(
        plan_err(&s("schedule: { cron: \"@daily\", every: 2 }")),
        "2:29",
        "unknown field `every`",
    );
    assert_err(
        plan_err(&s("schedule: [1]")),
        "2:11",
        "a cron schedule or a mapping",
    );
}

#[test]
fn plan_errors_name_line_and_column() {
    let s = |steps: &str| format!("name: p\nsteps:\n{steps}");
    // Semantic errors, at the key or value that is wrong.
    assert_err(
        plan_err(&s("  - name: a\n    file.lineinfil: {path: /x}\n")),
        "4:5",
        "unknown module `file.lineinfil`",
    );
    assert_err(
        plan_err(&s("  - name: a\n    command: [ls]\n    shell: ls\n")),
        "5:5",
        "a step runs one module, and this one also has `command`",
    );
    assert_err(
        plan_err(&s("  - name: a\n    sudo: true\n")),
        "3:5",
        "the step has no module",
    );
    assert_err(
        plan_err(&s("  - name: a\n    file.directory: {mode: \"0755\"}\n")),
        "4:5",
        "file.directory needs `path`",
    );
    assert_err(
        plan_err(&s("  - file.copy:\n      content: x\n")),
        "3:5",
        "file.copy needs `path`",
    );
    assert_err(
        plan_err(&s("  - file.absent: {path: \"\"}\n")),
        "3:25",
        "`path` is empty",
    );
    assert_err(
        plan_err(&s(
            "  - file.lineinfile:\n      path: /x\n      line: a\n      regexp: ^a\n      search_string: a\n",
        )),
        "7:7",
        "`regexp` and `search_string` cannot be used together",
    );
    assert_err(
        plan_err(&s(
            "  - file.lineinfile:\n      search_string: a\n      regexp: ^a\n      path: /x\n",
        )),
        "5:7",
        "`regexp` and `search_string` cannot be used together",
    );
    assert_err(
        plan_err(&s(
            "  - file.lineinfile:\n      path: /x\n      line: a\n      backrefs: true\n",
        )),
        "6:7",
        "`backrefs` needs `regexp`",
    );
    assert_err(
        plan_err(&s(
            "  - file.lineinfile: {path: /x, line: a, insertafter: EOF, insertbefore: BOF}\n",
        )),
        "3:60",
        "`insertafter` and `insertbefore` cannot be used together",
    );
    assert_err(
        plan_err(&s(
            "  - file.lineinfile: {path: /x, line: a, state: gone}\n",
        )),
        "3:49",
        "state must be `present` or `absent`, not `gone`",
    );
    assert_err(
        plan_err(&s("  - file.lineinfile: {path: /x}\n")),
        "3:5",
        "needs `line` with state present",
    );
    assert_err(
        plan_err(&s("  - file.lineinfile: {path: /x, state: absent}\n")),
        "3:5",
        "needs `line`, `regexp` or `search_string` with state absent",
    );
    assert_err(
        plan_err(&s("  - command: ls\n    timeout: 60x\n")),
        "4:14",
        "bad timeout `60x`",
    );
    assert_err(
        plan_err(&s("  - command: ls\n    timeout: 0\n")),
        "4:14",
        "more than zero",
    );
    assert_err(
        plan_err(&s("  - command: ls\n    timeout: -5\n")),
        "4:14",
        "bad timeout `-5`",
    );
    assert_err(
        plan_err(&s("  - file.directory: {path: /d, mode: 755}\n")),
        "3:38",
        "write the mode as a string of octal digits",
    );
    assert_err(
        plan_err(&s("  - file.directory: {path: /d, mode: \"rwx\"}\n")),
        "3:38",
        "mode `rwx` is not octal digits",
    );
    assert_err(
        plan_err(&s("  - file.copy: {path: /d, content: a, src: b}\n")),
        "3:39",
        "`content` and `src` cannot be used together",
    );
    assert_err(
        plan_err(&s("  - file.copy: {path: /d}\n")),
        "3:5",
        "file.copy needs `content` or `src`",
    );
    assert_err(
        plan_err(&s("  - command: \"echo 'oops\"\n")),
        "3:14",
        "unterminated ' quote",
    );
    assert_err(
        plan_err(&s("  - command: []\n")),
        "3:14",
        "command needs a program",
    );
    assert_err(
        plan_err(&s("  - shell: {cmd: \"\"}\n")),
        "3:5",
        "shell needs a command line",
    );
    assert_err(
        plan_err(&s("  - script: {args: [a]}\n")),
        "3:5",
        "script needs `src`",
    );
    // Plan-level.
    assert_err(
        plan_err("steps:\n  - command: ls\n"),
        "1:1",
        "a plan needs a `name`",
    );
    assert_err(plan_err("name: p\n"), "1:1", "a plan needs `steps`");
    assert_err(
        plan_err("name: p\nsteps: []\n"),
        "2:8",
        "a plan needs at least one step",
    );
    assert_err(
        plan_err("name: \"\"\nsteps: []\n"),
        "1:7",
        "the plan's name is empty",
    );
    assert_err(plan_err(""), "1:1", "the file is empty");
    // Duplicate keys are refused at the second one, wherever they are.
    assert_err(
        plan_err(&s("  - command: ls\n    when: vars.a\n    when: vars.b\n")),
        "5:5",
        "duplicate step key `when` (first at line 4, column 5)",
    );
    assert_err(
        plan_err("name: p\nvars:\n  a: 1\n  a: 2\nsteps: [{command: ls}]\n"),
        "4:3",
        "duplicate variable `a`",
    );
    // Syntax and type errors, where serde_norway found them.
    assert_err(
        plan_err("name: p\nsteps: [\n"),
        "3:1",
        "did not find expected node content",
    );
    assert_err(
        plan_err(&s("  - command: ls\n    sudo: maybe\n")),
        "4:11",
        "invalid type: string \"maybe\", expected a boolean",
    );
    assert_err(
        plan_err("name: p\nstepz: []\n"),
        "2:1",
        "unknown field `stepz`",
    );
    assert_err(
        plan_err(&s("  - command: ls\n    timeout: [1]\n")),
        "4:14",
        "expected a number or a string",
    );
    assert_err(
        plan_err(&s(
            "  - file.copy: {path: /x, content: a, mdoe: \"0644\"}\n",
        )),
        "3:39",
        "unknown field `mdoe`",
    );
    assert_err(plan_err("- a\n- b\n"), "1:1", "expected a plan");
}

#[test]
fn inventory_errors_name_line_and_column() {
    assert_err(
        inv_err("hosts:\n  web-1: {}\n  web-2: {}\n  web-1: { port: 23 }\n"),
        "4:3",
        "duplicate host `web-1` (first at line 2, column 3)",
    );
    assert_err(
        inv_err("hosts:\n  web-1: { port: 70000 }\n"),
        "2:18",
        "port 70000 is out of range (1-65535)",
    );
    assert_err(
        inv_err("hosts:\n  web-1:\n    port: 0\n"),
        "3:11",
        "port 0 is out of range",
    );
    assert_err(
        inv_err("defaults:\n  port: -1\nhosts: {}\n"),
        "2:9",
        "port -1 is out of range",
    );
    assert_err(
        inv_err("environments:\n  prod: {}\nhosts:\n  web-1: { environment: staging }\n"),
        "4:25",
        "unknown environment `staging` (defined: prod)",
    );
    assert_err(
        inv_err("hosts:\n  web-1: { connection: winrm }\n"),
        "2:24",
        "connection must be `ssh` or `local`, not `winrm`",
    );
    assert_err(
        inv_err("defaults:\n  connection: telnet\nhosts: {}\n"),
        "2:15",
        "connection must be `ssh` or `local`, not `telnet`",
    );
    assert_err(
        inv_err("hosts:\n  h: { host_key: AAAAonly }\n"),
        "2:18",
        "`host_key` is a public key line",
    );
    assert_err(
        inv_err("environments:\n  prod: {}\n  prod: {}\n"),
        "3:3",
        "duplicate environment `prod`",
    );
    assert_err(
        inv_err("hosts:\n  h: { adress: x }\n"),
        "2:8",
        "unknown field `adress`",
    );
    assert_err(
        inv_err("hosts:\n  h: { port: twenty }\n"),
        "2:14",
        "invalid type",
    );
    assert_err(
        inv_err("hosts: [a, b]\n"),
        "1:8",
        "hosts: invalid type: sequence, expected a mapping",
    );
}

#[test]
fn proxy_jump_resolves_to_the_bastion_chain_and_defaults_skip_the_bastion() {
    let inv = inventory(
        "defaults: { user: ops, proxy_jump: edge }
hosts:
  outer: { address: 192.0.2.1, user: jump, port: 2201, proxy_jump: none }
  edge: { address: 10.0.0.1, proxy_jump: outer }
  web-1: { address: 10.0.1.1 }
  web-2: { address: 10.0.1.2, proxy_jump: outer }
  direct: { proxy_jump: none }
  build: { connection: local }
",
    );
    let host = |name: &str| inv.hosts.iter().find(|h| h.name == name).unwrap();
    let jumps = |name: &str| -> Vec<&str> {
        host(name)
            .jump_chain()
            .iter()
            .map(|h| h.name.as_str())
            .collect()
    };
    // The default bastion is reached through its own proxy_jump, never through itself
    // (and `outer`, which it goes through, says `none`: with the default it would be a
    // cycle).
    assert_eq!(jumps("edge"), ["outer"]);
    assert_eq!(jumps("outer"), Vec::<&str>::new());
    // web-1 inherits the default: outer first, then edge.
    assert_eq!(jumps("web-1"), ["outer", "edge"]);
    assert_eq!(jumps("web-2"), ["outer"]);
    // `none` connects directly; a local host is this machine.
    assert!(host("direct").proxy_jump.is_none());
    assert!(host("build").proxy_jump.is_none());
    // The bastion carries its own settings (the host's own, defaults applied).
    let bastion = host("web-1").proxy_jump.clone().unwrap();
    assert_eq!(
        (bastion.name.as_str(), bastion.address.as_str()),
        ("edge", "10.0.0.1")
    );
    assert_eq!(bastion.user.as_deref(), Some("ops"));
    let outer = bastion.proxy_jump.clone().unwrap();
    assert_eq!(
        (outer.address.as_str(), outer.port, outer.user.as_deref()),
        ("192.0.2.1", 2201, Some("jump"))
    );
    assert_eq!(*outer, *host("outer"));
}

/// A file read with its bastions left unresolved (the server's import, whose bastions
/// may be hosts it keeps): a `proxy_jump` to a host the file lacks is kept by name with
/// where it was written, and `resolve_jumps` over those hosts and others resolves the
/// chains as a full parse does, or says which host's `proxy_jump` is wrong and why.
#[test]
fn proxy_jump_left_unresolved_then_resolved_over_more_hosts() {
    let file = "defaults: { proxy_jump: edge }
hosts:
  app: { identity_file: ~/.ssh/id }
  db: { proxy_jump: app }
  direct: { proxy_jump: none }
";
    let read = parse_inventory_unresolved(Path::new("inv.yaml"), file).unwrap();
    let names: Vec<&str> = read
        .inventory
        .hosts
        .iter()
        .map(|h| h.name.as_str())
        .collect();
    assert_eq!(names, ["app", "db", "direct"]);
    assert!(read.inventory.hosts.iter().all(|h| h.proxy_jump.is_none()));
    // Paths as written: the server's hosts are used on its runners' machines.
    assert_eq!(
        read.inventory.hosts[0].identity_file,
        Some(PathBuf::from("~/.ssh/id"))
    );
    let jump = |bastion: &str, at: &str| {
        Some(Jump {
            bastion: bastion.into(),
            written_at: at.into(),
        })
    };
    assert_eq!(
        read.jumps,
        [
            jump("edge", "defaults.proxy_jump"),
            jump("app", "hosts.db.proxy_jump"),
            None
        ]
    );
    // A full parse of the same file refuses the bastion it lacks.
    assert!(parse_inventory(Path::new("inv.yaml"), file).is_err());

    let host = |name: &str, connection: ConnectionKind| Host {
        name: name.into(),
        address: name.into(),
        port: 22,
        user: None,
        connection,
        labels: vec![],
        vars: BTreeMap::new(),
        environment: None,
        identity_file: None,
        known_hosts: None,
        host_key: None,
        proxy_jump: None,
    };
    let with = |extra: Host, extra_jump: Option<&str>| {
        let mut hosts = read.inventory.hosts.clone();
        hosts.push(extra);
        let mut jumps: Vec<Option<String>> = read
            .jumps
            .iter()
            .map(|j| j.as_ref().map(|j| j.bastion.clone()))
            .collect();
        jumps.push(extra_jump.map(str::to_string));
        resolve_jumps(hosts, &jumps, |i, why| (i, why))
    };
    let hosts = with(host("edge", ConnectionKind::Ssh), None).unwrap();
    let chain: Vec<&str> = hosts[1]
        .jump_chain()
        .iter()
        .map(|h| h.name.as_str())
        .collect();
    assert_eq!(chain, ["edge", "app"]);
    assert!(hosts[2].proxy_jump.is_none());
    assert_eq!(
        with(host("other", ConnectionKind::Ssh), None).unwrap_err(),
        (
            0,
            JumpError::Unknown {
                bastion: "edge".into()
            }
        )
    );
    assert_eq!(
        with(host("edge", ConnectionKind::Local), None).unwrap_err(),
        (
            0,
            JumpError::LocalBastion {
                bastion: "edge".into()
            }
        )
    );
    let (at, why) = with(host("edge", ConnectionKind::Ssh), Some("db")).unwrap_err();
    assert_eq!(
        why,
        JumpError::Cycle {
            hosts: vec!["app".into(), "edge".into(), "db".into(), "app".into()]
        }
    );
    assert_eq!(at, 1, "at db, whose bastion closes the cycle");
    assert_eq!(
        why.to_string(),
        "`proxy_jump` goes round in a cycle: app → edge → db → app"
    );
}

#[test]
fn proxy_jump_errors_name_line_and_column() {
    assert_err(
        inv_err("hosts:\n  web-1: { proxy_jump: bastoin }\n  bastion: {}\n"),
        "2:24",
        "`proxy_jump` names no host of this inventory: `bastoin`",
    );
    // Inherited: the error is at the default.
    assert_err(
        inv_err("defaults:\n  proxy_jump: gone\nhosts:\n  web-1: {}\n"),
        "2:15",
        "`proxy_jump` names no host of this inventory: `gone`",
    );
    assert_err(
        inv_err("hosts:\n  a: { proxy_jump: b }\n  b: { proxy_jump: c }\n  c: { proxy_jump: a }\n"),
        "4:20",
        "`proxy_jump` goes round in a cycle: a → b → c → a",
    );
    assert_err(
        inv_err("defaults:\n  proxy_jump: b\nhosts:\n  a: {}\n  b: { proxy_jump: a }\n"),
        "5:20",
        "`proxy_jump` goes round in a cycle: a → b → a",
    );
    // A cycle closed by the default says how to step out of it.
    assert_err(
        inv_err("defaults:\n  proxy_jump: b\nhosts:\n  b: { proxy_jump: a }\n  a: {}\n"),
        "2:15",
        "write `proxy_jump: none` on a host that is reached directly",
    );
    assert_err(
        inv_err("hosts:\n  a: { proxy_jump: a }\n"),
        "2:20",
        "host `a` cannot jump through itself",
    );
    assert_err(
        inv_err("hosts:\n  a: { connection: local, proxy_jump: b }\n  b: {}\n"),
        "2:39",
        "a host with `connection: local` is this machine: it has no `proxy_jump`",
    );
    assert_err(
        inv_err("hosts:\n  a: { proxy_jump: b }\n  b: { connection: local }\n"),
        "2:20",
        "`proxy_jump` names `b`, which has `connection: local`: a bastion is an ssh host",
    );
    assert_err(
        inv_err("hosts:\n  a: { proxy_jump: '' }\n"),
        "2:20",
        "`proxy_jump` is empty",
    );
    // At most MAX_JUMPS bastions: h0 ← h1 ← … ; h9 is reached through 9.
    let mut text = String::from("hosts:\n  h0: {}\n");
    for i in 1..=MAX_JUMPS + 1 {
        text.push_str(&format!("  h{i}: {{ proxy_jump: h{} }}\n", i - 1));
    }
    let ok = inventory(&text.replace(
        &format!("  h{}: {{ proxy_jump: h{} }}\n", MAX_JUMPS + 1, MAX_JUMPS),
        "",
    ));
    assert_eq!(ok.hosts.last().unwrap().jump_chain().len(), MAX_JUMPS);
    assert_err(
        inv_err(&text),
        &format!("{}:21", MAX_JUMPS + 3),
        &format!(
            "host `h{}` is reached through more than {MAX_JUMPS} bastions",
            MAX_JUMPS + 1
        ),
    );
    assert_err(
        inv_err("defaults:\n  proxy_jump: 7\n  nope: 1\nhosts: {}\n"),
        "3:3",
        "unknown field `nope`",
    );
}

#[test]
fn a_long_proxy_jump_chain_file_is_refused_without_deep_recursion() {
    // 20,000 hosts each jumping through the one before: refused at the first host past
    // the limit, in linear time and without recursion.
    let mut text = String::from("hosts:\n  h0: {}\n");
    for i in 1..20_000 {
        text.push_str(&format!("  h{i}: {{ proxy_jump: h{} }}\n", i - 1));
    }
    let started = std::time::Instant::now();
    let e = parse_inventory(Path::new("i.yaml"), &text).unwrap_err();
    assert!(e.message.contains("more than"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

const LINT_PLAN: &str = r#"name: l
targets:
  hosts: [web-1, ghost]
  labels: [web, nolabel]
  environments: [staging, nowhere, empty]
inputs:
  release: { default: "1" }
vars:
  app: shop
steps:
  - name: fine
    command: ["echo", "{{ vars.app }} {{ inputs.release }} {{ vars.release }} {{ vars.weight }} {{ env.app_port }} {{ host.name }}"]
    when: 'vars.app == "shop" and env.app_port > 1'
  - name: broken condition
    shell: "echo {{ vars.app | default('x') }}"
    when: 'vars.app = "shop"'
  - name: unknown references
    file.lineinfile:
      path: "/srv/{{ vars.nope }}/x"
      line: "{{ inputs.nope }} {{ env.nope }} {{ host.port }} {{ foo }}"
    when: vars.cond_missing or host.labels.x
  - name: bad template
    file.copy: { path: /x, content: "{{ vars.app " }
"#;

fn findings(plan: &Plan, inv: Option<&Inventory>) -> Vec<String> {
    lint(plan, inv)
        .findings
        .iter()
        .map(|f| {
            assert_eq!(f.location.file, "plans/p.yaml");
            format!("{}:{}: {}", f.location.line, f.location.column, f.message)
        })
        .collect()
}

fn assert_findings(got: Vec<String>, want: &[(&str, &str)]) {
    assert_eq!(got.len(), want.len(), "{got:#?}");
    for (g, (at, says)) in got.iter().zip(want) {
        assert!(
            g.starts_with(&format!("{at}: ")) && g.contains(says),
            "expected {at}: …{says}…, got {g}\n(all: {got:#?})"
        );
    }
}

#[test]
fn lint_without_an_inventory() {
    let p = plan(LINT_PLAN);
    assert_findings(
        findings(&p, None),
        &[
            ("12:23", "`vars.weight` is not defined in the plan's vars or inputs"),
            ("16:11", "malformed condition \"vars.app = \\\"shop\\\"\": column 10: `=` is not an operator"),
            ("21:11", "`vars.cond_missing` is not defined in the plan's vars or inputs"),
            ("19:13", "`vars.nope` is not defined"),
            ("20:13", "unknown name `foo`"),
            ("20:13", "`host.port` does not exist"),
            ("20:13", "`inputs.nope` is not one of the plan's inputs"),
            ("23:37", "template error in `file.copy.content`: syntax error"),
        ],
    );
}

/// `host.facts.NAME` is fine for the five facts, reported for any other name — in
/// templates and in conditions alike.
#[test]
fn lint_knows_the_host_facts() {
    let p = plan(
        r#"name: f
targets: { hosts: [web-1] }
steps:
  - name: facts
    shell: "echo {{ host.facts.os_family }} {{ host.facts.distribution }} {{ host.facts.version }} {{ host.facts.arch }} {{ host.facts.hostname }} {{ host.facts.nope }}"
    when: 'host.facts.os_family == "debian" and host.facts.kernel != "x"'
"#,
    );
    assert_findings(
        findings(&p, None),
        &[
            (
                "6:11",
                "`host.facts.kernel` is not a host fact: the facts are os_family, distribution, version, arch, hostname",
            ),
            ("5:12", "`host.facts.nope` is not a host fact"),
        ],
    );
}

#[test]
fn lint_with_an_inventory() {
    let p = plan(LINT_PLAN);
    let inv =
        inventory(&EXAMPLE_INVENTORY.replace("environments:\n", "environments:\n  empty: {}\n"));
    assert_findings(
        findings(&p, Some(&inv)),
        &[
            ("3:18", "unknown target host `ghost`: not in the inventory"),
            ("4:17", "no host in the inventory has label `nolabel`"),
            ("5:27", "unknown target environment `nowhere`: not in the inventory"),
            ("5:36", "no host in the inventory is in environment `empty`"),
            // vars.weight (web-1's) and env.app_port (prod's) now resolve.
            ("16:11", "malformed condition"),
            (
                "21:11",
                "`vars.cond_missing` is not defined in the plan's vars or inputs, nor in the vars of any targeted host or environment",
            ),
            ("19:13", "`vars.nope` is not defined"),
            ("20:13", "`env.nope` is not defined in any targeted environment"),
            ("20:13", "unknown name `foo`"),
            ("20:13", "`host.port` does not exist"),
            ("20:13", "`inputs.nope` is not one of the plan's inputs"),
            ("23:37", "template error"),
        ],
    );
    // A host's vars count only when the plan targets that host.
    let only_build = plan(
        "name: b\ntargets: { hosts: [build] }\nsteps:\n  - command: ['echo', '{{ vars.weight }}{{ env.app_port }}']\n",
    );
    assert_findings(
        findings(&only_build, Some(&inv)),
        &[("4:23", "`vars.weight` is not defined")],
    );
    // Targets that match nothing at all.
    let nothing = plan("name: n\ntargets:\n  hosts: [ghost]\nsteps:\n  - command: ls\n");
    assert_findings(
        findings(&nothing, Some(&inv)),
        &[
            ("3:11", "unknown target host `ghost`"),
            ("3:3", "the plan's targets match no host in the inventory"),
        ],
    );
    // The example plan is clean against the example inventory but for vars.restart.
    assert_findings(
        findings(&plan(EXAMPLE_PLAN), Some(&inventory(EXAMPLE_INVENTORY))),
        &[("20:11", "`vars.restart` is not defined")],
    );
}

proptest::proptest! {
    /// Parsing never panics, whatever the text: it is a model or a located error.
    #[test]
    fn parsing_never_panics(
        parts in proptest::collection::vec(
            proptest::sample::select(vec![
                "name: p\n", "steps:\n", "  - ", "command: ", "shell: ", "file.lineinfile: ",
                "{path: /x, ", "line: a}", "timeout: ", "60x", "1h", "[", "]", "{", "}", ": ",
                "- ", "\n", "    ", "'", "\"", "&a ", "*a", "<<: ", "hosts:\n", "  web-1: ",
                "port: ", "70000", "environment: ", "when: ", "{{ vars.x }}", "~", "#", ",",
                "\t", "---\n", "é", "null", "true", "0644", "regexp: ", "backrefs: true",
            ]),
            0..40,
        )
    ) {
        let text = parts.concat();
        for result in [
            parse_plan(Path::new("p.yaml"), &text).map(|_| ()),
            parse_inventory(Path::new("i.yaml"), &text).map(|_| ()),
        ] {
            if let Err(e) = result {
                proptest::prop_assert!(e.location.line >= 1 && e.location.column >= 1, "{e}");
            }
        }
    }
}

/// `file.template` takes `file.copy`'s parameters: a `src` relative to the plan's folder
/// or an inline `content`, exactly one of them; lint reads its inline template (not a
/// `src` file, which lives on the machine that runs the plan).
#[test]
fn file_template_parses_like_file_copy() {
    let p = plan(
        r#"name: t
vars: { port: 80 }
steps:
  - file.template: { path: /etc/app.conf, src: templates/app.conf.j2, mode: "0640", owner: "app:app" }
  - file.template: { path: /etc/motd, content: "port={{ vars.port }} {{ vars.nope }}\n" }
  - file.template: { path: /etc/abs, src: /srv/t.j2 }
"#,
    );
    assert_eq!(
        p.steps[0].module,
        Module::Template {
            path: "/etc/app.conf".into(),
            source: CopySource::Src(PathBuf::from("plans/templates/app.conf.j2")),
            mode: Some("0640".into()),
            owner: Some("app:app".into()),
        }
    );
    assert_eq!(p.steps[0].name, "file.template");
    assert_eq!(p.steps[0].module.kind(), "file.template");
    assert_eq!(
        p.steps[1].module,
        Module::Template {
            path: "/etc/motd".into(),
            source: CopySource::Content("port={{ vars.port }} {{ vars.nope }}\n".into()),
            mode: None,
            owner: None,
        }
    );
    assert_eq!(
        p.steps[2].module,
        Module::Template {
            path: "/etc/abs".into(),
            source: CopySource::Src(PathBuf::from("/srv/t.j2")),
            mode: None,
            owner: None,
        }
    );
    assert_findings(
        findings(&p, None),
        &[(
            "5:48",
            "`vars.nope` is not defined in the plan's vars or inputs",
        )],
    );

    let s = |steps: &str| format!("name: p\nsteps:\n{steps}");
    assert_err(
        plan_err(&s("  - file.template: {path: /d, content: a, src: b}\n")),
        "3:43",
        "`content` and `src` cannot be used together",
    );
    assert_err(
        plan_err(&s("  - file.template: {path: /d, src: b, content: a}\n")),
        "3:39",
        "`content` and `src` cannot be used together",
    );
    assert_err(
        plan_err(&s("  - file.template: {path: /d}\n")),
        "3:5",
        "file.template needs `content` or `src`",
    );
    assert_err(
        plan_err(&s("  - file.template: {path: /d, src: \"\"}\n")),
        "3:36",
        "`src` is empty",
    );
    assert_err(
        plan_err(&s("  - file.template:\n      src: a.j2\n")),
        "3:5",
        "file.template needs `path`",
    );
    assert_err(
        plan_err(&s("  - file.template: {path: /d, src: a.j2, mode: 644}\n")),
        "3:48",
        "write the mode as a string",
    );
    assert_err(
        plan_err(&s("  - file.template: {path: /d, src: a.j2, vars: {}}\n")),
        "3:42",
        "steps[0].file.template: unknown field `vars`, expected one of `path`, `content`, `src`, `mode`, `owner`",
    );
}

/// `package`, `user` and `group` parse to their model, with their defaults.
#[test]
fn package_user_and_group_parse() {
    use bosun_plans::model::{
        GroupArgs, PackageArgs, PackageManager, PackageState, Presence, UserArgs,
    };
    let p = plan(
        r#"name: accounts
steps:
  - package: { name: nginx }
  - package: { name: [curl, "{{ vars.extra }}"], state: latest, cache_valid_time: 3600, manager: apt }
  - package: { name: old-tool, state: absent, manager: dnf }
  - package: { name: jq, cache_valid_time: 1h30m }
  - group: { name: deploy, gid: 2000, system: true }
  - group: { name: "{{ vars.group }}", gid: "{{ vars.gid }}" }
  - group: { name: old, state: absent }
  - user:
      name: deploy
      uid: "2000"
      group: deploy
      groups: [adm, "1001"]
      append: true
      shell: /bin/bash
      home: /srv/deploy
      create_home: false
      system: true
      comment: "Deploy user"
      authorized_keys: ["ssh-ed25519 AAAA one", "{{ vars.key }}"]
  - user: { name: gone, state: absent, remove: true }
  - user: { name: plain, group: 100 }
"#,
    );
    let m: Vec<&Module> = p.steps.iter().map(|s| &s.module).collect();
    assert_eq!(
        m[0],
        &Module::Package(PackageArgs {
            names: vec!["nginx".into()],
            state: PackageState::Present,
            cache_valid_time: None,
            manager: PackageManager::Auto,
        })
    );
    assert_eq!(
        m[1],
        &Module::Package(PackageArgs {
            names: vec!["curl".into(), "{{ vars.extra }}".into()],
            state: PackageState::Latest,
            cache_valid_time: Some(Duration::from_secs(3600)),
            manager: PackageManager::Apt,
        })
    );
    assert!(
        matches!(m[2], Module::Package(a) if a.state == PackageState::Absent && a.manager == PackageManager::Dnf)
    );
    assert!(
        matches!(m[3], Module::Package(a) if a.cache_valid_time == Some(Duration::from_secs(5400)))
    );
    assert_eq!(
        m[4],
        &Module::Group(GroupArgs {
            name: "deploy".into(),
            state: Presence::Present,
            gid: Some("2000".into()),
            system: true,
        })
    );
    assert!(matches!(m[5], Module::Group(g) if g.gid.as_deref() == Some("{{ vars.gid }}")));
    assert!(matches!(m[6], Module::Group(g) if g.state == Presence::Absent));
    assert_eq!(
        m[7],
        &Module::User(UserArgs {
            name: "deploy".into(),
            state: Presence::Present,
            uid: Some("2000".into()),
            group: Some("deploy".into()),
            groups: Some(vec!["adm".into(), "1001".into()]),
            append: true,
            shell: Some("/bin/bash".into()),
            home: Some("/srv/deploy".into()),
            create_home: false,
            system: true,
            comment: Some("Deploy user".into()),
            authorized_keys: Some(vec!["ssh-ed25519 AAAA one".into(), "{{ vars.key }}".into()]),
            remove: false,
        })
    );
    assert_eq!(
        m[8],
        &Module::User(UserArgs {
            name: "gone".into(),
            state: Presence::Absent,
            remove: true,
            ..UserArgs::default()
        })
    );
    assert!(matches!(m[9], Module::User(u) if u.group.as_deref() == Some("100") && u.create_home));
    let kinds: Vec<&str> = p.steps.iter().map(|s| s.module.kind()).collect();
    assert_eq!(
        kinds[..],
        [
            "package", "package", "package", "package", "group", "group", "group", "user", "user",
            "user"
        ]
    );
    assert_eq!(p.steps[7].name, "user");
}

/// Every refusal of `package`, `user` and `group` names the key or value, where it is.
#[test]
fn package_user_and_group_errors_name_line_and_column() {
    let s = |steps: &str| format!("name: p\nsteps:\n{steps}");
    let cases: &[(&str, &str, &str)] = &[
        ("  - package: { state: present }\n", "3:5", "package needs `name`"),
        ("  - package: { name: [] }\n", "3:22", "`name` is an empty list"),
        ("  - package: { name: \"nginx; rm -rf /\" }\n", "3:22", "package name \"nginx; rm -rf /\" is not valid"),
        ("  - package: { name: [ok, -y] }\n", "3:27", "package name \"-y\" is not valid"),
        ("  - package: { name: x, state: installed }\n", "3:32", "state must be `present`, `absent` or `latest`, not `installed`"),
        ("  - package: { name: x, manager: yum }\n", "3:34", "manager must be `auto`, `apt` or `dnf`, not `yum`"),
        ("  - package: { name: x, cache_valid_time: soon }\n", "3:43", "bad cache_valid_time `soon`"),
        ("  - package: { name: x, cache_valid_time: -1 }\n", "3:43", "bad cache_valid_time `-1`"),
        ("  - package: { name: x, cache_valid_time: 1e300 }\n", "3:43", "bad cache_valid_time `1000000"),
        ("  - package: { name: x, state: absent, cache_valid_time: 60 }\n", "3:40", "`cache_valid_time` does not apply with state absent"),
        ("  - package: { name: x, update_cache: true }\n", "3:25", "unknown field `update_cache`"),
        ("  - package: { name: { a: b } }\n", "3:22", "expected a name or a list of names"),
        ("  - group: { gid: 10 }\n", "3:5", "group needs `name`"),
        ("  - group: { name: Admins }\n", "3:20", "group name \"Admins\" is not valid"),
        ("  - group: { name: g, gid: -5 }\n", "3:28", "`gid` must be a whole number from 0 to 4294967294"),
        ("  - group: { name: g, gid: \"12a\" }\n", "3:28", "`gid` must be a whole number"),
        ("  - group: { name: g, state: gone }\n", "3:30", "state must be `present` or `absent`, not `gone`"),
        ("  - group: { name: g, state: absent, gid: 5 }\n", "3:38", "`gid` does not apply with state absent"),
        ("  - group: { name: g, system: maybe }\n", "3:31", "invalid type: string \"maybe\", expected a boolean"),
        ("  - user: { shell: /bin/sh }\n", "3:5", "user needs `name`"),
        ("  - user: { name: \"bad name\" }\n", "3:19", "user name \"bad name\" is not valid"),
        (&format!("  - user: {{ name: {} }}\n", "a".repeat(33)), "3:19", "at most 32 characters"),
        ("  - user: { name: u, uid: 4294967295 }\n", "3:27", "`uid` must be a whole number from 0 to 4294967294"),
        ("  - user: { name: u, shell: bash }\n", "3:29", "`shell` must be an absolute path"),
        ("  - user: { name: u, home: \"/a:b\" }\n", "3:28", "holds a `:`"),
        ("  - user: { name: u, comment: \"a:b\" }\n", "3:31", "holds a `:`"),
        ("  - user: { name: u, groups: [ok, \"No\"] }\n", "3:35", "group name \"No\" is not valid"),
        ("  - user: { name: u, group: \"\" }\n", "3:29", "`group` is empty"),
        ("  - user: { name: u, groups: adm }\n", "3:30", "invalid type: string \"adm\", expected a sequence"),
        ("  - user: { name: u, append: true }\n", "3:22", "`append` needs `groups`"),
        ("  - user: { name: u, remove: true }\n", "3:22", "`remove` applies only with state absent"),
        ("  - user: { name: u, state: absent, shell: /bin/sh }\n", "3:37", "`shell` does not apply with state absent"),
        ("  - user: { name: u, authorized_keys: [\"\"] }\n", "3:40", "`authorized_keys[0]` is empty"),
        ("  - user: { name: u, authorized_keys: [\"a\\nb\"] }\n", "3:40", "one key per list item"),
        ("  - user: { name: u, password: x }\n", "3:22", "unknown field `password`, expected one of"),
        ("  - packages: { name: x }\n", "3:5", "unknown module `packages` (modules: command, shell, script, file.lineinfile, file.copy, file.template, file.directory, file.absent, package, user, group;"),
    ];
    let wrong: Vec<String> = cases
        .iter()
        .map(|(steps, at, says)| (plan_err(&s(steps)), at, says))
        .filter(|(got, at, says)| !(got.starts_with(&format!("{at}: ")) && got.contains(*says)))
        .map(|(got, at, says)| format!("expected {at}: …{says}…, got {got}"))
        .collect();
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Lint checks the templates of `package`, `user` and `group` like any other.
#[test]
fn lint_reads_package_user_and_group_templates() {
    let p = plan(
        r#"name: l
vars: { pkg: nginx }
steps:
  - package: { name: ["{{ vars.pkg }}", "{{ vars.nope }}"] }
  - package: { name: "{{ vars.missing_pkg }}" }
  - group: { name: "{{ vars.g }}", gid: "{{ vars.gid }}" }
  - user: { name: u, groups: ["{{ vars.gr }}"], authorized_keys: ["{{ vars.key }}"], shell: "{{ host.facts.shell }}" }
"#,
    );
    assert_findings(
        findings(&p, None),
        &[
            ("4:41", "`vars.nope` is not defined"),
            ("5:22", "`vars.missing_pkg` is not defined"),
            ("6:20", "`vars.g` is not defined"),
            ("6:41", "`vars.gid` is not defined"),
            ("7:31", "`vars.gr` is not defined"),
            ("7:93", "`host.facts.shell` is not a host fact"),
            ("7:67", "`vars.key` is not defined"),
        ],
    );
}

#[test]
fn on_stack_change_names_a_stack_and_the_outputs_that_start_a_run() {
    let base = "name: p\ntargets: { labels: [web] }\nsteps:\n  - command: [\"true\"]\n";
    let p = plan(&format!(
        "{base}on_stack_change:\n  stack: web-fleet\n  outputs: [instances, dns_name]\n"
    ));
    assert_eq!(
        p.on_stack_change,
        Some(bosun_plans::model::OnStackChange {
            stack: "web-fleet".into(),
            outputs: vec!["instances".into(), "dns_name".into()],
            inputs: BTreeMap::new(),
        })
    );
    let any = plan(&format!("{base}on_stack_change: {{ stack: net }}\n"));
    assert_eq!(any.on_stack_change.unwrap().outputs, Vec::<String>::new());
    assert!(plan(base).on_stack_change.is_none());
    for (extra, says) in [
        ("on_stack_change: { outputs: [a] }\n", "name the `stack`"),
        ("on_stack_change: { stack: \"a b\" }\n", "is not a stack id"),
        (
            "on_stack_change: { stack: s, outputs: [a, a] }\n",
            "output \"a\" is named twice",
        ),
        (
            "on_stack_change: { stack: s, colour: red }\n",
            "unknown field `colour`",
        ),
        (
            "on_stack_change: { stack: s, inputs: { release: version } }\n",
            "the plan declares no input \"release\"",
        ),
    ] {
        let e = plan_err(&format!("{base}{extra}"));
        assert!(e.contains(says), "{extra}: {e}");
    }
}
