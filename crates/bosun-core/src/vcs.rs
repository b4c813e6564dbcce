//! What a version-control event means for stacks: classifying a ref update (branch push,
//! tag, deletion), and routing changed files to the stacks whose watch paths they touch,
//! through a prefix trie so a push of many files against many stacks never compares
//! every file with every stack.

use std::collections::HashMap;
use std::fmt;

use crate::stack::{RepoPath, StackSpec};

/// True for git's all-zero object id (`before` of a created ref, `after` of a deleted one).
pub fn is_zero_sha(sha: &str) -> bool {
    !sha.is_empty() && sha.bytes().all(|b| b == b'0')
}

/// True for a full or abbreviated hex object id (7 to 64 hex digits).
pub fn is_sha(sha: &str) -> bool {
    (7..=64).contains(&sha.len()) && sha.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A pushed ref, classified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefUpdate {
    /// A branch moved or was created: the only kind that can trigger runs.
    Branch {
        branch: String,
        created: bool,
    },
    BranchDeleted {
        branch: String,
    },
    Tag {
        tag: String,
    },
    TagDeleted {
        tag: String,
    },
    /// Any other ref (`refs/notes/…`, …).
    Other {
        git_ref: String,
    },
}

impl RefUpdate {
    /// Classifies a push by its ref, its `before`/`after` ids and GitHub's `deleted` flag.
    pub fn classify(git_ref: &str, before: &str, after: &str, deleted: bool) -> RefUpdate {
        let deleted = deleted || is_zero_sha(after);
        if let Some(branch) = git_ref.strip_prefix("refs/heads/") {
            let branch = branch.to_string();
            if deleted {
                RefUpdate::BranchDeleted { branch }
            } else {
                RefUpdate::Branch {
                    branch,
                    created: is_zero_sha(before),
                }
            }
        } else if let Some(tag) = git_ref.strip_prefix("refs/tags/") {
            let tag = tag.to_string();
            if deleted {
                RefUpdate::TagDeleted { tag }
            } else {
                RefUpdate::Tag { tag }
            }
        } else {
            RefUpdate::Other {
                git_ref: git_ref.to_string(),
            }
        }
    }

    /// Why this update triggers nothing, or `None` for a branch update.
    pub fn ignored(&self) -> Option<Ignored> {
        match self {
            RefUpdate::Branch { .. } => None,
            RefUpdate::BranchDeleted { branch } => Some(Ignored::BranchDeleted {
                branch: branch.clone(),
            }),
            RefUpdate::Tag { tag } => Some(Ignored::TagPush { tag: tag.clone() }),
            RefUpdate::TagDeleted { tag } => Some(Ignored::TagDeleted { tag: tag.clone() }),
            RefUpdate::Other { git_ref } => Some(Ignored::OtherRef {
                git_ref: git_ref.clone(),
            }),
        }
    }
}

/// Why a delivery did not trigger a stack. The text is what people read in the
/// stack's trigger history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ignored {
    BranchNotTracked {
        tracked: String,
        pushed: String,
    },
    BaseNotTracked {
        tracked: String,
        base: String,
    },
    NoWatchPathTouched {
        watched: Vec<String>,
        changed: usize,
    },
    TagPush {
        tag: String,
    },
    TagDeleted {
        tag: String,
    },
    BranchDeleted {
        branch: String,
    },
    OtherRef {
        git_ref: String,
    },
}

impl fmt::Display for Ignored {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ignored::BranchNotTracked { tracked, pushed } => write!(
                f,
                "branch not tracked: the push was to {pushed:?}, the stack tracks {tracked:?}"
            ),
            Ignored::BaseNotTracked { tracked, base } => write!(
                f,
                "branch not tracked: the pull request's base is {base:?}, the stack tracks {tracked:?}"
            ),
            Ignored::NoWatchPathTouched { watched, changed } => {
                let shown: Vec<String> = watched
                    .iter()
                    .map(|w| {
                        if w.is_empty() {
                            "(repository root)".to_string()
                        } else {
                            w.clone()
                        }
                    })
                    .collect();
                write!(
                    f,
                    "no watch path touched: none of the {changed} changed file(s) is under {}",
                    shown.join(", ")
                )
            }
            Ignored::TagPush { tag } => write!(f, "tag push ignored: tag {tag:?}"),
            Ignored::TagDeleted { tag } => write!(f, "tag deletion ignored: tag {tag:?}"),
            Ignored::BranchDeleted { branch } => {
                write!(f, "branch deletion ignored: branch {branch:?}")
            }
            Ignored::OtherRef { git_ref } => write!(f, "ref {git_ref:?} is not a branch: ignored"),
        }
    }
}

/// The verdict on one stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Triggered because `file` sits under (or is) the watch path `prefix`.
    Triggered {
        file: String,
        prefix: String,
    },
    Ignored(Ignored),
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Triggered { file, prefix } if prefix.is_empty() => {
                write!(
                    f,
                    "triggered: {file} changed (the stack watches the repository root)"
                )
            }
            Verdict::Triggered { file, prefix } => {
                write!(f, "triggered: {file} changed, under watch path {prefix}")
            }
            Verdict::Ignored(i) => i.fmt(f),
        }
    }
}

/// Does `file` equal `prefix` or sit under it? `infra/net` matches `infra/net` and
/// `infra/net/main.tf`, not `infra/network/x.tf`; the empty prefix matches everything.
pub fn path_matches(prefix: &str, file: &str) -> bool {
    prefix.is_empty()
        || file == prefix
        || (file.starts_with(prefix) && file.as_bytes().get(prefix.len()) == Some(&b'/'))
}

/// Watch-path prefixes → values, as a trie over path segments. Looking up a file walks
/// its segments once, whatever the number of prefixes.
#[derive(Debug, Clone)]
pub struct PathIndex<T> {
    root: Node<T>,
}

#[derive(Debug, Clone)]
struct Node<T> {
    here: Vec<T>,
    children: HashMap<String, Node<T>>,
}

impl<T> Default for Node<T> {
    fn default() -> Self {
        Node {
            here: Vec::new(),
            children: HashMap::new(),
        }
    }
}

impl<T> Default for PathIndex<T> {
    fn default() -> Self {
        PathIndex {
            root: Node::default(),
        }
    }
}

impl<T> PathIndex<T> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `value` under a normalized prefix (`""` is the root).
    pub fn insert(&mut self, prefix: &str, value: T) {
        let mut node = &mut self.root;
        for seg in prefix.split('/').filter(|s| !s.is_empty()) {
            node = node.children.entry(seg.to_string()).or_default();
        }
        node.here.push(value);
    }

    /// Calls `found` with every value whose prefix `file` equals or sits under, and the
    /// depth (segments) of that prefix.
    pub fn for_each_match(&self, file: &str, mut found: impl FnMut(&T, usize)) {
        let mut node = &self.root;
        for v in &node.here {
            found(v, 0);
        }
        for (depth, seg) in file.split('/').filter(|s| !s.is_empty()).enumerate() {
            match node.children.get(seg) {
                Some(next) => node = next,
                None => return,
            }
            for v in &node.here {
                found(v, depth + 1);
            }
        }
    }
}

/// The prefixes a stack watches: its own path (always) and its watch paths, de-duplicated.
pub fn watched_prefixes(spec: &StackSpec) -> Vec<&RepoPath> {
    let mut out: Vec<&RepoPath> = vec![&spec.path];
    for w in &spec.watch_paths {
        if !out.contains(&w) {
            out.push(w);
        }
    }
    out
}

/// Routes one change of `branch` touching `changed` files to `stacks` (all the stacks
/// of the repository): one verdict per stack, in the order given. Stacks on other
/// branches are `branch not tracked` (`pull_request_base` words it for pull requests).
///
/// Cost: building the trie is linear in the branch's watch paths, and each changed file
/// walks it once — no stack × file comparison.
pub fn route(
    stacks: &[&StackSpec],
    branch: &str,
    changed: &[String],
    pull_request_base: bool,
) -> Vec<Verdict> {
    let mut index: PathIndex<usize> = PathIndex::new();
    for (i, spec) in stacks.iter().enumerate() {
        if spec.branch == branch {
            for prefix in watched_prefixes(spec) {
                index.insert(prefix.as_str(), i);
            }
        }
    }
    // For each stack, the first changed file (in the given order) that touched it, and
    // the watch path it matched.
    let mut hits: Vec<Option<(usize, String)>> = vec![None; stacks.len()];
    let mut remaining = stacks.iter().filter(|s| s.branch == branch).count();
    for (fi, file) in changed.iter().enumerate() {
        if remaining == 0 {
            break;
        }
        index.for_each_match(file, |&i, depth| {
            if hits[i].is_none() {
                let prefix: Vec<&str> = file.split('/').filter(|s| !s.is_empty()).collect();
                hits[i] = Some((fi, prefix[..depth.min(prefix.len())].join("/")));
                remaining -= 1;
            }
        });
    }
    stacks
        .iter()
        .zip(hits)
        .map(|(spec, hit)| {
            if spec.branch != branch {
                let tracked = spec.branch.clone();
                return Verdict::Ignored(if pull_request_base {
                    Ignored::BaseNotTracked {
                        tracked,
                        base: branch.to_string(),
                    }
                } else {
                    Ignored::BranchNotTracked {
                        tracked,
                        pushed: branch.to_string(),
                    }
                });
            }
            match hit {
                Some((fi, prefix)) => Verdict::Triggered {
                    file: changed[fi].clone(),
                    prefix,
                },
                None => Verdict::Ignored(Ignored::NoWatchPathTouched {
                    watched: watched_prefixes(spec)
                        .into_iter()
                        .map(|p| p.as_str().to_string())
                        .collect(),
                    changed: changed.len(),
                }),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack::StackInput;
    use proptest::prelude::*;

    fn stack(id: &str, branch: &str, path: &str, watch: &[&str]) -> StackSpec {
        StackSpec::from_input(StackInput {
            id: id.into(),
            repository: "github:acme/infra".into(),
            branch: Some(branch.into()),
            path: Some(path.into()),
            watch_paths: watch.iter().map(|s| s.to_string()).collect(),
            ..StackInput::default()
        })
        .unwrap()
    }

    fn files(f: &[&str]) -> Vec<String> {
        f.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn prefix_rule_is_per_segment() {
        assert!(path_matches("infra/net", "infra/net/main.tf"));
        assert!(path_matches("infra/net", "infra/net"));
        assert!(!path_matches("infra/net", "infra/network/x.tf"));
        assert!(!path_matches("infra/net", "infra/ne"));
        assert!(path_matches("", "anything/at/all"));
    }

    #[test]
    fn monorepo_routing() {
        let net = stack("net", "main", "infra/net", &[]);
        let network = stack("network", "main", "infra/network", &["modules/vpc"]);
        let root = stack("root", "main", "", &[]);
        let dev = stack("dev", "develop", "infra/net", &[]);
        let stacks = [&net, &network, &root, &dev];
        let v = route(
            &stacks,
            "main",
            &files(&["README.md", "infra/network/x.tf", "modules/vpc/a.tf"]),
            false,
        );
        assert!(matches!(
            v[0],
            Verdict::Ignored(Ignored::NoWatchPathTouched { .. })
        ));
        assert_eq!(
            v[1],
            Verdict::Triggered {
                file: "infra/network/x.tf".into(),
                prefix: "infra/network".into()
            }
        );
        assert_eq!(
            v[2],
            Verdict::Triggered {
                file: "README.md".into(),
                prefix: "".into()
            }
        );
        assert_eq!(
            v[3].to_string(),
            "branch not tracked: the push was to \"main\", the stack tracks \"develop\""
        );
        assert_eq!(
            v[0].to_string(),
            "no watch path touched: none of the 3 changed file(s) is under infra/net"
        );
    }

    #[test]
    fn refs_are_classified() {
        let z = "0000000000000000000000000000000000000000";
        let a = "6113728f27ae82c7b1a177c8d03f9e96e0adf246";
        assert_eq!(
            RefUpdate::classify("refs/heads/main", a, a, false),
            RefUpdate::Branch {
                branch: "main".into(),
                created: false
            }
        );
        assert_eq!(
            RefUpdate::classify("refs/heads/feat/x", z, a, false),
            RefUpdate::Branch {
                branch: "feat/x".into(),
                created: true
            }
        );
        assert_eq!(
            RefUpdate::classify("refs/heads/main", a, z, true),
            RefUpdate::BranchDeleted {
                branch: "main".into()
            }
        );
        assert_eq!(
            RefUpdate::classify("refs/tags/v1", z, a, false).ignored(),
            Some(Ignored::TagPush { tag: "v1".into() })
        );
        assert_eq!(
            RefUpdate::classify("refs/tags/v1", a, z, true).ignored(),
            Some(Ignored::TagDeleted { tag: "v1".into() })
        );
    }

    fn segment() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("a"),
            Just("ab"),
            Just("b"),
            Just("net"),
            Just("network")
        ]
        .prop_map(String::from)
    }

    fn path() -> impl Strategy<Value = String> {
        proptest::collection::vec(segment(), 0..4).prop_map(|s| s.join("/"))
    }

    proptest! {
        /// The trie finds exactly the prefixes the plain rule accepts.
        #[test]
        fn trie_agrees_with_the_prefix_rule(
            prefixes in proptest::collection::vec(path(), 0..12),
            file in path().prop_filter("files are not empty", |f| !f.is_empty()),
        ) {
            let mut index = PathIndex::new();
            for (i, p) in prefixes.iter().enumerate() {
                index.insert(p, i);
            }
            let mut found = Vec::new();
            index.for_each_match(&file, |&i, _| found.push(i));
            found.sort();
            let expected: Vec<usize> = prefixes
                .iter()
                .enumerate()
                .filter(|(_, p)| path_matches(p, &file))
                .map(|(i, _)| i)
                .collect();
            prop_assert_eq!(found, expected);
        }
    }
}
