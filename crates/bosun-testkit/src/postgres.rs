//! The PostgreSQL test server `BOSUN_TEST_DATABASE_URL` names (scripts/test.sh starts
//! one) and scratch databases on it, one per test case.

use std::io::Write;
use std::sync::atomic::{AtomicU32, Ordering};

/// The test server's URL, or `None` (having printed `SKIPPED (tool missing): postgresql`)
/// when there is none — unless `BOSUN_REQUIRE_TOOLS=1`, where that fails the test.
pub fn server_url() -> Option<String> {
    match std::env::var("BOSUN_TEST_DATABASE_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            if std::env::var("BOSUN_REQUIRE_TOOLS").as_deref() == Ok("1") {
                panic!(
                    "PostgreSQL is required (BOSUN_REQUIRE_TOOLS=1) but BOSUN_TEST_DATABASE_URL \
                     is not set"
                );
            }
            let _ = writeln!(std::io::stderr(), "SKIPPED (tool missing): postgresql");
            None
        }
    }
}

/// `url` with its database replaced by `db`.
pub fn with_database(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map(|i| i + 3).unwrap_or(0);
    let host_end = base[scheme_end..]
        .find('/')
        .map(|i| scheme_end + i)
        .unwrap_or(base.len());
    let mut out = format!("{}/{db}", &base[..host_end]);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

/// Runs `statements` on the database at `url` on a thread of its own (the synchronous
/// client runs a runtime of its own: kept off the caller's).
pub fn batch(url: &str, statements: &str) -> Result<(), String> {
    let (url, statements) = (url.to_string(), statements.to_string());
    std::thread::spawn(move || {
        let mut client = postgres::Client::connect(&url, postgres::NoTls)
            .map_err(|e| format!("connecting to {url}: {e}"))?;
        client.batch_execute(&statements).map_err(|e| {
            e.as_db_error()
                .map(|d| d.message().to_string())
                .unwrap_or_else(|| e.to_string())
        })
    })
    .join()
    .unwrap()
}

/// A scratch database, dropped (with any connection still open) when the case ends.
pub struct ScratchDb {
    pub admin_url: String,
    pub name: String,
    pub url: String,
}

impl ScratchDb {
    pub fn create(admin_url: &str) -> ScratchDb {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "bosun_test_{}_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos()
        );
        batch(admin_url, &format!("CREATE DATABASE {name}"))
            .unwrap_or_else(|e| panic!("creating a scratch database on {admin_url}: {e}"));
        ScratchDb {
            url: with_database(admin_url, &name),
            admin_url: admin_url.to_string(),
            name,
        }
    }
}

impl Drop for ScratchDb {
    fn drop(&mut self) {
        let _ = batch(
            &self.admin_url,
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        );
    }
}
