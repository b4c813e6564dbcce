//! Private networks of a test's own: network namespaces ([`NetNs`]) joined by veth pairs
//! ([`link`]), so a test can place a host where the test itself cannot reach it — an
//! sshd inside one ([`crate::SshdOptions::netns`]), the test's client code on a thread
//! inside another ([`NetNs::run`]). Nothing is added to this machine's own network
//! namespace: the links join the test's namespaces to each other only, so no packet of
//! theirs leaves them.
//!
//! Making namespaces needs root and `ip` (iproute2): [`require_netns`] says whether this
//! machine allows it, announcing the skip otherwise (or failing under
//! `BOSUN_REQUIRE_TOOLS=1`). A namespace is deleted when its [`NetNs`] is dropped (a
//! failing test unwinds through that too); one left behind by a test process that was
//! killed is deleted by the next [`NetNs::create`].

use std::fs::File;
use std::io::Write as _;
use std::os::fd::AsRawFd as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Every namespace made here is named `bosun-tk-<tag>-<pid>-<n>`.
const PREFIX: &str = "bosun-tk-";

/// Runs `ip ARGS…`; the error says what `ip` said.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// `true` when this process can make network namespaces (root, `ip`, a kernel and
/// container that allow it: one is made and deleted to find out). Otherwise announces
/// `SKIPPED (tool missing): network namespaces (…)` on stderr and returns `false` — or,
/// with `BOSUN_REQUIRE_TOOLS=1`, fails.
pub fn require_netns() -> bool {
    let why = if unsafe { libc::geteuid() } != 0 {
        Some("not root".to_string())
    } else {
        static PROBES: AtomicUsize = AtomicUsize::new(0);
        let n = PROBES.fetch_add(1, Ordering::Relaxed);
        let probe = format!("{PREFIX}probe-{}-{n}", std::process::id());
        match ip(&["netns", "add", &probe]) {
            Ok(()) => {
                let _ = ip(&["netns", "del", &probe]);
                None
            }
            Err(e) => Some(e),
        }
    };
    let Some(why) = why else {
        return true;
    };
    if std::env::var("BOSUN_REQUIRE_TOOLS").as_deref() == Ok("1") {
        panic!(
            "network namespaces are required (BOSUN_REQUIRE_TOOLS=1) but cannot be made here: {why} (run the tests as root; apt-get install iproute2)"
        );
    }
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED (tool missing): network namespaces ({why})"
    );
    false
}

/// A network namespace of the test's own, with its loopback up; deleted on drop.
#[derive(Debug)]
pub struct NetNs {
    name: String,
}

impl NetNs {
    /// Makes a namespace named after `tag` (short: `[a-z0-9]`), after deleting those a
    /// killed test process left behind. Call [`require_netns`] first.
    pub fn create(tag: &str) -> NetNs {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        sweep();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("{PREFIX}{tag}-{}-{n}", std::process::id());
        ip(&["netns", "add", &name]).unwrap_or_else(|e| panic!("{e}"));
        let ns = NetNs { name };
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    /// The namespace's name (for `ip netns exec NAME`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `ip -n NAME ARGS…` (in the namespace); panics with what `ip` said.
    pub fn ip(&self, args: &[&str]) {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        ip(&all).unwrap_or_else(|e| panic!("{e}"));
    }

    /// `program` to be run inside the namespace (`ip netns exec NAME program`, which
    /// becomes the program: killing the child kills it).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.name]).arg(program);
        command
    }

    /// Runs `f` on a thread of its own that has joined this namespace: every socket it
    /// opens (a current-thread tokio runtime's included) is in here. A panic in `f` is
    /// the caller's.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let path = Path::new("/run/netns").join(&self.name);
        let file = File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        std::thread::scope(|scope| {
            let worker = scope.spawn(|| {
                // Only this thread moves: setns(CLONE_NEWNET) is per thread.
                let done = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(
                    done,
                    0,
                    "setns into {}: {}",
                    self.name,
                    std::io::Error::last_os_error()
                );
                f()
            });
            worker
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.name]);
    }
}

/// Joins `a` and `b` with a veth pair: `a_addr` (CIDR, e.g. `10.214.1.1/30`) on `a`'s
/// end, `b_addr` on `b`'s, both up. The pair is made inside the two namespaces, and goes
/// when either of them is deleted.
pub fn link(a: &NetNs, a_addr: &str, b: &NetNs, b_addr: &str) {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id() % 100_000;
    let (a_if, b_if) = (format!("v{pid}a{n}"), format!("v{pid}b{n}"));
    ip(&[
        "link", "add", &a_if, "netns", &a.name, "type", "veth", "peer", "name", &b_if, "netns",
        &b.name,
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    for (ns, dev, addr) in [(a, &a_if, a_addr), (b, &b_if, b_addr)] {
        ns.ip(&["addr", "add", addr, "dev", dev]);
        ns.ip(&["link", "set", dev, "up"]);
    }
}

/// Deletes the namespaces made here by test processes that are gone.
fn sweep() {
    let Ok(out) = Command::new("ip")
        .args(["netns", "list"])
        .stdin(Stdio::null())
        .output()
    else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        // `<tag>-<pid>-<n>`: the pid is the next-to-last part.
        let pid = rest.rsplit('-').nth(1).and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = ip(&["netns", "del", name]);
            }
        }
    }
}
