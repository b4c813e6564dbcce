//! The README's "A short tour" runs as written: its shell block is run with bash, line by
//! line and stopping at the first failure, against the real `bosun` binary, a real server
//! it starts itself, a real git repository and the real engine. Only what a test must
//! change is changed: the build line (the binary is already built; its folder goes on
//! `PATH`), and the port (a free one instead of 8080, so tests can run side by side).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::process::{Command, Stdio};

use support::{terraform_or_skip, BIN};

/// The first ```sh block after the heading `## A short tour`.
fn tour(readme: &str) -> String {
    let at = readme
        .find("## A short tour")
        .expect("the README has a short tour");
    let rest = &readme[at..];
    let start = rest.find("```sh\n").expect("the tour has a sh block") + "```sh\n".len();
    let end = rest[start..].find("```").expect("the sh block ends") + start;
    rest[start..end].to_string()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn the_readme_tour_runs_as_written() {
    let Some(terraform) = terraform_or_skip() else {
        return;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let block = tour(&readme);
    let (build, rest) = block.split_once('\n').unwrap();
    assert!(
        build.starts_with("cargo build --release"),
        "the tour starts by building: {build}"
    );
    let port = free_port();
    let script = rest.replace("127.0.0.1:8080", &format!("127.0.0.1:{port}"));
    assert_ne!(script, rest, "the tour names the server's address");

    // A fresh folder with what the tour reads from the repository: its examples.
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path();
    std::os::unix::fs::symlink(root.join("examples"), work.join("examples")).unwrap();
    let bin_dir = Path::new(BIN).parent().unwrap();
    // The engine as a user has it: `terraform` on PATH.
    let engine_dir = work.join("engine");
    std::fs::create_dir(&engine_dir).unwrap();
    std::os::unix::fs::symlink(&terraform, engine_dir.join("terraform")).unwrap();
    let path = format!(
        "{}:{}:{}",
        bin_dir.display(),
        engine_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let wrapped = format!(
        "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\nexport BOSUN_LISTEN=127.0.0.1:{port}\n{script}"
    );
    let out = Command::new("bash")
        .arg("-c")
        .arg(&wrapped)
        .current_dir(work)
        .env("PATH", path)
        .env("CHECKPOINT_DISABLE", "1")
        .env_remove("BOSUN_URL")
        .env_remove("BOSUN_TOKEN")
        .env_remove("BOSUN_BOOTSTRAP_TOKEN")
        .env_remove("BOSUN_ORG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the tour failed ({:?})\nscript:\n{wrapped}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    // It did what it says: the run applied, the state and outputs are there.
    assert!(
        stdout.contains("state: finished"),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stdout.contains("hello-demo-2.internal"),
        "the outputs show the three replicas:\n{stdout}"
    );
    assert!(
        stderr.contains(&format!("bosun: console at http://127.0.0.1:{port}/")),
        "{stderr}"
    );
}
