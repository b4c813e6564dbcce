//! How a run reaches its code: for a `github:` stack, the repository's HTTPS address and
//! an installation token minted for that one run and repository (`contents: read`),
//! remembered so it is revoked when the run ends; plain git remotes need nothing.

use std::time::Duration;

use bosun_core::run::Trigger;
use bosun_core::stack::{Repository, StackSpec};
use bosun_store::{RunRecord, VcsTokenRecord};
use chrono::Utc;

use crate::app::AppState;
use crate::error::ApiError;

/// The clone address and credential handed to a run's runner.
#[derive(Debug, Default)]
pub struct Source {
    pub clone_url: Option<String>,
    pub clone_token: Option<String>,
}

/// The source of a leased run. `Ok(Err(reason))`: the run cannot reach its code and
/// fails with that reason (the engine never starts).
pub async fn for_run(
    state: &AppState,
    run: &RunRecord,
    spec: &StackSpec,
) -> Result<Result<Source, String>, ApiError> {
    let Repository::GitHub { .. } = &spec.repository else {
        return Ok(Ok(Source::default()));
    };
    let full = spec.repository.github_full_name().unwrap_or_default();
    let github = &state.vcs.github;
    if !github.app_configured() {
        return Ok(Err(format!(
            "cannot clone github:{full}: the GitHub App is not configured on this server"
        )));
    }
    let mut binding = super::binding(state, &spec.repository).await?;
    // A stack created before the App was installed heals on a manual run or a retry:
    // ask GitHub once before giving up.
    if binding.is_none() && matches!(run.trigger, Trigger::Manual | Trigger::Retry) {
        match super::resolve_binding(state, &full).await {
            Ok(b) => binding = b.filter(|b| !b.suspended),
            Err(e) => {
                return Ok(Err(format!(
                    "repository github:{full} is not connected, and asking GitHub failed: {e}"
                )))
            }
        }
    }
    let Some(binding) = binding else {
        return Ok(Err(format!(
            "repository github:{full} is not connected: the GitHub App is not installed on it (or its installation is suspended); install it, then retry the run"
        )));
    };
    let token = match github.installation_token(binding.installation, &full).await {
        Ok(t) => t,
        Err(e) => {
            return Ok(Err(format!(
                "cannot get a token to clone github:{full}: {e}"
            )))
        }
    };
    state
        .store
        .add_vcs_token(&VcsTokenRecord {
            run_id: run.id.clone(),
            token: token.token.clone(),
            expires_at: token.expires_at,
        })
        .await?;
    Ok(Ok(Source {
        clone_url: Some(github.clone_url(&full)),
        clone_token: Some(token.token),
    }))
}

/// Revokes the tokens of ended runs, about once a second; a token GitHub could not be
/// reached to revoke is tried again on the next pass, until it expires on its own.
pub fn revoke_duty() -> crate::duties::Duty {
    crate::duties::Duty::new("vcs_token_revoke", Some(Duration::from_secs(1)), |state| {
        let state = state.clone();
        Box::pin(async move {
            revoke_once(&state).await?;
            Ok(None)
        })
    })
}

/// One pass: returns how many tokens it revoked or dropped.
pub async fn revoke_once(state: &AppState) -> Result<usize, ApiError> {
    let mut done = 0;
    for t in state.store.vcs_tokens_due().await? {
        if t.expires_at > Utc::now() {
            if let Err(e) = state.vcs.github.revoke(&t.token).await {
                tracing::warn!(run = %t.run_id, error = %e, "could not revoke a run's installation token; will retry");
                continue;
            }
        }
        state.store.remove_vcs_token(&t.token).await?;
        done += 1;
    }
    Ok(done)
}
