//! Policies as code: Rego modules evaluated in-process (the `regorus` interpreter),
//! each evaluation bounded in time and memory, each policy file in size, and a policy
//! set's own `test_` rules run the way `opa test` runs them.
//!
//! A **policy set** is the `.rego` files of one folder (not recursive). Files ending in
//! `_test.rego` are its tests: loaded only by [`PolicySet::run_tests`].
//!
//! A **decision** reads five rules of every package in the set, each a set of messages
//! (strings): `deny`, `warn` and `require_approval` (what the plan, plan_run and approval
//! decision points act on), and `skip` and `trigger` (what the trigger decision point
//! acts on). A package that defines none of them adds nothing. An evaluation that fails
//! — a runtime error, or the time bound
//! [`Limits::eval_time`] or the memory bound [`Limits::max_memory_bytes`] reached — is an
//! [`EvalError`] naming the package (`policy data.x: deny: the memory bound (256 MiB) was
//! reached`): callers decide what it means (a deny, unless configured to warn). A test
//! that reaches a bound fails, saying so.
//!
//! Bounds: [`Limits::max_file_bytes`] per policy file and [`Limits::max_files`] per set
//! (checked before parsing), [`Limits::max_input_bytes`] for an input document, and the
//! evaluation time and memory per rule.
//!
//! The memory bound: a rule's evaluation (a decision's rule, or a test) may hold at most
//! [`Limits::max_memory_bytes`] more than was live when it started (the loaded policies and
//! the input are there before, and not counted); past that it fails, what it built is
//! freed, and the process carries on. The bytes are counted by the allocator regorus
//! declares as the global allocator of every binary linking this crate (mimalloc, with
//! counters) and checked by the interpreter as it goes: every 16 steps or 32 KiB allocated,
//! and inside the builtins that build collections element by element. Only the evaluating
//! thread's allocations count, because this crate's regorus work (evaluating, parsing,
//! converting an input) runs one at a time in the process: concurrent calls (such as
//! [`PolicySet::decide_input`] from several threads) queue, rule by rule, and neither fail
//! for each other's memory nor for the rest of the process's. A loop or comprehension that
//! runs away is stopped with at most about three times the bound resident (a collection
//! doubles as it grows, old and new both live for a moment). The check cannot stop a
//! single allocation: one builtin call that builds a huge value in one go (a `sprintf`
//! width in the billions, a `replace` or `concat` that multiplies its input) passes the
//! bound by that value's size before it is stopped. `numbers.range` and
//! `numbers.range_step`, which reserve their whole array at once (and abort the process
//! when the system refuses), refuse a range whose array alone passes the bound instead.
//!
//! An input document is checked and converted once into an [`Input`], which any number of
//! sets can then decide on ([`PolicySet::decide_input`]): the server evaluates each policy
//! as a set of its own on the same plan document.

use std::collections::BTreeSet;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use regorus::utils::limits::ExecutionTimerConfig;
use serde::Serialize;

mod bound;

use bound::Gate;

/// The rules a decision reads, in this order.
pub const DECISION_RULES: [&str; 5] = ["deny", "warn", "require_approval", "skip", "trigger"];

/// How much a policy set may cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock time of one rule's evaluation.
    pub eval_time: Duration,
    /// Largest policy file.
    pub max_file_bytes: usize,
    /// Most `.rego` files in a set (tests included).
    pub max_files: usize,
    /// Largest input document (its JSON text).
    pub max_input_bytes: usize,
    /// Memory one rule's evaluation may hold beyond what is live when it starts (the
    /// loaded policies and the input are not counted: they are there before).
    pub max_memory_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            eval_time: Duration::from_secs(1),
            max_file_bytes: 256 * 1024,
            max_files: 200,
            max_input_bytes: 64 * 1024 * 1024,
            // A rule of an ordinary decision holds well under 1 MiB (1,000 resources and a
            // few rules: 64 KiB; 10,000: 256 KiB). This is 4 times the largest input, room
            // for a policy that copies or re-serializes a whole input; a runaway is stopped
            // with at most about 3 times this resident, and evaluations run one at a time,
            // so that is all the policy engine adds to the process at worst.
            max_memory_bytes: 256 * 1024 * 1024,
        }
    }
}

/// Why a policy set cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("cannot read {path}: {why}")]
    Read { path: String, why: String },
    #[error("{path} is {size} bytes: a policy file is at most {max} bytes")]
    TooLarge { path: String, size: u64, max: usize },
    #[error("{dir} has {count} .rego files: a policy set has at most {max}")]
    TooManyFiles {
        dir: String,
        count: usize,
        max: usize,
    },
    #[error("{dir} has no .rego policy file")]
    Empty { dir: String },
    #[error("{path}: {why}")]
    Parse { path: String, why: String },
    /// The input's JSON text is longer than `max` bytes (measured up to one byte past
    /// the bound, never further).
    #[error("the input is more than {max} bytes: that is the most an input may be")]
    InputTooLarge { max: usize },
}

/// An evaluation that did not give an answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("policy {package}: {why}")]
pub struct EvalError {
    pub package: String,
    pub why: String,
}

/// One policy file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// As given (a path, or a name for uploaded text).
    pub path: String,
    pub text: String,
}

/// An input document, checked against [`Limits::max_input_bytes`] and converted to the
/// interpreter's values once: any number of sets can decide on it. Cloning it is cheap
/// (the interpreter's values are reference-counted).
#[derive(Debug, Clone)]
pub struct Input {
    value: regorus::Value,
}

impl Input {
    /// `document` as an input, if its JSON text is at most `limits.max_input_bytes` bytes
    /// (the text is counted, not built, and not past the bound).
    pub fn new(document: &serde_json::Value, limits: &Limits) -> Result<Input, PolicyError> {
        let max = limits.max_input_bytes;
        let mut counter = Counter { bytes: 0, max };
        if serde_json::to_writer(&mut counter, document).is_err() || counter.bytes > max {
            return Err(PolicyError::InputTooLarge { max });
        }
        // As `regorus::Value::from(serde_json::Value)` does, without the copy: a document
        // the interpreter cannot represent is undefined.
        let _gate = Gate::enter();
        let value = <regorus::Value as serde::Deserialize>::deserialize(document)
            .unwrap_or(regorus::Value::Undefined);
        Ok(Input { value })
    }
}

/// Counts the bytes written, failing once they pass `max`.
struct Counter {
    bytes: usize,
    max: usize,
}

impl std::io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.bytes = self.bytes.saturating_add(buf.len());
        if self.bytes > self.max {
            return Err(std::io::Error::other("past the bound"));
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What a set's rules said about one input.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub deny: Vec<String>,
    pub warn: Vec<String>,
    pub require_approval: Vec<String>,
    /// Do not start this stack's run for this delivery (the trigger point).
    pub skip: Vec<String>,
    /// Start this stack's run for this delivery though no watch path matched (the trigger
    /// point).
    pub trigger: Vec<String>,
    /// Packages whose evaluation failed, with why.
    pub errors: Vec<String>,
    pub duration_ms: u64,
}

/// A test rule's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TestResult {
    /// `data.PACKAGE.test_NAME`.
    pub name: String,
    pub passed: bool,
    /// Why it failed (false, undefined, or an error).
    pub why: Option<String>,
    pub duration_ms: u64,
}

/// The policies of one folder (or given as text), checked against [`Limits`].
#[derive(Debug, Clone)]
pub struct PolicySet {
    policies: Vec<Policy>,
    tests: Vec<Policy>,
    limits: Limits,
}

impl PolicySet {
    /// The `.rego` files of `dir`, in name order.
    pub fn from_dir(dir: &Path, limits: Limits) -> Result<PolicySet, PolicyError> {
        let read_err = |path: &Path, e: std::io::Error| PolicyError::Read {
            path: path.display().to_string(),
            why: e.to_string(),
        };
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| read_err(dir, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "rego") && p.is_file())
            .collect();
        files.sort();
        if files.len() > limits.max_files {
            return Err(PolicyError::TooManyFiles {
                dir: dir.display().to_string(),
                count: files.len(),
                max: limits.max_files,
            });
        }
        let mut all = Vec::new();
        for path in files {
            let size = std::fs::metadata(&path)
                .map_err(|e| read_err(&path, e))?
                .len();
            if size > limits.max_file_bytes as u64 {
                return Err(PolicyError::TooLarge {
                    path: path.display().to_string(),
                    size,
                    max: limits.max_file_bytes,
                });
            }
            let text = std::fs::read_to_string(&path).map_err(|e| read_err(&path, e))?;
            all.push(Policy {
                path: path.display().to_string(),
                text,
            });
        }
        let set = PolicySet::from_policies(all, limits)?;
        if set.policies.is_empty() {
            return Err(PolicyError::Empty {
                dir: dir.display().to_string(),
            });
        }
        Ok(set)
    }

    /// Policies given as text (tests are those whose path ends in `_test.rego`). Each
    /// must parse.
    pub fn from_policies(all: Vec<Policy>, limits: Limits) -> Result<PolicySet, PolicyError> {
        let (tests, policies): (Vec<Policy>, Vec<Policy>) = all
            .into_iter()
            .partition(|p| p.path.ends_with("_test.rego"));
        let set = PolicySet {
            policies,
            tests,
            limits,
        };
        let gate = Gate::enter();
        for p in set.policies.iter().chain(&set.tests) {
            if p.text.len() > limits.max_file_bytes {
                return Err(PolicyError::TooLarge {
                    path: p.path.clone(),
                    size: p.text.len() as u64,
                    max: limits.max_file_bytes,
                });
            }
            let mut engine = set.engine(&gate);
            engine
                .add_policy(p.path.clone(), p.text.clone())
                .map_err(|e| PolicyError::Parse {
                    path: p.path.clone(),
                    why: e.to_string(),
                })?;
        }
        Ok(set)
    }

    /// An engine for the set's limits (regorus work: the gate is held).
    fn engine(&self, _gate: &Gate) -> regorus::Engine {
        let mut engine = regorus::Engine::new();
        engine.set_execution_timer_config(ExecutionTimerConfig {
            limit: self.limits.eval_time,
            check_interval: NonZeroU32::MIN,
        });
        engine.set_strict_builtin_errors(true);
        let max = self.limits.max_memory_bytes;
        for (name, nargs, step) in [("numbers.range", 2, false), ("numbers.range_step", 3, true)] {
            // Only fails for a name added twice: a fresh engine has none.
            let _ = engine.add_extension(name.into(), nargs, Box::new(bound::range(max, step)));
        }
        engine
    }

    /// An engine with the set's policies (and its tests, if asked) loaded.
    fn loaded(&self, gate: &Gate, with_tests: bool) -> Result<regorus::Engine, PolicyError> {
        let mut engine = self.engine(gate);
        let files = self
            .policies
            .iter()
            .chain(self.tests.iter().filter(|_| with_tests));
        for p in files {
            engine
                .add_policy(p.path.clone(), p.text.clone())
                .map_err(|e| PolicyError::Parse {
                    path: p.path.clone(),
                    why: e.to_string(),
                })?;
        }
        Ok(engine)
    }

    /// The set's packages (`data.…` paths), tests excluded.
    pub fn packages(&self) -> Result<Vec<String>, PolicyError> {
        let gate = Gate::enter();
        let engine = self.loaded(&gate, false)?;
        let packages = engine.get_packages().map_err(|e| PolicyError::Parse {
            path: "policies".into(),
            why: e.to_string(),
        })?;
        Ok(packages
            .into_iter()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect())
    }

    /// Evaluates the [`DECISION_RULES`] of every package on `input`
    /// (checked and converted here: to decide several sets on one document, make an
    /// [`Input`] once and use [`PolicySet::decide_input`]). `duration_ms` includes the
    /// conversion.
    pub fn decide(&self, input: &serde_json::Value) -> Result<Decision, PolicyError> {
        let started = Instant::now();
        let input = Input::new(input, &self.limits)?;
        let mut decision = self.decide_input(&input)?;
        decision.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        Ok(decision)
    }

    /// Evaluates the [`DECISION_RULES`] of every package on an input
    /// already checked and converted (its size bound is the one [`Input::new`] was given).
    pub fn decide_input(&self, input: &Input) -> Result<Decision, PolicyError> {
        let started = Instant::now();
        let (mut engine, packages) = {
            let gate = Gate::enter();
            let mut engine = self.loaded(&gate, false)?;
            engine.set_input(input.value.clone());
            let packages: BTreeSet<String> = engine
                .get_packages()
                .map_err(|e| PolicyError::Parse {
                    path: "policies".into(),
                    why: e.to_string(),
                })?
                .into_iter()
                .collect();
            (engine, packages)
        };
        let mut decision = Decision::default();
        for package in packages {
            for rule in DECISION_RULES {
                let path = format!("{package}.{rule}");
                let messages = match self.eval(&mut engine, path, messages) {
                    Ok(messages) => messages,
                    Err(why) => {
                        // A package without this rule adds nothing.
                        if why.contains("not a valid rule path") || why.contains("no rule") {
                            continue;
                        }
                        decision.errors.push(
                            EvalError {
                                package: package.clone(),
                                why: format!("{rule}: {why}"),
                            }
                            .to_string(),
                        );
                        continue;
                    }
                };
                let into = match rule {
                    "deny" => &mut decision.deny,
                    "warn" => &mut decision.warn,
                    "require_approval" => &mut decision.require_approval,
                    "skip" => &mut decision.skip,
                    _ => &mut decision.trigger,
                };
                into.extend(messages);
            }
        }
        decision.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        Ok(decision)
    }

    /// Evaluates the rule at `path`, within the memory bound, and reads its value with
    /// `read`, holding the gate throughout. Why it failed, if it did.
    fn eval<T>(
        &self,
        engine: &mut regorus::Engine,
        path: String,
        read: impl FnOnce(&regorus::Value) -> T,
    ) -> Result<T, String> {
        let gate = Gate::enter();
        let max = self.limits.max_memory_bytes;
        match gate.bounded(max, || engine.eval_rule(path)) {
            Ok(v) => Ok(read(&v)),
            Err(e) if bound::is_memory_limit(&e) => Err(format!(
                "the memory bound ({}) was reached",
                bound::show_bytes(max)
            )),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Runs every `test_` rule of the set's `_test.rego` files (with the policies
    /// loaded): a test passes when it is true.
    pub fn run_tests(&self) -> Result<Vec<TestResult>, PolicyError> {
        let gate = Gate::enter();
        let mut engine = self.loaded(&gate, true)?;
        let mut names = Vec::new();
        for t in &self.tests {
            let mut one = self.engine(&gate);
            one.add_policy(t.path.clone(), t.text.clone())
                .map_err(|e| PolicyError::Parse {
                    path: t.path.clone(),
                    why: e.to_string(),
                })?;
            let packages = one.get_packages().map_err(|e| PolicyError::Parse {
                path: t.path.clone(),
                why: e.to_string(),
            })?;
            for package in packages {
                for rule in test_rules(&t.text) {
                    let name = format!("{package}.{rule}");
                    if !names.contains(&name) {
                        names.push(name);
                    }
                }
            }
        }
        drop(gate);
        let mut results = Vec::new();
        for name in names {
            let started = Instant::now();
            let outcome = self.eval(&mut engine, name.clone(), |v| match v {
                regorus::Value::Bool(true) => None,
                regorus::Value::Undefined => Some("undefined".to_string()),
                v => Some(v.to_json_str().unwrap_or_default()),
            });
            let (passed, why) = match outcome {
                Ok(None) => (true, None),
                Ok(Some(why)) | Err(why) => (false, Some(why)),
            };
            results.push(TestResult {
                name,
                passed,
                why,
                duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            });
        }
        Ok(results)
    }
}

/// The names of the `test_…` rules a test file defines (each once, in file order).
fn test_rules(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim_start();
        if !line.starts_with("test_") {
            continue;
        }
        let name: String = line
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !out.contains(&name) {
            out.push(name);
        }
    }
    out
}

/// A rule's value as messages: a set or array of strings (other values are shown as
/// JSON), a single string, or nothing when undefined.
fn messages(v: &regorus::Value) -> Vec<String> {
    let text = |v: &regorus::Value| match v {
        regorus::Value::String(s) => s.to_string(),
        other => other.to_json_str().unwrap_or_default(),
    };
    match v {
        regorus::Value::Undefined | regorus::Value::Null => Vec::new(),
        regorus::Value::Bool(false) => Vec::new(),
        regorus::Value::Set(s) => s.iter().map(text).collect(),
        regorus::Value::Array(a) => a.iter().map(text).collect(),
        other => vec![text(other)],
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn sets_and_inputs_can_cross_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<PolicySet>();
        send_sync::<Input>();
    }

    #[test]
    fn an_input_converts_as_regorus_converts_a_json_value() {
        let document = serde_json::json!({
            "plan": {"resource_changes": [
                {"address": "a.b", "change": {"actions": ["delete", "create"], "after": null}},
                {"size": 1.5, "n": -3, "big": 18446744073709551615u64, "e": 1e300, "ok": true},
            ]},
            "": [[], {}, "ünïcode \u{1F600}"],
        });
        let input = Input::new(&document, &Limits::default()).unwrap();
        assert_eq!(input.value, regorus::Value::from(document.clone()));
        assert_ne!(input.value, regorus::Value::Undefined);
    }
}
