//! A dry run's diff for one path: a unified diff of the content (`--- PATH (before)`,
//! `+++ PATH (after)`), then one `# …` line per change of kind, mode or owner.

use similar::TextDiff;

use super::mode::show;
use super::remote::{FileState, Ownership};

fn content(state: &FileState) -> &[u8] {
    match state {
        FileState::File { content, .. } => content,
        _ => &[],
    }
}

fn meta(state: &FileState) -> (Option<u32>, Option<&Ownership>) {
    match state {
        FileState::File { mode, owner, .. } | FileState::Directory { mode, owner } => {
            (*mode, owner.as_ref())
        }
        _ => (None, None),
    }
}

fn owner_text(o: Option<&Ownership>) -> String {
    match o {
        Some(o) => format!("{}:{}", o.user, o.group),
        None => "(unknown)".into(),
    }
}

fn mode_text(m: Option<u32>) -> String {
    match m {
        Some(m) => show(m),
        None => "(host default)".into(),
    }
}

/// The diff from `before` to `after`; `None` when they are the same.
pub(super) fn diff(path: &str, before: &FileState, after: &FileState) -> Option<String> {
    let mut out = String::new();
    let (old, new) = (content(before), content(after));
    if old != new {
        match (std::str::from_utf8(old), std::str::from_utf8(new)) {
            (Ok(old), Ok(new)) => {
                let text = TextDiff::from_lines(old, new)
                    .unified_diff()
                    .context_radius(3)
                    .header(&format!("{path} (before)"), &format!("{path} (after)"))
                    .to_string();
                out.push_str(&text);
                if !out.ends_with('\n') {
                    out.push('\n');
                }
            }
            _ => {
                out.push_str(&format!(
                    "--- {path} (before)\n+++ {path} (after)\n# binary content differs ({} bytes → {} bytes)\n",
                    old.len(),
                    new.len()
                ));
            }
        }
    }
    let same_kind = std::mem::discriminant(before) == std::mem::discriminant(after);
    if !same_kind {
        out.push_str(&format!(
            "# {}: {} → {}\n",
            path,
            before.describe(),
            after.describe()
        ));
    }
    let (bm, bo) = meta(before);
    let (am, ao) = meta(after);
    if !matches!(after, FileState::Absent) {
        if (same_kind && bm != am) || (!same_kind && am.is_some()) {
            out.push_str(&format!("# mode {} → {}\n", mode_text(bm), mode_text(am)));
        }
        if (same_kind && bo != ao && ao.is_some()) || (!same_kind && ao.is_some()) {
            out.push_str(&format!(
                "# owner {} → {}\n",
                owner_text(bo),
                owner_text(ao)
            ));
        }
    }
    if out.is_empty() {
        return None;
    }
    let header = format!("--- {path} (before)\n+++ {path} (after)\n");
    if !out.starts_with(&header) {
        out.insert_str(0, &header);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(s: &str, mode: u32) -> FileState {
        FileState::File {
            content: s.as_bytes().to_vec(),
            mode: Some(mode),
            owner: None,
        }
    }

    #[test]
    fn content_diffs_are_unified() {
        let d = diff(
            "/etc/app.conf",
            &file("a\nb\n", 0o644),
            &file("a\nc\n", 0o644),
        )
        .unwrap();
        assert_eq!(
            d,
            "--- /etc/app.conf (before)\n+++ /etc/app.conf (after)\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n"
        );
    }

    #[test]
    fn same_is_none_and_mode_changes_are_noted() {
        assert_eq!(diff("/x", &file("a\n", 0o644), &file("a\n", 0o644)), None);
        assert_eq!(
            diff("/x", &file("a\n", 0o644), &file("a\n", 0o600)).unwrap(),
            "--- /x (before)\n+++ /x (after)\n# mode 0644 → 0600\n"
        );
        let d = diff(
            "/d",
            &FileState::Absent,
            &FileState::Directory {
                mode: Some(0o755),
                owner: None,
            },
        )
        .unwrap();
        assert!(d.contains("# /d: absent → a directory"), "{d}");
        assert!(d.contains("# mode (host default) → 0755"), "{d}");
    }
}
