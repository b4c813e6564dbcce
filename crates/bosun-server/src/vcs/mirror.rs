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
use tokio::io::AsyncWriteExt as _;
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
    /// A repository URL, branch name or folder path that is refused before git runs.
    #[error("{0}")]
    BadInput(String),
    /// The branch or the folder does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The folder holds something unusable: too many or too big files, not UTF-8, or it
    /// is not a folder.
    #[error("{0}")]
    Content(String),
}

/// Bounds on what [`Mirrors::files_at`] reads. Going over one is an error, never a
/// silent truncation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileLimits {
    /// The most `.rego` files the folder may hold.
    pub max_files: usize,
    /// The largest one `.rego` file may be, in bytes.
    pub max_file_bytes: u64,
}

/// The `.rego` files of a folder at the head of a branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The commit `refs/heads/<branch>` pointed at after the fetch.
    pub commit: String,
    /// `(file name relative to the folder, content)`, sorted by name.
    pub files: Vec<(String, String)>,
}

/// What a branch's folder is called in messages: `"policies"`, or `"."` for the root.
fn folder_name(folder: &str) -> String {
    if folder.is_empty() {
        "\".\"".into()
    } else {
        format!("{folder:?}")
    }
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

    /// The `.rego` files directly under `path` (not in its subfolders; `""` or `"."`:
    /// the root) at the head of `branch` of the repository at `url`, after fetching it.
    /// Only regular files count: symlinks and submodules are skipped. `token`: an
    /// installation token for HTTPS remotes.
    ///
    /// The caller decides which URLs are acceptable: this reads whatever git can fetch,
    /// `file://` URLs and local paths included.
    pub async fn files_at(
        &self,
        url: &str,
        token: Option<&str>,
        branch: &str,
        path: &str,
        limits: &FileLimits,
    ) -> Result<Snapshot, MirrorError> {
        check_url(url)?;
        check_branch(branch)?;
        let folder = normalize_folder(path)?;
        let shown = redact(url);
        let dir = self.dir_for(url);
        let lock = self.lock_for(&dir);
        let _held = lock.lock().await;
        let git = Git::new(&dir, token);
        self.init_if_missing(&git, url).await?;
        git.fetch(&["+refs/heads/*:refs/heads/*"])
            .await
            .map_err(|e| match e {
                MirrorError::Git(m) => MirrorError::Git(format!("cannot fetch {shown}: {m}")),
                e => e,
            })?;

        // The branch's commit. The ref name is a pattern here, and the ref check above
        // left it no glob characters; the exact match is picked from the output.
        let full = format!("refs/heads/{branch}");
        let out = git
            .run(&[
                "for-each-ref",
                "--format=%(objectname) %(objecttype) %(refname)",
                &full,
            ])
            .await?;
        let Some((commit, kind)) = out.lines().find_map(|l| {
            let mut parts = l.splitn(3, ' ');
            let (sha, kind, name) = (parts.next()?, parts.next()?, parts.next()?);
            (name == full).then(|| (sha.to_string(), kind.to_string()))
        }) else {
            return Err(MirrorError::NotFound(format!(
                "branch {branch:?} does not exist in {shown}"
            )));
        };
        if kind != "commit" || !is_sha(&commit) {
            return Err(MirrorError::Content(format!(
                "branch {branch:?} of {shown} points at a {kind}, not a commit"
            )));
        }

        // The folder's tree. The object name goes through stdin, so no part of the path
        // can be read as an option or a pathspec.
        let object = if folder.is_empty() {
            format!("{commit}^{{tree}}")
        } else {
            format!("{commit}:{folder}")
        };
        let out = git
            .run_bytes(
                &["cat-file", "--batch-check"],
                Some(format!("{object}\n").as_bytes()),
            )
            .await?;
        let out = String::from_utf8_lossy(&out);
        let line = out.lines().next().unwrap_or("");
        let mut parts = line.split(' ');
        let tree = match (parts.next(), parts.next()) {
            (Some(sha), Some("tree")) if is_sha(sha) => sha.to_string(),
            (Some(sha), Some(kind)) if is_sha(sha) => {
                let kind = match kind {
                    "blob" => "file",
                    "commit" => "submodule",
                    other => other,
                };
                return Err(MirrorError::Content(format!(
                    "branch {branch:?} of {shown}: {} is a {kind}, not a folder",
                    folder_name(&folder)
                )));
            }
            _ => {
                return Err(MirrorError::NotFound(format!(
                    "branch {branch:?} of {shown} has no folder {}",
                    folder_name(&folder)
                )))
            }
        };

        // Its regular `.rego` files, with their sizes, before reading any of them.
        let listing = git.run_bytes(&["ls-tree", "-z", "-l", &tree], None).await?;
        let mut entries: Vec<(String, String, u64)> = Vec::new(); // (name, blob, size)
        for record in listing.split(|b| *b == 0).filter(|r| !r.is_empty()) {
            let Some(tab) = record.iter().position(|b| *b == b'\t') else {
                return Err(MirrorError::Git(format!(
                    "unexpected git ls-tree output for {shown}"
                )));
            };
            let (meta, name) = (&record[..tab], &record[tab + 1..]);
            let meta = String::from_utf8_lossy(meta);
            let mut meta = meta.split_whitespace();
            let (Some(mode), Some(kind), Some(blob), Some(size)) =
                (meta.next(), meta.next(), meta.next(), meta.next())
            else {
                return Err(MirrorError::Git(format!(
                    "unexpected git ls-tree output for {shown}"
                )));
            };
            if kind != "blob" || !(mode == "100644" || mode == "100755") {
                continue;
            }
            if !name.ends_with(b".rego") {
                continue;
            }
            let file = file_path(&folder, &String::from_utf8_lossy(name));
            let Ok(name) = String::from_utf8(name.to_vec()) else {
                return Err(MirrorError::Content(format!(
                    "the name of {file:?} on branch {branch:?} of {shown} is not UTF-8"
                )));
            };
            let size: u64 = size.parse().map_err(|_| {
                MirrorError::Git(format!("unexpected git ls-tree output for {shown}"))
            })?;
            entries.push((name, blob.to_string(), size));
        }
        entries.sort();
        if entries.len() > limits.max_files {
            return Err(MirrorError::Content(format!(
                "folder {} on branch {branch:?} of {shown} holds {} .rego files, more than the \
                 limit of {}",
                folder_name(&folder),
                entries.len(),
                limits.max_files
            )));
        }
        if let Some((name, _, size)) = entries.iter().find(|(_, _, s)| *s > limits.max_file_bytes) {
            return Err(MirrorError::Content(format!(
                "{:?} on branch {branch:?} of {shown} is {size} bytes, more than the limit of {}",
                file_path(&folder, name),
                limits.max_file_bytes
            )));
        }

        // Their contents, all through one `git cat-file --batch`.
        let mut files = Vec::with_capacity(entries.len());
        if !entries.is_empty() {
            let input: String = entries
                .iter()
                .map(|(_, blob, _)| format!("{blob}\n"))
                .collect();
            let out = git
                .run_bytes(&["cat-file", "--batch"], Some(input.as_bytes()))
                .await?;
            let mut rest = &out[..];
            for (name, blob, size) in &entries {
                let file = file_path(&folder, name);
                let (content, after) = batch_blob(rest, blob, *size).ok_or_else(|| {
                    MirrorError::Git(format!(
                        "git cat-file could not read {file:?} on branch {branch:?} of {shown}"
                    ))
                })?;
                rest = after;
                let content = String::from_utf8(content.to_vec()).map_err(|_| {
                    MirrorError::Content(format!(
                        "{file:?} on branch {branch:?} of {shown} is not UTF-8 text"
                    ))
                })?;
                files.push((name.clone(), content));
            }
        }
        Ok(Snapshot { commit, files })
    }
}

/// One object of `git cat-file --batch` output at the start of `out`: its content and
/// what follows it, if it is `blob` with `size` bytes.
fn batch_blob<'o>(out: &'o [u8], blob: &str, size: u64) -> Option<(&'o [u8], &'o [u8])> {
    let nl = out.iter().position(|b| *b == b'\n')?;
    let header = std::str::from_utf8(&out[..nl]).ok()?;
    if header != format!("{blob} blob {size}") {
        return None;
    }
    let size = usize::try_from(size).ok()?;
    let body = out.get(nl + 1..)?;
    let content = body.get(..size)?;
    let rest = body.get(size..)?.strip_prefix(b"\n")?;
    Some((content, rest))
}

/// `name` in `folder`, for messages.
fn file_path(folder: &str, name: &str) -> String {
    if folder.is_empty() {
        name.to_string()
    } else {
        format!("{folder}/{name}")
    }
}

/// `url` with the password of any `user:password@` in it replaced, for messages.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_string();
    };
    match rest[..at].split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***{}", &rest[at..]),
        None => url.to_string(),
    }
}

fn check_url(url: &str) -> Result<(), MirrorError> {
    let bad = |why: &str| {
        Err(MirrorError::BadInput(format!(
            "invalid repository URL {:?}: {why}",
            redact(url)
        )))
    };
    if url.trim().is_empty() {
        return bad("it is empty");
    }
    if url.starts_with('-') {
        return bad("it must not start with \"-\"");
    }
    if url.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return bad("it must not contain spaces or control characters");
    }
    Ok(())
}

/// Refuses branch names git would not take, or could read as something else: the rules
/// of `git check-ref-format`, plus no leading `-` and at most 255 bytes.
fn check_branch(branch: &str) -> Result<(), MirrorError> {
    let bad = |why: &str| {
        Err(MirrorError::BadInput(format!(
            "invalid branch name {branch:?}: {why}"
        )))
    };
    if branch.is_empty() {
        return bad("it is empty");
    }
    if branch.len() > 255 {
        return bad("it is longer than 255 bytes");
    }
    if branch.starts_with('-') {
        return bad("it must not start with \"-\"");
    }
    if branch.contains("..") {
        return bad("it must not contain \"..\"");
    }
    if branch.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return bad("it must not contain spaces or control characters");
    }
    if let Some(c) = branch.chars().find(|c| "~^:?*[\\".contains(*c)) {
        return bad(&format!("it must not contain {c:?}"));
    }
    if branch == "@" || branch.contains("@{") {
        return bad("it must not be \"@\" or contain \"@{\"");
    }
    if branch.starts_with('/') || branch.ends_with('/') || branch.contains("//") {
        return bad("it must not start or end with \"/\" or contain \"//\"");
    }
    if branch.ends_with('.') {
        return bad("it must not end with \".\"");
    }
    if branch
        .split('/')
        .any(|part| part.starts_with('.') || part.ends_with(".lock"))
    {
        return bad("no part of it may start with \".\" or end with \".lock\"");
    }
    Ok(())
}

/// The folder `path` names, as git writes paths: `""` for the root, no `.` parts, no
/// trailing slash. Refuses absolute paths, `..` parts, a leading `-` and control
/// characters.
fn normalize_folder(path: &str) -> Result<String, MirrorError> {
    let bad = |why: &str| {
        Err(MirrorError::BadInput(format!(
            "invalid folder path {path:?}: {why}"
        )))
    };
    if path.len() > 1024 {
        return bad("it is longer than 1024 bytes");
    }
    if path.starts_with('/') {
        return bad("it must be relative to the repository root");
    }
    if path.starts_with('-') {
        return bad("it must not start with \"-\"");
    }
    if path.chars().any(char::is_control) {
        return bad("it must not contain control characters");
    }
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => return bad("it must not contain \"..\" parts"),
            part => parts.push(part),
        }
    }
    Ok(parts.join("/"))
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
        let out = self.exec(cwd, args, None).await?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// Runs git in the mirror with `input` on its stdin; returns stdout as is.
    async fn run_bytes(&self, args: &[&str], input: Option<&[u8]>) -> Result<Vec<u8>, MirrorError> {
        self.exec(self.dir, args, input).await
    }

    async fn exec(
        &self,
        cwd: &Path,
        args: &[&str],
        input: Option<&[u8]>,
    ) -> Result<Vec<u8>, MirrorError> {
        let mut cmd = Command::new("git");
        cmd.args(args)
            .current_dir(cwd)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if cwd == self.dir {
            cmd.env("GIT_DIR", self.dir);
        }
        let mut child = cmd.spawn().map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                MirrorError::NoGit
            } else {
                MirrorError::Git(format!("cannot start git: {e}"))
            }
        })?;
        // stdin is written while stdout is read: git may answer before it has read it all.
        let stdin = child.stdin.take();
        let feed = async move {
            if let (Some(mut stdin), Some(input)) = (stdin, input) {
                // A git that stops reading early fails on its own; its status tells.
                let _ = stdin.write_all(input).await;
            }
        };
        let run = async {
            let ((), out) = tokio::join!(feed, child.wait_with_output());
            out
        };
        let out = tokio::time::timeout(GIT_TIMEOUT, run)
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
        Ok(out.stdout)
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

#[cfg(test)]
mod tests {
    use super::*;
    use bosun_testkit::{BareRepo, WorkTree};

    const LIMITS: FileLimits = FileLimits {
        max_files: 10,
        max_file_bytes: 1024,
    };

    struct Setup {
        _tmp: tempfile::TempDir,
        repo: BareRepo,
        work: WorkTree,
        mirrors: Mirrors,
    }

    impl Setup {
        fn new() -> Setup {
            let tmp = tempfile::tempdir().unwrap();
            let repos = tmp.path().join("repos");
            std::fs::create_dir_all(&repos).unwrap();
            let repo = BareRepo::create(&repos, "acme/policies");
            let work = repo.work_tree();
            let mirrors = Mirrors::new(tmp.path().join("mirrors"));
            Setup {
                _tmp: tmp,
                repo,
                work,
                mirrors,
            }
        }

        fn url(&self) -> String {
            self.repo.file_url()
        }

        async fn files_at(
            &self,
            branch: &str,
            path: &str,
            limits: &FileLimits,
        ) -> Result<Snapshot, MirrorError> {
            self.mirrors
                .files_at(&self.url(), None, branch, path, limits)
                .await
        }

        async fn error(&self, branch: &str, path: &str, limits: &FileLimits) -> MirrorError {
            match self.files_at(branch, path, limits).await {
                Ok(s) => panic!("expected an error for {branch:?} {path:?}, got {s:?}"),
                Err(e) => e,
            }
        }
    }

    fn names(s: &Snapshot) -> Vec<&str> {
        s.files.iter().map(|(n, _)| n.as_str()).collect()
    }

    #[tokio::test]
    async fn reads_the_rego_files_of_a_folder_at_the_branch_head() {
        let t = Setup::new();
        t.work.commit(
            &[
                ("root.rego", "package root\n"),
                ("policies/b.rego", "package b\n"),
                ("policies/a.rego", "package a\n"),
                ("policies/a_test.rego", "package a_test\n"),
                ("policies/README.md", "# not a policy\n"),
                ("policies/nested/c.rego", "package nested\n"),
                (
                    "policies/nested.rego/x.txt",
                    "a folder named like a policy\n",
                ),
            ],
            "policies",
        );
        // A symlink and a submodule named like policies are not regular files.
        #[cfg(unix)]
        std::os::unix::fs::symlink("a.rego", t.work.path().join("policies/link.rego")).unwrap();
        let other = t.work.commit(&[], "a symlink");
        // (`WorkTree::commit` stages with `add -A`, which would drop the gitlink.)
        t.work.git(&[
            "update-index",
            "--add",
            "--cacheinfo",
            &format!("160000,{other},policies/sub.rego"),
        ]);
        t.work.git(&["commit", "-q", "-m", "a submodule"]);
        let first = t.work.rev_parse("HEAD");
        t.work.push("main");
        let tree = t.work.git(&["ls-tree", "HEAD:policies"]);
        assert!(
            tree.contains("120000 blob") && tree.contains("160000 commit"),
            "{tree}"
        );

        let snap = t.files_at("main", "policies", &LIMITS).await.unwrap();
        assert_eq!(snap.commit, first);
        assert_eq!(
            snap.files,
            [
                ("a.rego".to_string(), "package a\n".to_string()),
                ("a_test.rego".into(), "package a_test\n".into()),
                ("b.rego".into(), "package b\n".into()),
            ]
        );
        // The same folder, however it is written.
        for path in ["policies/", "./policies", "policies//", "./policies/."] {
            assert_eq!(
                t.files_at("main", path, &LIMITS).await.unwrap(),
                snap,
                "{path}"
            );
        }
        // The root.
        for path in ["", ".", "./"] {
            let root = t.files_at("main", path, &LIMITS).await.unwrap();
            assert_eq!(names(&root), ["root.rego"], "{path:?}");
        }
        assert_eq!(
            names(
                &t.files_at("main", "policies/nested", &LIMITS)
                    .await
                    .unwrap()
            ),
            ["c.rego"]
        );

        // A new commit on the branch is picked up by the next call.
        t.work.delete("policies/b.rego");
        let second = t.work.commit(
            &[
                ("policies/a.rego", "package a\n\ndeny contains \"x\"\n"),
                ("policies/d.rego", "package d\n"),
            ],
            "a changes, b goes, d comes",
        );
        t.work.push("main");
        let snap = t.files_at("main", "policies", &LIMITS).await.unwrap();
        assert_ne!(second, first);
        assert_eq!(snap.commit, second);
        assert_eq!(names(&snap), ["a.rego", "a_test.rego", "d.rego"]);
        assert_eq!(snap.files[0].1, "package a\n\ndeny contains \"x\"\n");

        // Another branch of the same mirror.
        t.work.checkout_new_branch("release/1");
        let release = t
            .work
            .commit(&[("policies/a.rego", "package release\n")], "release");
        t.work.push("release/1");
        let snap = t.files_at("release/1", "policies", &LIMITS).await.unwrap();
        assert_eq!(snap.commit, release);
        assert_eq!(snap.files[0].1, "package release\n");
        // main did not move.
        let snap = t.files_at("main", "policies", &LIMITS).await.unwrap();
        assert_eq!(snap.commit, second);

        // A folder with no policies is an empty snapshot, not an error.
        let snap = t
            .files_at("main", "policies/nested.rego", &LIMITS)
            .await
            .unwrap();
        assert_eq!(snap.files, []);
    }

    #[tokio::test]
    async fn a_missing_branch_or_folder_is_named() {
        let t = Setup::new();
        t.work
            .commit(&[("policies/a.rego", "package a\n")], "policies");
        t.work.push("main");
        let url = t.url();

        let e = t.error("nope", "policies", &LIMITS).await;
        assert!(matches!(e, MirrorError::NotFound(_)), "{e:?}");
        assert_eq!(
            e.to_string(),
            format!("branch \"nope\" does not exist in {url}")
        );
        // A branch is not matched by its prefix or by a longer name.
        let e = t.error("mai", "policies", &LIMITS).await;
        assert!(matches!(e, MirrorError::NotFound(_)), "{e:?}");

        let e = t.error("main", "rules", &LIMITS).await;
        assert!(matches!(e, MirrorError::NotFound(_)), "{e:?}");
        assert_eq!(
            e.to_string(),
            format!("branch \"main\" of {url} has no folder \"rules\"")
        );
        let e = t.error("main", "policies/a.rego", &LIMITS).await;
        assert!(matches!(e, MirrorError::Content(_)), "{e:?}");
        assert_eq!(
            e.to_string(),
            format!("branch \"main\" of {url}: \"policies/a.rego\" is a file, not a folder")
        );

        // A branch deleted on the remote is gone from the mirror on the next call.
        t.work.checkout_new_branch("short-lived");
        t.work.push("short-lived");
        assert!(t.files_at("short-lived", "policies", &LIMITS).await.is_ok());
        t.work.delete_remote_branch("short-lived");
        let e = t.error("short-lived", "policies", &LIMITS).await;
        assert!(matches!(e, MirrorError::NotFound(_)), "{e:?}");
    }

    #[tokio::test]
    async fn limits_and_encoding_are_errors_not_truncations() {
        let t = Setup::new();
        let big = format!("package big\n# {}\n", "x".repeat(2000));
        t.work.commit(
            &[
                ("three/a.rego", "package a\n"),
                ("three/b.rego", "package b\n"),
                ("three/c_test.rego", "package c\n"),
                ("three/notes.txt", "not counted\n"),
                ("big/small.rego", "package small\n"),
                ("big/big.rego", &big),
            ],
            "policies",
        );
        std::fs::create_dir_all(t.work.path().join("latin1")).unwrap();
        std::fs::write(
            t.work.path().join("latin1/caf\u{e9}.rego"),
            b"package cafe\n# caf\xe9\n",
        )
        .unwrap();
        t.work.commit(&[], "latin-1");
        t.work.push("main");
        let url = t.url();

        // Exactly at the limits: fine.
        let exact = FileLimits {
            max_files: 3,
            max_file_bytes: big.len() as u64,
        };
        assert_eq!(
            t.files_at("main", "three", &exact)
                .await
                .unwrap()
                .files
                .len(),
            3
        );
        assert_eq!(
            t.files_at("main", "big", &exact).await.unwrap().files.len(),
            2
        );

        let two = FileLimits {
            max_files: 2,
            ..LIMITS
        };
        let e = t.error("main", "three", &two).await;
        assert!(matches!(e, MirrorError::Content(_)), "{e:?}");
        assert_eq!(
            e.to_string(),
            format!(
                "folder \"three\" on branch \"main\" of {url} holds 3 .rego files, more than \
                 the limit of 2"
            )
        );

        let e = t.error("main", "big", &LIMITS).await;
        assert!(matches!(e, MirrorError::Content(_)), "{e:?}");
        assert_eq!(
            e.to_string(),
            format!(
                "\"big/big.rego\" on branch \"main\" of {url} is {} bytes, more than the limit \
                 of 1024",
                big.len()
            )
        );

        let e = t.error("main", "latin1", &LIMITS).await;
        assert!(matches!(e, MirrorError::Content(_)), "{e:?}");
        assert_eq!(
            e.to_string(),
            format!("\"latin1/caf\u{e9}.rego\" on branch \"main\" of {url} is not UTF-8 text")
        );
    }

    #[tokio::test]
    async fn bad_branches_paths_and_urls_are_refused_before_git_runs() {
        let t = Setup::new();
        t.work
            .commit(&[("policies/a.rego", "package a\n")], "policies");
        t.work.push("main");

        for (branch, why) in [
            ("a..b", "\"..\""),
            ("-x", "\"-\""),
            ("", "empty"),
            ("has space", "spaces"),
            ("tab\there", "control"),
            ("a~1", "'~'"),
            ("a:b", "':'"),
            ("refs*", "'*'"),
            ("a@{1}", "\"@{\""),
            ("/main", "\"/\""),
            ("main/", "\"/\""),
            ("a//b", "\"//\""),
            ("main.", "end with \".\""),
            ("main.lock", "\".lock\""),
            ("x/.hidden", "start with \".\""),
        ] {
            let e = t.error(branch, "policies", &LIMITS).await;
            assert!(matches!(e, MirrorError::BadInput(_)), "{branch:?}: {e:?}");
            let msg = e.to_string();
            assert!(
                msg.starts_with(&format!("invalid branch name {branch:?}: ")) && msg.contains(why),
                "{branch:?}: {msg}"
            );
        }
        let long = "b".repeat(256);
        let e = t.error(&long, "policies", &LIMITS).await;
        assert!(e.to_string().contains("longer than 255 bytes"), "{e}");

        for (path, why) in [
            ("../x", "\"..\""),
            ("policies/../..", "\"..\""),
            ("-x", "\"-\""),
            ("/policies", "relative"),
            ("policies\n", "control"),
        ] {
            let e = t.error("main", path, &LIMITS).await;
            assert!(matches!(e, MirrorError::BadInput(_)), "{path:?}: {e:?}");
            let msg = e.to_string();
            assert!(
                msg.starts_with(&format!("invalid folder path {path:?}: ")) && msg.contains(why),
                "{path:?}: {msg}"
            );
        }
        let e = t.error("main", &"p/".repeat(513), &LIMITS).await;
        assert!(e.to_string().contains("longer than 1024 bytes"), "{e}");

        for url in ["", "-uhttps://x", "https://x/a b"] {
            let e = t
                .mirrors
                .files_at(url, None, "main", "policies", &LIMITS)
                .await
                .unwrap_err();
            assert!(matches!(e, MirrorError::BadInput(_)), "{url:?}: {e:?}");
            assert!(e.to_string().starts_with("invalid repository URL"), "{e}");
        }
        // Nothing reached git: no mirror was made.
        assert!(!t.mirrors.root.exists());

        // At the length limit: refused by the repository, not by the check.
        let e = t.error(&"b".repeat(255), "policies", &LIMITS).await;
        assert!(matches!(e, MirrorError::NotFound(_)), "{e:?}");

        // A name with a dash and dots inside is fine.
        t.work.checkout_new_branch("feat-1.2/x-y");
        t.work.push("feat-1.2/x-y");
        let snap = t
            .files_at("feat-1.2/x-y", "policies", &LIMITS)
            .await
            .unwrap();
        assert_eq!(names(&snap), ["a.rego"]);
    }

    #[tokio::test]
    async fn many_files_come_through_one_batch() {
        // More object ids than a pipe holds go to `git cat-file --batch` while its answer
        // is read: neither side waits for the other.
        let t = Setup::new();
        let files: Vec<(String, String)> = (0..3000)
            .map(|i| {
                (
                    format!("many/p{i:04}.rego"),
                    format!("package p{i:04}\n# {}\n", "x".repeat(i % 200)),
                )
            })
            .collect();
        let refs: Vec<(&str, &str)> = files
            .iter()
            .map(|(p, c)| (p.as_str(), c.as_str()))
            .collect();
        t.work.commit(&refs, "many");
        t.work.push("main");
        let limits = FileLimits {
            max_files: 3000,
            ..LIMITS
        };
        let snap = t.files_at("main", "many", &limits).await.unwrap();
        let want: Vec<(String, String)> = files
            .into_iter()
            .map(|(p, c)| (p["many/".len()..].to_string(), c))
            .collect();
        assert_eq!(snap.files, want);
    }

    #[tokio::test]
    async fn an_empty_repository_has_no_branch() {
        let t = Setup::new();
        let e = t.error("main", "", &LIMITS).await;
        assert!(matches!(e, MirrorError::NotFound(_)), "{e:?}");
        assert_eq!(
            e.to_string(),
            format!("branch \"main\" does not exist in {}", t.url())
        );
    }

    #[test]
    fn passwords_in_urls_stay_out_of_messages() {
        assert_eq!(
            redact("https://user:s3cret@example.com/a.git"),
            "https://user:***@example.com/a.git"
        );
        assert_eq!(
            redact("https://example.com/a@b.git"),
            "https://example.com/a@b.git"
        );
        assert_eq!(
            redact("ssh://git@example.com/a.git"),
            "ssh://git@example.com/a.git"
        );
        assert_eq!(redact("git@example.com:a.git"), "git@example.com:a.git");
    }
}
