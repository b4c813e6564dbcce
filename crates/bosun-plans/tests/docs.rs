//! The plan and inventory reference (`docs/plans.md`) and the examples (`examples/plans/`)
//! are checked against the parser, so they cannot drift from what Bosun reads: every
//! module has a section naming each parameter the parser takes, every plan and inventory
//! example parses, every step example parses as a step, and every condition example is
//! a condition.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use bosun_plans::model::{lint, parse_inventory, parse_plan, MODULES};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn reference() -> String {
    std::fs::read_to_string(repo_root().join("docs/plans.md")).expect("docs/plans.md")
}

/// The reference's ```yaml blocks, each with the line it starts on.
fn yaml_blocks(doc: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (i, line) in doc.lines().enumerate() {
        match (&mut current, line.trim_start()) {
            (None, l) if l.starts_with("```yaml") => current = Some((i + 1, String::new())),
            (Some(_), l) if l.starts_with("```") => blocks.extend(current.take()),
            (Some((_, text)), _) => {
                text.push_str(line);
                text.push('\n');
            }
            _ => {}
        }
    }
    blocks
}

/// The text of the reference's section `### `name``, up to the next heading.
fn module_section<'a>(doc: &'a str, module: &str) -> Option<&'a str> {
    let heading = format!("### `{module}`\n");
    let start = doc.find(&heading)? + heading.len();
    let rest = &doc[start..];
    let end = rest.find("\n#").unwrap_or(rest.len());
    Some(&rest[..end])
}

/// A plan around `steps` (a YAML list, as the reference writes step examples).
fn plan_of_steps(steps: &str) -> String {
    let indented: String = steps.lines().map(|l| format!("  {l}\n")).collect();
    format!("name: doc-example\ninputs:\n  release:\nvars:\n  app_port: 80\nsteps:\n{indented}")
}

fn first_key(block: &str) -> &str {
    block
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .unwrap_or("")
}

#[test]
fn every_example_in_the_reference_parses() {
    let doc = reference();
    let blocks = yaml_blocks(&doc);
    assert!(
        blocks.len() >= 10,
        "only {} yaml blocks found",
        blocks.len()
    );
    let file = Path::new("docs/plans.md");
    let mut checked = 0;
    for (line, block) in &blocks {
        let top = first_key(block);
        let has = |key: &str| block.lines().any(|l| l.starts_with(key));
        let outcome = if top.starts_with("- stack:") {
            // An environment's hosts_from: sources of hosts from stacks' outputs.
            let value: serde_json::Value = serde_norway::from_str(block)
                .unwrap_or_else(|e| panic!("docs/plans.md:{line}: not YAML: {e}"));
            if let Err(e) = bosun_plans::host_source::parse(&value) {
                panic!("docs/plans.md:{line}: the sources do not parse: {e}");
            }
            Ok(())
        } else if has("on_stack_change:") || (has("targets:") && !has("steps:")) {
            let plan = format!("name: doc-example\n{block}steps:\n  - command: [true]\n");
            parse_plan(file, &plan).map(|_| ())
        } else if top.starts_with("- ") {
            parse_plan(file, &plan_of_steps(block)).map(|_| ())
        } else if has("steps:") {
            parse_plan(file, block).map(|_| ())
        } else if has("hosts:") {
            parse_inventory(file, block).map(|_| ())
        } else if has("schedule:") {
            let plan = format!(
                "name: doc-example\ninputs:\n  release:\n{block}steps:\n  - command: [true]\n"
            );
            parse_plan(file, &plan).map(|_| ())
        } else if has("when:") {
            for l in block.lines().filter(|l| l.starts_with("when:")) {
                let expr: String = unquote(&l["when:".len()..]);
                if let Err(e) = bosun_plans::condition::check(&expr) {
                    panic!("docs/plans.md:{line}: condition {expr:?} does not parse: {e}");
                }
            }
            Ok(())
        } else if has("line:") {
            // A template fragment; the templates have their own reference tests.
            Ok(())
        } else {
            panic!(
                "docs/plans.md:{line}: a yaml block this test does not know how to check:\n{block}"
            );
        };
        if let Err(e) = outcome {
            panic!("docs/plans.md:{line}: the example does not parse: {e}\n{block}");
        }
        checked += 1;
    }
    assert_eq!(checked, blocks.len());
}

/// A YAML scalar as written after a key: quotes removed the way YAML removes them for
/// the plain, single- and double-quoted forms the reference uses.
fn unquote(raw: &str) -> String {
    let v = raw.trim();
    if let Some(inner) = v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')) {
        inner.replace("''", "'")
    } else if let Some(inner) = v.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
        inner.replace("\\\"", "\"")
    } else {
        v.to_string()
    }
}

#[test]
fn every_module_has_a_section_with_an_example_naming_each_parameter() {
    let doc = reference();
    for module in MODULES {
        let section = module_section(&doc, module)
            .unwrap_or_else(|| panic!("docs/plans.md has no `### `{module}`` section"));
        let example = yaml_blocks(section)
            .into_iter()
            .find(|(_, b)| b.contains(&format!("- {module}:")));
        let (_, example) =
            example.unwrap_or_else(|| panic!("the `{module}` section has no step example"));
        parse_plan(Path::new("docs/plans.md"), &plan_of_steps(&example))
            .unwrap_or_else(|e| panic!("the `{module}` example does not parse: {e}"));
        // The parser names the parameters it takes when it refuses an unknown one.
        let probe = plan_of_steps(&format!("- {module}: {{ no_such_parameter_zz: x }}\n"));
        let err = parse_plan(Path::new("probe.yaml"), &probe)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        let params = expected_fields(&err);
        if module_takes_a_mapping(module) {
            assert!(
                !params.is_empty(),
                "{module}: the parser's refusal names no parameters: {err}"
            );
        }
        for p in params {
            assert!(
                section.contains(&format!("`{p}`")),
                "docs/plans.md's `{module}` section does not name its parameter `{p}`"
            );
        }
    }
}

fn module_takes_a_mapping(module: &str) -> bool {
    module != "command"
}

/// The field names in a serde "unknown field …, expected one of `a`, `b`" message.
fn expected_fields(message: &str) -> Vec<String> {
    let Some(rest) = message
        .split_once("expected one of ")
        .map(|(_, r)| r)
        .or_else(|| message.split_once("expected ").map(|(_, r)| r))
    else {
        return Vec::new();
    };
    rest.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

#[test]
fn the_example_plans_parse_and_lint_clean_against_their_inventory() {
    let dir = repo_root().join("examples/plans");
    let inventory_path = dir.join("inventory.yaml");
    let inventory_text =
        std::fs::read_to_string(&inventory_path).expect("examples/plans/inventory.yaml");
    let inventory =
        parse_inventory(&inventory_path, &inventory_text).unwrap_or_else(|e| panic!("{e}"));
    let mut plans = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if !name.ends_with(".yaml") || name == "inventory.yaml" {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let plan = parse_plan(&path, &text).unwrap_or_else(|e| panic!("{e}"));
        let report = lint(&plan, Some(&inventory));
        assert!(
            report.findings.is_empty(),
            "{name}: lint findings: {:?}",
            report.findings
        );
        plans += 1;
    }
    assert!(plans >= 1, "no example plan in examples/plans");
}
