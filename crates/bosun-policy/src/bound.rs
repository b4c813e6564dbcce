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
//! it is stopped.

use std::sync::{Mutex, MutexGuard, Once, PoisonError};

use regorus::LimitError;

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
/// of one (an extension's error reaches the caller as text).
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn bytes_show_in_the_largest_whole_unit() {
        assert_eq!(show_bytes(256 * 1024 * 1024), "256 MiB");
        assert_eq!(show_bytes(1536 * 1024), "1536 KiB");
        assert_eq!(show_bytes(1000), "1000 bytes");
        assert_eq!(show_bytes(0), "0 bytes");
    }
}
