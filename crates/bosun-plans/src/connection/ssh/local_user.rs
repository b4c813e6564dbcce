//! The user running Bosun: its name and its home folder.

use std::path::{Path, PathBuf};

/// `~/…` → `$HOME/…`.
pub(super) fn expand_home(path: &Path) -> PathBuf {
    match (path.strip_prefix("~"), home_dir()) {
        (Ok(rest), Some(home)) => home.join(rest),
        _ => path.to_path_buf(),
    }
}

pub(super) fn home_dir() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .or_else(|| passwd_entry().map(|(_, home)| home))
}

/// The name of the user running Bosun (from the password database, as OpenSSH does).
pub(super) fn local_user() -> Option<String> {
    passwd_entry().map(|(name, _)| name).or_else(|| {
        ["USER", "LOGNAME"]
            .iter()
            .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()))
    })
}

/// This process's user's name and home directory.
fn passwd_entry() -> Option<(String, PathBuf)> {
    use std::ffi::CStr;
    use std::os::unix::ffi::OsStrExt as _;
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: getpwuid_r writes only into `pwd` and `buf` (whose length we pass); the
    // strings it points `pwd` at live in `buf`, which outlives every use below.
    unsafe {
        let mut pwd: libc::passwd = std::mem::zeroed();
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        let rc = libc::getpwuid_r(
            libc::getuid(),
            &mut pwd,
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        );
        if rc != 0 || result.is_null() || pwd.pw_name.is_null() || pwd.pw_dir.is_null() {
            return None;
        }
        let name = CStr::from_ptr(pwd.pw_name).to_string_lossy().into_owned();
        let home = PathBuf::from(std::ffi::OsStr::from_bytes(
            CStr::from_ptr(pwd.pw_dir).to_bytes(),
        ));
        Some((name, home))
    }
}
