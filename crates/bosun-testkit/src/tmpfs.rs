//! A small filesystem of the test's own, to fill up: a tmpfs mounted on a temp dir
//! (mounting needs root, as in CI; elsewhere the caller skips loudly, and under
//! `BOSUN_REQUIRE_TOOLS=1` the test fails), unmounted (lazily) on drop.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// A tmpfs of `size` (`mount`'s syntax: `8m`), or `None` after announcing the skip
    /// when mounting is not permitted here.
    pub fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::Builder::new()
            .prefix("bosun-disk-")
            .tempdir()
            .unwrap();
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir.path())
            .output();
        match out {
            Ok(o) if o.status.success() => Some(Tmpfs { dir }),
            other => {
                let why = match other {
                    Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
                    Err(e) => e.to_string(),
                };
                if std::env::var("BOSUN_REQUIRE_TOOLS").as_deref() == Ok("1") {
                    panic!("mounting a tmpfs is required (BOSUN_REQUIRE_TOOLS=1): {why}");
                }
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIPPED (tool missing): mount -t tmpfs (needs root): {why}"
                );
                None
            }
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fills the filesystem to the last byte with a file, [`Filler::remove`]d to give the
    /// space back.
    pub fn fill(&self) -> Filler {
        let path = self.path().join("filler");
        let mut f = std::fs::File::create(&path).unwrap();
        for chunk in [64 * 1024, 4096, 512, 1] {
            let buf = vec![0u8; chunk];
            while f.write_all(&buf).is_ok() {}
        }
        let _ = f.sync_all();
        Filler(path)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// The file filling a [`Tmpfs`].
pub struct Filler(PathBuf);

impl Filler {
    /// Removes the file: the space returns.
    pub fn remove(self) {
        std::fs::remove_file(&self.0).unwrap();
    }
}
