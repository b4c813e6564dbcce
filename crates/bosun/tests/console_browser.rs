//! The console in a real browser: the real `bosun server` binary, headless Chromium driven
//! through chromedriver (WebDriver), real git repositories, the real Terraform 1.0.3 and
//! signed GitHub webhooks. Each test logs in with a token as a person does and uses the
//! pages' stable hooks (ids, `data-*` attributes, form names) — the contract with the
//! page templates — then checks the outcome through the JSON API as well.
//!
//! Every page visited is saved as a PNG under `target/console-screenshots/` (the path is
//! printed). Without Chromium or chromedriver the tests skip loudly; with
//! `BOSUN_REQUIRE_TOOLS=1` (scripts/test.sh) a missing browser fails them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, Output, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};
use support::{bosun, deliver_webhook, http, terraform_or_skip, ServerProcess};
use tempfile::TempDir;

// ---- the browser -------------------------------------------------------------------------

/// Chromium and chromedriver, or `None` after announcing the skip. `CHROMIUM` and
/// `CHROMEDRIVER` override the Debian paths.
fn browser_or_skip() -> Option<(PathBuf, PathBuf)> {
    let find = |var: &str, default: &str| {
        let p = std::env::var_os(var)
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(default));
        let works = Command::new(&p)
            .arg("--version")
            .stdin(Stdio::null())
            .output()
            .is_ok_and(|o| o.status.success());
        works.then_some(p)
    };
    let chromium = find("CHROMIUM", "/usr/bin/chromium");
    let driver = find("CHROMEDRIVER", "/usr/bin/chromedriver");
    match (chromium, driver) {
        (Some(c), Some(d)) => Some((c, d)),
        (c, d) => {
            let missing = [("chromium", c.is_none()), ("chromedriver", d.is_none())]
                .iter()
                .filter(|(_, m)| *m)
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(" and ");
            if std::env::var("BOSUN_REQUIRE_TOOLS").as_deref() == Ok("1") {
                let verb = if missing.contains(" and ") {
                    "are"
                } else {
                    "is"
                };
                panic!(
                    "{missing} {verb} required (BOSUN_REQUIRE_TOOLS=1) but not installed \
                     (Debian: apt-get install chromium chromium-driver)"
                );
            }
            let _ = writeln!(std::io::stderr(), "SKIPPED (tool missing): {missing}");
            None
        }
    }
}

/// A free loopback port (bound, read, released).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A chromedriver child process, killed on drop.
struct Driver {
    child: Child,
    url: String,
}

impl Driver {
    fn start(bin: &Path) -> Driver {
        let port = free_port();
        let mut child = Command::new(bin)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn chromedriver");
        // It says so on stdout once it listens; keep draining the pipe afterwards.
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line.contains("started successfully") {
                    let _ = tx.send(());
                }
            }
        });
        if rx.recv_timeout(Duration::from_secs(30)).is_err() {
            let _ = child.kill();
            panic!("chromedriver did not start on port {port} within 30s");
        }
        Driver {
            child,
            url: format!("http://127.0.0.1:{port}"),
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Headless Chromium on one test's server: blocking wrappers over the WebDriver client,
/// so tests mix browser steps with the blocking CLI/HTTP helpers. Screenshots of every
/// page visited go to `target/console-screenshots/<test>-<page>.png`.
struct Browser {
    rt: tokio::runtime::Runtime,
    client: Option<Client>,
    base: String,
    test: &'static str,
    // Dropped after the client: the browser first, then its driver, then its profile.
    _driver: Driver,
    _profile: TempDir,
}

impl Browser {
    fn open(bins: &(PathBuf, PathBuf), server: &ServerProcess, test: &'static str) -> Browser {
        let (chromium, driver_bin) = bins;
        let driver = Driver::start(driver_bin);
        let profile = tempfile::Builder::new()
            .prefix("bosun-chromium-")
            .tempdir()
            .unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": chromium,
                "args": [
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-quic",
                    "--no-first-run",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--disable-dev-shm-usage",
                    "--window-size=1280,1600",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            }),
        );
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = rt
            .block_on(
                ClientBuilder::new(connector)
                    .capabilities(caps)
                    .connect(&driver.url),
            )
            .unwrap_or_else(|e| panic!("cannot start headless Chromium via chromedriver: {e}"));
        Browser {
            rt,
            client: Some(client),
            base: server.url(),
            test,
            _driver: driver,
            _profile: profile,
        }
    }

    fn c(&self) -> &Client {
        self.client.as_ref().unwrap()
    }

    /// Opens `path` (on the server) and saves a screenshot named `page`.
    fn visit(&self, path: &str, page: &str) {
        let url = format!("{}{path}", self.base);
        self.rt
            .block_on(self.c().goto(&url))
            .unwrap_or_else(|e| panic!("goto {url}: {e}"));
        self.shot(page);
    }

    /// The path (and query) the browser is on.
    fn path(&self) -> String {
        let u = self.rt.block_on(self.c().current_url()).unwrap();
        match u.query() {
            Some(q) => format!("{}?{q}", u.path()),
            None => u.path().to_string(),
        }
    }

    /// Saves a screenshot of the page as it is now.
    fn shot(&self, page: &str) {
        let png = self.rt.block_on(self.c().screenshot()).unwrap();
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(format!("{}-{page}.png", self.test));
        std::fs::write(&file, png).unwrap();
        eprintln!("screenshot: {}", file.display());
    }

    /// Runs `script` (a function body; `arguments[i]` are `args`) in the page.
    fn js(&self, script: &str, args: Vec<Value>) -> Value {
        self.rt
            .block_on(self.c().execute(script, args))
            .unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// The text content of the first element matching `css`, or `None` if there is none.
    fn text(&self, css: &str) -> Option<String> {
        self.js(
            "var e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
            vec![json!(css)],
        )
        .as_str()
        .map(str::to_string)
    }

    /// How many elements match `css`.
    fn count(&self, css: &str) -> usize {
        self.js(
            "return document.querySelectorAll(arguments[0]).length;",
            vec![json!(css)],
        )
        .as_u64()
        .unwrap() as usize
    }

    /// The page's HTML, for failure messages.
    fn html(&self) -> String {
        self.rt.block_on(self.c().source()).unwrap_or_default()
    }

    /// Types `text` into the field matching `css` (cleared first), as a person does.
    fn fill(&self, css: &str, text: &str) {
        self.rt.block_on(async {
            let el = self
                .c()
                .find(Locator::Css(css))
                .await
                .unwrap_or_else(|e| panic!("no field {css}: {e}"));
            el.clear().await.unwrap();
            el.send_keys(text).await.unwrap();
        });
    }

    /// Clicks the element matching `css` and waits for the page it leads to (a form's
    /// submit button: the POST, its redirect and the next page).
    fn click_and_wait(&self, css: &str) {
        // A marker on the current document: gone once the next page has loaded.
        self.js("window.__bosunOld = true; return null;", vec![]);
        self.rt.block_on(async {
            let el = self
                .c()
                .find(Locator::Css(css))
                .await
                .unwrap_or_else(|e| panic!("nothing to click at {css}: {e}"));
            el.click().await.unwrap();
        });
        self.wait(&format!("a new page after clicking {css}"), || {
            let v = self.js(
                "return window.__bosunOld !== true && document.readyState === 'complete';",
                vec![],
            );
            (v == json!(true)).then_some(())
        });
    }

    /// Polls `f` until it returns `Some` (every 100 ms, up to 60 s); on timeout saves a
    /// screenshot and panics with `what` and the page.
    fn wait<T>(&self, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(v) = f() {
                return v;
            }
            if Instant::now() > deadline {
                self.shot("timeout");
                panic!(
                    "timed out waiting for {what} on {}\npage:\n{}",
                    self.path(),
                    self.html()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Logs in on the login page with `token`, landing on the org's stacks.
    fn login(&self, token: &str) {
        self.visit("/login", "login");
        self.fill("#token", token);
        self.click_and_wait("button[type=submit]");
    }

    /// The text of the flash message (`ok` or `error`) the page shows, if any.
    /// Signs in as `user` on the OpenID Provider's own login and consent forms.
    fn sign_in_at_provider(&self, user: &str) {
        self.wait("the provider's login form", || {
            (self.count("input[name=login]") == 1).then_some(())
        });
        self.shot("provider-login");
        self.fill("input[name=login]", user);
        self.fill("input[name=password]", "any password");
        self.click_and_wait("button[type=submit]");
        self.wait("the provider's consent form", || {
            (self.count("input[name=prompt][value=consent]") == 1).then_some(())
        });
        self.click_and_wait("button[type=submit]");
    }

    fn flash(&self, kind: &str) -> Option<String> {
        self.text(&format!(".flash.{kind}"))
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(c) = self.client.take() {
            let _ = self.rt.block_on(c.close());
        }
    }
}

/// `target/console-screenshots` of this workspace (or of `CARGO_TARGET_DIR`).
fn screenshot_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    target.join("console-screenshots")
}

// ---- the world: repositories, engines, the server ------------------------------------------

/// The module every stack runs: a variable, a local and outputs, no providers.
const MAIN_TF: &str = r#"variable "replicas" {
  type    = number
  default = 1
}

output "greeting" {
  value = "hello-${var.replicas}"
}
"#;

/// One test's world: a temp dir, Terraform, a bare repository holding `MAIN_TF`.
struct Fixture {
    dir: TempDir,
    tf: PathBuf,
    repo_url: String,
}

impl Fixture {
    fn new() -> Option<Fixture> {
        let tf = terraform_or_skip()?;
        let dir = tempfile::Builder::new()
            .prefix("bosun-console-")
            .tempdir()
            .unwrap();
        let repo_url = support::bare_repository(dir.path(), MAIN_TF);
        Some(Fixture { repo_url, tf, dir })
    }

    /// An engine wrapper: `plan` and `apply` print `lines` numbered lines, one every
    /// `every` seconds, then exec the real Terraform — a run whose log grows while it goes.
    fn talkative_engine(&self, lines: u32, every: &str) -> PathBuf {
        let path = self.dir.path().join("talkative-engine.sh");
        let script = format!(
            r#"#!/bin/sh
case "$1" in
  plan|apply)
    i=1
    while [ $i -le {lines} ]; do echo "console-$1-line-$i"; sleep {every}; i=$((i+1)); done
    ;;
esac
exec "{tf}" "$@"
"#,
            tf = self.tf.display()
        );
        support::write_executable(&path, &script);
        path
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        // Engines (and their sleeps) work inside the temp dir: none may outlive the test.
        support::kill_processes_under(self.dir.path());
    }
}

struct Env {
    server: ServerProcess,
    admin: String,
}

fn start(fx: &Fixture, args: &[&str]) -> Env {
    let server = ServerProcess::start(&fx.dir.path().join("data"), args, &[]);
    let admin = server.admin_token();
    Env { server, admin }
}

/// `bosun ARGS` with the admin token; must succeed; returns stdout.
fn ok(env: &Env, args: &[&str]) -> String {
    let out = bosun(&env.server, &env.admin, args);
    assert!(
        out.status.success(),
        "bosun {args:?} failed\nstdout:\n{}\nstderr:\n{}\nserver log (tail):\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        support::log_tail(&env.server, 40)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn ok_json(env: &Env, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let text = ok(env, &all);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
}

fn create_stack(env: &Env, fx: &Fixture, id: &str, engine: &Path, extra: &[&str]) {
    let mut args = vec![
        "stack",
        "create",
        id,
        "--repository",
        &fx.repo_url,
        "--engine",
        "terraform",
        "--engine-binary",
        engine.to_str().unwrap(),
        "--var",
        "TF_VAR_replicas=3",
    ];
    args.extend_from_slice(extra);
    ok(env, &args);
}

fn trigger(env: &Env, stack: &str) -> String {
    ok_json(env, &["run", "trigger", stack])["id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Polls the run (through the API) until it is in `want`, up to 90 s.
fn wait_run_state(env: &Env, run: &str, want: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let r = ok_json(env, &["run", "show", run]);
        if r["state"] == want {
            return r;
        }
        let terminal = matches!(
            r["state"].as_str(),
            Some(
                "finished"
                    | "failed"
                    | "discarded"
                    | "canceled"
                    | "interrupted"
                    | "force_failed"
                    | "skipped"
            )
        );
        assert!(
            !terminal && Instant::now() < deadline,
            "run {run} never became {want}: {r:#}\nserver log (tail):\n{}",
            support::log_tail(&env.server, 40)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

// ---- tests ---------------------------------------------------------------------------------

#[test]
fn log_in_with_a_token_and_see_the_stacks() {
    let Some(bins) = browser_or_skip() else {
        return;
    };
    let Some(fx) = Fixture::new() else { return };
    let env = start(&fx, &[]);
    create_stack(&env, &fx, "web", &fx.tf, &[]);
    create_stack(&env, &fx, "db", &fx.tf, &[]);
    let b = Browser::open(&bins, &env.server, "login");

    // Not logged in: a page sends the browser to the login form.
    b.visit("/orgs/default/stacks", "redirected");
    assert!(b.path().starts_with("/login"), "{}", b.path());

    // A wrong token is refused, saying why.
    b.fill("#token", "bsn_not-a-real-token");
    b.click_and_wait("button[type=submit]");
    b.shot("refused");
    let alert = b.text("[role=alert]").unwrap_or_default();
    assert!(!alert.trim().is_empty(), "no refusal shown:\n{}", b.html());
    assert!(b.path().starts_with("/login"), "{}", b.path());

    b.login(&env.admin);
    b.shot("stacks");
    assert_eq!(b.path(), "/orgs/default/stacks");
    for s in ["web", "db"] {
        assert_eq!(
            b.count(&format!("table#stacks tr[data-stack=\"{s}\"]")),
            1,
            "stack {s} listed:\n{}",
            b.html()
        );
    }
    let row = b.text("tr[data-stack=\"web\"]").unwrap();
    assert!(row.contains("no runs yet"), "{row}");

    // Every section in the navigation opens, by its link, a page of its own — not an
    // error page and not the login form.
    for section in ["runners", "approvals", "plans", "drift", "audit", "stacks"] {
        b.click_and_wait(&format!("header nav a[href=\"/orgs/default/{section}\"]"));
        b.shot(section);
        assert_eq!(b.path(), format!("/orgs/default/{section}"));
        let current = b
            .text("header nav a[aria-current=page]")
            .unwrap_or_default();
        assert!(
            current.to_lowercase().contains(section),
            "{section} is the current section: {current:?}"
        );
        assert_eq!(
            b.count("main h1"),
            1,
            "{section} has a heading:\n{}",
            b.html()
        );
        assert_eq!(
            b.count("[role=alert]"),
            0,
            "{section} shows no error:\n{}",
            b.html()
        );
    }

    // On a phone every section fits the screen's width: nothing scrolls the page
    // sideways (wide tables scroll inside their own box) — also a stack with a run, and
    // the run's page with its plan and log.
    let run = trigger(&env, "web");
    wait_run_state(&env, &run, "unconfirmed");
    let run_page = format!("runs/{run}");
    b.rt.block_on(b.c().set_window_size(390, 844)).unwrap();
    for section in [
        "stacks",
        "stacks/web",
        run_page.as_str(),
        "runners",
        "approvals",
        "plans",
        "drift",
        "audit",
    ] {
        b.visit(
            &format!("/orgs/default/{section}"),
            &format!("phone-{}", section.replace('/', "-")),
        );
        let (page, screen) = (
            b.js("return document.documentElement.scrollWidth;", vec![]),
            b.js("return window.innerWidth;", vec![]),
        );
        if page.as_i64().unwrap() > screen.as_i64().unwrap() {
            let wide = b.js(
                "return [...document.querySelectorAll('body *')]\
                 .filter(e => e.getBoundingClientRect().right > window.innerWidth + 0.5)\
                 .map(e => e.tagName + '#' + e.id + '.' + e.className).slice(0, 20).join(' ');",
                vec![],
            );
            panic!("{section} is {page} px wide on a {screen} px screen; too wide: {wide}");
        }
    }
    // On a laptop the audit log's details wrap inside their column.
    b.rt.block_on(b.c().set_window_size(1280, 900)).unwrap();
    b.visit("/orgs/default/audit", "audit-laptop");
    let (page, screen) = (
        b.js("return document.documentElement.scrollWidth;", vec![]),
        b.js("return window.innerWidth;", vec![]),
    );
    assert!(
        page.as_i64().unwrap() <= screen.as_i64().unwrap(),
        "the audit log is {page} px wide on a {screen} px screen"
    );
}

#[test]
fn a_run_page_follows_the_live_log_and_confirms_the_run() {
    let Some(bins) = browser_or_skip() else {
        return;
    };
    let Some(fx) = Fixture::new() else { return };
    // Twelve lines half a second apart: the page opens well before the last one.
    let engine = fx.talkative_engine(12, "0.5");
    let env = start(&fx, &["--local-runners", "1"]);
    create_stack(&env, &fx, "live", &engine, &[]);
    let b = Browser::open(&bins, &env.server, "run");
    b.login(&env.admin);

    let run = trigger(&env, "live");
    wait_run_state(&env, &run, "planning");
    let page = format!("/orgs/default/runs/{run}");
    b.visit(&page, "run-planning");
    assert_eq!(
        b.count("pre#log[data-live-log]"),
        1,
        "a live log:\n{}",
        b.html()
    );
    // The log grows on this very document (no reload): a marker set now survives.
    b.js("window.__bosunSamePage = 'yes'; return null;", vec![]);
    let first = b.text("pre#log").unwrap_or_default();
    let line_count = |t: &str| t.matches("console-plan-line-").count();
    let before = line_count(&first);
    b.wait("new plan lines arriving in the open page", || {
        let now = b.text("pre#log").unwrap_or_default();
        (line_count(&now) > before && line_count(&now) >= 2).then_some(())
    });
    assert_eq!(
        b.js("return window.__bosunSamePage || null;", vec![]),
        json!("yes"),
        "the page was reloaded instead of following the log"
    );
    b.shot("run-live-log");
    // Each line, live or not, starts with its time; the plan phase has its divider.
    let times = b.count("pre#log time.log-t");
    assert!(
        times >= line_count(&b.text("pre#log").unwrap_or_default()),
        "{}",
        b.html()
    );
    assert_eq!(b.count("pre#log .log-phase"), 1, "{}", b.html());

    // Planned: the run waits for confirmation, and the page offers it.
    wait_run_state(&env, &run, "unconfirmed");
    b.visit(&page, "run-unconfirmed");
    assert_eq!(b.text("#run-state").unwrap().trim(), "unconfirmed");
    let confirm = "form#run-actions button[name=action][value=confirm]";
    assert_eq!(b.count(confirm), 1, "a confirm button:\n{}", b.html());
    b.click_and_wait(confirm);
    b.shot("run-confirmed");
    let said = b.flash("ok");
    assert!(said.is_some(), "a confirmation message:\n{}", b.html());

    // The apply's lines arrive in the page the confirmation led to, then the run ends.
    b.wait("apply lines in the live log", || {
        let t = b.text("pre#log").unwrap_or_default();
        t.contains("console-apply-line-").then_some(())
    });
    b.shot("run-applying");
    // The apply's lines came after a divider the script added to this page.
    b.wait("the apply divider", || {
        (b.count("pre#log .log-phase") == 2).then_some(())
    });
    let dividers = b.js(
        "return Array.from(document.querySelectorAll('pre#log .log-phase')).map(e => e.textContent);",
        vec![],
    );
    assert_eq!(dividers, json!(["plan", "apply"]));
    wait_run_state(&env, &run, "finished");
    b.wait("the page to say finished", || {
        let s = b.text("#run-state").unwrap_or_default();
        if s.trim() == "finished" {
            return Some(());
        }
        // Without the live refresh the next load shows it.
        b.visit(&page, "run-finished");
        None
    });
    b.shot("run-finished");
    let versions = ok_json(&env, &["state", "versions", "live"]);
    assert_eq!(
        versions["items"].as_array().unwrap().len(),
        1,
        "{versions:#}"
    );
}

const LAPTOP_LOCK: &str = r#"{"ID":"laptop-1","Operation":"OperationTypeApply","Who":"alice@laptop","Version":"1.0.3","Created":"","Path":"","Info":""}"#;

#[test]
fn force_unlock_from_the_state_page_refuses_a_wrong_lock_id() {
    let Some(bins) = browser_or_skip() else {
        return;
    };
    let Some(fx) = Fixture::new() else { return };
    let env = start(&fx, &[]);
    create_stack(&env, &fx, "net", &fx.tf, &[]);
    let state_path = "/api/v1/orgs/default/stacks/net/state";
    let (status, body) = http(
        env.server.addr,
        "LOCK",
        state_path,
        &env.admin,
        Some(LAPTOP_LOCK),
    );
    assert_eq!(status, 200, "{body}");

    // What the API itself says to a wrong lock id: the page must say the same.
    let (status, body) = http(
        env.server.addr,
        "POST",
        "/api/v1/orgs/default/stacks/net/state/force-unlock",
        &env.admin,
        Some(r#"{"lock_id":"laptop-2"}"#),
    );
    assert_eq!(status, 409, "{body}");
    let api_says: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(api_says["error"]["code"], "lock_mismatch", "{body}");
    let api_message = api_says["error"]["message"].as_str().unwrap().to_string();

    let b = Browser::open(&bins, &env.server, "state");
    b.login(&env.admin);
    let page = "/orgs/default/stacks/net/state";
    b.visit(page, "state-locked");
    let lock = b.text("#lock").unwrap_or_default();
    for want in ["laptop-1", "alice@laptop"] {
        assert!(lock.contains(want), "#lock shows {want}:\n{lock}");
    }
    assert_eq!(b.text("#lock-id").unwrap_or_default().trim(), "laptop-1");

    b.fill("form#force-unlock input[name=lock_id]", "laptop-2");
    b.click_and_wait("form#force-unlock [type=submit]");
    b.shot("state-wrong-id");
    let err = b
        .flash("error")
        .unwrap_or_else(|| panic!("a refusal:\n{}", b.html()));
    assert!(
        err.contains(&api_message),
        "the page says the API's refusal\n page: {err}\n  api: {api_message}"
    );
    assert_eq!(ok_json(&env, &["state", "lock", "net"])["locked"], true);

    b.fill("form#force-unlock input[name=lock_id]", "laptop-1");
    b.click_and_wait("form#force-unlock [type=submit]");
    b.shot("state-unlocked");
    let said = b
        .flash("ok")
        .unwrap_or_else(|| panic!("a confirmation:\n{}", b.html()));
    assert!(said.contains("laptop-1"), "{said}");
    assert_eq!(ok_json(&env, &["state", "lock", "net"])["locked"], false);
    let lock = b.text("#lock").unwrap_or_default();
    assert!(
        !lock.contains("alice@laptop"),
        "still shown as locked:\n{lock}"
    );
}

#[test]
fn a_gated_stack_run_is_approved_from_the_inbox() {
    let Some(bins) = browser_or_skip() else {
        return;
    };
    let Some(fx) = Fixture::new() else { return };
    // One admin both requests and approves: self-approval is allowed on this server.
    let env = start(&fx, &["--local-runners", "1", "--allow-self-approval"]);
    let (status, body) = http(
        env.server.addr,
        "POST",
        "/api/v1/orgs/default/inventory",
        &env.admin,
        Some(
            &json!({"source": "environments:\n  prod: { requires_approval: true }\n"}).to_string(),
        ),
    );
    assert_eq!(status, 200, "inventory import: {body}");
    create_stack(
        &env,
        &fx,
        "gated",
        &fx.tf,
        &["--environment", "prod", "--autodeploy"],
    );
    let run = trigger(&env, "gated");
    wait_run_state(&env, &run, "unconfirmed");

    let b = Browser::open(&bins, &env.server, "approvals");
    b.login(&env.admin);
    b.visit("/orgs/default/approvals", "approvals");
    let row = format!("tr[data-subject=\"{run}\"]");
    assert_eq!(
        b.count(&row),
        1,
        "the run waits in the inbox:\n{}",
        b.html()
    );
    assert_eq!(b.count(&format!("{row} form.approve")), 1);
    assert_eq!(b.count(&format!("{row} form.reject")), 1);
    // On a phone the decision is on the screen, not scrolled away to the right.
    b.rt.block_on(b.c().set_window_size(390, 844)).unwrap();
    b.visit("/orgs/default/approvals", "approvals-phone");
    let fits = b.js(
        "return [...document.querySelectorAll(arguments[0])]\
         .every(e => e.getBoundingClientRect().right <= window.innerWidth);",
        vec![json!(format!("{row} button"))],
    );
    assert_eq!(fits, json!(true), "Approve and Reject fit a 390 px screen");
    b.rt.block_on(b.c().set_window_size(1280, 1600)).unwrap();
    b.visit("/orgs/default/approvals", "approvals");
    b.fill(
        &format!("{row} form.approve [name=comment]"),
        "looks right from the browser",
    );
    b.click_and_wait(&format!("{row} form.approve [type=submit]"));
    b.shot("approved");
    assert!(
        b.flash("ok").is_some(),
        "an approval message:\n{}",
        b.html()
    );
    assert_eq!(b.count(&row), 0, "no longer waiting:\n{}", b.html());

    let r = wait_run_state(&env, &run, "finished");
    let decisions = ok_json(&env, &["approvals", "decisions"]);
    let text = decisions.to_string();
    assert!(
        text.contains(&run) && text.contains("looks right from the browser"),
        "the decision is recorded with its comment: {decisions:#}\nrun: {r:#}"
    );
}

#[test]
fn an_ignored_tag_push_shows_its_reason_on_the_stack_page() {
    let Some(bins) = browser_or_skip() else {
        return;
    };
    let Some(fx) = Fixture::new() else { return };
    let Some(examples) = bosun_testkit::require_examples() else {
        return;
    };
    const SECRET: &str = "console-webhook-secret";
    let repos = fx.dir.path().join("github");
    std::fs::create_dir_all(&repos).unwrap();
    let gh = bosun_testkit::GithubDouble::start(4242, &repos);
    gh.add_installation(9, "acme", &["acme/infra"]);
    let repo = bosun_testkit::BareRepo::create(&repos, "acme/infra");
    let work = repo.work_tree();
    let commit = work.commit(&[("infra/main.tf", MAIN_TF)], "the module");
    work.push("main");
    let key = bosun_testkit::write_app_key(fx.dir.path());
    let env = start(
        &fx,
        &[
            "--github-webhook-secret",
            SECRET,
            "--github-app-id",
            "4242",
            "--github-app-key-file",
            key.to_str().unwrap(),
            "--github-api-url",
            gh.url(),
            "--github-url",
            gh.url(),
            "--git-poll-interval",
            "0s",
        ],
    );
    let tf = fx.tf.to_str().unwrap().to_string();
    ok(
        &env,
        &[
            "stack",
            "create",
            "web",
            "--repository",
            "github:acme/infra",
            "--path",
            "infra",
            "--engine",
            "terraform",
            "--engine-binary",
            &tf,
        ],
    );

    // A tag pushed, delivered as GitHub delivers it (GitHub's own push example, retargeted).
    let mut payload = examples.example("push", |p| p["ref"].is_string());
    payload["ref"] = "refs/tags/v1.2.0".into();
    payload["before"] = "0000000000000000000000000000000000000000".into();
    payload["after"] = commit.clone().into();
    payload["created"] = true.into();
    payload["deleted"] = false.into();
    payload["repository"]["full_name"] = "acme/infra".into();
    payload["installation"] = json!({"id": 9});
    let body = serde_json::to_vec(&payload).unwrap();
    let sig = bosun_testkit::sign(SECRET.as_bytes(), &body);
    let (status, reply) = deliver_webhook(env.server.addr, "push", "console-tag-1", &body, &sig);
    assert_eq!(status, 200, "{reply}");
    let reply: Value = serde_json::from_str(&reply).unwrap();
    assert!(
        reply["triggered"].as_array().is_none_or(|t| t.is_empty()),
        "a tag push triggers nothing: {reply:#}"
    );

    let b = Browser::open(&bins, &env.server, "triggers");
    b.login(&env.admin);
    b.visit("/orgs/default/stacks/web", "stack");
    let rows = b.count("table#triggers tr[data-delivery]");
    assert_eq!(
        rows,
        1,
        "one delivery in the trigger history:\n{}",
        b.html()
    );
    let row = "table#triggers tr[data-delivery=\"console-tag-1\"]";
    assert_eq!(b.count(row), 1, "the delivery by its id:\n{}", b.html());
    let text = b.text(row).unwrap();
    for want in ["push", "v1.2.0"] {
        assert!(text.contains(want), "the row shows {want:?}:\n{text}");
    }
    assert_eq!(
        b.count(&format!("{row}[data-triggered=\"false\"]")),
        1,
        "{text}"
    );
    let decision = b.text(&format!("{row} .decision")).unwrap_or_default();
    assert_eq!(decision.trim(), "ignored", "{text}");
    let reason = b.text(&format!("{row} .reason")).unwrap_or_default();
    assert!(
        reason.contains("tag push ignored") && reason.contains("v1.2.0"),
        "the reason in words: {reason}"
    );
}

#[test]
fn a_gated_plans_dry_run_runs_at_once_and_its_real_run_is_approved_from_the_inbox() {
    let Some(bins) = browser_or_skip() else {
        return;
    };
    if !bosun_testkit::sshd::require_sshd() {
        return;
    }
    let fleet = bosun_testkit::sshd::SshdFleet::start(1);
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let server = ServerProcess::start(&dir.path().join("data"), &["--allow-self-approval"], &[]);
    let env = Env {
        admin: server.admin_token(),
        server,
    };
    let h = &fleet.hosts()[0];
    let inv = format!(
        "environments:\n  prod: {{ requires_approval: true }}\nhosts:\n  h0: {{ address: \"{}\", port: {}, user: \"{}\", identity_file: \"{}\", known_hosts: \"{}\", labels: [fleet], environment: prod }}\n",
        h.address(),
        h.port(),
        h.user(),
        fleet.client_key_path().display(),
        fleet.known_hosts_path().display()
    );
    let (status, body) = http(
        env.server.addr,
        "POST",
        "/api/v1/orgs/default/inventory",
        &env.admin,
        Some(&json!({ "source": inv }).to_string()),
    );
    assert_eq!(status, 200, "inventory import: {body}");
    let plan = format!(
        "name: deploy\ntargets:\n  labels: [fleet]\nsteps:\n  - name: write the config\n    file.copy:\n      path: \"{}/{{{{ host.name }}}}.conf\"\n      content: \"port=8080\\n\"\n",
        work.display()
    );
    let file = dir.path().join("deploy.yaml");
    std::fs::write(&file, plan).unwrap();
    ok(&env, &["plan", "apply", file.to_str().unwrap()]);
    // A dry run changes no host: it does not wait for an approval.
    let dry = ok_json(&env, &["plan-run", "start", "deploy", "--dry-run"]);
    assert_ne!(dry["state"], "paused", "{dry:#}");
    let id = dry["id"].as_str().unwrap().to_string();

    let b = Browser::open(&bins, &env.server, "plan-run");
    b.login(&env.admin);
    let page = format!("/orgs/default/plan-runs/{id}");
    b.visit(&page, "paused-or-running");
    b.wait("the dry run to succeed", || {
        let s = b.text("#run-state").unwrap_or_default();
        if s.trim() == "succeeded" {
            return Some(());
        }
        assert!(
            !matches!(s.trim(), "failed" | "aborted"),
            "the dry run ended {s}:\n{}",
            b.html()
        );
        b.visit(&page, "plan-run");
        None
    });
    b.shot("plan-run");
    assert_eq!(
        b.count("table#hosts tr[data-host=\"h0\"]"),
        1,
        "{}",
        b.html()
    );
    assert!(
        b.count("#dry-run-report [data-host=\"h0\"]") >= 1,
        "the report predicts h0:\n{}",
        b.html()
    );
    let report = b.text("#dry-run-report").unwrap();
    assert!(report.contains("h0.conf"), "{report}");
    assert_eq!(b.count("#unresolved"), 1, "{}", b.html());
    // A dry run changes nothing.
    assert!(!work.join("h0.conf").exists());

    // The real run waits for an approver, and runs once approved from the inbox.
    let real = ok_json(&env, &["plan-run", "start", "deploy"]);
    assert_eq!(real["state"], "paused", "{real:#}");
    let real_id = real["id"].as_str().unwrap().to_string();
    // Its page shows its preview beside the decision, the card refreshing itself while
    // the preview runs: h0's step and the diff of the file it would write.
    b.visit(
        &format!("/orgs/default/plan-runs/{real_id}"),
        "real-run-paused",
    );
    b.wait("the preview's outcome in the approval card", || {
        let s = b.text("#run-preview-outcome").unwrap_or_default();
        (s.trim() == "1 host would change").then_some(())
    });
    b.shot("real-run-previewed");
    assert_eq!(
        b.count("#run-approval table#preview-hosts tr[data-host=\"h0\"]"),
        1,
        "{}",
        b.html()
    );
    let diff = b
        .text("#run-approval #preview-predictions")
        .unwrap_or_default();
    assert!(
        diff.contains("h0.conf (after)") && diff.contains("+port=8080"),
        "{diff}"
    );
    b.visit("/orgs/default/approvals", "approvals");
    let row = format!("tr[data-subject=\"{real_id}\"]");
    assert_eq!(b.count(&row), 1, "the real run waits:\n{}", b.html());
    assert_eq!(
        b.text(&format!("{row} .preview-line")).unwrap_or_default(),
        "preview: 1 host would change"
    );
    b.click_and_wait(&format!("{row} form.approve [type=submit]"));
    b.shot("approved");
    assert!(b.flash("ok").is_some(), "{}", b.html());
    let page = format!("/orgs/default/plan-runs/{real_id}");
    b.visit(&page, "real-run");
    b.wait("the approved run to succeed", || {
        let s = b.text("#run-state").unwrap_or_default();
        if s.trim() == "succeeded" {
            return Some(());
        }
        assert!(
            !matches!(s.trim(), "failed" | "aborted"),
            "the run ended {s}:\n{}",
            b.html()
        );
        b.visit(&page, "real-run");
        None
    });
    assert!(work.join("h0.conf").exists());
}

/// A real run's page shows what each step printed on each host: the failed step's output
/// unfolded, the others a click away, printed text shown as text, and on a phone a long
/// unbroken line wraps inside its block — nothing scrolls the page sideways.
#[test]
fn a_plan_runs_page_shows_each_hosts_output_and_fits_a_phone() {
    let Some(bins) = browser_or_skip() else {
        return;
    };
    if !bosun_testkit::sshd::require_sshd() {
        return;
    }
    let fleet = bosun_testkit::sshd::SshdFleet::start(1);
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(&dir.path().join("data"), &[], &[]);
    let env = Env {
        admin: server.admin_token(),
        server,
    };
    let h = &fleet.hosts()[0];
    let inv = format!(
        "hosts:\n  h0: {{ address: \"{}\", port: {}, user: \"{}\", identity_file: \"{}\", known_hosts: \"{}\", labels: [fleet] }}\n",
        h.address(),
        h.port(),
        h.user(),
        fleet.client_key_path().display(),
        fleet.known_hosts_path().display()
    );
    let (status, body) = http(
        env.server.addr,
        "POST",
        "/api/v1/orgs/default/inventory",
        &env.admin,
        Some(&json!({ "source": inv }).to_string()),
    );
    assert_eq!(status, 200, "inventory import: {body}");
    let long = "x".repeat(600);
    let plan = format!(
        "name: talk\ntargets:\n  labels: [fleet]\nsteps:\n  - name: greet\n    shell: 'echo \"<b>hello</b> from {{{{ host.name }}}}\"; echo {long}'\n  - name: break\n    shell: 'echo broken >&2; exit 2'\n"
    );
    let file = dir.path().join("talk.yaml");
    std::fs::write(&file, plan).unwrap();
    ok(&env, &["plan", "apply", file.to_str().unwrap()]);
    let id = ok(&env, &["plan-run", "start", "talk"]).trim().to_string();

    let b = Browser::open(&bins, &env.server, "plan-run-output");
    b.login(&env.admin);
    b.rt.block_on(b.c().set_window_size(390, 844)).unwrap();
    let page = format!("/orgs/default/plan-runs/{id}");
    b.visit(&page, "running");
    b.wait("the run to fail at its second step", || {
        let s = b.text("#run-state").unwrap_or_default();
        if s.trim() == "failed" {
            return Some(());
        }
        assert!(
            !matches!(s.trim(), "succeeded" | "aborted" | "interrupted"),
            "the run ended {s}:\n{}",
            b.html()
        );
        b.visit(&page, "plan-run-output");
        None
    });
    let host = "#output article.output[data-host=\"h0\"]";
    assert_eq!(
        b.count(&format!("{host} details[data-step=\"2\"][open]")),
        1,
        "the failed step is unfolded:\n{}",
        b.html()
    );
    let broken = b
        .text(&format!("{host} details[data-step=\"2\"] pre.output"))
        .unwrap();
    assert_eq!(broken, "broken");
    assert_eq!(
        b.count(&format!("{host} details[data-step=\"1\"][open]")),
        0,
        "{}",
        b.html()
    );
    b.rt.block_on(async {
        b.c()
            .find(Locator::Css(&format!(
                "{host} details[data-step=\"1\"] summary"
            )))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
    });
    b.js(
        "document.querySelector('#output').scrollIntoView(); return null;",
        vec![],
    );
    b.shot("output-unfolded");
    let greet = b
        .text(&format!("{host} details[data-step=\"1\"] pre.output"))
        .unwrap();
    assert_eq!(greet, format!("<b>hello</b> from h0\n{long}"));
    assert_eq!(b.count("#output b"), 0, "printed markup stays text");
    let shown = b.js(
        "var p = document.querySelector(arguments[0]); return p.offsetHeight > 0 && p.scrollWidth <= p.clientWidth;",
        vec![json!(format!("{host} details[data-step=\"1\"] pre.output"))],
    );
    assert_eq!(shown, json!(true), "the long line wraps inside its block");
    let (width, screen) = (
        b.js("return document.documentElement.scrollWidth;", vec![]),
        b.js("return window.innerWidth;", vec![]),
    );
    assert!(
        width.as_i64().unwrap() <= screen.as_i64().unwrap(),
        "the run's page is {width} px wide on a {screen} px screen"
    );
}

/// The first hour, in the browser at a laptop's and a phone's width: log in and land in
/// the org with the stacks; a gated stack's run waits for an approval and is approved
/// from its own page, where the plan summary shows; a second change makes a second state
/// version, and its page shows what changed. No page scrolls sideways.
#[test]
fn the_first_hour_in_the_console() {
    let Some(bins) = browser_or_skip() else {
        return;
    };
    let Some(fx) = Fixture::new() else { return };
    // One admin does everything here: self-approval is allowed on this server.
    let env = start(&fx, &["--local-runners", "1", "--allow-self-approval"]);
    ok(&env, &["env", "create", "prod", "--requires-approval"]);
    create_stack(&env, &fx, "app", &fx.tf, &["--environment", "prod"]);
    let b = Browser::open(&bins, &env.server, "first-hour");
    b.login(&env.admin);
    assert_eq!(
        b.path(),
        "/orgs/default/stacks",
        "landed where the stacks are"
    );

    let fits = |page: &str| {
        let (w, screen) = (
            b.js("return document.documentElement.scrollWidth;", vec![]),
            b.js("return window.innerWidth;", vec![]),
        );
        assert!(
            w.as_i64().unwrap() <= screen.as_i64().unwrap(),
            "{page} is {w} px wide on a {screen} px screen"
        );
    };
    let approve_from_its_page = |run: &str, shot: &str| {
        wait_run_state(&env, run, "unconfirmed");
        let page = format!("/orgs/default/runs/{run}");
        b.visit(&page, shot);
        assert_eq!(b.count("#run-approval"), 1, "{}", b.html());
        assert_eq!(b.count("#plan-summary"), 1, "the plan summary shows");
        assert!(
            !b.html().contains("Confirm and apply"),
            "no confirm offered"
        );
        for (w, h, name) in [(390, 844, "phone"), (1280, 1600, "laptop")] {
            b.rt.block_on(b.c().set_window_size(w, h)).unwrap();
            b.visit(&page, &format!("{shot}-{name}"));
            fits(&page);
        }
        b.fill("#run-approve [name=comment]", "first hour");
        b.click_and_wait("#run-approve button.primary");
        assert!(b.flash("ok").is_some(), "{}", b.html());
        wait_run_state(&env, run, "finished");
    };

    let first = trigger(&env, "app");
    approve_from_its_page(&first, "run-1");
    ok(
        &env,
        &["stack", "update", "app", "--var", "TF_VAR_replicas=4"],
    );
    let second = trigger(&env, "app");
    approve_from_its_page(&second, "run-2");
    // The run keeps who approved it.
    b.visit(&format!("/orgs/default/runs/{second}"), "run-2-finished");
    let decided = b.text("#run-decisions").unwrap_or_default();
    assert!(decided.contains("approve by user:admin"), "{decided}");

    // The second version's page shows what changed.
    let page = "/orgs/default/stacks/app/state/versions/2";
    for (w, h, name) in [(390, 844, "phone"), (1280, 1600, "laptop")] {
        b.rt.block_on(b.c().set_window_size(w, h)).unwrap();
        b.visit(page, &format!("state-version-{name}"));
        fits(page);
    }
    let diff = b.text("#diff").unwrap_or_default();
    assert!(
        diff.contains("hello-3") && diff.contains("hello-4"),
        "the diff shows the output's change: {diff}"
    );

    // The console remembers the org last looked at, even an empty one.
    ok(&env, &["org", "create", "second"]);
    b.visit("/orgs/second/plans", "second-org");
    b.visit("/", "home-again");
    assert_eq!(b.path(), "/orgs/second/stacks", "back in the org last seen");
    b.visit("/orgs/default/runners", "default-org");
    b.visit("/", "home-default");
    assert_eq!(b.path(), "/orgs/default/stacks");
}

/// An OpenID Provider (`oidc-provider`) with `users`, and a server signing people in with
/// it from its config file: `platform-admins` admin of every org, `team-net` operator of
/// org `net` (created). The provider offers the device flow when `device_flow`. Answers
/// the runtime the provider's calls run on.
fn provider_and_server(
    users: Value,
    device_flow: bool,
) -> (
    tokio::runtime::Runtime,
    bosun_testkit::oidc::OpenIdProvider,
    ServerProcess,
    TempDir,
) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let op = if device_flow {
        bosun_testkit::oidc::OpenIdProvider::start(users)
    } else {
        bosun_testkit::oidc::OpenIdProvider::start_without_device_flow(users)
    };
    // The server reads its providers from the config file, the client secret from a file.
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("corp-secret");
    std::fs::write(&secret, "browser-client-secret\n").unwrap();
    let config = dir.path().join("bosun.toml");
    std::fs::write(
        &config,
        format!(
            r#"[sign_in]
token_login = true

[[sign_in.providers]]
id = "corp"
name = "Corp SSO"
issuer = "{issuer}"
client_id = "bosun-browser"
client_secret_file = "{secret}"
scopes = ["openid", "email", "profile", "groups", "offline_access"]

[[sign_in.providers.roles]]
group = "platform-admins"
org = "*"
role = "admin"

[[sign_in.providers.roles]]
group = "team-net"
org = "net"
role = "operator"
"#,
            issuer = op.issuer,
            secret = secret.display()
        ),
    )
    .unwrap();
    let data = dir.path().join("data");
    let server = ServerProcess::start(&data, &["--config", config.to_str().unwrap()], &[]);
    rt.block_on(op.set_clients(json!([{
        "client_id": "bosun-browser",
        "client_secret": "browser-client-secret",
        "redirect_uris": [format!("{}/login/corp/callback", server.url())],
        "post_logout_redirect_uris": [format!("{}/login", server.url())],
        "grant_types": if device_flow {
            json!(["authorization_code", "refresh_token", "urn:ietf:params:oauth:grant-type:device_code"])
        } else {
            json!(["authorization_code", "refresh_token"])
        },
        "response_types": ["code"],
    }])));
    let (status, body) = http(
        server.addr,
        "POST",
        "/api/v1/orgs",
        &server.admin_token(),
        Some(r#"{"id": "net", "name": "Net"}"#),
    );
    assert_eq!(status, 201, "{body}");
    (rt, op, server, dir)
}

/// The CLI against `server`, with the login kept in `credentials` (no other token).
fn logged_in_cli(server: &ServerProcess, credentials: &Path, args: &[&str]) -> Output {
    Command::new(support::BIN)
        .args(args)
        .env("BOSUN_URL", server.url())
        .env("BOSUN_CREDENTIALS", credentials)
        .env_remove("BOSUN_TOKEN")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Starts `bosun login` against `server`, keeping the login in `credentials`: the running
/// command, its stderr from after its `verification:` line, and what that line says.
// The command is returned for the caller to wait on.
#[allow(clippy::zombie_processes)]
fn start_login(
    server: &ServerProcess,
    credentials: &Path,
) -> (Child, BufReader<ChildStderr>, String) {
    let mut login = Command::new(support::BIN)
        .args(["login"])
        .env("BOSUN_URL", server.url())
        .env("BOSUN_CREDENTIALS", credentials)
        .env_remove("BOSUN_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(login.stderr.take().unwrap());
    loop {
        let mut line = String::new();
        if err.read_line(&mut line).unwrap() == 0 {
            let status = login.wait().unwrap();
            panic!("bosun login ended early ({status})");
        }
        if let Some(rest) = line.trim().strip_prefix("verification: ") {
            return (login, err, rest.to_string());
        }
    }
}

#[test]
fn a_person_signs_in_with_their_identity_provider_and_out_again() {
    use bosun_testkit::oidc::require_oidc_provider;
    let Some(bins) = browser_or_skip() else {
        return;
    };
    if !require_oidc_provider() {
        return;
    }
    let (_rt, op, server, _dir) = provider_and_server(
        json!({
            "carol": {"preferred_username": "carol", "email": "carol@example.com",
                      "groups": ["platform-admins"]},
        }),
        true,
    );
    let b = Browser::open(&bins, &server, "sign_in");
    b.visit("/orgs/default/stacks", "sign-in-asked");
    // Sent to log in; the provider's button keeps where the person was going.
    b.wait("the login page", || {
        b.path().starts_with("/login").then_some(())
    });
    assert_eq!(b.count("#sign-in-corp"), 1, "{}", b.html());
    b.click_and_wait("#sign-in-corp");
    // The provider's own login and consent forms.
    b.sign_in_at_provider("carol");
    // Back on Bosun, signed in (the Strict session cookie rides the same-site move on),
    // on the page first asked for, as the user her first sign-in made.
    b.wait("the org's stacks page", || {
        (b.path() == "/orgs/default/stacks" && b.count("span.user") == 1).then_some(())
    });
    b.shot("signed-in");
    assert_eq!(
        b.text("span.user").as_deref(),
        Some("carol"),
        "{}",
        b.html()
    );
    let (status, body) = http(
        server.addr,
        "GET",
        "/api/v1/orgs/default/members",
        &server.admin_token(),
        None,
    );
    assert_eq!(status, 200, "{body}");
    let members: Value = serde_json::from_str(&body).unwrap();
    let carol = members["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["user"] == "carol")
        .unwrap_or_else(|| panic!("{members}"))
        .clone();
    assert_eq!(
        (carol["role"].as_str(), carol["source"].as_str()),
        (Some("admin"), Some("provider"))
    );

    // Signing out ends the session here and goes to the provider's sign-out.
    b.click_and_wait("form[action='/logout'] button");
    b.shot("signed-out-at-provider");
    let at = b.rt.block_on(b.c().current_url()).unwrap();
    assert!(
        at.as_str().starts_with(&op.issuer),
        "signing out went to {at}, not the provider"
    );
    b.visit("/orgs/default/stacks", "after-sign-out");
    b.wait("the login page again", || {
        b.path().starts_with("/login").then_some(())
    });
}

#[test]
fn bosun_login_signs_the_cli_in_through_the_device_flow_and_roles_follow_each_refresh() {
    let Some(bins) = browser_or_skip() else {
        return;
    };
    if !bosun_testkit::oidc::require_oidc_provider() {
        return;
    }
    let (rt, op, server, dir) = provider_and_server(
        json!({
            "dana": {"preferred_username": "dana", "email": "dana@example.com",
                     "groups": ["team-net"]},
        }),
        true,
    );
    let credentials = dir.path().join("credentials.json");
    let cli = |args: &[&str]| logged_in_cli(&server, &credentials, args);
    // `bosun login` prints where to go and waits for the person.
    let (mut login, mut err, verification) = start_login(&server, &credentials);
    let (url, code) = verification.split_once(" code: ").unwrap();
    let (url, code) = (url.to_string(), code.to_string());
    assert!(
        url.starts_with(&op.issuer) && url.contains(&code),
        "{url} {code}"
    );

    // The person, in a browser: the provider's confirm, login and consent pages.
    let b = Browser::open(&bins, &server, "cli_login");
    b.rt.block_on(b.c().goto(&url)).unwrap();
    b.shot("device-confirm");
    b.click_and_wait("button[autofocus]");
    b.sign_in_at_provider("dana");
    b.shot("device-done");

    // The CLI finishes on its own, keeping a short-lived token (0600) for this server.
    let status = login.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    assert!(status.success(), "bosun login failed: {rest}");
    assert!(
        rest.contains("Logged in to") && rest.contains("as dana"),
        "{rest}"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&credentials)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(
        mode & 0o777,
        0o600,
        "the credentials file is the user's alone"
    );
    let whoami = |want_ok: bool| {
        let out = cli(&["whoami", "--json"]);
        assert_eq!(
            out.status.success(),
            want_ok,
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).unwrap_or(Value::Null)
    };
    let me = whoami(true);
    assert_eq!(me["user"], "dana", "{me}");
    assert_eq!(
        me["orgs"],
        json!([{"org": "net", "role": "operator"}]),
        "{me}"
    );
    // Listed with the person's tokens, short-lived.
    let tokens: Value = serde_json::from_slice(&cli(&["token", "list", "--json"]).stdout).unwrap();
    let first = tokens["items"][0].clone();
    assert_eq!(first["description"], "bosun login (corp)", "{tokens}");
    let lifetime = chrono::DateTime::parse_from_rfc3339(first["expires_at"].as_str().unwrap())
        .unwrap()
        - chrono::DateTime::parse_from_rfc3339(first["created_at"].as_str().unwrap()).unwrap();
    assert!(lifetime <= chrono::Duration::hours(1), "{first}");

    // A command near the token's end replaces it by itself (here, the saved expiry moved
    // to within the refresh margin).
    let mut saved: Value = serde_json::from_slice(&std::fs::read(&credentials).unwrap()).unwrap();
    let before = saved[server.url()]["token_id"]
        .as_str()
        .unwrap()
        .to_string();
    saved[server.url()]["expires_at"] =
        json!((chrono::Utc::now() + chrono::Duration::minutes(5)).to_rfc3339());
    std::fs::write(&credentials, serde_json::to_vec(&saved).unwrap()).unwrap();
    assert_eq!(whoami(true)["user"], "dana");
    let saved: Value = serde_json::from_slice(&std::fs::read(&credentials).unwrap()).unwrap();
    let after = saved[server.url()]["token_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(before, after, "the token was replaced");
    let first = json!({"id": after});

    // dana leaves team-net at the provider: the next refresh takes the role away.
    rt.block_on(op.set_users(json!({
        "dana": {"preferred_username": "dana", "groups": []},
    })));
    let refreshed = cli(&["login", "--refresh"]);
    assert!(
        refreshed.status.success(),
        "{}",
        String::from_utf8_lossy(&refreshed.stderr)
    );
    let me = whoami(true);
    assert_eq!(me["orgs"], json!([]), "{me}");
    let tokens: Value = serde_json::from_slice(&cli(&["token", "list", "--json"]).stdout).unwrap();
    let old = tokens["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == first["id"])
        .unwrap()
        .clone();
    assert!(
        !old["revoked_at"].is_null(),
        "the old token is revoked: {old}"
    );

    // Logging out ends the login on the server: the token no longer works.
    let saved: Value = serde_json::from_slice(&std::fs::read(&credentials).unwrap()).unwrap();
    let token = saved[server.url()]["token"].as_str().unwrap().to_string();
    let out = cli(&["logout"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (status, body) = http(server.addr, "GET", "/api/v1/whoami", &token, None);
    assert_eq!(status, 401, "{body}");
    whoami(false);
}

#[test]
fn bosun_login_goes_through_this_machines_browser_where_the_provider_has_no_device_flow() {
    let Some(bins) = browser_or_skip() else {
        return;
    };
    if !bosun_testkit::oidc::require_oidc_provider() {
        return;
    }
    let (_rt, op, server, dir) = provider_and_server(
        json!({
            "erin": {"preferred_username": "erin", "email": "erin@example.com",
                     "groups": ["team-net"]},
        }),
        false,
    );
    let credentials = dir.path().join("credentials.json");
    // `bosun login` prints the provider's page to open, and listens for the browser.
    let (mut login, mut err, url) = start_login(&server, &credentials);
    assert!(
        url.starts_with(&op.issuer) && !url.contains(" code: "),
        "{url}"
    );

    // The person signs in in the browser; the provider sends it to Bosun, and Bosun on to
    // the CLI's loopback, whose page says it is done.
    let b = Browser::open(&bins, &server, "cli_login_browser");
    b.rt.block_on(b.c().goto(&url)).unwrap();
    b.sign_in_at_provider("erin");
    b.wait("the CLI's page", || {
        b.html().contains("Signed in to Bosun").then_some(())
    });
    b.shot("loopback-done");
    let at = b.rt.block_on(b.c().current_url()).unwrap();
    assert_eq!(at.host_str(), Some("127.0.0.1"), "{at}");
    assert_eq!(at.path(), "/bosun-login", "{at}");

    let status = login.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    assert!(status.success(), "bosun login failed: {rest}");
    assert!(
        rest.contains("Logged in to") && rest.contains("as erin"),
        "{rest}"
    );
    let out = logged_in_cli(&server, &credentials, &["whoami", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let me: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(me["user"], "erin", "{me}");
    assert_eq!(
        me["orgs"],
        json!([{"org": "net", "role": "operator"}]),
        "{me}"
    );
}

#[test]
fn bosun_login_at_a_terminal_opens_the_browser_for_the_person() {
    if !bosun_testkit::oidc::require_oidc_provider() {
        return;
    }
    let (_rt, op, server, dir) = provider_and_server(
        json!({"erin": {"preferred_username": "erin", "groups": []}}),
        false,
    );
    // `$BROWSER`: a script writing down the URL it was given.
    let opened = dir.path().join("opened");
    let browser = dir.path().join("browser.sh");
    std::fs::write(
        &browser,
        format!(
            "#!/bin/sh\nprintf '%s' \"$1\" > {}.tmp && mv {0}.tmp {0}\n",
            opened.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&browser, std::fs::Permissions::from_mode(0o755)).unwrap();
    // At a terminal (`script` gives the command one).
    let mut login = Command::new("script")
        .args(["-qec", &format!("{} login", support::BIN), "/dev/null"])
        .env("BOSUN_URL", server.url())
        .env("BOSUN_CREDENTIALS", dir.path().join("credentials.json"))
        .env("BROWSER", &browser)
        .env_remove("BOSUN_TOKEN")
        .env_remove("BOSUN_NO_BROWSER")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let url = loop {
        if let Ok(url) = std::fs::read_to_string(&opened) {
            break url;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "bosun login opened no browser"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let _ = login.kill();
    let _ = login.wait();
    // The provider's sign-in page, for this server's client.
    assert!(
        url.starts_with(&op.issuer) && url.contains("client_id=bosun-browser"),
        "{url}"
    );
}
