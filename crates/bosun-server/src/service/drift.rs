//! What drift means for one run, as the API shows it: a drift run's result and the
//! reconcile run it started, or the drift run a reconcile run came from.

use bosun_api::RunDrift;
use bosun_core::drift::{result_of, DriftResult};
use bosun_core::run::{RunKind, Trigger};
use bosun_store::{DriftCheckRecord, RunRecord};

use crate::app::AppState;
use crate::error::ApiError;

fn plan_changes(run: &RunRecord) -> Option<bool> {
    run.plan_summary
        .as_ref()
        .and_then(|p| p.get("has_changes"))
        .and_then(|v| v.as_bool())
}

/// A drift run's result as it stands.
pub fn result(run: &RunRecord) -> DriftResult {
    result_of(run.state, plan_changes(run))
}

/// The drift fields of a run on the wire: a drift run's outcome, or the drift run a
/// reconcile run came from.
pub async fn run_fields(
    state: &AppState,
    run: &RunRecord,
) -> Result<(Option<RunDrift>, Option<String>), ApiError> {
    let check = match (run.kind, run.trigger) {
        (RunKind::Drift, _) | (RunKind::Tracked, Trigger::Schedule) => {
            state.store.drift_check(&run.id).await?
        }
        _ => None,
    };
    Ok(run_fields_of(run, check))
}

/// [`run_fields`] from the drift check already read with the run (its context's).
pub fn run_fields_of(
    run: &RunRecord,
    check: Option<DriftCheckRecord>,
) -> (Option<RunDrift>, Option<String>) {
    match (run.kind, run.trigger) {
        (RunKind::Drift, _) => (
            Some(RunDrift {
                result: result(run).as_str().to_string(),
                reconcile_run: check.and_then(|c| c.reconcile_run),
            }),
            None,
        ),
        (RunKind::Tracked, Trigger::Schedule) => (
            None,
            check
                .filter(|c| c.reconcile_run.as_deref() == Some(&run.id))
                .map(|c| c.run),
        ),
        _ => (None, None),
    }
}
