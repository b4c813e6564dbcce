//! Server-side bare mirrors of repositories, used to learn which files a push or pull
//! request changed from the commit range itself — not from the webhook's list, which
//! GitHub truncates at 20 commits and which says nothing useful about force pushes.
//!
//! One bare repository per remote URL under `<data-dir>/mirrors`, fetched incrementally,
//! one git process at a time per mirror. Credentials reach git through its environment
//! (`http.extraHeader`), never through arguments or the mirror's config.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use bosun_core::vcs::{is_sha, is_zero_sha};
use sha2::{Digest, Sha256};
use tokio::process::Command;
use tokio::sync::Mutex;

const GIT_TIMEOUT: Duration = Duration::from_secs(300);

/// The commit range whose changed files are wanted.
#[derive(Debug, Clone)]
pub enum Range {
    /// A push (or a poll) moving `branch` from `before` (all zeros: created) to `after`.
    Push {
        branch: String,
        before: String,
        after: String,
    },
    /// A pull request: from the merge base of `base` and `head` to `head`.
    PullRequest {
        number: i64,
        base_branch: String,
        base: String,
        head: String,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    #[error("git is not installed on the server")]
    NoGit,
    #[error("{0}")]
    Git(String),
    #[error("invalid commit id {0:?}")]
    BadSha(String),
}

/// The mirrors of one server.
pub struct Mirrors {
    root: PathBuf,
    locks: std::sync::Mutex<HashMap<PathBuf, Arc<Mutex<()>>>>,
}

impl Mirrors {
    pub fn new(root: PathBuf) -> Self {
        Mirrors {
            root,
            locks: std::sync::Mutex::new(HashMap::new()),
        }
    }

    fn dir_for(&self, url: &str) -> PathBuf {
        let digest = hex::encode(Sha256::digest(url.as_bytes()));
        self.root.join(format!("{}.git", &digest[..24]))
    }

    fn lock_for(&self, dir: &Path) -> Arc<Mutex<()>> {
        let mut locks = match self.locks.lock() {
            Ok(l) => l,
            Err(poisoned) => poisoned.into_inner(),
        };
        locks.entry(dir.to_path_buf()).or_default().clone()
    }

    /// Creates the bare mirror `git` works on, with `url` as its `origin`, unless it
    /// exists. Call with the mirror's lock held.
    async fn init_if_missing(&self, git: &Git<'_>, url: &str) -> Result<(), MirrorError> {
        if git.dir.join("HEAD").exists() {
            return Ok(());
        }
        // Clones of private repositories: the mirrors dir is the owner's only, like the
        // data dir it is in.
        let mut builder = tokio::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        builder.mode(0o700);
        builder
            .create(&self.root)
            .await
            .map_err(|e| MirrorError::Git(format!("cannot create {}: {e}", self.root.display())))?;
        git.run_in(
            &self.root,
            &["init", "--quiet", "--bare", &git.dir.to_string_lossy()],
        )
        .await?;
        git.run(&["config", "remote.origin.url", url]).await?;
        Ok(())
    }

    /// The files changed in `range` of the repository at `url`, sorted and unique (both
    /// sides of a rename). `token`: an installation token for HTTPS remotes.
    pub async fn changed_files(
        &self,
        url: &str,
        token: Option<&str>,
        range: &Range,
    ) -> Result<Vec<String>, MirrorError> {
        for sha in match range {
            Range::Push { before, after, .. } => [before, after],
            Range::PullRequest { base, head, .. } => [base, head],
        } {
            if !is_sha(sha) {
                return Err(MirrorError::BadSha(sha.clone()));
            }
        }
        let dir = self.dir_for(url);
        let lock = self.lock_for(&dir);
        let _held = lock.lock().await;
        let git = Git::new(&dir, token);
        self.init_if_missing(&git, url).await?;
        match range {
            Range::Push {
                branch,
                before,
                after,
            } => {
                git.fetch(&["+refs/heads/*:refs/heads/*"]).await?;
                git.ensure(after).await?;
                if is_zero_sha(before) {
                    // A new branch: the commits on it that no other branch has.
                    let mut args = vec![
                        "log".to_string(),
                        "--format=".into(),
                        "--name-only".into(),
                        "--no-renames".into(),
                        "--diff-merges=first-parent".into(),
                        after.clone(),
                    ];
                    let others = git.other_branches(branch).await?;
                    if !others.is_empty() {
                        args.push("--not".into());
                        args.extend(others);
                    }
                    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
                    return Ok(lines(&git.run(&refs).await?));
                }
                git.ensure(before).await?;
                let out = git
                    .run(&["diff", "--name-only", "--no-renames", before, after])
                    .await?;
                Ok(lines(&out))
            }
            Range::PullRequest {
                number,
                base_branch,
                base,
                head,
            } => {
                let pr_ref = format!("+refs/pull/{number}/head:refs/pull/{number}/head");
                let base_ref = format!("+refs/heads/{base_branch}:refs/heads/{base_branch}");
                // Not every server has pull request refs; the commits are asked for below.
                if git.fetch(&[&base_ref, &pr_ref]).await.is_err() {
                    git.fetch(&[&base_ref]).await?;
                }
                git.ensure(base).await?;
                git.ensure(head).await?;
                let merge_base = git.run(&["merge-base", base, head]).await?;
                let merge_base = merge_base.trim();
                let out = git
                    .run(&["diff", "--name-only", "--no-renames", merge_base, head])
                    .await?;
                Ok(lines(&out))
            }
        }
    }
}

fn lines(out: &str) -> Vec<String> {
    let mut files: Vec<String> = out
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect();
    files.sort();
    files.dedup();
    files
}

/// git commands against one mirror.
struct Git<'a> {
    dir: &'a Path,
    env: Vec<(String, String)>,
}

impl<'a> Git<'a> {
    fn new(dir: &'a Path, token: Option<&str>) -> Self {
        let mut env = vec![
            ("GIT_TERMINAL_PROMPT".to_string(), "0".to_string()),
            ("GIT_CONFIG_NOSYSTEM".into(), "1".into()),
            ("GIT_CONFIG_GLOBAL".into(), "/dev/null".into()),
            ("GIT_ASKPASS".into(), "/bin/false".into()),
            ("SSH_ASKPASS".into(), "/bin/false".into()),
        ];
        if let Some(token) = token {
            let basic =
                base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{token}"));
            env.push(("GIT_CONFIG_COUNT".into(), "1".into()));
            env.push(("GIT_CONFIG_KEY_0".into(), "http.extraHeader".into()));
            env.push((
                "GIT_CONFIG_VALUE_0".into(),
                format!("Authorization: Basic {basic}"),
            ));
        }
        Git { dir, env }
    }

    async fn run(&self, args: &[&str]) -> Result<String, MirrorError> {
        self.run_in(self.dir, args).await
    }

    async fn run_in(&self, cwd: &Path, args: &[&str]) -> Result<String, MirrorError> {
        let mut cmd = Command::new("git");
        cmd.args(args)
            .current_dir(cwd)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if cwd == self.dir {
            cmd.env("GIT_DIR", self.dir);
        }
        let child = cmd.spawn().map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                MirrorError::NoGit
            } else {
                MirrorError::Git(format!("cannot start git: {e}"))
            }
        })?;
        let out = tokio::time::timeout(GIT_TIMEOUT, child.wait_with_output())
            .await
            .map_err(|_| {
                MirrorError::Git(format!(
                    "git {} took longer than {}s",
                    args.first().unwrap_or(&""),
                    GIT_TIMEOUT.as_secs()
                ))
            })?
            .map_err(|e| MirrorError::Git(format!("git failed: {e}")))?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            return Err(MirrorError::Git(format!(
                "git {} failed: {}",
                args.first().unwrap_or(&""),
                stderr.trim().lines().last().unwrap_or("no output")
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    async fn fetch(&self, refspecs: &[&str]) -> Result<(), MirrorError> {
        let mut args = vec!["fetch", "--quiet", "--prune", "--no-tags", "origin"];
        args.extend_from_slice(refspecs);
        self.run(&args).await.map(|_| ())
    }

    /// Makes sure a commit is in the mirror, asking the remote for it by id if no
    /// fetched ref reaches it (a force-pushed-away `before`, say).
    async fn ensure(&self, sha: &str) -> Result<(), MirrorError> {
        let object = format!("{sha}^{{commit}}");
        if self.run(&["cat-file", "-e", &object]).await.is_ok() {
            return Ok(());
        }
        self.run(&["fetch", "--quiet", "--no-tags", "origin", sha])
            .await
            .map_err(|e| MirrorError::Git(format!("commit {sha} is not available: {e}")))?;
        self.run(&["cat-file", "-e", &object]).await.map(|_| ())
    }

    /// Every branch of the mirror except `branch`.
    async fn other_branches(&self, branch: &str) -> Result<Vec<String>, MirrorError> {
        let out = self
            .run(&["for-each-ref", "--format=%(refname)", "refs/heads/"])
            .await?;
        let own = format!("refs/heads/{branch}");
        Ok(out
            .lines()
            .map(str::trim)
            .filter(|r| !r.is_empty() && *r != own)
            .map(String::from)
            .collect())
    }
}

/// The head commit of `branch` at a remote (`git ls-remote`), for the poller.
pub async fn remote_head(url: &str, branch: &str) -> Result<Option<String>, MirrorError> {
    let tmp = std::env::temp_dir();
    let git = Git::new(&tmp, None);
    let full = format!("refs/heads/{branch}");
    let out = git
        .run_in(&tmp, &["ls-remote", "--heads", "--", url, &full])
        .await?;
    Ok(out.lines().find_map(|l| {
        let (sha, name) = l.split_once('\t')?;
        (name.trim() == full).then(|| sha.trim().to_string())
    }))
}
