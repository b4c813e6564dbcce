//! Stack dependencies in the store (SPEC §2.7; one source for both backends, see `super::db`): the held runs a tracked upstream
//! run creates for its downstream stacks, and what happens to them when it ends —
//! released when its outputs changed (or the dependency says `trigger_always`), removed
//! when they did not, skipped when it failed. All of it inside the transaction that
//! creates or ends the upstream run, so no downstream run is lost or left waiting.

use std::collections::BTreeMap;

use bosun_core::outputs;
use bosun_core::run::{Event, RunKind, RunState, Trigger};
use bosun_core::state::Output;
use serde_json::Value;

use super::db::{self, params, OptionalExtension, Transaction};
use super::{apply_event, decode_outputs, insert_run, load_run, query_runs, RUN_COLUMNS};
use crate::{NewRun, Result, RunEventInput, RunRecord, RunUpdate, StoreError};

/// The id of the run `upstream` holds for `stack`: derived from both, so the same pair
/// always names the same run, in the format of every other run id.
fn held_run_id(upstream: &RunRecord, stack: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("{}\n{stack}", upstream.id).as_bytes());
    format!(
        "run-{:011x}{}",
        upstream.created_at.timestamp_millis(),
        hex::encode(&digest[..5])
    )
}

/// After a tracked run is inserted: one held run for each stack that depends on its
/// stack (and, through [`insert_run`], for theirs in turn — the graph is acyclic).
pub(super) fn hold_downstream(tx: &Transaction<'_>, upstream: &RunRecord) -> Result<()> {
    if upstream.kind != RunKind::Tracked {
        return Ok(());
    }
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
        let run = NewRun {
            id: held_run_id(upstream, &stack),
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
        insert_run(tx, &run, None)?;
        tx.prepare_cached(
            "UPDATE runs SET held = 1, needs_lease = 0, upstream_run = ?2, reason = ?3
             WHERE id = ?1",
        )?
        .execute(params![
            run.id,
            upstream.id,
            format!(
                "waiting for run {} of upstream stack {}",
                upstream.id, upstream.stack
            )
        ])?;
    }
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
fn changed_outputs(tx: &Transaction<'_>, run: &RunRecord) -> Result<Vec<String>> {
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

/// After `run` reached the terminal `state`: settles the runs it holds.
pub(super) fn upstream_ended(tx: &Transaction<'_>, run: &RunRecord, state: RunState) -> Result<()> {
    let held = query_runs(
        tx,
        &format!("SELECT {RUN_COLUMNS} FROM runs WHERE upstream_run = ?1 AND held = 1"),
        params![run.id],
    )?;
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
            tx.prepare_cached("UPDATE runs SET held = 0 WHERE id = ?1")?
                .execute([&d.id])?;
            let d = load_run(tx, &d.id)?.unwrap_or(d);
            let input = RunEventInput {
                event: Event::UpstreamFailed,
                fencing: None,
                update: RunUpdate {
                    reason: Some(reason.clone()),
                    ..Default::default()
                },
                audit: None,
            };
            apply_event(tx, &d, &input)?;
        }
        return Ok(());
    }
    let changed = changed_outputs(tx, run)?;
    for d in held {
        let always =
            state == RunState::Finished && trigger_always(tx, &d.org, &d.stack, &run.stack)?;
        if changed.is_empty() && !always {
            remove_held(tx, &d.id)?;
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
        tx.prepare_cached(
            "UPDATE runs SET held = 0, needs_lease = 1, reason = ?2 WHERE id = ?1 AND held = 1",
        )?
        .execute(params![d.id, reason])?;
    }
    Ok(())
}

/// Removes a held run that will never be needed, with the runs it holds in turn.
fn remove_held(tx: &Transaction<'_>, id: &str) -> Result<()> {
    let children: Vec<String> = {
        let mut stmt =
            tx.prepare_cached("SELECT id FROM runs WHERE upstream_run = ?1 AND held = 1")?;
        let rows = stmt.query_map([id], |r| r.get(0))?;
        rows.collect::<db::Result<_>>()?
    };
    for child in children {
        remove_held(tx, &child)?;
    }
    tx.prepare_cached("DELETE FROM run_phases WHERE run_id = ?1")?
        .execute([id])?;
    tx.prepare_cached("DELETE FROM runs WHERE id = ?1 AND held = 1")?
        .execute([id])?;
    Ok(())
}

/// Records the upstream outputs a run was given (once: later phases keep the first).
pub(super) fn set_consumed(tx: &Transaction<'_>, run: &str, consumed: &Value) -> Result<bool> {
    let n = tx
        .prepare_cached("UPDATE runs SET consumed = ?2 WHERE id = ?1 AND consumed IS NULL")?
        .execute(params![run, consumed.to_string()])?;
    Ok(n == 1)
}
