//! The `package` module against this machine's real apt and dpkg — and dnf and rpm —
//! with no network: throwaway packages (`bosun-test-pkg-<hex>`, versions 1.0 and 1.1)
//! built with `dpkg-deb --build` into a local repository (`dpkg-scanpackages`), and
//! `bosun-test-rpm-<hex>` built with `rpmbuild` into a dnf repository (`createrepo_c`)
//! served on the loopback; each purged by a guard when the test ends however it ends.
//!
//! apt is pointed at its repository alone through `APT_CONFIG` (its own source list,
//! index folder and cache, set in the sessions of a real sshd host), so the tests never
//! read or refresh the machine's own package index — but packages are installed into,
//! and removed from, the machine's real dpkg database. dnf finds its repository through
//! a file in `/etc/yum.repos.d`, removed afterwards. Dry runs must leave `dpkg -l` and
//! dpkg's status file (`rpm -qa` for dnf) as they were.
//!
//! Package managers take machine-wide locks: the tests of this binary run one at a time.
//! They need root (sudo would drop `APT_CONFIG`), sshd, `dpkg-deb` and
//! `dpkg-scanpackages` (dpkg-dev) — and `dnf`, `rpmbuild` and `createrepo_c` for the dnf
//! test; without them they are skipped loudly, or fail under `BOSUN_REQUIRE_TOOLS=1`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use bosun_plans::exec::{HostStatus, RunReport};
use bosun_plans::model::{parse_plan, Host, Inventory, Plan};
use bosun_testkit::sshd::{SshdHost, SshdOptions};

mod common;
use common::{require_root_or_sudo, unique_name};

/// apt's lock is the machine's: one test at a time.
static APT: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const TOOLS: [&str; 5] = [
    "/usr/bin/apt-get",
    "/usr/bin/dpkg-deb",
    "/usr/bin/dpkg-scanpackages",
    "/usr/bin/dpkg-query",
    "/usr/sbin/sshd",
];

/// Root, the tools and sshd, or `None` (a loud skip, or a failure under
/// `BOSUN_REQUIRE_TOOLS=1`).
fn require() -> Option<()> {
    let sudo = require_root_or_sudo(&TOOLS)?;
    if sudo {
        if std::env::var("BOSUN_REQUIRE_TOOLS").as_deref() == Ok("1") {
            panic!(
                "the package tests need root: sudo would drop APT_CONFIG (BOSUN_REQUIRE_TOOLS=1)"
            );
        }
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED (tool missing): root (the package tests isolate apt with APT_CONFIG, which sudo drops)"
        );
        return None;
    }
    bosun_testkit::sshd::require_sshd().then_some(())
}

fn sh(script: &str, args: &[&str]) -> String {
    let out = Command::new("sh")
        .args(["-c", script, "sh"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A local apt repository and an apt configuration that knows only it; the packages it
/// made are purged on drop.
struct Repo {
    dir: tempfile::TempDir,
    packages: Vec<String>,
}

impl Repo {
    fn new() -> Repo {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for sub in [
            "repo",
            "parts",
            "state/lists/partial",
            "cache/archives/partial",
            "build",
        ] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        std::fs::write(
            d.join("sources.list"),
            format!("deb [trusted=yes] file:{}/repo ./\n", d.display()),
        )
        .unwrap();
        std::fs::write(
            d.join("apt.conf"),
            format!(
                "Dir::Etc::sourcelist \"{d}/sources.list\";\n\
                 Dir::Etc::sourceparts \"{d}/parts\";\n\
                 Dir::State \"{d}/state\";\n\
                 Dir::Cache \"{d}/cache\";\n\
                 APT::Sandbox::User \"root\";\n",
                d = d.display()
            ),
        )
        .unwrap();
        std::fs::write(d.join("repo/Packages"), "").unwrap();
        Repo {
            dir,
            packages: Vec::new(),
        }
    }

    fn apt_config(&self) -> PathBuf {
        self.dir.path().join("apt.conf")
    }

    /// A new package name (purged on drop).
    fn name(&mut self) -> String {
        let n = unique_name("bosun-test-pkg-");
        self.packages.push(n.clone());
        n
    }

    /// Builds `name` `version` into the repository and indexes it.
    fn publish(&self, name: &str, version: &str) {
        let d = self.dir.path();
        let root = d.join("build").join(format!("{name}-{version}"));
        std::fs::create_dir_all(root.join("DEBIAN")).unwrap();
        std::fs::create_dir_all(root.join("usr/share/doc").join(name)).unwrap();
        std::fs::write(
            root.join("usr/share/doc").join(name).join("version"),
            format!("{version}\n"),
        )
        .unwrap();
        std::fs::write(
            root.join("DEBIAN/control"),
            format!(
                "Package: {name}\nVersion: {version}\nArchitecture: all\n\
                 Maintainer: Bosun tests <tests@bosun.invalid>\n\
                 Description: a throwaway package of the Bosun tests\n"
            ),
        )
        .unwrap();
        let deb = d.join("repo").join(format!("{name}_{version}_all.deb"));
        sh(
            "dpkg-deb --build --root-owner-group \"$1\" \"$2\" >/dev/null",
            &[root.to_str().unwrap(), deb.to_str().unwrap()],
        );
        sh(
            "cd \"$1\" && dpkg-scanpackages -m . /dev/null > Packages 2>/dev/null",
            &[d.join("repo").to_str().unwrap()],
        );
    }

    /// Makes the index look last refreshed long ago.
    fn age_the_index(&self) {
        let d = self.dir.path();
        let stamp = d.join("state/periodic/update-success-stamp");
        let lists = d.join("state/lists");
        let partial = d.join("state/lists/partial");
        let mut paths = vec![lists.to_str().unwrap(), partial.to_str().unwrap()];
        if stamp.exists() {
            paths.push(stamp.to_str().unwrap());
        }
        sh("touch -d @1000000000 -- \"$@\"", &paths);
    }

    /// When the index was last refreshed, as the stamp says (`None`: never).
    fn refreshed_at(&self) -> Option<SystemTime> {
        std::fs::metadata(self.dir.path().join("state/periodic/update-success-stamp"))
            .and_then(|m| m.modified())
            .ok()
    }
}

impl Drop for Repo {
    fn drop(&mut self) {
        for p in &self.packages {
            if installed(p).is_some() {
                let _ = Command::new("dpkg").args(["--purge", p]).output();
            }
        }
    }
}

/// The installed version of `name`, as dpkg says.
fn installed(name: &str) -> Option<String> {
    let out = Command::new("dpkg-query")
        .args(["-W", "-f", "${db:Status-Status} ${Version}", name])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.strip_prefix("installed ").map(str::to_string)
}

/// dpkg's view of the machine: `dpkg -l` and its status file.
fn dpkg_state() -> (String, Vec<u8>) {
    let list = sh("dpkg -l", &[]);
    (list, std::fs::read("/var/lib/dpkg/status").unwrap())
}

/// An sshd host whose sessions use the repository's apt configuration.
fn host(repo: &Repo) -> (tempfile::TempDir, SshdHost, Inventory) {
    let dir = tempfile::tempdir().unwrap();
    let sshd = SshdHost::start_with(
        &dir.path().join("sshd"),
        SshdOptions {
            session_env: vec![(
                "APT_CONFIG".into(),
                repo.apt_config().to_str().unwrap().into(),
            )],
            ..SshdOptions::default()
        },
    );
    let inv = Inventory {
        environments: BTreeMap::new(),
        hosts: vec![Host {
            name: "h".into(),
            ..common::host_for(&sshd)
        }],
    };
    (dir, sshd, inv)
}

/// A one-step plan: `package:` with these parameters (a YAML flow mapping's inside).
fn step(params: &str) -> Plan {
    let text =
        format!("name: packages\ntargets: {{ hosts: [h] }}\nsteps:\n  - package: {{ {params} }}\n");
    parse_plan(Path::new("packages.yaml"), &text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

async fn run(plan: &Plan, inv: &Inventory, dry_run: bool) -> (HostStatus, String, RunReport) {
    let report = common::run_plan(plan, inv, dry_run).await;
    let r = report.result(1, "h").unwrap();
    (r.status, r.message.clone(), report.clone())
}

/// A dry run of `plan`: its status and message, with dpkg's state unchanged by it.
async fn dry(plan: &Plan, inv: &Inventory) -> (HostStatus, String) {
    let before = dpkg_state();
    let (status, message, _) = run(plan, inv, true).await;
    assert!(
        dpkg_state() == before,
        "a dry run changed dpkg's state ({message})"
    );
    (status, message)
}

async fn real(plan: &Plan, inv: &Inventory) -> (HostStatus, String) {
    let (status, message, report) = run(plan, inv, false).await;
    if status == HostStatus::Failed {
        let r = report.result(1, "h").unwrap();
        eprintln!("stdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
    }
    (status, message)
}

/// From an index that knows nothing to installed, unchanged, upgraded (only once the
/// index is refreshed: `cache_valid_time` decides when) and removed, each predicted by
/// a dry run that changes nothing first.
#[tokio::test]
async fn packages_follow_the_index_through_present_latest_and_absent() {
    let _apt = APT.lock().await;
    if require().is_none() {
        return;
    }
    let mut repo = Repo::new();
    let (a, b) = (repo.name(), repo.name());
    repo.publish(&a, "1.0");
    repo.publish(&b, "1.0");
    repo.age_the_index();
    let (_dir, sshd, inv) = host(&repo);
    let present_a = step(&format!("name: {a}, cache_valid_time: 3600"));

    // The index has never seen the package: without cache_valid_time a dry run knows it
    // is not there to install; with it, it cannot know (a real run refreshes first).
    let (status, message) = dry(&step(&format!("name: {a}")), &inv).await;
    assert_eq!(status, HostStatus::Failed, "{message}\n{}", sshd.log());
    assert!(
        message.contains(&format!("package {a} is not available")),
        "{message}"
    );
    let (status, message) = dry(&present_a, &inv).await;
    assert_eq!(status, HostStatus::Unknown, "{message}");
    assert!(
        message.starts_with(&format!(
            "cannot know: {a} is not in the package index, which a real run refreshes first"
        )),
        "{message}"
    );
    assert_eq!(repo.refreshed_at(), None, "a dry run refreshed the index");

    // Installed, the stale index refreshed first.
    let (status, message) = real(&present_a, &inv).await;
    assert_eq!(
        (status, message.as_str()),
        (
            HostStatus::Changed,
            format!("installed {a} 1.0 (package index refreshed)").as_str()
        )
    );
    assert_eq!(installed(&a).as_deref(), Some("1.0"));
    assert_eq!(
        std::fs::read_to_string(format!("/usr/share/doc/{a}/version")).unwrap(),
        "1.0\n"
    );
    let refreshed = repo.refreshed_at().expect("the refresh is stamped");

    // Again: nothing to do, and the index (fresh) is left alone.
    let (status, message) = real(&present_a, &inv).await;
    assert_eq!(
        (status, message),
        (HostStatus::Ok, format!("already installed: {a} 1.0"))
    );
    assert_eq!(repo.refreshed_at(), Some(refreshed));

    // 1.1 is published, but the index is younger than cache_valid_time: latest keeps 1.0.
    repo.publish(&a, "1.1");
    let latest_a = step(&format!("name: {a}, state: latest, cache_valid_time: 3600"));
    assert_eq!(
        dry(&latest_a, &inv).await,
        (
            HostStatus::Ok,
            format!("already the latest version: {a} 1.0")
        )
    );
    let (status, message) = real(&latest_a, &inv).await;
    assert_eq!(
        (status, message),
        (
            HostStatus::Ok,
            format!("already the latest version: {a} 1.0")
        )
    );
    assert_eq!(installed(&a).as_deref(), Some("1.0"));
    assert_eq!(repo.refreshed_at(), Some(refreshed));

    // Once the index is older than cache_valid_time, a dry run of latest cannot know.
    repo.age_the_index();
    let (status, message) = dry(&latest_a, &inv).await;
    assert_eq!(status, HostStatus::Unknown, "{message}");
    assert!(
        message.contains("which a real run refreshes first"),
        "{message}"
    );

    // `present` of a list refreshes only because one is missing; it installs that one
    // and does not upgrade the other.
    let both = step(&format!("name: [{a}, {b}], cache_valid_time: 3600"));
    let (status, message) = real(&both, &inv).await;
    assert_eq!(
        (status, message),
        (
            HostStatus::Changed,
            format!("installed {b} 1.0; unchanged {a} 1.0 (package index refreshed)")
        )
    );
    assert_eq!(installed(&a).as_deref(), Some("1.0"));
    assert!(repo.refreshed_at().unwrap() > refreshed);

    // The index now offers 1.1: latest predicts the upgrade, then makes it, then has
    // nothing left to do.
    let latest = step(&format!("name: {a}, state: latest"));
    assert_eq!(
        dry(&latest, &inv).await,
        (HostStatus::Changed, format!("upgraded {a} 1.0 → 1.1"))
    );
    assert_eq!(installed(&a).as_deref(), Some("1.0"));
    assert_eq!(
        real(&latest, &inv).await,
        (HostStatus::Changed, format!("upgraded {a} 1.0 → 1.1"))
    );
    assert_eq!(installed(&a).as_deref(), Some("1.1"));
    assert_eq!(
        real(&latest, &inv).await,
        (
            HostStatus::Ok,
            format!("already the latest version: {a} 1.1")
        )
    );

    // Absent: predicted, removed, then already absent.
    let gone = step(&format!("name: [{a}, {b}], state: absent"));
    assert_eq!(
        dry(&gone, &inv).await,
        (HostStatus::Changed, format!("removed {a} 1.1, {b} 1.0"))
    );
    assert_eq!(
        real(&gone, &inv).await,
        (HostStatus::Changed, format!("removed {a} 1.1, {b} 1.0"))
    );
    assert_eq!((installed(&a), installed(&b)), (None, None));
    assert_eq!(
        real(&gone, &inv).await,
        (HostStatus::Ok, format!("already absent: {a}, {b}"))
    );
    assert_eq!(
        dry(&gone, &inv).await,
        (HostStatus::Ok, format!("already absent: {a}, {b}"))
    );
}

/// A package no source has fails the step naming it, dry or real, and nothing of the
/// list is installed.
#[tokio::test]
async fn unknown_packages_fail_naming_them() {
    let _apt = APT.lock().await;
    if require().is_none() {
        return;
    }
    let mut repo = Repo::new();
    let a = repo.name();
    let nope = unique_name("bosun-test-nope-");
    repo.publish(&a, "1.0");
    let (_dir, _sshd, inv) = host(&repo);
    let plan = step(&format!("name: [{a}, {nope}], cache_valid_time: 0"));
    let (status, message) = dry(&plan, &inv).await;
    // The index was never refreshed: a dry run cannot tell.
    assert_eq!(status, HostStatus::Unknown, "{message}");
    let before = dpkg_state();
    let (status, message) = real(&plan, &inv).await;
    assert_eq!(status, HostStatus::Failed, "{message}");
    assert_eq!(
        message,
        format!("package {nope} is not available from apt's package sources (unknown package?)")
    );
    assert_eq!(installed(&a), None);
    assert!(dpkg_state() == before);
    // Now the index is fresh, a dry run knows too.
    let (status, message) = dry(&step(&format!("name: [{a}, {nope}]")), &inv).await;
    assert_eq!(status, HostStatus::Failed, "{message}");
    assert!(message.contains(&nope), "{message}");
}

/// A host without apt and dnf — its sessions' `PATH` holds every program of this
/// machine but `apt-get`, `dpkg-query`, `dnf` and `rpm` — fails a package step saying
/// so, dry or real; so does a step whose `manager` the host does not have.
#[tokio::test]
async fn hosts_without_the_package_manager_fail_saying_so() {
    let _apt = APT.lock().await;
    if require().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    for folder in ["/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"] {
        let Ok(entries) = std::fs::read_dir(folder) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            if ["apt-get", "dpkg-query", "dnf", "rpm"]
                .iter()
                .any(|n| name == *n)
            {
                continue;
            }
            let _ = std::os::unix::fs::symlink(e.path(), bin.join(&name));
        }
    }
    let sshd = SshdHost::start_with(
        &dir.path().join("sshd"),
        SshdOptions {
            session_env: vec![("PATH".into(), bin.to_str().unwrap().into())],
            ..SshdOptions::default()
        },
    );
    let inv = Inventory {
        environments: BTreeMap::new(),
        hosts: vec![Host {
            name: "h".into(),
            ..common::host_for(&sshd)
        }],
    };
    for (params, says) in [
        (
            "name: nginx",
            "package: this host has no supported package manager (apt: apt-get and dpkg-query; dnf: dnf and rpm)",
        ),
        ("name: nginx, manager: dnf", "package: manager dnf is not on this host (dnf and rpm not found)"),
        ("name: nginx, manager: apt", "package: manager apt is not on this host (apt-get and dpkg-query not found)"),
    ] {
        for dry_run in [true, false] {
            let (status, message, _) = run(&step(params), &inv, dry_run).await;
            assert_eq!(
                (status, message.as_str()),
                (HostStatus::Failed, says),
                "{params} (dry run: {dry_run})\n{}",
                sshd.log()
            );
        }
    }
}

/// A throwaway dnf repository (`rpmbuild`, `createrepo_c`) served over HTTP on the
/// loopback (`python3 -m http.server`: dnf caches a remote repository's metadata, which
/// `cache_valid_time` is about, but reads a `file://` one in place every time) and known
/// to dnf through a repository file in `/etc/yum.repos.d`; on drop the server stops, its
/// packages are erased and the file (with the folder, if this made it) and dnf's cache
/// of it removed.
struct RpmRepo {
    dir: tempfile::TempDir,
    id: String,
    made_reposdir: bool,
    packages: Vec<String>,
    server: std::process::Child,
}

const REPOSDIR: &str = "/etc/yum.repos.d";

impl RpmRepo {
    fn new() -> RpmRepo {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("repo")).unwrap();
        sh(
            "createrepo_c -q \"$1\"",
            &[dir.path().join("repo").to_str().unwrap()],
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let server = Command::new("python3")
            .args([
                "-m",
                "http.server",
                "--bind",
                "127.0.0.1",
                &port.to_string(),
                "--directory",
            ])
            .arg(dir.path().join("repo"))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "the repository's HTTP server did not start"
            );
            std::thread::yield_now();
        }
        let made_reposdir = !Path::new(REPOSDIR).exists();
        std::fs::create_dir_all(REPOSDIR).unwrap();
        let id = unique_name("bosun-test-");
        std::fs::write(
            Path::new(REPOSDIR).join(format!("{id}.repo")),
            format!(
                "[{id}]\nname=Bosun tests\nbaseurl=http://127.0.0.1:{port}/\nenabled=1\ngpgcheck=0\n"
            ),
        )
        .unwrap();
        RpmRepo {
            dir,
            id,
            made_reposdir,
            packages: Vec::new(),
            server,
        }
    }

    fn name(&mut self) -> String {
        let n = unique_name("bosun-test-rpm-");
        self.packages.push(n.clone());
        n
    }

    /// Builds `name` `version` (release 1) into the repository and indexes it.
    fn publish(&self, name: &str, version: &str) {
        let top = self.dir.path().join(format!("build-{name}-{version}"));
        std::fs::create_dir_all(top.join("SPECS")).unwrap();
        let spec = top.join("SPECS/p.spec");
        std::fs::write(
            &spec,
            format!(
                "Name: {name}\nVersion: {version}\nRelease: 1\nSummary: a throwaway package of the Bosun tests\n\
                 License: MIT\nBuildArch: noarch\nAutoReqProv: no\n\
                 %description\nA throwaway package of the Bosun tests.\n\
                 %install\nmkdir -p %{{buildroot}}/usr/share/doc/{name}\necho {version} > %{{buildroot}}/usr/share/doc/{name}/version\n\
                 %files\n/usr/share/doc/{name}/version\n"
            ),
        )
        .unwrap();
        sh(
            "rpmbuild --quiet --define \"_topdir $1\" -bb \"$2\" >/dev/null 2>&1 && cp \"$1\"/RPMS/noarch/*.rpm \"$3\" && createrepo_c -q \"$3\"",
            &[
                top.to_str().unwrap(),
                spec.to_str().unwrap(),
                self.dir.path().join("repo").to_str().unwrap(),
            ],
        );
    }
}

impl Drop for RpmRepo {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
        for p in &self.packages {
            if rpm_installed(p).is_some() {
                let _ = Command::new("rpm").args(["-e", "--nodeps", p]).output();
            }
        }
        let _ = std::fs::remove_file(Path::new(REPOSDIR).join(format!("{}.repo", self.id)));
        if self.made_reposdir {
            let _ = std::fs::remove_dir(REPOSDIR);
        }
        if let Ok(entries) = std::fs::read_dir("/var/cache/dnf") {
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().starts_with(&self.id) {
                    let _ = std::fs::remove_dir_all(e.path());
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
    }
}

/// The installed version-release of `name`, as rpm says.
fn rpm_installed(name: &str) -> Option<String> {
    let out = Command::new("rpm")
        .args(["-q", "--qf", "%{VERSION}-%{RELEASE}", name])
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// rpm's view of the machine.
fn rpm_state() -> String {
    sh("rpm -qa 2>/dev/null | sort", &[])
}

/// dnf, on this machine (`manager: dnf`, whatever else it has): present, unchanged,
/// latest once the metadata is older than `cache_valid_time`, absent; dry runs first,
/// changing nothing rpm knows.
#[tokio::test]
async fn dnf_installs_upgrades_and_removes() {
    let _apt = APT.lock().await;
    let tools = [
        "/usr/bin/dnf",
        "/usr/bin/rpm",
        "/usr/bin/rpmbuild",
        "/usr/bin/createrepo_c",
    ];
    match require_root_or_sudo(&tools) {
        None => return,
        Some(true) => {
            use std::io::Write as _;
            if std::env::var("BOSUN_REQUIRE_TOOLS").as_deref() == Ok("1") {
                panic!("the dnf test needs root (BOSUN_REQUIRE_TOOLS=1)");
            }
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED (tool missing): root (the dnf test adds a repository file)"
            );
            return;
        }
        Some(false) => {}
    }
    let mut repo = RpmRepo::new();
    let a = repo.name();
    repo.publish(&a, "1.0");
    let inv = Inventory {
        environments: BTreeMap::new(),
        hosts: vec![Host {
            name: "h".into(),
            address: "localhost".into(),
            connection: bosun_plans::model::ConnectionKind::Local,
            ..Host::default()
        }],
    };
    let rpm_dry = |plan: Plan| {
        let inv = inv.clone();
        async move {
            let before = rpm_state();
            let (status, message, _) = run(&plan, &inv, true).await;
            assert_eq!(
                rpm_state(),
                before,
                "a dry run changed rpm's state ({message})"
            );
            (status, message)
        }
    };
    let present = step(&format!("name: {a}, manager: dnf"));

    // No metadata cached for the repository yet: a dry run cannot know.
    let (status, message) = rpm_dry(present.clone()).await;
    assert_eq!(status, HostStatus::Unknown, "{message}");
    assert!(
        message.contains(&format!("{a} is not in dnf's metadata cache")),
        "{message}"
    );

    assert_eq!(
        real(&present, &inv).await,
        (HostStatus::Changed, format!("installed {a} 1.0-1"))
    );
    assert_eq!(rpm_installed(&a).as_deref(), Some("1.0-1"));
    assert_eq!(
        real(&present, &inv).await,
        (HostStatus::Ok, format!("already installed: {a} 1.0-1"))
    );

    // 1.1 is published; the metadata is younger than cache_valid_time: nothing newer.
    repo.publish(&a, "1.1");
    let latest = |cvt: u64| {
        step(&format!(
            "name: {a}, manager: dnf, state: latest, cache_valid_time: {cvt}"
        ))
    };
    assert_eq!(
        real(&latest(3600), &inv).await,
        (
            HostStatus::Ok,
            format!("already the latest version: {a} 1.0-1")
        )
    );
    assert_eq!(rpm_installed(&a).as_deref(), Some("1.0-1"));
    // With cache_valid_time 0 the metadata is refreshed first, and the upgrade is made.
    assert_eq!(
        real(&latest(0), &inv).await,
        (HostStatus::Changed, format!("upgraded {a} 1.0-1 → 1.1-1"))
    );
    assert_eq!(rpm_installed(&a).as_deref(), Some("1.1-1"));
    let plain_latest = step(&format!("name: {a}, manager: dnf, state: latest"));
    assert_eq!(
        rpm_dry(plain_latest.clone()).await,
        (
            HostStatus::Ok,
            format!("already the latest version: {a} 1.1-1")
        )
    );
    assert_eq!(
        real(&plain_latest, &inv).await,
        (
            HostStatus::Ok,
            format!("already the latest version: {a} 1.1-1")
        )
    );

    let gone = step(&format!("name: {a}, manager: dnf, state: absent"));
    assert_eq!(
        rpm_dry(gone.clone()).await,
        (HostStatus::Changed, format!("removed {a} 1.1-1"))
    );
    assert_eq!(
        real(&gone, &inv).await,
        (HostStatus::Changed, format!("removed {a} 1.1-1"))
    );
    assert_eq!(rpm_installed(&a), None);
    assert_eq!(
        real(&gone, &inv).await,
        (HostStatus::Ok, format!("already absent: {a}"))
    );

    let nope = unique_name("bosun-test-nope-");
    let (status, message) = real(&step(&format!("name: [{a}, {nope}], manager: dnf")), &inv).await;
    assert_eq!(
        (status, message),
        (
            HostStatus::Failed,
            format!(
                "package {nope} is not available from dnf's package sources (unknown package?)"
            )
        )
    );
    assert_eq!(rpm_installed(&a), None);
}
