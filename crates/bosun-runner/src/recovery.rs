//! State an engine could not write. The engine's http backend retries its state requests
//! for `RunnerConfig::state_retry_window` (`workspace::state_retry_env`); when the server
//! stays away longer, OpenTofu/Terraform give up and leave the state in `errored.tfstate`
//! in the module directory. The runner then delivers that file to the server as a
//! recovered version before it reports the phase, retrying until the server takes it, and
//! removes the workspace only after that. A workspace it could not deliver from is kept;
//! a runner starting on the same work dir delivers what such workspaces hold
//! (`deliver_leftovers`), found through the lease note every workspace carries.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bosun_api::{Lease, StateVersion};
use serde::{Deserialize, Serialize};

use crate::client::{retry, ClientError, ServerClient};
use crate::workspace::module_dir;

/// The file OpenTofu and Terraform write the state to when the backend refused it, in the
/// directory they ran in.
pub(crate) const ERRORED_STATE_FILE: &str = "errored.tfstate";
/// Which lease a workspace belongs to, in its root.
pub(crate) const LEASE_NOTE_FILE: &str = "bosun-lease.json";
/// The longest reason the server keeps with a recovered version.
const MAX_REASON_CHARS: usize = 500;

/// What a workspace remembers of its lease: enough to deliver its errored state later.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct LeaseNote {
    pub(crate) run_id: String,
    pub(crate) org: String,
    pub(crate) stack: String,
    pub(crate) phase: String,
    pub(crate) fencing: i64,
    /// The stack's path in the repository: the module directory under `src/`.
    pub(crate) path: String,
}

impl LeaseNote {
    pub(crate) fn of(lease: &Lease) -> Self {
        LeaseNote {
            run_id: lease.run_id.clone(),
            org: lease.org.clone(),
            stack: lease.stack.clone(),
            phase: lease.phase.clone(),
            fencing: lease.fencing,
            path: lease.path.clone(),
        }
    }

    /// Writes the note into the workspace `root` (readable by the runner's user only).
    pub(crate) async fn write(&self, root: &Path) -> std::io::Result<()> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let text = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        let path = root.join(LEASE_NOTE_FILE);
        tokio::task::spawn_blocking(move || {
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&path)?;
            file.write_all(&text)?;
            file.sync_all()
        })
        .await
        .map_err(std::io::Error::other)?
    }

    async fn read(root: &Path) -> Option<LeaseNote> {
        let text = tokio::fs::read(root.join(LEASE_NOTE_FILE)).await.ok()?;
        serde_json::from_slice(&text).ok()
    }
}

/// The errored state the engine left in the workspace `root`'s module directory, if any.
pub(crate) async fn errored_state(root: &Path, stack_path: &str) -> Option<PathBuf> {
    let module = module_dir(&root.join("src"), stack_path).ok()?;
    let file = module.join(ERRORED_STATE_FILE);
    let meta = tokio::fs::symlink_metadata(&file).await.ok()?;
    meta.is_file().then_some(file)
}

/// Delivers the state in `file` for the lease in `note` as a recovered version, retrying
/// what may succeed later until `give_up` resolves.
pub(crate) async fn deliver(
    client: &ServerClient,
    note: &LeaseNote,
    file: &Path,
    reason: &str,
    give_up: impl Future<Output = ()>,
) -> Result<StateVersion, ClientError> {
    let state = tokio::fs::read(file)
        .await
        .map_err(|e| ClientError::Protocol(format!("cannot read {}: {e}", file.display())))?;
    let reason = short_reason(reason);
    retry("delivering a recovered state", give_up, || {
        client.put_recovered_state(&note.run_id, note.fencing, &reason, state.clone())
    })
    .await
}

/// `reason` on one line, within what the server keeps.
fn short_reason(reason: &str) -> String {
    let one_line: String = reason.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut short: String = one_line.chars().take(MAX_REASON_CHARS).collect();
    if short.chars().count() < one_line.chars().count() {
        short.pop();
        short.push('…');
    }
    if short.is_empty() {
        short.push_str("the engine could not write the state");
    }
    short
}

/// What a recovered version's answer says, for the phase's log.
pub(crate) fn describe(version: &StateVersion) -> String {
    if version.current {
        format!(
            "bosun: the state the engine could not write is stored as version {} (recovered), \
             the stack's current state",
            version.version
        )
    } else {
        format!(
            "bosun: the state the engine could not write is stored as version {} (recovered), \
             kept beside the current state: another writer holds the lock or wrote a newer \
             serial since",
            version.version
        )
    }
}

/// Delivers the errored state of every workspace under `work_dir` that a runner left
/// behind (it stopped before the server took it), then removes that workspace; a
/// workspace without one is left alone. Stops trying when `stop` resolves: what is not
/// delivered stays on disk for the next start.
pub(crate) async fn deliver_leftovers(
    client: Arc<ServerClient>,
    work_dir: PathBuf,
    runner_name: String,
    stop: impl Future<Output = ()>,
) {
    tokio::pin!(stop);
    let Ok(mut entries) = tokio::fs::read_dir(&work_dir).await else {
        return;
    };
    let mut roots = Vec::new();
    while let Ok(Some(entry)) = entries.next_entry().await {
        if entry.file_type().await.is_ok_and(|t| t.is_dir()) {
            roots.push(entry.path());
        }
    }
    roots.sort();
    for root in roots {
        let Some(note) = LeaseNote::read(&root).await else {
            continue;
        };
        let Some(file) = errored_state(&root, &note.path).await else {
            continue;
        };
        tracing::warn!(
            run = %note.run_id,
            workspace = %root.display(),
            "found a state the engine could not write; delivering it to the server"
        );
        let reason = format!(
            "runner {runner_name} found the state the engine of run {}'s {} phase (fencing {}) \
             could not write to the server, and delivered it when the runner started again",
            note.run_id, note.phase, note.fencing
        );
        match deliver(&client, &note, &file, &reason, &mut stop).await {
            Ok(version) => {
                tracing::info!(
                    run = %note.run_id,
                    version = version.version,
                    current = version.current,
                    "recovered state delivered; removing its workspace"
                );
                let removed = tokio::task::spawn_blocking({
                    let root = root.clone();
                    move || std::fs::remove_dir_all(root)
                })
                .await;
                if !matches!(removed, Ok(Ok(()))) {
                    tracing::warn!(workspace = %root.display(), "cannot remove the workspace");
                }
            }
            Err(ClientError::GaveUp) => return,
            Err(e) => tracing::error!(
                run = %note.run_id,
                workspace = %root.display(),
                error = %e,
                "the server refused a recovered state; the workspace is kept"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_one_short_line() {
        assert_eq!(short_reason("  a\n b\tc "), "a b c");
        assert_eq!(short_reason(""), "the engine could not write the state");
        let long = short_reason(&"x ".repeat(1000));
        assert_eq!(long.chars().count(), MAX_REASON_CHARS);
        assert!(long.ends_with('…'));
    }

    #[tokio::test]
    async fn a_workspace_note_finds_its_errored_state() {
        let dir = tempfile::tempdir().unwrap();
        let lease = crate::test_support::plain_lease("https://git.example/r.git");
        let note = LeaseNote {
            path: "envs/prod".into(),
            ..LeaseNote::of(&lease)
        };
        note.write(dir.path()).await.unwrap();
        assert_eq!(LeaseNote::read(dir.path()).await, Some(note.clone()));
        assert_eq!(errored_state(dir.path(), &note.path).await, None);
        let module = dir.path().join("src/envs/prod");
        std::fs::create_dir_all(&module).unwrap();
        std::fs::write(module.join(ERRORED_STATE_FILE), b"{}").unwrap();
        assert_eq!(
            errored_state(dir.path(), &note.path).await,
            Some(module.join(ERRORED_STATE_FILE))
        );
        // A path that leaves the checkout finds nothing.
        assert_eq!(errored_state(dir.path(), "../x").await, None);
    }
}
