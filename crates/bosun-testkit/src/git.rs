//! Real git repositories for tests: [`BareRepo`], a bare repository laid out the way
//! [`crate::GithubDouble`] serves it (`<repos_root>/<owner>/<repo>.git`), and
//! [`WorkTree`], a clone of it that commits and pushes. Every git command runs with a
//! fixed identity and no user or system config, so results do not depend on the machine.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The identity every commit made here carries.
pub const AUTHOR_NAME: &str = "Bosun Test";
/// The e-mail of [`AUTHOR_NAME`].
pub const AUTHOR_EMAIL: &str = "test@bosun.test";

/// A `git` command in `dir` with a clean environment: only `PATH` is kept; no global or
/// system config, `init.defaultBranch=main`, no signing, no prompts, a fixed identity.
pub fn git_command(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("LANG", "C")
        .env("LC_ALL", "C")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_AUTHOR_NAME", AUTHOR_NAME)
        .env("GIT_AUTHOR_EMAIL", AUTHOR_EMAIL)
        .env("GIT_COMMITTER_NAME", AUTHOR_NAME)
        .env("GIT_COMMITTER_EMAIL", AUTHOR_EMAIL)
        .args([
            "-c",
            "init.defaultBranch=main",
            "-c",
            "commit.gpgsign=false",
            "-c",
            "tag.gpgsign=false",
            "-c",
            "credential.helper=",
            "-c",
            "advice.detachedHead=false",
        ])
        .stdin(Stdio::null());
    cmd
}

/// Runs git in `dir` with [`git_command`]'s environment and returns its output whatever
/// the exit status (for commands a test expects to fail).
pub fn git_output(dir: &Path, args: &[&str]) -> Output {
    git_command(dir)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running git {args:?}: {e} (is git installed?)"))
}

/// Runs git in `dir` and returns its trimmed stdout; panics with stderr if it fails.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = git_output(dir, args);
    if !out.status.success() {
        panic!(
            "git {args:?} in {} failed ({}):\n{}{}",
            dir.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A bare repository at `<repos_root>/<owner>/<repo>.git`, HEAD on `main`, fetchable by
/// any object id (`uploadpack.allowAnySHA1InWant`) and refusing pushes over HTTP.
#[derive(Debug, Clone)]
pub struct BareRepo {
    path: PathBuf,
    full_name: String,
}

impl BareRepo {
    /// Creates the bare repository for `full_name` (`owner/repo`) under `repos_root`.
    pub fn create(repos_root: &Path, full_name: &str) -> BareRepo {
        let (owner, repo) = full_name
            .split_once('/')
            .filter(|(o, r)| !o.is_empty() && !r.is_empty() && !r.contains('/'))
            .unwrap_or_else(|| panic!("repository {full_name:?} is not owner/repo"));
        let root = std::fs::canonicalize(repos_root)
            .unwrap_or_else(|e| panic!("repos root {}: {e}", repos_root.display()));
        let owner_dir = root.join(owner);
        std::fs::create_dir_all(&owner_dir)
            .unwrap_or_else(|e| panic!("creating {}: {e}", owner_dir.display()));
        let path = owner_dir.join(format!("{repo}.git"));
        let path_str = path.to_str().expect("UTF-8 path");
        git(&owner_dir, &["init", "-q", "--bare", path_str]);
        git(&path, &["config", "uploadpack.allowAnySHA1InWant", "true"]);
        git(&path, &["config", "http.receivepack", "false"]);
        BareRepo {
            path,
            full_name: full_name.to_string(),
        }
    }

    /// The repository's directory (`…/<owner>/<repo>.git`).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `owner/repo`.
    pub fn full_name(&self) -> &str {
        &self.full_name
    }

    /// `file://` URL of the bare repository.
    pub fn file_url(&self) -> String {
        format!("file://{}", self.path.display())
    }

    /// Points `name` (e.g. `refs/pull/7/head`) at `sha`, which must already be in this
    /// repository (push it first, e.g. on a branch or with [`WorkTree::push_ref`]).
    pub fn set_ref(&self, name: &str, sha: &str) {
        git(&self.path, &["update-ref", name, sha]);
    }

    /// Deletes ref `name`.
    pub fn delete_ref(&self, name: &str) {
        git(&self.path, &["update-ref", "-d", name]);
    }

    /// The object id `rev` names in this repository.
    pub fn rev_parse(&self, rev: &str) -> String {
        git(&self.path, &["rev-parse", "--verify", rev])
    }

    /// A fresh clone in its own temporary directory (removed on drop).
    pub fn work_tree(&self) -> WorkTree {
        WorkTree::new(self)
    }
}

/// A non-bare clone of a [`BareRepo`] (remote `origin` is its `file://` URL) that commits
/// and pushes. All methods panic with git's stderr on failure.
#[derive(Debug)]
pub struct WorkTree {
    dir: PathBuf,
    remote_url: String,
    _tmp: Option<tempfile::TempDir>,
}

impl WorkTree {
    /// Clones `bare` into a new temporary directory, kept until the `WorkTree` drops.
    pub fn new(bare: &BareRepo) -> WorkTree {
        let tmp = tempfile::tempdir().expect("temp dir");
        let mut wt = WorkTree::in_dir(bare, &tmp.path().join("work"));
        wt._tmp = Some(tmp);
        wt
    }

    /// Clones `bare` into `dir` (which must not exist or be empty).
    pub fn in_dir(bare: &BareRepo, dir: &Path) -> WorkTree {
        let parent = dir.parent().expect("work tree dir has a parent");
        std::fs::create_dir_all(parent).expect("creating work tree parent");
        let url = bare.file_url();
        git(
            parent,
            &["clone", "-q", &url, dir.to_str().expect("UTF-8 path")],
        );
        WorkTree {
            dir: dir.to_path_buf(),
            remote_url: url,
            _tmp: None,
        }
    }

    /// The work tree's directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// `file://` URL of the bare repository this is a clone of.
    pub fn file_url(&self) -> String {
        self.remote_url.clone()
    }

    /// Runs git in the work tree, returning trimmed stdout.
    pub fn git(&self, args: &[&str]) -> String {
        git(&self.dir, args)
    }

    /// Writes `files` (`(path, content)`, parent directories created), stages everything
    /// (including earlier [`WorkTree::delete`]s) and commits; returns the new commit's id.
    /// An empty `files` with nothing staged makes an empty commit.
    pub fn commit(&self, files: &[(&str, &str)], message: &str) -> String {
        for (path, content) in files {
            let full = self.dir.join(path);
            if let Some(parent) = full.parent() {
                std::fs::create_dir_all(parent).expect("creating parent directory");
            }
            std::fs::write(&full, content)
                .unwrap_or_else(|e| panic!("writing {}: {e}", full.display()));
        }
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "--allow-empty", "-m", message]);
        self.rev_parse("HEAD")
    }

    /// Makes `n` commits, each changing `counter.txt`; returns their ids, oldest first.
    pub fn commit_n(&self, n: usize) -> Vec<String> {
        let counter = self.dir.join("counter.txt");
        (0..n)
            .map(|_| {
                let next = std::fs::read_to_string(&counter)
                    .ok()
                    .and_then(|s| s.trim().parse::<u64>().ok())
                    .unwrap_or(0)
                    + 1;
                self.commit(
                    &[("counter.txt", &format!("{next}\n"))],
                    &format!("commit {next}"),
                )
            })
            .collect()
    }

    /// Removes `path` (a file or directory) and stages the removal; the next
    /// [`WorkTree::commit`] records it.
    pub fn delete(&self, path: &str) {
        self.git(&["rm", "-q", "-r", "--", path]);
    }

    /// Pushes local branch `branch` to the same branch on `origin`.
    pub fn push(&self, branch: &str) {
        let spec = format!("refs/heads/{branch}:refs/heads/{branch}");
        self.git(&["push", "-q", "origin", &spec]);
    }

    /// Force-pushes local branch `branch` (rewriting the remote branch).
    pub fn push_force(&self, branch: &str) {
        let spec = format!("+refs/heads/{branch}:refs/heads/{branch}");
        self.git(&["push", "-q", "origin", &spec]);
    }

    /// Pushes `rev` (a commit id or local ref) to the remote ref `remote_ref`, forcing,
    /// e.g. `push_ref(&sha, "refs/pull/7/head")`.
    pub fn push_ref(&self, rev: &str, remote_ref: &str) {
        let sha = self.rev_parse(rev);
        let spec = format!("+{sha}:{remote_ref}");
        self.git(&["push", "-q", "origin", &spec]);
    }

    /// Tags HEAD as `name` (lightweight) unless the tag exists, and pushes the tag.
    pub fn push_tag(&self, name: &str) {
        let tag_ref = format!("refs/tags/{name}");
        let exists = git_output(&self.dir, &["rev-parse", "-q", "--verify", &tag_ref])
            .status
            .success();
        if !exists {
            self.git(&["tag", name]);
        }
        let spec = format!("+{tag_ref}:{tag_ref}");
        self.git(&["push", "-q", "origin", &spec]);
    }

    /// Deletes branch `branch` on `origin`.
    pub fn delete_remote_branch(&self, branch: &str) {
        self.git(&["push", "-q", "origin", "--delete", branch]);
    }

    /// Creates branch `branch` at HEAD and switches to it.
    pub fn checkout_new_branch(&self, branch: &str) {
        self.git(&["checkout", "-q", "-b", branch]);
    }

    /// Switches to existing branch (or commit) `rev`.
    pub fn checkout(&self, rev: &str) {
        self.git(&["checkout", "-q", rev]);
    }

    /// Moves the current branch to `rev`, discarding changes.
    pub fn reset_hard(&self, rev: &str) {
        self.git(&["reset", "-q", "--hard", rev]);
    }

    /// The full object id `rev` names.
    pub fn rev_parse(&self, rev: &str) -> String {
        self.git(&["rev-parse", "--verify", rev])
    }
}
