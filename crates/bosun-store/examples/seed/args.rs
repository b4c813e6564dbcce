//! The seeder's command line.

use super::*;

// --- arguments ----------------------------------------------------------------------------

pub(crate) enum Backend {
    Sqlite(PathBuf),
    Postgres(String),
}

pub(crate) struct Args {
    pub(crate) backend: Backend,
    pub(crate) token_file: PathBuf,
    pub(crate) stacks: u64,
    pub(crate) runs_per_stack: u32,
    pub(crate) versions_per_stack: u32,
    pub(crate) runners: u32,
    pub(crate) small_orgs: u32,
    pub(crate) small_org_stacks: u64,
    pub(crate) templates: u64,
    pub(crate) chunk: u64,
    pub(crate) samples_file: Option<PathBuf>,
    pub(crate) samples: u64,
}

pub(crate) const USAGE: &str =
    "usage: seed (--sqlite FILE | --postgres URL) --token-file FILE [--stacks N] \
[--runs-per-stack N] [--versions-per-stack N] [--runners N] [--small-orgs N] \
[--small-org-stacks N] [--templates N] [--chunk N] [--samples-file FILE] [--samples N]";

impl Args {
    pub(crate) fn parse(mut it: impl Iterator<Item = String>) -> R<Args> {
        let mut sqlite = None;
        let mut postgres = None;
        let mut token_file = None;
        let mut a = Args {
            backend: Backend::Sqlite(PathBuf::new()),
            token_file: PathBuf::new(),
            stacks: 10_000,
            runs_per_stack: 10,
            versions_per_stack: 5,
            runners: 1000,
            small_orgs: 3,
            small_org_stacks: 200,
            templates: 100,
            chunk: 10_000,
            samples_file: None,
            samples: 1000,
        };
        while let Some(flag) = it.next() {
            let mut value = || {
                it.next()
                    .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))
            };
            let num = |v: String| -> R<u64> {
                v.parse::<u64>()
                    .map_err(|_| format!("{flag}: not a whole number: {v:?}").into())
            };
            match flag.as_str() {
                "--sqlite" => sqlite = Some(PathBuf::from(value()?)),
                "--postgres" => postgres = Some(value()?),
                "--token-file" => token_file = Some(PathBuf::from(value()?)),
                "--stacks" => a.stacks = num(value()?)?,
                "--runs-per-stack" => a.runs_per_stack = num(value()?)? as u32,
                "--versions-per-stack" => a.versions_per_stack = num(value()?)? as u32,
                "--runners" => a.runners = num(value()?)? as u32,
                "--small-orgs" => a.small_orgs = num(value()?)? as u32,
                "--small-org-stacks" => a.small_org_stacks = num(value()?)?,
                "--templates" => a.templates = num(value()?)?,
                "--chunk" => a.chunk = num(value()?)?,
                "--samples-file" => a.samples_file = Some(PathBuf::from(value()?)),
                "--samples" => a.samples = num(value()?)?,
                "-h" | "--help" => return Err(USAGE.into()),
                other => return Err(format!("unknown argument {other:?}\n{USAGE}").into()),
            }
        }
        a.backend = match (sqlite, postgres) {
            (Some(p), None) => Backend::Sqlite(p),
            (None, Some(u)) => Backend::Postgres(u),
            _ => {
                return Err(format!("give exactly one of --sqlite and --postgres\n{USAGE}").into())
            }
        };
        a.token_file = token_file.ok_or_else(|| format!("--token-file is required\n{USAGE}"))?;
        if a.templates < 2 || a.runners < 1 || a.runs_per_stack < 1 || a.chunk < 1 {
            return Err("--templates must be at least 2; --runners, --runs-per-stack and --chunk at least 1".into());
        }
        Ok(a)
    }

    /// Digits of a stack number: six, or more for a million stacks and up.
    pub(crate) fn width(&self) -> usize {
        let most = self.stacks.max(self.small_org_stacks).max(self.templates);
        most.saturating_sub(1).to_string().len().max(6)
    }

    /// The orgs copies go to, with how many stacks each (the template org is number 0).
    pub(crate) fn targets(&self) -> Vec<(String, u64)> {
        let mut out = vec![(BIG_ORG.to_string(), self.stacks)];
        for i in 1..=self.small_orgs {
            out.push((format!("team-{i}"), self.small_org_stacks));
        }
        out
    }
}
