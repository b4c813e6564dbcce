//! The memory bound of an evaluation, on regorus' allocator accounting.
//!
//! With its `allocator-memory-limits` feature, regorus declares its allocator (mimalloc,
//! `regorus-mimalloc`) as the process's global allocator: each thread counts the bytes it
//! allocates and frees, and adds its count to a process-wide total when it is flushed.
//! regorus' interpreter compares that total with one process-wide limit at its checkpoints
//! (every 16 steps of an evaluation or 32 KiB allocated, and inside the builtins that
//! build collections element by element) and fails with
//! [`regorus::LimitError::MemoryLimitExceeded`] once it is passed. Total and limit being
//! process-wide, a bound per evaluation is built here:
//!
//! - All of this crate's regorus work (parsing, converting an input, evaluating, reading a
//!   value) runs holding one lock, the [`Gate`]: one at a time in the process.
//! - Threads flush their counts only when asked (the automatic flush is switched off), and
//!   only regorus' checks (while a limit is set) and [`Gate::bounded`] ask: while a rule is
//!   evaluated, the total moves only with the evaluating thread's own allocations. Other
//!   threads' allocations (the server's requests) never count against an evaluation.
//! - The total starts biased far above zero: a thread that frees what others allocated
//!   counts negative, and regorus reads a negative total as zero, which would loosen the
//!   bound by that much.
//! - A rule's evaluation runs with the limit set to the total at its start plus the bound,
//!   and unset when it ends (or unwinds).
//!
//! What it cannot do: stop a single allocation. An allocation is counted when made and
//! checked at the next checkpoint, so one builtin call that builds a large value in one
//! go, without regorus checking in between, can pass the bound by that value's size before
//! it is stopped. `numbers.range` and `numbers.range_step` reserve their whole array at
//! once (a reservation the system refuses aborts the process), so they are replaced here
//! by [`range`], which refuses a range whose array alone passes the bound before
//! allocating it.

use std::sync::{Mutex, MutexGuard, Once, PoisonError};

use regorus::{LimitError, Value};

/// Held while this crate's regorus work runs (see the module docs).
static GATE: Mutex<()> = Mutex::new(());
static SETUP: Once = Once::new();

/// Where the process-wide total starts: far above zero, so that frees counted on threads
/// other than the allocating one never bring it below zero, and far below `u64::MAX`
/// (which regorus reads as "no limit"), so that the total plus a bound stays under it
/// unless the bound itself is about as large (`usize::MAX`: no bound).
const BIAS: usize = usize::MAX >> 2;

/// This crate's turn at regorus: no other thread of the process runs regorus meanwhile.
pub(crate) struct Gate {
    _held: MutexGuard<'static, ()>,
}

impl Gate {
    /// Waits for the turn.
    pub(crate) fn enter() -> Gate {
        // A panic while holding the gate leaves nothing half-done that matters here: the
        // limit is unset as the panic unwinds (see `Unset`).
        let held = GATE.lock().unwrap_or_else(PoisonError::into_inner);
        SETUP.call_once(|| {
            regorus::set_thread_flush_threshold_override(Some(0));
            regorus_mimalloc::limits::record_alloc(BIAS);
            regorus::flush_thread_memory_counters();
        });
        Gate { _held: held }
    }

    /// Runs `f` with the memory limit set to what is counted live now plus `max_bytes`.
    pub(crate) fn bounded<R>(&self, max_bytes: usize, f: impl FnOnce() -> R) -> R {
        // Flushes this thread's count first: what it allocated before is not `f`'s.
        let live = regorus_mimalloc::global_allocation_stats_snapshot().allocated;
        let max = u64::try_from(max_bytes).unwrap_or(u64::MAX);
        regorus::set_global_memory_limit(Some(live.saturating_add(max)));
        let _unset = Unset;
        f()
    }
}

/// Unsets the memory limit when dropped.
struct Unset;

impl Drop for Unset {
    fn drop(&mut self) {
        regorus::set_global_memory_limit(None);
    }
}

/// Whether `e` is regorus saying the memory limit was passed: its own error, or the text
/// of one (an extension's error, such as [`range`]'s, reaches the caller as text).
pub(crate) fn is_memory_limit(e: &anyhow::Error) -> bool {
    matches!(
        e.downcast_ref::<LimitError>(),
        Some(LimitError::MemoryLimitExceeded { .. })
    ) || e
        .to_string()
        .contains("execution exceeded memory limit (usage=")
}

/// `bytes` for people: in MiB or KiB when whole.
pub(crate) fn show_bytes(bytes: usize) -> String {
    const KIB: usize = 1024;
    const MIB: usize = 1024 * 1024;
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else if bytes >= KIB && bytes.is_multiple_of(KIB) {
        format!("{} KiB", bytes / KIB)
    } else {
        format!("{bytes} bytes")
    }
}

/// `numbers.range(a, b)` (`step` false) or `numbers.range_step(a, b, step)`, computed as
/// regorus computes them (strict errors), except that a range whose array alone would
/// take more than `max_bytes` fails as the memory bound, before anything is allocated.
pub(crate) fn range(
    max_bytes: usize,
    step: bool,
) -> impl FnMut(Vec<Value>) -> anyhow::Result<Value> + Clone + Send + Sync {
    move |args| range_of(&args, max_bytes, step)
}

fn range_of(args: &[Value], max_bytes: usize, step: bool) -> anyhow::Result<Value> {
    let name = if step {
        "numbers.range_step"
    } else {
        "numbers.range"
    };
    for v in args {
        if !matches!(v, Value::Number(_)) {
            anyhow::bail!("`{name}` expects numeric argument. Got `{v}` instead");
        }
    }
    let (Some(a), Some(b)) = (args.first(), args.get(1)) else {
        anyhow::bail!("`{name}` expects {} arguments", if step { 3 } else { 2 });
    };
    let v1 = a.as_number()?.clone();
    let v2 = b.as_number()?.clone();
    if !v1.is_integer() || !v2.is_integer() {
        anyhow::bail!("operand must be integer");
    }
    let diff = v2.sub(&v1)?.as_i64();
    let (incr, count) = if step {
        let Some(s) = args.get(2) else {
            anyhow::bail!("`{name}` expects 3 arguments");
        };
        let s = s.as_number()?;
        let zero = Value::from(0u64);
        if !s.is_integer() || s <= zero.as_number()? {
            anyhow::bail!("step must be a positive integer");
        }
        match (diff, s.as_i64()) {
            (Some(d), Some(s)) if d >= 0 => (s, (d / s).saturating_add(1)),
            (Some(d), Some(s)) => (-s, d.checked_neg().map_or(i64::MAX, |d| d / s + 1)),
            _ => anyhow::bail!("could not determine number of elements"),
        }
    } else {
        match diff {
            Some(d) if d >= 0 => (1, d.saturating_add(1)),
            Some(d) => (
                -1,
                d.checked_neg().map_or(i64::MAX, |d| d.saturating_add(1)),
            ),
            None => anyhow::bail!("could not determine number of elements"),
        }
    };
    let bytes = usize::try_from(count)
        .ok()
        .and_then(|c| c.checked_mul(std::mem::size_of::<Value>()));
    let count = match (usize::try_from(count), bytes) {
        (Ok(count), Some(bytes)) if bytes <= max_bytes => count,
        _ => {
            return Err(anyhow::Error::new(LimitError::MemoryLimitExceeded {
                usage: bytes.map_or(u64::MAX, |b| u64::try_from(b).unwrap_or(u64::MAX)),
                limit: u64::try_from(max_bytes).unwrap_or(u64::MAX),
            }))
        }
    };
    let increment = Value::from(incr);
    let increment = increment.as_number()?;
    let mut values = Vec::with_capacity(count);
    let mut v = v1;
    if step {
        let up = increment.is_positive();
        while (v <= v2 && up) || (v >= v2 && !up) {
            values.push(Value::from(v.clone()));
            v.add_assign(increment)?;
        }
    } else {
        while v != v2 {
            values.push(Value::from(v.clone()));
            v.add_assign(increment)?;
        }
        values.push(Value::from(v));
    }
    Ok(Value::from(values))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// `call` evaluated by regorus' own builtins, or (`ours`) with [`range`] in their place.
    fn eval(call: &str, ours: bool) -> anyhow::Result<Value> {
        let _gate = Gate::enter();
        let mut engine = regorus::Engine::new();
        engine.set_strict_builtin_errors(true);
        if ours {
            let max = 64 * 1024 * 1024;
            engine
                .add_extension("numbers.range".into(), 2, Box::new(range(max, false)))
                .unwrap();
            engine
                .add_extension("numbers.range_step".into(), 3, Box::new(range(max, true)))
                .unwrap();
        }
        engine
            .add_policy("t.rego".into(), format!("package t\n\nr := {call}\n"))
            .unwrap();
        engine.eval_rule("data.t.r".into())
    }

    fn both(call: &str) -> [anyhow::Result<Value>; 2] {
        [eval(call, false), eval(call, true)]
    }

    #[test]
    fn the_ranges_are_regorus_own() {
        for call in [
            "numbers.range(1, 5)",
            "numbers.range(5, 1)",
            "numbers.range(3, 3)",
            "numbers.range(-2, 2)",
            "numbers.range(1.0, 3)",
            "numbers.range(1, 3.0)",
            "numbers.range(-1e3, -998)",
            "numbers.range_step(0, 10, 3)",
            "numbers.range_step(10, 0, 3)",
            "numbers.range_step(1, 10, 20)",
            "numbers.range_step(1, 1, 1)",
            "numbers.range_step(-5, 5, 2)",
            "numbers.range_step(0, 10, 2.0)",
        ] {
            let [theirs, ours] = both(call);
            let theirs = theirs.unwrap();
            assert!(matches!(theirs, Value::Array(_)), "{call}: {theirs}");
            assert_eq!(ours.unwrap(), theirs, "{call}");
        }
        for call in [
            "numbers.range(1.5, 3)",
            "numbers.range(1, 3.5)",
            "numbers.range(1, \"3\")",
            "numbers.range_step(0, 10, 0)",
            "numbers.range_step(0, 10, -1)",
            "numbers.range_step(0, 10, 1.5)",
            "numbers.range_step(0.5, 10, 1)",
        ] {
            let [theirs, ours] = both(call);
            assert!(
                theirs.is_err() && ours.is_err(),
                "{call}: {theirs:?} {ours:?}"
            );
        }
        // Past the bound: refused, as the memory bound, before anything is allocated
        // (regorus' own would reserve 24 PB here, and abort the process).
        for call in ["numbers.range(1, 1e15)", "numbers.range_step(1, 1e15, 7)"] {
            assert!(is_memory_limit(&eval(call, true).unwrap_err()), "{call}");
        }
    }

    #[test]
    fn bytes_show_in_the_largest_whole_unit() {
        assert_eq!(show_bytes(256 * 1024 * 1024), "256 MiB");
        assert_eq!(show_bytes(1536 * 1024), "1536 KiB");
        assert_eq!(show_bytes(1000), "1000 bytes");
        assert_eq!(show_bytes(0), "0 bytes");
    }
}
