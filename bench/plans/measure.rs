// Runs one command and measures it: wall time (spawn → exit of the command itself) and
// the peak memory of its whole process tree, sampled from /proc.
//
// Built by bench/plans.sh with plain `rustc -O` (standard library only, no crates):
//     measure --interval-ms 50 --timeout-s 900 --out RESULT.json --log OUTPUT.log -- CMD ARGS...
//
// Method:
// - This process is a child subreaper (prctl PR_SET_CHILD_SUBREAPER), so descendants whose
//   parent exits — ssh ControlPersist masters daemonising, double forks — are re-parented
//   to it and stay in the measured tree instead of escaping to init.
// - Every interval it lists /proc, reads `/proc/PID/stat` (ppid and rss) of every process
//   not already known to be outside the tree, and sums the RSS of all its descendants
//   (itself excluded). A process whose parent chain ends at pid 0 without passing through
//   this process is remembered as foreign and not read again (until its pid disappears),
//   so a sample costs about one read per process of the tree.
// - Sum of RSS counts pages shared between processes (forks of one parent, shared
//   libraries) once per process: it is the figure `ps` would add up, not unique memory.
//   So whenever the RSS sum reaches a new peak (by more than 1 % over the last such
//   reading) the tree's PSS is summed too (`Pss:` of /proc/PID/smaps_rollup: shared pages
//   divided among the processes sharing them): "peak_pss_kib" is the largest of those,
//   i.e. the tree's proportional memory around its RSS peak.
// - When the command exits, the descendants left behind (e.g. ControlPersist masters) are
//   counted, sent SIGTERM (SIGKILL after 5 s) and reaped; the tree's CPU time is
//   getrusage(RUSAGE_CHILDREN) after that, i.e. every process of the tree that was reaped.
// - SIGTERM/SIGINT to this process: the tree is killed the same way, exit 143.
//
// stdout/stderr of the command go to the log file; stdin is /dev/null.
// RESULT.json: {"exit_code", "signal", "timed_out", "wall_s", "peak_rss_kib",
// "peak_pss_kib", "peak_procs", "samples", "tree_cpu_s", "sampler_cpu_s", "leftover_procs"}.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::Read;
use std::os::raw::{c_int, c_long};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const PR_SET_CHILD_SUBREAPER: c_int = 36;
const WNOHANG: c_int = 1;
const SIGINT: c_int = 2;
const SIGKILL: c_int = 9;
const SIGTERM: c_int = 15;
const RUSAGE_SELF: c_int = 0;
const RUSAGE_CHILDREN: c_int = -1;
const SC_PAGESIZE: c_int = 30;

#[repr(C)]
#[derive(Default)]
struct Timeval {
    sec: c_long,
    usec: c_long,
}

#[repr(C)]
#[derive(Default)]
struct Rusage {
    utime: Timeval,
    stime: Timeval,
    rest: [c_long; 14],
}

extern "C" {
    fn prctl(option: c_int, ...) -> c_int;
    fn waitpid(pid: c_int, status: *mut c_int, options: c_int) -> c_int;
    fn kill(pid: c_int, sig: c_int) -> c_int;
    fn getrusage(who: c_int, usage: *mut Rusage) -> c_int;
    fn getpid() -> c_int;
    fn sysconf(name: c_int) -> c_long;
    fn signal(sig: c_int, handler: extern "C" fn(c_int)) -> usize;
}

static STOP: AtomicBool = AtomicBool::new(false);
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: c_int) {
    STOP_SIGNAL.store(sig, Ordering::SeqCst);
    STOP.store(true, Ordering::SeqCst);
}

fn cpu_seconds(who: c_int) -> f64 {
    let mut r = Rusage::default();
    unsafe { getrusage(who, &mut r) };
    (r.utime.sec + r.stime.sec) as f64 + (r.utime.usec + r.stime.usec) as f64 / 1e6
}

fn die(msg: &str) -> ! {
    eprintln!("measure: {msg}");
    std::process::exit(2)
}

/// The process tree below `me`, from /proc.
struct Tree {
    me: i32,
    page_kib: u64,
    /// Pids known to be outside the tree (their chain reached pid 0 without `me`).
    foreign: HashSet<i32>,
    buf: String,
}

struct Sample {
    rss_kib: u64,
    /// Descendants of `me`, with their parent pid.
    members: Vec<(i32, i32)>,
}

impl Tree {
    fn read_stat(&mut self, pid: i32) -> Option<(i32, u64)> {
        self.buf.clear();
        let mut f = fs::File::open(format!("/proc/{pid}/stat")).ok()?;
        f.read_to_string(&mut self.buf).ok()?;
        // "pid (comm) state ppid ..." — comm may hold spaces and parentheses.
        let rest = &self.buf[self.buf.rfind(')')? + 2..];
        let mut fields = rest.split(' ');
        // rest starts at field 3 (state); ppid is field 4, rss field 24.
        let ppid: i32 = fields.nth(1)?.parse().ok()?;
        let rss_pages: u64 = fields.nth(19)?.parse().ok()?;
        Some((ppid, rss_pages))
    }

    fn sample(&mut self) -> Sample {
        let mut procs: HashMap<i32, (i32, u64)> = HashMap::new();
        let mut seen: HashSet<i32> = HashSet::new();
        if let Ok(dir) = fs::read_dir("/proc") {
            for e in dir.flatten() {
                let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                    continue;
                };
                seen.insert(pid);
                if pid == self.me || self.foreign.contains(&pid) {
                    continue;
                }
                if let Some(st) = self.read_stat(pid) {
                    procs.insert(pid, st);
                }
            }
        }
        // A pid that disappeared may be reused by a new process: forget it.
        self.foreign.retain(|p| seen.contains(p));

        let mut rss_kib = 0;
        let mut members = Vec::new();
        let mut memo: HashMap<i32, bool> = HashMap::new();
        for (&pid, &(ppid, rss)) in &procs {
            let mut chain = vec![pid];
            let mut cur = ppid;
            // Some(true): below me; Some(false): foreign; None: unknown (a parent vanished
            // between the listing and the read — decided at the next sample).
            let verdict = loop {
                if cur == self.me {
                    break Some(true);
                }
                if cur <= 0 || self.foreign.contains(&cur) {
                    break Some(false);
                }
                if let Some(&v) = memo.get(&cur) {
                    break Some(v);
                }
                match procs.get(&cur) {
                    Some(&(pp, _)) => {
                        chain.push(cur);
                        cur = pp;
                    }
                    None => break None,
                }
                if chain.len() > 4096 {
                    break None;
                }
            };
            if let Some(v) = verdict {
                for p in chain {
                    memo.insert(p, v);
                }
            }
            match verdict {
                Some(true) => {
                    rss_kib += rss * self.page_kib;
                    members.push((pid, ppid));
                }
                Some(false) => {
                    self.foreign.insert(pid);
                }
                None => {}
            }
        }
        Sample { rss_kib, members }
    }
}

/// Sum of PSS (KiB) of these processes.
fn pss_kib(members: &[(i32, i32)], buf: &mut String) -> u64 {
    let mut total = 0;
    for &(pid, _) in members {
        buf.clear();
        let Ok(mut f) = fs::File::open(format!("/proc/{pid}/smaps_rollup")) else {
            continue;
        };
        if f.read_to_string(buf).is_err() {
            continue;
        }
        if let Some(line) = buf.lines().find(|l| l.starts_with("Pss:")) {
            total += line.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        }
    }
    total
}

/// Reaps every finished child that is not `main` (orphans re-parented to us).
fn reap_orphans(members: &[(i32, i32)], me: i32, main: i32) {
    for &(pid, ppid) in members {
        if ppid == me && pid != main {
            let mut st = 0;
            unsafe { waitpid(pid, &mut st, WNOHANG) };
        }
    }
}

/// SIGTERM to every descendant, SIGKILL to what is left after 5 s; reaps them all.
fn kill_tree(tree: &mut Tree) {
    for sig in [SIGTERM, SIGKILL] {
        let s = tree.sample();
        if s.members.is_empty() {
            break;
        }
        for &(pid, _) in &s.members {
            unsafe { kill(pid, sig) };
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            let mut st = 0;
            while unsafe { waitpid(-1, &mut st, WNOHANG) } > 0 {}
            let left = tree.sample();
            if left.members.is_empty() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let mut st = 0;
    while unsafe { waitpid(-1, &mut st, WNOHANG) } > 0 {}
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut interval_ms = 50u64;
    let mut timeout_s = 900u64;
    let mut out = None;
    let mut log = None;
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--interval-ms" => {
                interval_ms = args.get(i + 1).and_then(|v| v.parse().ok()).unwrap_or_else(|| die("bad --interval-ms"));
                i += 2;
            }
            "--timeout-s" => {
                timeout_s = args.get(i + 1).and_then(|v| v.parse().ok()).unwrap_or_else(|| die("bad --timeout-s"));
                i += 2;
            }
            "--out" => {
                out = args.get(i + 1).cloned();
                i += 2;
            }
            "--log" => {
                log = args.get(i + 1).cloned();
                i += 2;
            }
            "--" => {
                i += 1;
                break;
            }
            other => die(&format!("unknown argument {other}")),
        }
    }
    let cmd = &args[i..];
    if cmd.is_empty() {
        die("usage: measure [--interval-ms N] [--timeout-s N] --out FILE --log FILE -- CMD ARGS...");
    }
    let out = out.unwrap_or_else(|| die("--out is required"));
    let log = log.unwrap_or_else(|| die("--log is required"));

    unsafe {
        if prctl(PR_SET_CHILD_SUBREAPER, 1 as c_long, 0 as c_long, 0 as c_long, 0 as c_long) != 0 {
            die("prctl(PR_SET_CHILD_SUBREAPER) failed");
        }
        signal(SIGTERM, on_signal);
        signal(SIGINT, on_signal);
    }
    let me = unsafe { getpid() };
    let page_kib = (unsafe { sysconf(SC_PAGESIZE) }.max(4096) as u64) / 1024;
    let mut tree = Tree {
        me,
        page_kib,
        foreign: HashSet::new(),
        buf: String::with_capacity(512),
    };
    // Everything already running is foreign: learn it before the command starts, so the
    // first samples during the run only read new processes.
    tree.sample();

    let logf = fs::File::create(&log).unwrap_or_else(|e| die(&format!("cannot create {log}: {e}")));
    let logf2 = logf.try_clone().unwrap_or_else(|e| die(&format!("{log}: {e}")));
    let start = Instant::now();
    let child = Command::new(&cmd[0])
        .args(&cmd[1..])
        .stdin(Stdio::null())
        .stdout(logf)
        .stderr(logf2)
        .spawn()
        .unwrap_or_else(|e| die(&format!("cannot start {}: {e}", cmd[0])));
    let main_pid = child.id() as i32;
    // The command is reaped by this thread only, at the moment it exits (precise wall time);
    // `child` is never waited on through std.
    let (tx, rx) = mpsc::channel::<(Instant, c_int)>();
    std::thread::spawn(move || {
        let mut st: c_int = 0;
        loop {
            let r = unsafe { waitpid(main_pid, &mut st, 0) };
            if r == main_pid {
                break;
            }
            if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(4) {
                break; // not EINTR
            }
        }
        let _ = tx.send((Instant::now(), st));
    });

    let interval = Duration::from_millis(interval_ms.max(1));
    let deadline = start + Duration::from_secs(timeout_s);
    let mut peak_rss = 0u64;
    let mut peak_pss = 0u64;
    let mut pss_at_rss = 0u64;
    let mut pss_buf = String::with_capacity(2048);
    let mut peak_procs = 0usize;
    let mut samples = 0u64;
    let mut timed_out = false;
    let mut next = start;
    let ended: Option<(Instant, c_int)> = loop {
        let s = tree.sample();
        samples += 1;
        peak_rss = peak_rss.max(s.rss_kib);
        if s.rss_kib * 100 > pss_at_rss * 101 {
            pss_at_rss = s.rss_kib;
            peak_pss = peak_pss.max(pss_kib(&s.members, &mut pss_buf));
        }
        peak_procs = peak_procs.max(s.members.len());
        reap_orphans(&s.members, me, main_pid);
        if STOP.load(Ordering::SeqCst) {
            break None;
        }
        if Instant::now() >= deadline {
            timed_out = true;
            break None;
        }
        next += interval;
        let now = Instant::now();
        let wait = if next > now { next - now } else {
            next = now;
            Duration::ZERO
        };
        match rx.recv_timeout(wait) {
            Ok(end) => break Some(end),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => die("lost the command's waiter"),
        }
    };

    let (wall_s, exit_code, term_signal) = match ended {
        Some((at, st)) => {
            let wall = (at - start).as_secs_f64();
            if st & 0x7f == 0 {
                (wall, Some((st >> 8) & 0xff), None)
            } else {
                (wall, None, Some(st & 0x7f))
            }
        }
        None => ((Instant::now() - start).as_secs_f64(), None, None),
    };
    // What the command left behind (after its exit), then stop it all.
    let left = tree.sample();
    let leftover = left.members.iter().filter(|(p, _)| *p != main_pid).count();
    if ended.is_none() {
        unsafe { kill(main_pid, SIGTERM) };
    }
    kill_tree(&mut tree);
    if ended.is_none() {
        let _ = rx.recv_timeout(Duration::from_secs(10));
    }
    let tree_cpu = cpu_seconds(RUSAGE_CHILDREN);
    let sampler_cpu = cpu_seconds(RUSAGE_SELF);

    let opt = |v: Option<c_int>| v.map_or("null".to_string(), |x| x.to_string());
    let json = format!(
        "{{\"exit_code\": {}, \"signal\": {}, \"timed_out\": {}, \"wall_s\": {:.4}, \"peak_rss_kib\": {}, \"peak_pss_kib\": {}, \"peak_procs\": {}, \"samples\": {}, \"interval_ms\": {}, \"tree_cpu_s\": {:.3}, \"sampler_cpu_s\": {:.3}, \"leftover_procs\": {}}}\n",
        opt(exit_code),
        opt(term_signal),
        timed_out,
        wall_s,
        peak_rss,
        peak_pss,
        peak_procs,
        samples,
        interval_ms,
        tree_cpu,
        sampler_cpu,
        leftover
    );
    fs::write(&out, json).unwrap_or_else(|e| die(&format!("cannot write {out}: {e}")));
    if STOP.load(Ordering::SeqCst) {
        std::process::exit(128 + STOP_SIGNAL.load(Ordering::SeqCst));
    }
}
