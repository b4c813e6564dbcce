//! Bastions (`proxy_jump`) over real sshds: hosts only their bastion can reach (in network
//! namespaces the test makes) running a plan through it on one shared bastion
//! connection, a chain of two bastions followed hop by hop, each hop's host key verified
//! and a refusal naming the hop, `host check` showing each hop's stages, and no bastion
//! connection outliving the connections through it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bosun_plans::connection::check::{check, failed_stage, Stage, StageStatus};
use bosun_plans::connection::ssh::SshConnection;
use bosun_plans::connection::{ConnError, ConnectOptions, Connection};
use bosun_plans::exec::{self, HostStatus, RunOptions, RunStatus};
use bosun_plans::model::{parse_inventory, parse_plan, Host, Inventory};
use bosun_testkit::netns::{link, require_netns, NetNs};
use bosun_testkit::sshd::{keygen, require_sshd, KeyPair, KeyType, SshdHost, SshdOptions};
use tempfile::TempDir;

mod common;

use common::{options, run_ok, shell, text};

/// Waits until `ok` holds (polling), or fails saying `what`.
fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// sshds that trust one client key, each setting `BOSUN_TEST_HOST` to its name in its
/// sessions, and one known_hosts file for them all.
struct Lab {
    dir: TempDir,
    key: KeyPair,
    hosts: Vec<(String, SshdHost)>,
}

impl Lab {
    fn new() -> Lab {
        let dir = tempfile::tempdir().unwrap();
        let key = keygen(&dir.path().join("client_ed25519"), KeyType::Ed25519);
        Lab {
            dir,
            key,
            hosts: Vec::new(),
        }
    }

    /// Starts sshd `name` with `options` (the lab's key and marker added).
    fn start(&mut self, name: &str, mut options: SshdOptions) -> &SshdHost {
        options.client_key = Some(self.key.clone());
        options
            .session_env
            .push(("BOSUN_TEST_HOST".into(), name.into()));
        let host = SshdHost::start_with(&self.dir.path().join(name), options);
        self.hosts.push((name.to_string(), host));
        let lines: String = self
            .hosts
            .iter()
            .map(|(_, h)| format!("{}\n", h.known_hosts_line()))
            .collect();
        std::fs::write(self.known_hosts(), lines).unwrap();
        &self.hosts.last().unwrap().1
    }

    fn sshd(&self, name: &str) -> &SshdHost {
        &self.hosts.iter().find(|(n, _)| n == name).unwrap().1
    }

    fn known_hosts(&self) -> PathBuf {
        self.dir.path().join("known_hosts")
    }

    /// An inventory file's text: `(name, sshd, extra keys)` per host, the lab's key and
    /// known_hosts as defaults, and `defaults_extra` (e.g. `proxy_jump: b`).
    fn inventory_text(&self, defaults_extra: &str, hosts: &[(&str, &str, &str)]) -> String {
        let mut text = format!(
            "defaults:\n  identity_file: {}\n  known_hosts: {}\n{defaults_extra}hosts:\n",
            self.key.private_key.display(),
            self.known_hosts().display()
        );
        for (name, sshd, extra) in hosts {
            let s = self.sshd(sshd);
            text.push_str(&format!(
                "  {name}: {{ address: {}, port: {}, user: {}{extra} }}\n",
                s.address(),
                s.port(),
                s.user()
            ));
        }
        text
    }

    fn inventory(&self, defaults_extra: &str, hosts: &[(&str, &str, &str)]) -> Inventory {
        let text = self.inventory_text(defaults_extra, hosts);
        parse_inventory(Path::new("inventory.yaml"), &text)
            .unwrap_or_else(|e| panic!("{e}\n{text}"))
    }

    fn logs(&self) -> String {
        self.hosts
            .iter()
            .map(|(n, h)| format!("--- {n}:\n{}", h.log()))
            .collect()
    }

    /// Waits until no sshd of the lab serves a connection any more.
    fn wait_all_closed(&self) {
        for (name, sshd) in &self.hosts {
            wait_for(&format!("{name}'s connections to close"), || {
                sshd.connections() == 0
            });
        }
    }
}

fn host<'a>(inv: &'a Inventory, name: &str) -> &'a Host {
    inv.hosts.iter().find(|h| h.name == name).unwrap()
}

async fn connect(lab: &Lab, host: &Host) -> SshConnection {
    match SshConnection::connect(host, &options()).await {
        Ok(c) => c,
        Err(e) => panic!("connect failed: {e}\n{}", lab.logs()),
    }
}

fn statuses(stages: &[Stage]) -> Vec<(String, StageStatus)> {
    stages.iter().map(|s| (s.label(), s.status)).collect()
}

fn all(labels: &[&str], status: StageStatus) -> Vec<(String, StageStatus)> {
    labels.iter().map(|l| (l.to_string(), status)).collect()
}

/// Two hosts in namespaces of their own that only the bastion's namespace is linked to;
/// the test's client code runs in a fourth, linked to the bastion's alone. The hosts are
/// unreachable directly, and a plan runs on both through one bastion connection.
#[test]
fn hosts_only_their_bastion_reaches_run_a_plan_through_one_bastion_connection() {
    if !require_sshd() || !require_netns() {
        return;
    }
    // Namespaces go last (dropped after the sshds in them).
    let client = NetNs::create("client");
    let edge = NetNs::create("edge");
    let inner = [NetNs::create("innera"), NetNs::create("innerb")];
    link(&client, "10.214.1.1/30", &edge, "10.214.1.2/30");
    link(&edge, "10.214.2.1/30", &inner[0], "10.214.2.2/30");
    link(&edge, "10.214.3.1/30", &inner[1], "10.214.3.2/30");

    let mut lab = Lab::new();
    let in_ns = |ns: &NetNs, address: &str| SshdOptions {
        netns: Some(ns.name().to_string()),
        listen: Some(address.to_string()),
        ..SshdOptions::default()
    };
    lab.start("bastion-1", in_ns(&edge, "10.214.1.2"));
    lab.start("inner-1", in_ns(&inner[0], "10.214.2.2"));
    lab.start("inner-2", in_ns(&inner[1], "10.214.3.2"));
    // Every host but the bastion inherits its proxy_jump.
    let inv = lab.inventory(
        "  proxy_jump: bastion-1\n",
        &[
            ("bastion-1", "bastion-1", ""),
            ("inner-1", "inner-1", ""),
            ("inner-2", "inner-2", ""),
        ],
    );
    let plan = parse_plan(
        Path::new("where.yaml"),
        r#"name: where
targets: { hosts: [inner-1, inner-2] }
steps:
  - name: where am i
    shell: 'echo "$BOSUN_TEST_HOST $(readlink /proc/self/ns/net)"'
"#,
    )
    .unwrap();
    let ns_inode = |ns: &NetNs| {
        std::fs::metadata(Path::new("/run/netns").join(ns.name()))
            .unwrap()
            .ino()
    };

    let report = client.run(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            // From here, inner-1 is unreachable: no route to its network.
            let mut direct = host(&inv, "inner-1").clone();
            direct.proxy_jump = None;
            let short = ConnectOptions {
                connect_timeout: Duration::from_secs(3),
            };
            match SshConnection::connect(&direct, &short).await {
                Err(ConnError::Connect { addr, reason }) => {
                    assert_eq!(addr, "10.214.2.2:2222");
                    assert!(reason.contains("unreachable"), "{reason}");
                }
                other => panic!("inner-1 should be unreachable directly: {other:?}"),
            }
            exec::run(&plan, &inv, RunOptions::default(), |_| {})
                .await
                .unwrap()
        })
    });
    assert_eq!(
        report.status,
        RunStatus::Succeeded,
        "{report:#?}\n{}",
        lab.logs()
    );
    for (name, ns) in [("inner-1", &inner[0]), ("inner-2", &inner[1])] {
        let result = report.result(1, name).unwrap();
        assert_eq!(result.status, HostStatus::Changed, "{result:?}");
        // It ran on that host, in that host's network namespace.
        assert_eq!(
            result.stdout,
            format!("{name} net:[{}]\n", ns_inode(ns)),
            "{result:?}"
        );
    }
    // Each host was logged in to from the bastion's address on its network; the bastion
    // was logged in to once, for both.
    for (name, bastion_side) in [("inner-1", "10.214.2.1"), ("inner-2", "10.214.3.1")] {
        let log = lab.sshd(name).log();
        assert!(
            log.contains(&format!(
                "Accepted publickey for root from {bastion_side} port "
            )),
            "{}",
            lab.logs()
        );
    }
    assert_eq!(lab.sshd("bastion-1").logins(), 1, "{}", lab.logs());
    // The run closed its connections, the bastion's with them.
    lab.wait_all_closed();
}

/// b1 ← b2 ← target on loopback: the target is reached through b2, which is reached
/// through b1; a hop that refuses to forward breaks the chain there, and the error names
/// it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_of_two_bastions_is_followed_hop_by_hop() {
    if !require_sshd() {
        return;
    }
    let mut lab = Lab::new();
    let closed = || SshdOptions {
        extra_config: vec!["AllowTcpForwarding no".into()],
        ..SshdOptions::default()
    };
    lab.start("b1", SshdOptions::default());
    lab.start("b2", SshdOptions::default());
    lab.start("target", SshdOptions::default());
    lab.start("b1-closed", closed());
    lab.start("b2-closed", closed());
    let inv = lab.inventory(
        "",
        &[
            ("b1", "b1", ""),
            ("b2", "b2", ", proxy_jump: b1"),
            ("target", "target", ", proxy_jump: b2"),
        ],
    );
    let conn = connect(&lab, host(&inv, "target")).await;
    let out = run_ok(&conn, &shell("echo $BOSUN_TEST_HOST")).await;
    assert_eq!(text(&out.stdout), "target\n");
    for name in ["b1", "b2", "target"] {
        assert_eq!(lab.sshd(name).logins(), 1, "{name}\n{}", lab.logs());
        assert_eq!(lab.sshd(name).connections(), 1, "{name}");
    }
    let logins = |name: &str| lab.sshd(name).logins();
    // Closing the connection closes both bastions' too.
    conn.close().await;
    lab.wait_all_closed();
    // So does dropping it unclosed (a cancelled run).
    let conn = connect(&lab, host(&inv, "target")).await;
    run_ok(&conn, &shell("true")).await;
    assert_eq!(lab.sshd("b1").connections(), 1);
    drop(conn);
    lab.wait_all_closed();

    // b2 refuses to forward: the target's channel fails, naming b2 and the target.
    let target = lab.sshd("target").port();
    let inv = lab.inventory(
        "",
        &[
            ("b1", "b1", ""),
            ("b2", "b2-closed", ", proxy_jump: b1"),
            ("target", "target", ", proxy_jump: b2"),
        ],
    );
    let err = SshConnection::connect(host(&inv, "target"), &options())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ConnError::Tunnel { bastion, .. } if bastion == "b2"),
        "{err:?}"
    );
    let said = err.to_string();
    assert!(
        said.starts_with(&format!(
            "bastion \"b2\" could not open a channel to 127.0.0.1:{target}: "
        )) && said.contains("administratively prohibited"),
        "{said}"
    );

    // b1 refuses to forward: b2 cannot be reached through it.
    let b2 = lab.sshd("b2").port();
    let inv = lab.inventory(
        "",
        &[
            ("b1", "b1-closed", ""),
            ("b2", "b2", ", proxy_jump: b1"),
            ("target", "target", ", proxy_jump: b2"),
        ],
    );
    let err = SshConnection::connect(host(&inv, "target"), &options())
        .await
        .unwrap_err();
    assert!(
        err.to_string().starts_with(&format!(
            "via bastion \"b2\": bastion \"b1\" could not open a channel to 127.0.0.1:{b2}: "
        )),
        "{err}"
    );
    assert_eq!(logins("target"), 2, "{}", lab.logs());
    // Nothing stays open after the failures either.
    lab.wait_all_closed();
}

/// Each hop's key is checked as any host's: the target's under its own name and port (as
/// OpenSSH's ProxyJump does), the bastion's under its own; a refusal names the hop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_hop_s_host_key_is_verified_and_a_refusal_names_the_hop() {
    if !require_sshd() {
        return;
    }
    let mut lab = Lab::new();
    lab.start("bastion", SshdOptions::default());
    lab.start("target", SshdOptions::default());
    let stranger = keygen(&lab.dir.path().join("stranger"), KeyType::Ed25519).public_key();
    let target_port = lab.sshd("target").port();

    // The target presents a key other than its pinned one.
    let inv = lab.inventory(
        "",
        &[
            ("bastion", "bastion", ""),
            (
                "target",
                "target",
                &format!(", proxy_jump: bastion, host_key: '{stranger}'"),
            ),
        ],
    );
    match SshConnection::connect(host(&inv, "target"), &options()).await {
        Err(ConnError::HostKey { host, reason }) => {
            assert_eq!(host, "target");
            assert!(
                reason.contains("does not match the pinned host_key"),
                "{reason}"
            );
        }
        other => panic!("expected the target's key refused: {other:?}"),
    }
    // The target's line missing from known_hosts: looked up as [127.0.0.1]:PORT.
    let only_bastion = lab.dir.path().join("only_bastion");
    std::fs::write(
        &only_bastion,
        format!("{}\n", lab.sshd("bastion").known_hosts_line()),
    )
    .unwrap();
    let mut target = host(&inv, "target").clone();
    target.host_key = None;
    target.known_hosts = Some(only_bastion.clone());
    match SshConnection::connect(&target, &options()).await {
        Err(ConnError::HostKey { host, reason }) => {
            assert_eq!(host, "target");
            assert!(
                reason.contains(&format!(
                    "for [127.0.0.1]:{target_port} is not in known_hosts"
                )),
                "{reason}"
            );
        }
        other => panic!("expected the target's key refused: {other:?}"),
    }

    // The bastion presents a key other than its pinned one: the target is never tried.
    let bastion_logins = lab.sshd("bastion").logins();
    assert_eq!(bastion_logins, 2, "{}", lab.logs());
    let inv = lab.inventory(
        "",
        &[
            ("bastion", "bastion", &format!(", host_key: '{stranger}'")),
            ("target", "target", ", proxy_jump: bastion"),
        ],
    );
    let err = SshConnection::connect(host(&inv, "target"), &options())
        .await
        .unwrap_err();
    match &err {
        ConnError::Via { bastion, error } => {
            assert_eq!(bastion, "bastion");
            assert!(
                matches!(&**error, ConnError::HostKey { host, .. } if host == "bastion"),
                "{err:?}"
            );
        }
        other => panic!("expected the bastion's key refused: {other:?}"),
    }
    assert!(
        err.to_string()
            .starts_with("via bastion \"bastion\": host key of bastion is not trusted: "),
        "{err}"
    );
    assert_eq!(lab.sshd("target").logins(), 0, "{}", lab.logs());

    // In a run, every host behind that bastion fails with its error.
    let inv = lab.inventory(
        "",
        &[
            ("bastion", "bastion", &format!(", host_key: '{stranger}'")),
            ("t1", "target", ", proxy_jump: bastion"),
            ("t2", "target", ", proxy_jump: bastion"),
        ],
    );
    let plan = parse_plan(
        Path::new("p.yaml"),
        "name: p\ntargets: { hosts: [t1, t2] }\nsteps:\n  - shell: 'true'\n",
    )
    .unwrap();
    let tried = || {
        lab.sshd("bastion")
            .log()
            .matches("Connection from ")
            .count()
    };
    let before = tried();
    let report = exec::run(&plan, &inv, RunOptions::default(), |_| {})
        .await
        .unwrap();
    assert_eq!(report.status, RunStatus::Failed);
    // Tried once for both hosts: a bastion that failed is not tried again in the run.
    assert_eq!(tried(), before + 1, "{}", lab.logs());
    for name in ["t1", "t2"] {
        let result = report.result(1, name).unwrap();
        assert_eq!(result.status, HostStatus::Failed, "{result:?}");
        assert!(
            result
                .message
                .contains("via bastion \"bastion\": host key of bastion is not trusted"),
            "{result:?}"
        );
    }
    assert_eq!(lab.sshd("target").logins(), 0, "{}", lab.logs());
    assert_eq!(
        lab.sshd("bastion").logins(),
        bastion_logins,
        "{}",
        lab.logs()
    );
    lab.wait_all_closed();
}

/// `host check` shows each bastion's stages (named after it) before the host's own, and
/// the first failed stage says which hop broke.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_check_shows_each_hop_as_stages_of_its_own() {
    if !require_sshd() {
        return;
    }
    let mut lab = Lab::new();
    lab.start("b1", SshdOptions::default());
    lab.start("b2", SshdOptions::default());
    lab.start("target", SshdOptions::default());
    let stranger = keygen(&lab.dir.path().join("stranger"), KeyType::Ed25519).public_key();
    let chain = |b2_extra: &str| {
        lab.inventory(
            "",
            &[
                ("b1", "b1", ""),
                ("b2", "b2", &format!(", proxy_jump: b1{b2_extra}")),
                ("target", "target", ", proxy_jump: b2"),
            ],
        )
    };
    let inv = chain("");
    let stages = check(host(&inv, "target"), &options()).await;
    let hop = |b: &str| {
        ["resolve", "connect", "host key", "authenticate"]
            .map(|s| format!("{b}: {s}"))
            .to_vec()
    };
    let mut expected: Vec<String> = hop("b1");
    expected.extend(hop("b2"));
    expected.extend(
        ["resolve", "connect", "host key", "authenticate"]
            .iter()
            .map(|s| s.to_string()),
    );
    let got: Vec<(String, StageStatus)> = statuses(&stages);
    let labels: Vec<&str> = expected.iter().map(String::as_str).collect();
    assert_eq!(
        got[..12],
        all(&labels, StageStatus::Ok)[..],
        "{stages:#?}\n{}",
        lab.logs()
    );
    // sudo is the target's alone (whatever this machine's sudo makes of it).
    assert_eq!(got.len(), 13, "{stages:#?}");
    assert_eq!(stages[12].name, "sudo");
    assert_eq!(stages[12].bastion, None);
    assert_ne!(stages[12].status, StageStatus::Failed, "{stages:#?}");
    // b2 is reached through b1, the target through b2.
    assert!(
        stages[4].detail.contains("left to bastion \"b1\""),
        "{stages:#?}"
    );
    assert!(
        stages[9].detail.contains(&format!(
            "127.0.0.1:{} through bastion \"b2\"",
            lab.sshd("target").port()
        )),
        "{stages:#?}"
    );
    lab.wait_all_closed();

    // b2's key is wrong: the check stops at b2's host key, and the rest is skipped.
    let inv = chain(&format!(", host_key: '{stranger}'"));
    let stages = check(host(&inv, "target"), &options()).await;
    let broke = failed_stage(&stages).unwrap();
    assert_eq!(
        (broke.bastion.as_deref(), broke.name),
        (Some("b2"), "host key"),
        "{stages:#?}"
    );
    assert!(
        broke.detail.contains("does not match the pinned host_key"),
        "{stages:#?}"
    );
    assert!(stages[..6].iter().all(|s| s.status == StageStatus::Ok));
    let rest = &stages[7..];
    assert_eq!(rest.len(), 6, "{stages:#?}");
    assert!(
        rest.iter()
            .all(|s| s.status == StageStatus::Skipped
                && s.detail == "not checked: b2: host key failed"),
        "{stages:#?}"
    );
    assert_eq!(lab.sshd("target").logins(), 1, "{}", lab.logs());
    lab.wait_all_closed();
}
