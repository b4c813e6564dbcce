//! Differential test: `bosun_plans::lineinfile::apply` against real ansible-core.
//!
//! A deterministic generator crosses file contents (missing, empty, no trailing newline,
//! CRLF, a bare CR, duplicates, matches at the start, middle and end, non-UTF-8 bytes)
//! with parameter sets covering every parameter (`line`, `regexp`, `search_string`,
//! `state`, `insertafter`/`insertbefore` with BOF/EOF and regexps, `backrefs`,
//! `firstmatch`, `create`) and their error cases, then adds seeded random cases. Every
//! case runs through ansible-core's own `lineinfile` module (`tests/ansible/
//! lineinfile_driver.py`, one Python process for all of them) and through `apply`; the
//! resulting file bytes, `changed`, failed-or-not and, on success, the message must be
//! identical. A handful of cases also go through a real `ansible-playbook` run to show
//! that the driver sees what a play sees (`BOSUN_LINEINFILE_PLAYBOOK=all` sends every
//! case through the playbook: slower, about half a second a case).
//!
//! Without ansible-core the test prints `SKIPPED (tool missing): ansible-core` and
//! passes, unless `BOSUN_REQUIRE_TOOLS=1` (scripts/test.sh), where it fails.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use bosun_plans::lineinfile::{apply, Params};
use serde_json::{json, Map, Value};

struct Case {
    id: String,
    content: Option<Vec<u8>>,
    params: Params,
}

/// Builder helpers for readable parameter sets.
trait P {
    fn re(self, r: &str) -> Self;
    fn ss(self, s: &str) -> Self;
    fn after(self, a: &str) -> Self;
    fn before(self, b: &str) -> Self;
    fn br(self) -> Self;
    fn first(self) -> Self;
    fn create(self) -> Self;
}

impl P for Params {
    fn re(mut self, r: &str) -> Self {
        self.regexp = Some(r.into());
        self
    }
    fn ss(mut self, s: &str) -> Self {
        self.search_string = Some(s.into());
        self
    }
    fn after(mut self, a: &str) -> Self {
        self.insertafter = Some(a.into());
        self
    }
    fn before(mut self, b: &str) -> Self {
        self.insertbefore = Some(b.into());
        self
    }
    fn br(mut self) -> Self {
        self.backrefs = true;
        self
    }
    fn first(mut self) -> Self {
        self.firstmatch = true;
        self
    }
    fn create(mut self) -> Self {
        self.create = true;
        self
    }
}

fn line(l: &str) -> Params {
    Params {
        line: Some(l.into()),
        ..Params::default()
    }
}

fn no_line() -> Params {
    Params::default()
}

fn gone() -> Params {
    Params {
        absent: true,
        ..Params::default()
    }
}

fn gone_line(l: &str) -> Params {
    Params {
        absent: true,
        line: Some(l.into()),
        ..Params::default()
    }
}

fn contents() -> Vec<(&'static str, Option<Vec<u8>>)> {
    let c = |s: &[u8]| Some(s.to_vec());
    vec![
        ("missing", None),
        ("empty", c(b"")),
        ("abc", c(b"a\nb\nc\n")),
        ("abc-no-eol", c(b"a\nb\nc")),
        ("abc-crlf", c(b"a\r\nb\r\nc\r\n")),
        ("dups", c(b"x=1\nfoo\nx=2\nfoo\n")),
        (
            "sshd",
            c(b"# comment\nPermitRootLogin yes\n#PermitRootLogin no\nPort 22\n"),
        ),
        ("line-at-end-no-eol", c(b"a\nline")),
        ("bare-cr-end", c(b"a\r")),
        ("spaces", c(b"  foo = bar  \n\tx=7\nfoo\n")),
        ("latin1", c(b"caf\xe9\n\xff\xfe x=1\n")),
        ("blank-lines", c(b"\n\n\n")),
        ("mixed-endings", c(b"Ab\r\nline\nx=3\r\n\r\nb")),
    ]
}

fn param_sets() -> Vec<(&'static str, Params)> {
    vec![
        ("line-new", line("line")),
        ("line-b", line("b")),
        ("line-c", line("c")),
        ("line-empty", line("")),
        ("line-with-newline", line("line\n")),
        ("line-two-lines", line("p\nq")),
        ("re-replace", line("B").re("^b")),
        ("re-dups-last", line("x=9").re("^x=")),
        ("re-dups-first", line("x=9").re("^x=").first()),
        ("re-miss-after", line("x=9").re("^zzz").after("^a")),
        ("re-miss-before", line("new").re("nomatch").before("^b")),
        ("re-dollar", line("C").re("c$")),
        ("re-dollar-cr", line("B").re("b\\r$")),
        ("re-empty", line("z").re("")),
        ("re-caret-dollar", line("blank").re("^$")),
        (
            "re-icase",
            line("PermitRootLogin no").re("(?i)^permitrootlogin"),
        ),
        ("re-lookahead", line("Port 2222").re("^(?!#)\\s*Port\\b")),
        ("re-lookbehind", line("found").re("(?<=x=)\\d")),
        ("re-backref-in-pattern", line("twice").re("^(.)\\1")),
        ("re-class-latin1", line("cafe").re("^caf[\\x80-\\xff]$")),
        ("re-verbose", line("v").re("(?x) ^ x = \\d  # a comment")),
        ("re-invalid", line("x").re("(")),
        ("re-lookbehind-variable", line("x").re("(?<=a+)b")),
        (
            "re-sshd",
            line("PermitRootLogin no")
                .re("^PermitRootLogin")
                .after("^#PermitRootLogin"),
        ),
        ("after-bof", line("top").after("BOF")),
        ("before-bof", line("top").before("BOF")),
        ("after-eof", line("end").after("EOF")),
        ("before-eof-regex", line("end").before("EOF")),
        ("after-a", line("new").after("^a")),
        ("after-c-last", line("new").after("^c")),
        ("after-foo-first", line("new").after("foo").first()),
        ("after-foo-last", line("new").after("foo")),
        ("after-empty", line("new").after("")),
        ("after-already", line("b").after("^a")),
        ("before-b", line("new").before("^b")),
        ("before-x-first", line("new").before("^x=").first()),
        ("before-empty", line("new").before("")),
        ("before-already", line("a").before("^b")),
        ("after-invalid", line("new").after("[")),
        ("br-swap", line("\\2=\\1").re("^(\\w)=(\\d)$").br()),
        (
            "br-named",
            line("\\g<k> = [\\g<v>]")
                .re("^\\s*(?P<k>[a-z]+)\\s*=\\s*(?P<v>.*?)\\s*$")
                .br(),
        ),
        ("br-miss", line("\\1").re("^nomatch(.*)").br()),
        ("br-first", line("<\\g<0>>").re("^x=\\d").br().first()),
        ("br-escapes", line("\\1\\t\\\\\\101\\n").re("^(a|c)").br()),
        ("br-bad-escape", line("\\q\\1").re("^(b)").br()),
        ("br-bad-group", line("\\3").re("^(b)").br()),
        ("br-unmatched-group", line("[\\1][\\2]").re("^(a)|(b)").br()),
        ("br-newline-kept", line("\\g<0>").re("^.*$").br()),
        ("br-dollar-group", line("<\\1>").re("(\\s*)$").br()),
        ("ss-b", line("B").ss("b")),
        ("ss-x-first", line("x=0").ss("x=").first()),
        ("ss-x-last", line("x=0").ss("x=")),
        ("ss-empty", line("E").ss("")),
        ("ss-miss-after", line("new").ss("zzz").after("^a")),
        ("create", line("created").create()),
        ("create-backrefs", line("\\1").re("(a)").br().create()),
        ("create-after", line("new").after("^a").create()),
        ("absent-line", gone_line("b")),
        ("absent-line-foo", gone_line("foo")),
        ("absent-re", gone().re("^x=")),
        ("absent-re-all", gone().re("")),
        ("absent-ss", gone().ss("o")),
        ("absent-invalid-re", gone().re("a{2,1}")),
        ("err-absent-nothing", gone()),
        ("err-no-line", no_line().re("^a")),
        ("err-backrefs-no-regexp", line("x").br()),
        ("err-after-before", line("x").after("^a").before("^b")),
        ("err-re-ss", line("x").re("a").ss("a")),
        ("err-br-ss", line("x").re("a").ss("a").br()),
    ]
}

/// SplitMix64: a small seeded generator, so the random cases are the same every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

fn random_cases(seed: u64, n: usize) -> Vec<Case> {
    let mut rng = Rng(seed);
    let lines: &[&[u8]] = &[
        b"a",
        b"b",
        b"x=1",
        b"x=2",
        b"foo",
        b"  foo = bar",
        b"#foo",
        b"",
        b"PermitRootLogin yes",
        b"caf\xe9",
        b"Ab",
        b"line",
        b"x=3 # trailing",
    ];
    let endings: &[&[u8]] = &[b"\n", b"\n", b"\n", b"\r\n", b"\r"];
    let plain_lines = ["line", "foo", "x=3", "b", "a", "new thing", "", "Ab"];
    let templates = [
        "\\1",
        "\\g<1>=\\2",
        "v=\\g<v>",
        "\\2\\n\\1",
        "\\q",
        "\\g<9>",
        "[\\g<0>]",
    ];
    let regexps = [
        "^x=",
        "^foo",
        "b$",
        "(?i)^ab",
        "^(\\w+)=(\\d)",
        "^\\s*foo\\s*=\\s*(?P<v>.*)$",
        "^(?!#)foo",
        "o+",
        "",
        "[",
        "(a)|b",
        "x=(\\d)\\r?$",
        "^(.*)$",
        "\\bx\\b",
        "(?m)^$",
        "^[^#]*=",
        "a{2}|b{,1}",
        "(?P<v>a)(?(v)b|c)",
    ];
    let searches = ["foo", "x=", "", "a", "#"];
    let afters = ["BOF", "EOF", "^a", "^x=", "foo", "^zzz", "", "b$"];
    let befores = ["BOF", "^b", "^x=", "^zzz", "EOF", "#"];
    let mut cases = Vec::with_capacity(n);
    for i in 0..n {
        let content = if rng.chance(8) {
            None
        } else {
            let mut c = Vec::new();
            let count = rng.below(6);
            for j in 0..count {
                let text = *rng.pick(lines);
                c.extend_from_slice(text);
                if j + 1 < count || !rng.chance(25) {
                    let end = *rng.pick(endings);
                    c.extend_from_slice(end);
                }
            }
            Some(c)
        };
        let mut p = Params {
            absent: rng.chance(20),
            backrefs: rng.chance(20),
            firstmatch: rng.chance(30),
            create: rng.chance(30),
            ..Params::default()
        };
        if rng.chance(60) {
            p.regexp = Some((*rng.pick(&regexps)).to_string());
        } else if rng.chance(50) {
            p.search_string = Some((*rng.pick(&searches)).to_string());
        }
        if !p.absent || rng.chance(50) {
            let l = if p.backrefs && rng.chance(60) {
                rng.pick(&templates)
            } else {
                rng.pick(&plain_lines)
            };
            p.line = Some((*l).to_string());
        }
        match rng.below(4) {
            0 => p.insertafter = Some((*rng.pick(&afters)).to_string()),
            1 => p.insertbefore = Some((*rng.pick(&befores)).to_string()),
            _ => {}
        }
        if rng.chance(3) {
            // The occasional conflicting pair, to keep the error paths honest.
            p.insertafter = Some("^a".into());
            p.insertbefore = Some("^b".into());
        }
        cases.push(Case {
            id: format!("random-{i}"),
            content,
            params: p,
        });
    }
    cases
}

/// Python `re` on bytes, case by case: each pattern replaces the line it matches with
/// `<\g<0>>` (the exact span, newline included when the match took it), with and without
/// firstmatch, and removes every line it matches with `state: absent`. Invalid patterns
/// must fail on both sides.
fn regex_corpus() -> Vec<Case> {
    let content: &[u8] = b"foo\na\nab\nabcd\nxx\n  \t\nA1_b2\n\ncaf\xe9\naab\noo\r\nx=42x\n[:a]\nb";
    let patterns = [
        "^a",
        "a$",
        "^$",
        "\\Aa",
        "a\\Z",
        "\\bfoo\\b",
        "\\Bo",
        "o+?",
        "o*",
        "(?i)FOO",
        "(?i)[A-C]+",
        "[^a-z]+",
        "[\\w-]+",
        "[\\s]+$",
        "\\s+$",
        "\\d{2,}",
        "x{,2}",
        "x{1,}",
        "a{0}",
        "a{,}",
        ".",
        "(?s).$",
        ".$",
        "\\S+",
        "\\W",
        "\\x41",
        "\\101",
        "\\t",
        "[\\x00-\\x1f]",
        "[\\x80-\\xff]+",
        "(?:a|b)+",
        "(a|ab)(c|bcd)(d*)",
        "(a*)*",
        "(a|)+b",
        "(?=o)o",
        "(?!f)o",
        "(?<=f)o",
        "(?<!f)o",
        "(?<=\\d{2})x",
        "(\\w)\\1",
        "(?P<n>\\w)(?P=n)",
        "(a)?(?(1)b|c)",
        "a*+",
        "(?>a+)b",
        "a++b",
        "a?+b",
        "(?x) a  b # c",
        "(?m)^b",
        "(?m)a$",
        "(?s:.)+",
        "(?i:a)A",
        "(?i)a(?-i:A)",
        "(?a)\\w+",
        "(?L)\\w+",
        "[[:alpha:]]+",
        "(?i)(?m)^x",
        "(?=a)*b",
        "()",
        "(|a)",
        "a||b",
        "[]-a]+",
        "[a-]+",
        "[-a]+",
        "[\\]]",
        "[^]]+",
        "(?#comment)ab",
        "\\.",
        "\\==",
        "[\\b]",
        "\\0",
        "(?i)\\xc9",
        "x{2}{3}",
        "(?(1)a|b)",
        "\\u0041",
        "\\p{L}",
        "a{2,1}",
        "(?P<a>x)(?P<a>y)",
        "(?<=a*)b",
        "[a",
        "(?",
        "a|*",
        "x(?i)",
        "\\Z*",
        "\\8",
        "(a)\\2",
        "(?P<1>a)",
        "(?u)a",
        "(?La)a",
        "(?-a:x)",
        "(?<!ab|c)x",
        "(?<=ab|cd)c",
    ];
    let mut cases = Vec::new();
    for (i, re) in patterns.iter().enumerate() {
        let with = |p: Params| Case {
            id: format!("regex-{i} {re}"),
            content: Some(content.to_vec()),
            params: p,
        };
        cases.push(with(line("<\\g<0>>").re(re).br()));
        cases.push(with(line("<\\g<0>>").re(re).br().first()));
        cases.push(with(gone().re(re)));
    }
    cases
}

fn all_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (pname, params) in param_sets() {
        for (cname, content) in contents() {
            cases.push(Case {
                id: format!("{pname}/{cname}"),
                content: content.clone(),
                params: params.clone(),
            });
        }
    }
    cases.extend(regex_corpus());
    cases.extend(random_cases(0x00B0_5E11, 300));
    cases
}

/// The module arguments as a playbook would write them (`backrefs: false` and friends
/// are left out, as `Params` cannot tell them from absent).
fn module_args(p: &Params) -> Value {
    let mut m = Map::new();
    let mut opt = |k: &str, v: &Option<String>| {
        if let Some(v) = v {
            m.insert(k.into(), json!(v));
        }
    };
    opt("line", &p.line);
    opt("regexp", &p.regexp);
    opt("search_string", &p.search_string);
    opt("insertafter", &p.insertafter);
    opt("insertbefore", &p.insertbefore);
    if p.absent {
        m.insert("state".into(), json!("absent"));
    }
    for (k, v) in [
        ("backrefs", p.backrefs),
        ("firstmatch", p.firstmatch),
        ("create", p.create),
    ] {
        if v {
            m.insert(k.into(), json!(true));
        }
    }
    Value::Object(m)
}

#[derive(Debug, Clone, PartialEq)]
struct AnsibleResult {
    failed: bool,
    changed: bool,
    msg: String,
    content: Option<Vec<u8>>,
}

fn driver() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ansible/lineinfile_driver.py")
}

fn ansible_core_available() -> bool {
    Command::new("python3")
        .args(["-c", "import ansible.modules.lineinfile"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn run_ansible(mode: &str, cases: &[&Case], dir: &Path) -> Vec<AnsibleResult> {
    let input: Vec<Value> = cases
        .iter()
        .map(|c| json!({"id": c.id, "content": c.content, "args": module_args(&c.params)}))
        .collect();
    let cases_path = dir.join(format!("cases-{mode}.json"));
    let out_path = dir.join(format!("results-{mode}.json"));
    std::fs::write(&cases_path, serde_json::to_vec(&input).unwrap()).unwrap();
    let out = Command::new("python3")
        .arg(driver())
        .arg(mode)
        .arg(&cases_path)
        .arg(&out_path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "lineinfile_driver.py {mode} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Vec<Value> = serde_json::from_slice(&std::fs::read(&out_path).unwrap()).unwrap();
    assert_eq!(results.len(), cases.len());
    results
        .into_iter()
        .zip(cases)
        .map(|(r, c)| {
            assert_eq!(r["id"], json!(c.id));
            AnsibleResult {
                failed: r["failed"].as_bool().unwrap(),
                changed: r["changed"].as_bool().unwrap(),
                msg: r["msg"].as_str().unwrap_or_default().to_string(),
                content: serde_json::from_value(r["content"].clone()).unwrap(),
            }
        })
        .collect()
}

fn show(bytes: &Option<Vec<u8>>) -> String {
    match bytes {
        None => "<no file>".into(),
        Some(b) => format!("{:?}", String::from_utf8_lossy(b)),
    }
}

fn describe(case: &Case) -> String {
    format!(
        "{} — content {} — args {}",
        case.id,
        show(&case.content),
        module_args(&case.params)
    )
}

/// Compares `apply` with Ansible's result; `None` when they agree.
fn compare(case: &Case, ansible: &AnsibleResult) -> Option<String> {
    let ours = apply(case.content.as_deref(), &case.params);
    match (&ours, ansible.failed) {
        (Err(_), true) => None,
        (Err(e), false) => Some(format!(
            "apply failed ({e}) but Ansible succeeded: changed={} msg={:?} content={}",
            ansible.changed,
            ansible.msg,
            show(&ansible.content)
        )),
        (Ok(o), true) => Some(format!(
            "apply succeeded (changed={} content={}) but Ansible failed: {}",
            o.changed,
            show(&o.content),
            ansible.msg
        )),
        (Ok(o), false) => {
            if o.content == ansible.content
                && o.changed == ansible.changed
                && o.message == ansible.msg
            {
                None
            } else {
                Some(format!(
                    "differs:\n      ours:    changed={} msg={:?} content={}\n      ansible: changed={} msg={:?} content={}",
                    o.changed,
                    o.message,
                    show(&o.content),
                    ansible.changed,
                    ansible.msg,
                    show(&ansible.content)
                ))
            }
        }
    }
}

#[test]
fn lineinfile_matches_ansible_core() {
    if !ansible_core_available() {
        if std::env::var("BOSUN_REQUIRE_TOOLS").as_deref() == Ok("1") {
            panic!("ansible-core is required (BOSUN_REQUIRE_TOOLS=1): pip install ansible-core");
        }
        let _ = writeln!(std::io::stderr(), "SKIPPED (tool missing): ansible-core");
        return;
    }
    let cases = all_cases();
    assert!(cases.len() >= 60);
    let dir = tempfile::tempdir().unwrap();

    let started = Instant::now();
    let refs: Vec<&Case> = cases.iter().collect();
    let results = run_ansible("driver", &refs, dir.path());
    let driver_time = started.elapsed();

    let mut failures = Vec::new();
    for (case, ansible) in cases.iter().zip(&results) {
        if let Some(why) = compare(case, ansible) {
            failures.push(format!("  {}\n      {why}", describe(case)));
        }
    }

    // The same cases through a real play: the driver must see what ansible-playbook sees.
    let all = std::env::var("BOSUN_LINEINFILE_PLAYBOOK").as_deref() == Ok("all");
    let step = if all { 1 } else { cases.len() / 6 };
    let picked: Vec<usize> = (0..cases.len()).step_by(step.max(1)).collect();
    let started = Instant::now();
    let subset: Vec<&Case> = picked.iter().map(|&i| &cases[i]).collect();
    let played = run_ansible("playbook", &subset, dir.path());
    let playbook_time = started.elapsed();
    for (&i, p) in picked.iter().zip(&played) {
        let d = &results[i];
        let same = p.failed == d.failed
            && p.changed == d.changed
            && p.content == d.content
            && (p.failed || p.msg == d.msg);
        if !same {
            failures.push(format!(
                "  {}\n      ansible-playbook and the driver disagree: playbook {p:?}, driver {d:?}",
                describe(&cases[i])
            ));
        }
    }

    let failed = results.iter().filter(|r| r.failed).count();
    let changed = results.iter().filter(|r| r.changed).count();
    let _ = writeln!(
        std::io::stderr(),
        "lineinfile vs ansible-core: {} cases ({failed} failed, {changed} changed, {} unchanged) \
         through the module driver in {:.1?}, {} through ansible-playbook in {:.1?}",
        cases.len(),
        cases.len() - failed - changed,
        driver_time,
        picked.len(),
        playbook_time
    );
    assert!(
        failures.is_empty(),
        "{} of {} cases differ from ansible-core:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
