//! Lint of a parsed plan: malformed conditions and templates, references that cannot
//! resolve (a host fact must be one of [`crate::facts::FACTS`]) and, with an inventory,
//! targets that match nothing.

use std::collections::BTreeSet;

use crate::model::{CopySource, Inventory, Location, Module, Plan};
use crate::{condition, template};

/// A lint finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LintFinding {
    pub location: Location,
    pub message: String,
}

/// Everything lint found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LintReport {
    pub findings: Vec<LintFinding>,
}

/// The template strings of a module, each with its path below the module key.
pub(crate) fn module_templates(module: &Module) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut add = |path: String, s: Option<&String>| {
        if let Some(s) = s {
            out.push((path, s.clone()));
        }
    };
    match module {
        Module::Command { argv } => {
            for (i, a) in argv.iter().enumerate() {
                add(format!("command[{i}]"), Some(a));
            }
        }
        Module::Shell { cmd } => add("shell.cmd".into(), Some(cmd)),
        Module::Script { src, args } => {
            add("script.src".into(), Some(&src.display().to_string()));
            for (i, a) in args.iter().enumerate() {
                add(format!("script.args[{i}]"), Some(a));
            }
        }
        Module::LineInFile(a) => {
            let p = "file.lineinfile";
            add(format!("{p}.path"), Some(&a.path));
            add(format!("{p}.line"), a.line.as_ref());
            add(format!("{p}.regexp"), a.regexp.as_ref());
            add(format!("{p}.search_string"), a.search_string.as_ref());
            add(format!("{p}.insertafter"), a.insertafter.as_ref());
            add(format!("{p}.insertbefore"), a.insertbefore.as_ref());
            add(format!("{p}.mode"), a.mode.as_ref());
            add(format!("{p}.owner"), a.owner.as_ref());
        }
        Module::Copy {
            path,
            source,
            mode,
            owner,
        }
        | Module::Template {
            path,
            source,
            mode,
            owner,
        } => {
            let p = module.kind();
            add(format!("{p}.path"), Some(path));
            match source {
                CopySource::Content(c) => add(format!("{p}.content"), Some(c)),
                CopySource::Src(s) => add(format!("{p}.src"), Some(&s.display().to_string())),
            }
            add(format!("{p}.mode"), mode.as_ref());
            add(format!("{p}.owner"), owner.as_ref());
        }
        Module::Directory { path, mode, owner } => {
            add("file.directory.path".into(), Some(path));
            add("file.directory.mode".into(), mode.as_ref());
            add("file.directory.owner".into(), owner.as_ref());
        }
        Module::Absent { path } => add("file.absent.path".into(), Some(path)),
        Module::FlushHandlers => {}
        Module::Package(a) => {
            for (i, n) in a.names.iter().enumerate() {
                add(format!("package.name[{i}]"), Some(n));
            }
        }
        Module::Group(a) => {
            add("group.name".into(), Some(&a.name));
            add("group.gid".into(), a.gid.as_ref());
        }
        Module::User(a) => {
            add("user.name".into(), Some(&a.name));
            add("user.uid".into(), a.uid.as_ref());
            add("user.group".into(), a.group.as_ref());
            for (i, g) in a.groups.iter().flatten().enumerate() {
                add(format!("user.groups[{i}]"), Some(g));
            }
            add("user.shell".into(), a.shell.as_ref());
            add("user.home".into(), a.home.as_ref());
            add("user.comment".into(), a.comment.as_ref());
            for (i, k) in a.authorized_keys.iter().flatten().enumerate() {
                add(format!("user.authorized_keys[{i}]"), Some(k));
            }
        }
    }
    out
}

/// What lint knows is defined, per namespace.
struct Known {
    vars: BTreeSet<String>,
    inputs: BTreeSet<String>,
    /// `None`: not knowable without an inventory.
    env: Option<BTreeSet<String>>,
    with_inventory: bool,
}

impl Known {
    fn new(plan: &Plan, inventory: Option<&Inventory>) -> Known {
        let mut vars: BTreeSet<String> = plan.vars.keys().cloned().collect();
        let inputs: BTreeSet<String> = plan.inputs.keys().cloned().collect();
        vars.extend(inputs.iter().cloned());
        let env = inventory.map(|inv| {
            let mut env = BTreeSet::new();
            for h in plan.target_hosts(inv) {
                vars.extend(h.vars.keys().cloned());
                if let Some(e) = h.environment.as_ref().and_then(|e| inv.environments.get(e)) {
                    env.extend(e.vars.keys().cloned());
                }
            }
            vars.extend(env.iter().cloned());
            env
        });
        Known {
            vars,
            inputs,
            env,
            with_inventory: inventory.is_some(),
        }
    }

    /// Why `reference` (dotted; namespace first) cannot resolve, if it cannot.
    fn problem(&self, reference: &str) -> Option<String> {
        let mut parts = reference.splitn(3, '.');
        let ns = parts.next()?;
        let key = parts.next();
        let deeper = parts.next();
        let Some(key) = key else {
            return if condition::NAMESPACES.contains(&ns) {
                None
            } else {
                Some(format!(
                    "unknown name `{ns}`: references start with vars., env., inputs. or host."
                ))
            };
        };
        let r = format!("{ns}.{key}");
        match ns {
            "vars" if !self.vars.contains(key) => Some(if self.with_inventory {
                format!("`{r}` is not defined in the plan's vars or inputs, nor in the vars of any targeted host or environment")
            } else {
                format!("`{r}` is not defined in the plan's vars or inputs")
            }),
            "inputs" if !self.inputs.contains(key) => {
                Some(format!("`{r}` is not one of the plan's inputs"))
            }
            "env" => match &self.env {
                Some(env) if !env.contains(key) => {
                    Some(format!("`{r}` is not defined in any targeted environment"))
                }
                _ => None,
            },
            "host" if !["name", "address", "labels", "facts"].contains(&key) => Some(format!(
                "`{r}` does not exist: a host has name, address, labels and facts"
            )),
            "host" if key == "facts" => {
                let fact = deeper?.split('.').next()?;
                (!crate::facts::FACTS.contains(&fact)).then(|| {
                    format!(
                        "`host.facts.{fact}` is not a host fact: the facts are {}",
                        crate::facts::FACTS.join(", ")
                    )
                })
            }
            "vars" | "inputs" | "host" => None,
            _ => Some(format!(
                "unknown name `{ns}`: references start with vars., env., inputs. or host."
            )),
        }
    }
}

/// Lints a parsed plan (with its inventory when given, so references resolve).
pub fn lint(plan: &Plan, inventory: Option<&Inventory>) -> LintReport {
    let mut findings: Vec<LintFinding> = Vec::new();
    let locs = &plan.locations;
    let mut add = |location: Location, message: String| {
        let f = LintFinding { location, message };
        if !findings.contains(&f) {
            findings.push(f);
        }
    };

    if let Some(inv) = inventory {
        for (i, h) in plan.targets.hosts.iter().enumerate() {
            if !inv.hosts.iter().any(|x| &x.name == h) {
                add(
                    locs.locate(&format!("targets.hosts[{i}]")),
                    format!("unknown target host `{h}`: not in the inventory"),
                );
            }
        }
        for (i, l) in plan.targets.labels.iter().enumerate() {
            if !inv.hosts.iter().any(|x| x.labels.contains(l)) {
                add(
                    locs.locate(&format!("targets.labels[{i}]")),
                    format!("no host in the inventory has label `{l}`"),
                );
            }
        }
        for (i, e) in plan.targets.environments.iter().enumerate() {
            let loc = locs.locate(&format!("targets.environments[{i}]"));
            if !inv.environments.contains_key(e) {
                add(
                    loc,
                    format!("unknown target environment `{e}`: not in the inventory"),
                );
            } else if !inv.hosts.iter().any(|x| x.environment.as_ref() == Some(e)) {
                add(
                    loc,
                    format!("no host in the inventory is in environment `{e}`"),
                );
            }
        }
        if plan.target_hosts(inv).is_empty() {
            add(
                locs.locate("targets"),
                "the plan's targets match no host in the inventory".into(),
            );
        }
    }

    let known = Known::new(plan, inventory);
    for (sp, step) in plan.all_steps() {
        if let Some(when) = &step.when {
            let loc = locs
                .get(&format!("{sp}.when"))
                .cloned()
                .unwrap_or_else(|| step.location.clone());
            match condition::parse(when) {
                Err(e) => add(loc, format!("malformed condition {when:?}: {e}")),
                Ok(ast) => {
                    for r in condition::references(&ast) {
                        if let Some(problem) = known.problem(&r) {
                            add(loc.clone(), problem);
                        }
                    }
                }
            }
        }
        for (field, text) in module_templates(&step.module) {
            let loc = locs.locate(&format!("{sp}.{field}"));
            match template::references(&text) {
                Err(e) => add(loc, format!("template error in `{field}`: {}", e.message)),
                Ok(refs) => {
                    for r in refs {
                        if let Some(problem) = known.problem(&r) {
                            add(loc.clone(), problem);
                        }
                    }
                }
            }
        }
    }
    LintReport { findings }
}
