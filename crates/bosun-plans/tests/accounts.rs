//! The `user` and `group` modules against this machine's real accounts (`useradd`,
//! `usermod`, `userdel`, `groupadd`, `groupmod`, `groupdel`, `getent`, `id`): throwaway
//! names (`bt-<hex>`), removed by a guard when the test ends however it ends. Plans are
//! parsed from YAML and run by the executor on a `local` host — and on a real sshd host
//! in `users_over_ssh`. Dry runs must leave `/etc/passwd`, `/etc/group`, `/etc/shadow`
//! and `/etc/gshadow` byte for byte as they were.
//!
//! They need root or a passwordless `sudo -n` (then every step says `sudo: true`);
//! without either they are skipped loudly, or fail under `BOSUN_REQUIRE_TOOLS=1`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::Path;

use bosun_plans::exec::{HostStatus, RunReport, RunStatus};
use bosun_plans::model::{parse_plan, ConnectionKind, Host, Inventory};

mod common;
use common::Counting;
use common::{as_root, require_root_or_sudo, unique_name};

const TOOLS: [&str; 6] = [
    "/usr/sbin/useradd",
    "/usr/sbin/usermod",
    "/usr/sbin/userdel",
    "/usr/sbin/groupadd",
    "/usr/sbin/groupdel",
    "/usr/bin/getent",
];

/// The tests of this binary change the same account databases and compare them byte
/// for byte: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Removes the test's users (with their homes) and groups when dropped.
struct Accounts {
    sudo: bool,
    users: Vec<String>,
    groups: Vec<String>,
}

impl Accounts {
    fn new(sudo: bool) -> Self {
        Accounts {
            sudo,
            users: Vec::new(),
            groups: Vec::new(),
        }
    }
    fn user(&mut self) -> String {
        let n = unique_name("bt-");
        self.users.push(n.clone());
        n
    }
    fn group(&mut self) -> String {
        let n = unique_name("bt-g");
        self.groups.push(n.clone());
        n
    }
}

impl Drop for Accounts {
    fn drop(&mut self) {
        for u in &self.users {
            if getent("passwd", u).is_some() {
                as_root(self.sudo, &["userdel", "-r", u]);
            }
        }
        for g in &self.groups {
            if getent("group", g).is_some() {
                as_root(self.sudo, &["groupdel", g]);
            }
        }
    }
}

fn getent(db: &str, key: &str) -> Option<String> {
    let out = std::process::Command::new("getent")
        .args([db, key])
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Field `i` (0-based) of a passwd or group entry.
fn field(entry: &str, i: usize) -> String {
    entry.split(':').nth(i).unwrap_or_default().to_string()
}

/// A uid and gid no account has, in a range distributions leave to local accounts.
fn free_id() -> u32 {
    let start = u32::from_str_radix(&unique_name("")[..4], 16).unwrap() % 10_000;
    (0..10_000)
        .map(|i| 42_000 + (start + i) % 10_000)
        .find(|id| {
            getent("passwd", &id.to_string()).is_none()
                && getent("group", &id.to_string()).is_none()
        })
        .expect("a free id")
}

/// The account databases, byte for byte.
#[derive(PartialEq, Eq)]
struct Snapshot(BTreeMap<&'static str, Vec<u8>>);

/// Shows the lines that differ, not the whole files.
impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (file, bytes) in &self.0 {
            writeln!(
                f,
                "{file}: {} bytes, last line {:?}",
                bytes.len(),
                String::from_utf8_lossy(bytes)
                    .lines()
                    .last()
                    .unwrap_or_default()
            )?;
        }
        Ok(())
    }
}

fn snapshot(sudo: bool) -> Snapshot {
    Snapshot(snapshot_files(sudo))
}

fn snapshot_files(sudo: bool) -> BTreeMap<&'static str, Vec<u8>> {
    ["/etc/passwd", "/etc/group", "/etc/shadow", "/etc/gshadow"]
        .into_iter()
        .filter(|f| Path::new(f).exists())
        .map(|f| {
            let out = as_root(sudo, &["cat", f]);
            assert!(out.status.success(), "cat {f}");
            (f, out.stdout)
        })
        .collect()
}

fn local() -> Inventory {
    Inventory {
        environments: BTreeMap::new(),
        hosts: vec![Host {
            name: "h".into(),
            address: "localhost".into(),
            connection: ConnectionKind::Local,
            ..Host::default()
        }],
    }
}

/// A plan of `(module, parameters)` steps (parameters as a YAML flow mapping), each
/// with `sudo` as given.
fn plan(sudo: bool, steps: &[(&str, String)]) -> bosun_plans::model::Plan {
    let mut text = String::from("name: accounts\ntargets: { hosts: [h] }\nsteps:\n");
    for (module, params) in steps {
        text.push_str(&format!("  - {module}: {params}\n    sudo: {sudo}\n"));
    }
    parse_plan(Path::new("accounts.yaml"), &text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

async fn run(plan: &bosun_plans::model::Plan, inv: &Inventory, dry_run: bool) -> RunReport {
    common::run_plan(plan, inv, dry_run).await
}

/// Each step's status and message on host `h`.
fn results(report: &RunReport) -> Vec<(HostStatus, String)> {
    report
        .steps
        .iter()
        .map(|s| {
            let r = s.result("h").unwrap();
            (r.status, r.message.clone())
        })
        .collect()
}

fn assert_statuses(report: &RunReport, want: &[HostStatus]) {
    let got = results(report);
    let statuses: Vec<HostStatus> = got.iter().map(|(s, _)| *s).collect();
    assert_eq!(statuses, want, "{got:#?}");
}

fn mode_of(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

/// A folder for homes that every user can reach.
fn homes_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// Groups, then a user in them with every parameter, from nothing to exactly what the
/// steps say; a second run changes nothing; changes to the shell, the keys and the
/// supplementary groups are predicted, then made; `state: absent` removes them all.
/// Every dry run leaves the account databases as they were.
#[tokio::test]
async fn groups_and_users_are_created_changed_and_removed() {
    let _serial = SERIAL.lock().await;
    let Some(sudo) = require_root_or_sudo(&TOOLS) else {
        return;
    };
    let mut acc = Accounts::new(sudo);
    let (g1, g2, user) = (acc.group(), acc.group(), acc.user());
    let gid = free_id();
    let uid = free_id();
    let homes = homes_dir();
    let home = homes.path().join(&user);
    let home_s = home.to_str().unwrap().to_string();
    let inv = local();
    let keys = [
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOne one@bosun",
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAITwo two@bosun",
    ];
    let steps = |shell: &str, keys: &[&str], groups: &str| {
        let keys: Vec<String> = keys.iter().map(|k| format!("{k:?}")).collect();
        plan(
            sudo,
            &[
                ("group", format!("{{ name: {g1}, gid: {gid} }}")),
                ("group", format!("{{ name: {g2}, system: true }}")),
                (
                    "user",
                    format!(
                        "{{ name: {user}, uid: {uid}, group: {g1}, groups: [{groups}], shell: {shell}, \
                         home: {home_s}, comment: \"Bosun test\", authorized_keys: [{}] }}",
                        keys.join(", ")
                    ),
                ),
            ],
        )
    };
    let first = steps("/bin/sh", &keys, &g2);

    // A dry run predicts every step, the user's groups included (made by earlier steps),
    // and changes nothing.
    let before = snapshot(sudo);
    let report = run(&first, &inv, true).await;
    assert_eq!(
        report.status,
        RunStatus::Succeeded,
        "{:#?}",
        results(&report)
    );
    assert_statuses(&report, &[HostStatus::Changed; 3]);
    let r = results(&report);
    assert_eq!(r[0].1, format!("group {g1} created (gid {gid})"));
    assert_eq!(r[1].1, format!("group {g2} created (system)"));
    assert!(r[2].1.starts_with(&format!("user {user} created (uid {uid}, group {g1}, groups {g2}, shell /bin/sh, home {home_s})")), "{}", r[2].1);
    assert!(
        r[2].1.ends_with("authorized_keys written (2 keys)"),
        "{}",
        r[2].1
    );
    assert_eq!(
        snapshot(sudo),
        before,
        "a dry run changed the account databases"
    );
    assert!(getent("passwd", &user).is_none());
    assert!(!home.exists());

    // The real run does what was predicted.
    let report = run(&first, &inv, false).await;
    assert_eq!(
        report.status,
        RunStatus::Succeeded,
        "{:#?}",
        results(&report)
    );
    assert_statuses(&report, &[HostStatus::Changed; 3]);
    let g1_entry = getent("group", &g1).unwrap();
    assert_eq!(field(&g1_entry, 2), gid.to_string());
    let g2_gid: u32 = field(&getent("group", &g2).unwrap(), 2).parse().unwrap();
    assert!(g2_gid < 1000, "a system group has a system gid: {g2_gid}");
    let entry = getent("passwd", &user).unwrap();
    assert_eq!(
        entry,
        format!("{user}:x:{uid}:{gid}:Bosun test:{home_s}:/bin/sh")
    );
    let groups = String::from_utf8_lossy(
        &std::process::Command::new("id")
            .args(["-Gn", &user])
            .output()
            .unwrap()
            .stdout,
    )
    .trim()
    .to_string();
    assert_eq!(groups, format!("{g1} {g2}"));
    let ssh = home.join(".ssh");
    let file = ssh.join("authorized_keys");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        format!("{}\n{}\n", keys[0], keys[1])
    );
    assert_eq!((mode_of(&ssh), mode_of(&file)), (0o700, 0o600));
    for p in [&home, &ssh, &file] {
        let m = std::fs::metadata(p).unwrap();
        assert_eq!((m.uid(), m.gid()), (uid, gid), "{}", p.display());
    }

    // Again: nothing to do, and the file is not rewritten.
    let inode = std::fs::metadata(&file).unwrap().ino();
    let report = run(&first, &inv, false).await;
    assert_statuses(&report, &[HostStatus::Ok; 3]);
    let r = results(&report);
    assert_eq!(r[0].1, format!("group {g1} exists (gid {gid})"));
    assert_eq!(r[2].1, format!("user {user} exists (uid {uid}), unchanged"));
    assert_eq!(std::fs::metadata(&file).unwrap().ino(), inode);
    // A dry run agrees.
    let report = run(&first, &inv, true).await;
    assert_statuses(&report, &[HostStatus::Ok; 3]);

    // A new shell, one key fewer, no supplementary group: predicted, then made.
    let second = steps("/bin/bash", &keys[..1], "");
    let before = snapshot(sudo);
    let report = run(&second, &inv, true).await;
    assert_statuses(
        &report,
        &[HostStatus::Ok, HostStatus::Ok, HostStatus::Changed],
    );
    let message = &results(&report)[2].1;
    assert_eq!(
        message,
        &format!(
            "user {user}: groups: removed from {g2} (now none); shell /bin/sh → /bin/bash; authorized_keys replaced (1 keys)"
        )
    );
    assert_eq!(snapshot(sudo), before);
    assert_eq!(std::fs::read_to_string(&file).unwrap().lines().count(), 2);
    let report = run(&second, &inv, false).await;
    assert_statuses(
        &report,
        &[HostStatus::Ok, HostStatus::Ok, HostStatus::Changed],
    );
    assert_eq!(&results(&report)[2].1, message);
    assert_eq!(field(&getent("passwd", &user).unwrap(), 6), "/bin/bash");
    assert!(!getent("group", &g2).unwrap().contains(&user));
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        format!("{}\n", keys[0])
    );
    assert_eq!(mode_of(&file), 0o600);
    let report = run(&second, &inv, false).await;
    assert_statuses(&report, &[HostStatus::Ok; 3]);

    // A key file someone loosened is fixed, though its keys are right.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let report = run(&second, &inv, false).await;
    assert_eq!(
        results(&report)[2],
        (
            HostStatus::Changed,
            format!("user {user}: authorized_keys: mode or owner fixed")
        )
    );
    assert_eq!(mode_of(&file), 0o600);

    // `append`: groups are added, never taken away.
    let append = plan(
        sudo,
        &[(
            "user",
            format!("{{ name: {user}, groups: [{g2}], append: true }}"),
        )],
    );
    let report = run(&append, &inv, false).await;
    assert_eq!(
        results(&report)[0],
        (
            HostStatus::Changed,
            format!("user {user}: added to groups {g2}")
        )
    );
    let report = run(&append, &inv, false).await;
    assert_statuses(&report, &[HostStatus::Ok]);

    // Absent: predicted, then removed (the user with its home), then already absent.
    let gone = plan(
        sudo,
        &[
            (
                "user",
                format!("{{ name: {user}, state: absent, remove: true }}"),
            ),
            ("group", format!("{{ name: {g1}, state: absent }}")),
            ("group", format!("{{ name: {g2}, state: absent }}")),
        ],
    );
    let before = snapshot(sudo);
    let report = run(&gone, &inv, true).await;
    assert_statuses(&report, &[HostStatus::Changed; 3]);
    assert_eq!(
        results(&report)[0].1,
        format!("user {user} removed with its home {home_s}")
    );
    assert_eq!(snapshot(sudo), before);
    let report = run(&gone, &inv, false).await;
    assert_eq!(
        report.status,
        RunStatus::Succeeded,
        "{:#?}",
        results(&report)
    );
    assert_statuses(&report, &[HostStatus::Changed; 3]);
    assert!(getent("passwd", &user).is_none());
    assert!(getent("group", &g1).is_none() && getent("group", &g2).is_none());
    assert!(!home.exists());
    let report = run(&gone, &inv, false).await;
    assert_statuses(&report, &[HostStatus::Ok; 3]);
    assert_eq!(
        results(&report)[0].1,
        format!("user {user} is already absent")
    );
    assert_eq!(
        results(&report)[1].1,
        format!("group {g1} is already absent")
    );
}

/// A system user with no home, and a group's gid changed.
#[tokio::test]
async fn system_users_and_gid_changes() {
    let _serial = SERIAL.lock().await;
    let Some(sudo) = require_root_or_sudo(&TOOLS) else {
        return;
    };
    let mut acc = Accounts::new(sudo);
    let (group, user) = (acc.group(), acc.user());
    let (gid, gid2) = (free_id(), free_id() + 1);
    let inv = local();
    let make = plan(
        sudo,
        &[
            ("group", format!("{{ name: {group}, gid: {gid} }}")),
            (
                "user",
                format!("{{ name: {user}, system: true, create_home: false, home: /nonexistent/{user}, shell: /usr/sbin/nologin }}"),
            ),
        ],
    );
    let report = run(&make, &inv, false).await;
    assert_statuses(&report, &[HostStatus::Changed; 2]);
    let entry = getent("passwd", &user).unwrap();
    let uid: u32 = field(&entry, 2).parse().unwrap();
    assert!(uid < 1000, "a system user has a system uid: {entry}");
    assert!(!Path::new(&format!("/nonexistent/{user}")).exists());
    assert_statuses(&run(&make, &inv, false).await, &[HostStatus::Ok; 2]);

    let regid = plan(
        sudo,
        &[("group", format!("{{ name: {group}, gid: {gid2} }}"))],
    );
    let before = snapshot(sudo);
    let report = run(&regid, &inv, true).await;
    assert_eq!(
        results(&report)[0],
        (
            HostStatus::Changed,
            format!("group {group}: gid {gid} → {gid2}")
        )
    );
    assert_eq!(snapshot(sudo), before);
    let report = run(&regid, &inv, false).await;
    assert_eq!(
        results(&report)[0],
        (
            HostStatus::Changed,
            format!("group {group}: gid {gid} → {gid2}")
        )
    );
    assert_eq!(
        field(&getent("group", &group).unwrap(), 2),
        gid2.to_string()
    );
}

/// What cannot be done fails the step, dry or real, saying why, before anything
/// changes: a group that does not exist, a uid another user has, keys for a home that
/// is not there, a `.ssh` that is a symbolic link (root never writes through it).
#[tokio::test]
async fn impossible_steps_fail_saying_why() {
    let _serial = SERIAL.lock().await;
    let Some(sudo) = require_root_or_sudo(&TOOLS) else {
        return;
    };
    let mut acc = Accounts::new(sudo);
    let (user, other) = (acc.user(), acc.user());
    let missing = unique_name("bt-nogroup-");
    let inv = local();
    let cases = [
        (
            format!("{{ name: {user}, groups: [{missing}] }}"),
            format!("user {user}: group {missing} does not exist"),
        ),
        (
            format!("{{ name: {user}, uid: 0 }}"),
            format!("user {user}: uid 0 is already the uid of user root"),
        ),
        (
            format!("{{ name: {user}, create_home: false, home: /nonexistent/{user}, authorized_keys: [\"ssh-ed25519 AAAA k\"] }}"),
            format!("authorized_keys go in /nonexistent/{user}/.ssh, and /nonexistent/{user} does not exist"),
        ),
    ];
    for (params, says) in &cases {
        let p = plan(sudo, &[("user", params.clone())]);
        for dry in [true, false] {
            let before = snapshot(sudo);
            let report = run(&p, &inv, dry).await;
            let (status, message) = results(&report).remove(0);
            assert_eq!(
                status,
                HostStatus::Failed,
                "{params} (dry: {dry}): {message}"
            );
            assert!(
                message.contains(says.as_str()),
                "{params} (dry: {dry}): {message}"
            );
            assert_eq!(snapshot(sudo), before, "{params} (dry: {dry})");
        }
    }

    // A `.ssh` that points elsewhere is refused, and nothing is written there.
    let homes = homes_dir();
    let home = homes.path().join(&other);
    let elsewhere = tempfile::tempdir().unwrap();
    let make = plan(
        sudo,
        &[(
            "user",
            format!("{{ name: {other}, home: {} }}", home.display()),
        )],
    );
    assert_statuses(&run(&make, &inv, false).await, &[HostStatus::Changed]);
    std::os::unix::fs::symlink(elsewhere.path(), home.join(".ssh")).unwrap();
    let keys = plan(
        sudo,
        &[(
            "user",
            format!("{{ name: {other}, authorized_keys: [\"ssh-ed25519 AAAA k\"] }}"),
        )],
    );
    for dry in [true, false] {
        let report = run(&keys, &inv, dry).await;
        let (status, message) = results(&report).remove(0);
        assert_eq!(status, HostStatus::Failed, "{message}");
        assert!(
            message.contains("is a symbolic link or not a folder"),
            "{message}"
        );
    }
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
}

/// Over a real sshd: a user with keys made, then unchanged, and a dry run that
/// predicts its removal without removing it.
#[tokio::test]
async fn users_over_ssh() {
    let _serial = SERIAL.lock().await;
    let Some(sudo) = require_root_or_sudo(&TOOLS) else {
        return;
    };
    let Some((_dir, sshd)) = common::sshd() else {
        return;
    };
    let mut acc = Accounts::new(sudo);
    let user = acc.user();
    let homes = homes_dir();
    let home = homes.path().join(&user);
    let inv = Inventory {
        environments: BTreeMap::new(),
        hosts: vec![Host {
            name: "h".into(),
            ..common::host_for(&sshd)
        }],
    };
    let make = plan(
        sudo,
        &[(
            "user",
            format!("{{ name: {user}, home: {}, shell: /bin/sh, authorized_keys: [\"ssh-ed25519 AAAA k\"] }}", home.display()),
        )],
    );
    let report = run(&make, &inv, false).await;
    assert_eq!(
        report.status,
        RunStatus::Succeeded,
        "{:#?}\n{}",
        results(&report),
        sshd.log()
    );
    assert_statuses(&report, &[HostStatus::Changed]);
    assert_eq!(
        std::fs::read_to_string(home.join(".ssh/authorized_keys")).unwrap(),
        "ssh-ed25519 AAAA k\n"
    );
    assert_statuses(&run(&make, &inv, false).await, &[HostStatus::Ok]);
    let gone = plan(
        sudo,
        &[("user", format!("{{ name: {user}, state: absent }}"))],
    );
    let before = snapshot(sudo);
    let report = run(&gone, &inv, true).await;
    assert_eq!(
        results(&report)[0],
        (
            HostStatus::Changed,
            format!("user {user} removed (its home {} is kept)", home.display())
        )
    );
    assert_eq!(snapshot(sudo), before);
    assert!(getent("passwd", &user).is_some());
}

/// How many remote commands a step takes: a group one, whatever it finds; a user one to
/// read and one more only when something changes; a dry run one read each.
#[tokio::test]
async fn account_steps_take_one_command_or_two() {
    use bosun_plans::modules::{self, Overlay, Remote};
    use bosun_plans::template::Scope;
    let _serial = SERIAL.lock().await;
    let Some(sudo) = require_root_or_sudo(&TOOLS) else {
        return;
    };
    let mut acc = Accounts::new(sudo);
    let (group, user) = (acc.group(), acc.user());
    let homes = homes_dir();
    let conn = Counting {
        inner: bosun_plans::connection::local::LocalConnection::new(),
        commands: Default::default(),
    };
    let remote = Remote {
        conn: &conn,
        sudo,
        deadline: None,
        live: None,
    };
    let scope = Scope::default();
    let rendered = |params: (&str, String)| {
        let p = plan(false, &[params]);
        modules::render(&p.steps[0].module, &scope).unwrap().module
    };
    let home = homes.path().join(&user);
    let keys = format!(
        "{{ name: {user}, home: {}, authorized_keys: [\"ssh-ed25519 AAAA k\"] }}",
        home.display()
    );
    let cases: Vec<(&str, (&str, String), usize)> = vec![
        (
            "group created",
            ("group", format!("{{ name: {group} }}")),
            1,
        ),
        (
            "group unchanged",
            ("group", format!("{{ name: {group} }}")),
            1,
        ),
        ("user created with keys", ("user", keys.clone()), 2),
        ("user unchanged", ("user", keys), 1),
        (
            "user changed",
            ("user", format!("{{ name: {user}, groups: [{group}] }}")),
            2,
        ),
        (
            "user removed",
            (
                "user",
                format!("{{ name: {user}, state: absent, remove: true }}"),
            ),
            2,
        ),
        (
            "user already absent",
            ("user", format!("{{ name: {user}, state: absent }}")),
            1,
        ),
        (
            "group removed",
            ("group", format!("{{ name: {group}, state: absent }}")),
            1,
        ),
    ];
    for (what, params, want) in cases {
        let module = rendered(params);
        conn.commands.store(0, std::sync::atomic::Ordering::SeqCst);
        let _ = modules::predict(&module, &remote, &mut Overlay::new(), "s").await;
        assert_eq!(
            conn.commands.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "{what} (dry run)"
        );
        conn.commands.store(0, std::sync::atomic::Ordering::SeqCst);
        let outcome = modules::apply(&module, &remote).await;
        assert!(outcome.is_ok(), "{what}: {outcome:?}");
        assert_eq!(
            conn.commands.load(std::sync::atomic::Ordering::SeqCst),
            want,
            "{what}"
        );
    }
}
