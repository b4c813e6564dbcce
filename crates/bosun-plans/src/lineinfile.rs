//! `file.lineinfile`, byte-identical to Ansible's `lineinfile` for `line`, `regexp`,
//! `search_string`, `state`, `insertafter`, `insertbefore`, `backrefs`, `firstmatch` and
//! `create`: a pure function from the file's current bytes to its new bytes.

/// Rendered parameters.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Params {
    pub line: Option<String>,
    pub regexp: Option<String>,
    pub search_string: Option<String>,
    /// `true`: `state: absent`.
    pub absent: bool,
    pub insertafter: Option<String>,
    pub insertbefore: Option<String>,
    pub backrefs: bool,
    pub firstmatch: bool,
    pub create: bool,
}

/// What the module would do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The new content; `None` when the file does not exist and stays so.
    pub content: Option<Vec<u8>>,
    pub changed: bool,
    /// Ansible's message (`line added`, `line replaced`, `1 line(s) removed`, …).
    pub message: String,
}

/// Invalid parameters or an impossible request, worded like Ansible's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LineInFileError(pub String);

/// Applies the module to `current` (`None`: the file does not exist).
pub fn apply(_current: Option<&[u8]>, _params: &Params) -> Result<Outcome, LineInFileError> {
    Err(LineInFileError(
        "file.lineinfile is not implemented yet".into(),
    ))
}
