//! Stack dependencies in the store (one source for both backends, see `super::db`): the held runs a tracked upstream
//! run creates for the stacks downstream of its own (one per stack in the whole chain below
//! it, however many paths reach the stack — a diamond's bottom runs once), and what
//! happens to them as their holders end (`run_holds`, one row per holder). A held run is
//! skipped as soon as one holder failed; otherwise it settles once every holder has
//! ended: released when one changed outputs it maps (or the dependency says
//! `trigger_always`), removed otherwise.
//! All of it inside the transaction that creates or ends the upstream run, so no
//! downstream run is lost or left waiting.

use std::collections::BTreeMap;

use bosun_core::outputs;
use bosun_core::run::{Event, RunKind, RunState, Trigger};
use bosun_core::state::Output;
use serde_json::Value;

use super::db::{self, params, OptionalExtension, Transaction};
use super::runs::{apply_event, insert_queued_run, load_run};
use super::state::decode_outputs;
use crate::{NewRun, Result, RunEventInput, RunRecord, RunUpdate, StoreError};

/// The id of the run the wave started by the tracked run `root` holds for `stack`:
/// derived from both, so every path from the root to the stack (a diamond has two)
/// names the same run, in the format of every other run id.
fn held_run_id(root: &RunRecord, stack: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("{}\n{stack}", root.id).as_bytes());
    format!(
        "run-{:011x}{}",
        root.created_at.timestamp_millis(),
        hex::encode(&digest[..5])
    )
}

/// After a tracked run is inserted: one held run for each stack downstream of its stack,
/// through the whole (acyclic) graph below it — one per stack however many paths reach
/// it, held by the run of each of its upstream stacks in the chain.
pub(super) fn hold_downstream(tx: &Transaction<'_>, upstream: &RunRecord) -> Result<()> {
    if upstream.kind != RunKind::Tracked {
        return Ok(());
    }
    hold(tx, upstream, upstream)
}

/// Holds a run of each stack depending on `upstream`'s for the wave of `root`: created
/// (holding the next level in turn) the first time the wave reaches the stack, given
/// one more holder on every later path.
fn hold(tx: &Transaction<'_>, upstream: &RunRecord, root: &RunRecord) -> Result<()> {
    let downstream: Vec<(String, String)> = {
        let mut stmt = tx.prepare_cached(
            "SELECT d.stack_id, s.branch FROM stack_dependencies d
             JOIN stacks s ON s.org_id = d.org_id AND s.id = d.stack_id
             WHERE d.org_id = ?1 AND d.upstream = ?2 ORDER BY d.stack_id",
        )?;
        let rows = stmt.query_map(params![upstream.org, upstream.stack], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?;
        rows.collect::<db::Result<_>>()?
    };
    for (stack, branch) in downstream {
        let id = held_run_id(root, &stack);
        let created = if load_run(tx, &id)?.is_some() {
            None
        } else {
            let run = NewRun {
                id: id.clone(),
                org: upstream.org.clone(),
                stack,
                kind: RunKind::Tracked,
                trigger: Trigger::Dependency,
                triggered_by: format!("stack:{}", upstream.stack),
                commit: None,
                branch,
                retry_of: None,
                pull_request: None,
            };
            let created = insert_queued_run(tx, &run, None)?;
            tx.prepare_cached(
                "UPDATE runs SET held = 1, needs_lease = 0, upstream_run = ?2 WHERE id = ?1",
            )?
            .execute(params![id, upstream.id])?;
            Some(created)
        };
        tx.prepare_cached("INSERT INTO run_holds (run_id, upstream_run_id) VALUES (?1, ?2)")?
            .execute(params![id, upstream.id])?;
        set_waiting_reason(tx, &id)?;
        if let Some(created) = created {
            hold(tx, &created, root)?;
        }
    }
    Ok(())
}

/// A held run's reason while it waits: the holding runs that have not ended yet.
fn set_waiting_reason(tx: &Transaction<'_>, id: &str) -> Result<()> {
    let waiting: Vec<String> = {
        let mut stmt = tx.prepare_cached(
            "SELECT h.upstream_run_id, r.stack_id FROM run_holds h
             JOIN runs r ON r.id = h.upstream_run_id
             WHERE h.run_id = ?1 AND h.outcome IS NULL ORDER BY r.stack_id, h.upstream_run_id",
        )?;
        let rows = stmt.query_map([id], |r| {
            let (run, stack): (String, String) = (r.get(0)?, r.get(1)?);
            Ok(format!("run {run} of upstream stack {stack}"))
        })?;
        rows.collect::<db::Result<_>>()?
    };
    tx.prepare_cached("UPDATE runs SET reason = ?2 WHERE id = ?1")?
        .execute(params![id, format!("waiting for {}", waiting.join(", "))])?;
    Ok(())
}

/// How a dependency of a downstream stack on an upstream one is configured.
fn trigger_always(
    tx: &Transaction<'_>,
    org: &str,
    downstream: &str,
    upstream: &str,
) -> Result<bool> {
    let raw: Option<String> = tx
        .prepare_cached("SELECT depends_on FROM stacks WHERE org_id = ?1 AND id = ?2")?
        .query_row(params![org, downstream], |r| r.get(0))
        .optional()?;
    let deps: Value = match raw {
        Some(s) => serde_json::from_str(&s)
            .map_err(|e| StoreError::Backend(format!("stack {downstream}: depends_on: {e}")))?,
        None => return Ok(false),
    };
    Ok(deps
        .as_array()
        .into_iter()
        .flatten()
        .find(|d| d["stack"] == upstream)
        .and_then(|d| d["trigger_always"].as_bool())
        .unwrap_or(false))
}

/// The outputs the versions written by `run` changed: its last version against the one
/// before its first (none written → no change).
pub(super) fn changed_outputs(tx: &Transaction<'_>, run: &RunRecord) -> Result<Vec<String>> {
    let range: Option<(i64, i64)> = tx
        .prepare_cached(
            "SELECT MIN(version), MAX(version) FROM state_versions
             WHERE org_id = ?1 AND stack_id = ?2 AND writer_kind = 'run' AND writer_id = ?3
             HAVING COUNT(*) > 0",
        )?
        .query_row(params![run.org, run.stack, run.id], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .optional()?;
    let Some((first, last)) = range else {
        return Ok(Vec::new());
    };
    let outputs_of = |sql: &str, version: i64| -> Result<BTreeMap<String, Output>> {
        let raw: Option<String> = tx
            .prepare_cached(sql)?
            .query_row(params![run.org, run.stack, version], |r| r.get(0))
            .optional()?;
        raw.map(|s| decode_outputs(&s))
            .transpose()
            .map(Option::unwrap_or_default)
    };
    let before = outputs_of(
        "SELECT outputs FROM state_versions WHERE org_id = ?1 AND stack_id = ?2
         AND version < ?3 ORDER BY version DESC LIMIT 1",
        first,
    )?;
    let after = outputs_of(
        "SELECT outputs FROM state_versions WHERE org_id = ?1 AND stack_id = ?2 AND version = ?3",
        last,
    )?;
    Ok(outputs::compare(&before, &after)
        .into_iter()
        .filter(|c| c.is_change())
        .map(|c| c.name)
        .collect())
}

/// What a holding run's end means for a run it holds (a `run_holds.outcome`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Its outputs changed (or the dependency says `trigger_always`): the held run is needed.
    Released,
    /// Nothing the held run depends on changed (or the holder was removed unneeded).
    Unchanged,
    /// It failed or was skipped: the held run must not run on what it left.
    Failed,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Released => "released",
            Outcome::Unchanged => "unchanged",
            Outcome::Failed => "failed",
        }
    }
}

/// The held runs still waiting on `upstream` (queued, not yet settled).
fn waiting_on(tx: &Transaction<'_>, upstream: &str) -> Result<Vec<String>> {
    let mut stmt = tx.prepare_cached(
        "SELECT h.run_id FROM run_holds h JOIN runs r ON r.id = h.run_id
         WHERE h.upstream_run_id = ?1 AND h.outcome IS NULL
           AND r.held = 1 AND r.state = 'queued'
         ORDER BY h.run_id",
    )?;
    let rows = stmt.query_map([upstream], |r| r.get(0))?;
    Ok(rows.collect::<db::Result<_>>()?)
}

/// Records what `upstream`'s end means for the held run `id`, then settles that run.
fn record(
    tx: &Transaction<'_>,
    id: &str,
    upstream: &str,
    outcome: Outcome,
    reason: Option<String>,
) -> Result<()> {
    tx.prepare_cached(
        "UPDATE run_holds SET outcome = ?3, reason = ?4
         WHERE run_id = ?1 AND upstream_run_id = ?2 AND outcome IS NULL",
    )?
    .execute(params![id, upstream, outcome.as_str(), reason])?;
    settle(tx, id)
}

/// Settles the held run `id`: skipped as soon as one of its holders failed (naming it —
/// whatever the others do, it must not run on what that one left); once every holder
/// has ended, released when any needs it (with their reasons), removed otherwise; still
/// waiting (its reason naming what for) while any has not.
fn settle(tx: &Transaction<'_>, id: &str) -> Result<()> {
    let holds: Vec<(Option<String>, Option<String>)> = {
        let mut stmt = tx.prepare_cached(
            "SELECT outcome, reason FROM run_holds WHERE run_id = ?1 ORDER BY upstream_run_id",
        )?;
        let rows = stmt.query_map([id], |r| Ok((r.get(0)?, r.get(1)?)))?;
        rows.collect::<db::Result<_>>()?
    };
    let any_failed = holds
        .iter()
        .any(|(o, _)| o.as_deref() == Some(Outcome::Failed.as_str()));
    if !any_failed && holds.iter().any(|(outcome, _)| outcome.is_none()) {
        return set_waiting_reason(tx, id);
    }
    let reasons = |outcome: Outcome| -> Vec<String> {
        holds
            .iter()
            .filter(|(o, _)| o.as_deref() == Some(outcome.as_str()))
            .filter_map(|(_, reason)| reason.clone())
            .collect()
    };
    let failed = reasons(Outcome::Failed);
    if !failed.is_empty() {
        tx.prepare_cached("UPDATE runs SET held = 0 WHERE id = ?1")?
            .execute([id])?;
        let Some(d) = load_run(tx, id)? else {
            return Ok(());
        };
        let input = RunEventInput {
            event: Event::UpstreamFailed,
            fencing: None,
            update: RunUpdate {
                reason: Some(failed.join("; ")),
                ..Default::default()
            },
            audit: None,
        };
        apply_event(tx, &d, &input)?;
        return Ok(());
    }
    let released = reasons(Outcome::Released);
    if !released.is_empty() {
        tx.prepare_cached(
            "UPDATE runs SET held = 0, needs_lease = 1, reason = ?2 WHERE id = ?1 AND held = 1",
        )?
        .execute(params![id, released.join("; ")])?;
        return Ok(());
    }
    remove_held(tx, id)
}

/// After `run` reached the terminal `state`: records what that means for each run it
/// holds, settling those it was the last to hold.
pub(super) fn upstream_ended(tx: &Transaction<'_>, run: &RunRecord, state: RunState) -> Result<()> {
    // A held run that ended while waiting (canceled) waits for nothing any more.
    tx.prepare_cached("UPDATE runs SET held = 0 WHERE id = ?1 AND held = 1")?
        .execute([&run.id])?;
    let held = waiting_on(tx, &run.id)?;
    if held.is_empty() {
        return Ok(());
    }
    let failed = matches!(
        state,
        RunState::Failed | RunState::ForceFailed | RunState::Interrupted | RunState::Skipped
    );
    if failed {
        let reason = format!(
            "upstream run {} of stack {} ended {}",
            run.id,
            run.stack,
            state.as_str()
        );
        for d in held {
            record(tx, &d, &run.id, Outcome::Failed, Some(reason.clone()))?;
        }
        return Ok(());
    }
    let changed = changed_outputs(tx, run)?;
    for d in held {
        let Some(stack) = load_run(tx, &d)?.map(|r| r.stack) else {
            continue;
        };
        let always =
            state == RunState::Finished && trigger_always(tx, &run.org, &stack, &run.stack)?;
        if changed.is_empty() && !always {
            record(tx, &d, &run.id, Outcome::Unchanged, None)?;
            continue;
        }
        let reason = if changed.is_empty() {
            format!(
                "run {} of upstream stack {} finished (trigger_always)",
                run.id, run.stack
            )
        } else {
            format!(
                "run {} of upstream stack {} changed outputs: {}",
                run.id,
                run.stack,
                changed.join(", ")
            )
        };
        record(tx, &d, &run.id, Outcome::Released, Some(reason))?;
    }
    Ok(())
}

/// Removes a held run that will never be needed; for the runs it holds in turn it counts
/// as an upstream that changed nothing.
fn remove_held(tx: &Transaction<'_>, id: &str) -> Result<()> {
    tx.prepare_cached("DELETE FROM run_phases WHERE run_id = ?1")?
        .execute([id])?;
    tx.prepare_cached("DELETE FROM run_holds WHERE run_id = ?1")?
        .execute([id])?;
    tx.prepare_cached("DELETE FROM runs WHERE id = ?1 AND held = 1")?
        .execute([id])?;
    for child in waiting_on(tx, id)? {
        record(tx, &child, id, Outcome::Unchanged, None)?;
    }
    Ok(())
}

/// Records the upstream outputs a run was given (once: later phases keep the first), and
/// the state versions they came from in `state_version_refs`, which retention keeps.
pub(super) fn set_consumed(tx: &Transaction<'_>, run: &str, consumed: &Value) -> Result<bool> {
    let n = tx
        .prepare_cached("UPDATE runs SET consumed = ?2 WHERE id = ?1 AND consumed IS NULL")?
        .execute(params![run, consumed.to_string()])?;
    if n == 1 {
        let mut insert = tx.prepare_cached(
            "INSERT OR IGNORE INTO state_version_refs (org_id, stack_id, version, run_id)
             SELECT org_id, ?2, ?3, id FROM runs WHERE id = ?1",
        )?;
        for c in consumed.as_array().into_iter().flatten() {
            if let (Some(stack), Some(version)) = (c["stack"].as_str(), c["version"].as_i64()) {
                insert.execute(params![run, stack, version])?;
            }
        }
    }
    Ok(n == 1)
}
