//! State an engine could not write. The engine's http backend retries its state requests
//! for `RunnerConfig::state_retry_window` (`workspace::state_retry_env`); when the server
//! stays away longer, OpenTofu/Terraform give up and leave the state in `errored.tfstate`
//! in the module directory. The runner then delivers that file to the server as a
//! recovered version before it reports the phase, retrying until the server takes it, and
//! removes the workspace only after that. A workspace it could not deliver from is kept;
//! a runner starting on the same work dir delivers what such workspaces hold
//! (`settle_leftovers`), found through the lease note every workspace carries — and hands
//! back the leases of phases its earlier process left with nothing executing them.

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

    /// Writes the note into the workspace `root` (readable by the runner's user only) and
    /// returns it locked (`flock`): while the file stays open the workspace is this
    /// process's, and another runner process starting on the same work dir leaves it
    /// alone. The kernel drops the lock when the process ends, however it ends.
    pub(crate) async fn write(&self, root: &Path) -> std::io::Result<std::fs::File> {
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
            file.sync_all()?;
            lock(&file)?;
            Ok(file)
        })
        .await
        .map_err(std::io::Error::other)?
    }

    #[cfg(test)]
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

/// Takes the exclusive `flock` of a lease note without waiting: `WouldBlock` when a live
/// process holds it.
fn lock(file: &std::fs::File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd as _;
    // SAFETY: flock(2) on a descriptor this `File` owns; no memory is involved.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// A workspace a runner process that has ended left behind: it stopped mid-phase.
pub(crate) struct Leftover {
    root: PathBuf,
    note: LeaseNote,
    /// The note's lock, held while this process settles the workspace.
    _lock: std::fs::File,
}

/// The workspace's lease note, locked, unless a live process holds it.
async fn claim(root: &Path) -> Option<(LeaseNote, std::fs::File)> {
    let path = root.join(LEASE_NOTE_FILE);
    tokio::task::spawn_blocking(move || {
        let file = std::fs::File::open(&path).ok()?;
        lock(&file).ok()?;
        let note = serde_json::from_reader(&file).ok()?;
        Some((note, file))
    })
    .await
    .ok()
    .flatten()
}

/// The workspaces under `work_dir` that carry a lease note no live process holds (another
/// runner process on the same work dir keeps its own). Called before any worker starts,
/// so none of this process's own workspaces is among them.
pub(crate) async fn leftovers(work_dir: &Path) -> Vec<Leftover> {
    let Ok(mut entries) = tokio::fs::read_dir(work_dir).await else {
        return Vec::new();
    };
    let mut found = Vec::new();
    while let Ok(Some(entry)) = entries.next_entry().await {
        if !entry.file_type().await.is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let root = entry.path();
        if let Some((note, lock)) = claim(&root).await {
            found.push(Leftover {
                root,
                note,
                _lock: lock,
            });
        }
    }
    found.sort_by(|a, b| a.root.cmp(&b.root));
    found
}

/// Settles what an earlier process of this runner left in its work dir, then removes each
/// workspace it settled:
/// - a state its engine could not write (`errored.tfstate`) is delivered as a recovered
///   version;
/// - a phase nothing executes any more — no process works in its workspace (an engine
///   outlives its runner, in its own process group, and may still write its state) — is
///   handed back to the server (`abandon`: requeued if it never started, force-failed
///   otherwise), rather than left for the stale sweep;
/// - a workspace an engine still works in is settled once that engine has ended.
///
/// Stops trying when `stop` resolves: what is not settled stays on disk for the next
/// start.
pub(crate) async fn settle_leftovers(
    client: Arc<ServerClient>,
    found: Vec<Leftover>,
    runner_name: String,
    stop: impl Future<Output = ()>,
) {
    tokio::pin!(stop);
    let mut waiting = found;
    let mut logged = std::collections::HashSet::new();
    while !waiting.is_empty() {
        let mut busy_ones = Vec::new();
        for leftover in waiting {
            let Leftover { root, note, .. } = &leftover;
            // An engine the old process left may still be writing the state of what it
            // applied: wait for it, and settle what it leaves behind.
            if busy(root).await {
                if logged.insert(root.clone()) {
                    tracing::info!(
                        run = %note.run_id,
                        workspace = %root.display(),
                        "an engine of an earlier runner process still works here; waiting for it"
                    );
                }
                busy_ones.push(leftover);
                continue;
            }
            let settled = match errored_state(root, &note.path).await {
                Some(file) => deliver_leftover(&client, note, &file, &runner_name, &mut stop).await,
                None => abandon_leftover(&client, note, &mut stop).await,
            };
            match settled {
                Settled::Done => remove(root).await,
                Settled::Keep => {}
                Settled::Stop => return,
            }
        }
        waiting = busy_ones;
        if waiting.is_empty() {
            break;
        }
        tokio::select! {
            () = tokio::time::sleep(BUSY_POLL) => {}
            () = &mut stop => return,
        }
    }
}

/// How often a workspace an earlier process's engine still works in is looked at again.
const BUSY_POLL: std::time::Duration = std::time::Duration::from_secs(1);

enum Settled {
    /// Nothing of it is left to do: the workspace may go.
    Done,
    /// The workspace stays.
    Keep,
    /// The runner is stopping.
    Stop,
}

async fn deliver_leftover(
    client: &ServerClient,
    note: &LeaseNote,
    file: &Path,
    runner_name: &str,
    stop: impl Future<Output = ()>,
) -> Settled {
    tracing::warn!(
        run = %note.run_id,
        file = %file.display(),
        "found a state the engine could not write; delivering it to the server"
    );
    let reason = format!(
        "runner {runner_name} found the state the engine of run {}'s {} phase (fencing {}) \
         could not write to the server, and delivered it when the runner started again",
        note.run_id, note.phase, note.fencing
    );
    match deliver(client, note, file, &reason, stop).await {
        Ok(version) => {
            tracing::info!(
                run = %note.run_id,
                version = version.version,
                current = version.current,
                "recovered state delivered; removing its workspace"
            );
            Settled::Done
        }
        Err(ClientError::GaveUp) => Settled::Stop,
        Err(e) => {
            tracing::error!(
                run = %note.run_id,
                file = %file.display(),
                error = %e,
                "the server refused a recovered state; the workspace is kept"
            );
            Settled::Keep
        }
    }
}

async fn abandon_leftover(
    client: &ServerClient,
    note: &LeaseNote,
    stop: impl Future<Output = ()>,
) -> Settled {
    let handed_back = retry("handing back an abandoned lease", stop, || {
        client.abandon(&note.run_id, note.fencing)
    })
    .await;
    match handed_back {
        Ok(()) => {
            tracing::warn!(
                run = %note.run_id,
                phase = %note.phase,
                fencing = note.fencing,
                "handed back the lease an earlier process of this runner left unfinished"
            );
            Settled::Done
        }
        // The server settled it already (the stale sweep, another lease since), or the
        // run is gone: nothing is left to do.
        Err(ClientError::Fenced) => Settled::Done,
        Err(e) if e.status() == Some(reqwest::StatusCode::NOT_FOUND) => Settled::Done,
        Err(ClientError::GaveUp) => Settled::Stop,
        Err(e) => {
            tracing::error!(run = %note.run_id, error = %e, "cannot hand back an abandoned lease");
            Settled::Keep
        }
    }
}

/// Whether a process works in `root` (its working directory is in it).
async fn busy(root: &Path) -> bool {
    let root = root.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let Ok(procs) = std::fs::read_dir("/proc") else {
            return false;
        };
        procs.flatten().any(|p| {
            p.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
                && std::fs::read_link(p.path().join("cwd")).is_ok_and(|cwd| cwd.starts_with(&root))
        })
    })
    .await
    .unwrap_or(true)
}

async fn remove(root: &Path) {
    let removed = tokio::task::spawn_blocking({
        let root = root.to_path_buf();
        move || std::fs::remove_dir_all(root)
    })
    .await;
    if !matches!(removed, Ok(Ok(()))) {
        tracing::warn!(workspace = %root.display(), "cannot remove the workspace");
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
    async fn leftovers_are_the_workspaces_no_live_process_holds() {
        let work = tempfile::tempdir().unwrap();
        let lease = crate::test_support::plain_lease("https://git.example/r.git");
        let (mine, gone) = (work.path().join("a"), work.path().join("b"));
        std::fs::create_dir_all(&mine).unwrap();
        std::fs::create_dir_all(&gone).unwrap();
        std::fs::create_dir_all(work.path().join("no-note")).unwrap();
        let _held = LeaseNote::of(&lease).write(&mine).await.unwrap();
        drop(LeaseNote::of(&lease).write(&gone).await.unwrap());
        let found = leftovers(work.path()).await;
        let roots: Vec<_> = found.iter().map(|l| l.root.clone()).collect();
        assert_eq!(roots, vec![gone]);
    }

    #[tokio::test]
    async fn a_workspace_note_finds_its_errored_state() {
        let dir = tempfile::tempdir().unwrap();
        let lease = crate::test_support::plain_lease("https://git.example/r.git");
        let note = LeaseNote {
            path: "envs/prod".into(),
            ..LeaseNote::of(&lease)
        };
        let held = note.write(dir.path()).await.unwrap();
        assert_eq!(LeaseNote::read(dir.path()).await, Some(note.clone()));
        // Held by a live owner: not a leftover; once the owner is gone, it is.
        assert!(claim(dir.path()).await.is_none(), "the owner holds it");
        drop(held);
        let (claimed, _lock) = claim(dir.path())
            .await
            .expect("free once the owner is gone");
        assert_eq!(claimed, note);
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
