//! TLS to PostgreSQL, against real servers this file starts: one with `ssl=on` and a
//! certificate for `db.bosun.test` signed by a CA made here (rcgen), one without TLS.
//! Every case goes through `PostgresStore::open` with libpq's URL parameters and checks
//! the server's own view (`pg_stat_ssl`) of the store's connections.
//!
//! Without PostgreSQL's server binaries (`initdb`, `pg_ctl`) every case prints `SKIPPED
//! (tool missing): postgresql` and passes, unless `BOSUN_REQUIRE_TOOLS=1`, where it fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};

use bosun_store::{Audit, DatabaseStore, IdentityStore, NewOrg, PostgresStore};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// The name in the server's certificate (reached through `hostaddr=127.0.0.1`).
const SERVER_NAME: &str = "db.bosun.test";
/// A role that logs in with a client certificate only (`cert` in pg_hba.conf).
const CERT_USER: &str = "certuser";
/// A role that logs in with SCRAM over TLS only, for channel binding.
const SCRAM_USER: &str = "scramuser";
const SCRAM_PASSWORD: &str = "s3cret-pw";

/// The newest PostgreSQL server bin dir: pg_config's, else /usr/lib/postgresql/*/bin.
fn pg_bindir() -> Option<PathBuf> {
    let usable = |d: &Path| d.join("initdb").is_file() && d.join("pg_ctl").is_file();
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if out.status.success() && usable(&dir) {
            return Some(dir);
        }
    }
    std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| {
            let e = e.ok()?;
            let version: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            usable(&bin).then_some((version, bin))
        })
        .max_by_key(|(v, _)| *v)
        .map(|(_, bin)| bin)
}

/// The server binaries, or `None` (having said so) when there are none.
fn bindir_or_skip() -> Option<PathBuf> {
    let dir = pg_bindir();
    if dir.is_none() {
        if std::env::var("BOSUN_REQUIRE_TOOLS").as_deref() == Ok("1") {
            panic!(
                "PostgreSQL server binaries (initdb, pg_ctl) are required (BOSUN_REQUIRE_TOOLS=1)"
            );
        }
        let _ = writeln!(std::io::stderr(), "SKIPPED (tool missing): postgresql");
    }
    dir
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// PostgreSQL refuses to run as root: as root, the server runs as `nobody`.
fn server_user() -> Option<(u32, u32)> {
    if run(Command::new("id").arg("-u")) != "0" {
        return None;
    }
    let uid = run(Command::new("id").args(["-u", "nobody"]));
    let gid = run(Command::new("id").args(["-g", "nobody"]));
    Some((uid.parse().unwrap(), gid.parse().unwrap()))
}

/// What the TLS server's clients are given: its CA, another CA that signed nothing of it,
/// and a client certificate for `CERT_USER`.
struct Pki {
    ca: PathBuf,
    other_ca: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
}

fn ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), Issuer::new(params, key))
}

fn leaf(
    issuer: &Issuer<'_, KeyPair>,
    names: Vec<String>,
    cn: &str,
    usage: ExtendedKeyUsagePurpose,
) -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(names).unwrap();
    params.distinguished_name.push(DnType::CommonName, cn);
    params.extended_key_usages = vec![usage];
    let cert = params.signed_by(&key, issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// A throwaway PostgreSQL server, stopped and removed when dropped.
struct PgServer {
    dir: tempfile::TempDir,
    bindir: PathBuf,
    runs_as: Option<(u32, u32)>,
    port: u16,
    pki: Option<Pki>,
}

impl PgServer {
    fn start(bindir: PathBuf, tls: bool) -> PgServer {
        let dir = tempfile::tempdir().unwrap();
        let runs_as = server_user();
        let path = dir.path().to_path_buf();
        let give = |p: &Path, mode: u32| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
            if let Some((uid, gid)) = runs_as {
                std::os::unix::fs::chown(p, Some(uid), Some(gid)).unwrap();
            }
        };
        give(&path, 0o755);
        let as_server = |program: &Path| {
            let mut cmd = match runs_as {
                Some(_) => {
                    let mut c = Command::new("runuser");
                    c.args(["-u", "nobody", "--"]).arg(program);
                    c
                }
                None => Command::new(program),
            };
            cmd.current_dir(&path);
            cmd
        };
        let data = path.join("data");
        run(as_server(&bindir.join("initdb"))
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                "bosun",
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
            ]));

        // A free port: ask the kernel for one, then hand it to the server.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut conf = format!(
            "listen_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{}'\n\
             fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n",
            path.display()
        );
        let mut pki = None;
        if tls {
            let (ca_pem, issuer) = ca("Bosun test CA");
            let (other_pem, _) = ca("Some other CA");
            let (server_pem, server_key) = leaf(
                &issuer,
                vec![SERVER_NAME.to_string()],
                SERVER_NAME,
                ExtendedKeyUsagePurpose::ServerAuth,
            );
            let (client_pem, client_key) = leaf(
                &issuer,
                vec![],
                CERT_USER,
                ExtendedKeyUsagePurpose::ClientAuth,
            );
            let write = |name: &str, body: &str, mode: u32| {
                let p = path.join(name);
                std::fs::write(&p, body).unwrap();
                give(&p, mode);
                p
            };
            let p = Pki {
                ca: write("ca.pem", &ca_pem, 0o644),
                other_ca: write("other-ca.pem", &other_pem, 0o644),
                client_cert: write("client.crt", &client_pem, 0o644),
                client_key: write("client.key", &client_key, 0o600),
            };
            let server_crt = write("server.crt", &server_pem, 0o644);
            let server_key = write("server.key", &server_key, 0o600);
            conf.push_str(&format!(
                "ssl = on\nssl_cert_file = '{}'\nssl_key_file = '{}'\nssl_ca_file = '{}'\n",
                server_crt.display(),
                server_key.display(),
                p.ca.display()
            ));
            // First match wins: these roles only log in over TLS, each its own way.
            let hba = data.join("pg_hba.conf");
            let rest = std::fs::read_to_string(&hba).unwrap();
            std::fs::write(
                &hba,
                format!(
                    "hostssl all {CERT_USER} 127.0.0.1/32 cert\n\
                     hostssl all {SCRAM_USER} 127.0.0.1/32 scram-sha-256\n{rest}"
                ),
            )
            .unwrap();
            pki = Some(p);
        }
        let mut pgconf = std::fs::OpenOptions::new()
            .append(true)
            .open(data.join("postgresql.conf"))
            .unwrap();
        pgconf.write_all(conf.as_bytes()).unwrap();
        let log = path.join("server.log");
        let started = as_server(&bindir.join("pg_ctl"))
            .arg("-D")
            .arg(&data)
            .arg("-l")
            .arg(&log)
            .args(["-w", "-t", "60", "start"])
            .output()
            .unwrap();
        assert!(
            started.status.success(),
            "starting PostgreSQL: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        let server = PgServer {
            dir,
            bindir,
            runs_as,
            port,
            pki,
        };
        if tls {
            server.admin(
                "postgres",
                &format!(
                    "CREATE ROLE {CERT_USER} LOGIN;
                     CREATE ROLE {SCRAM_USER} LOGIN PASSWORD '{SCRAM_PASSWORD}';"
                ),
            );
        }
        server
    }

    fn pki(&self) -> &Pki {
        self.pki.as_ref().expect("a TLS server")
    }

    /// Runs `sql` as the superuser over the Unix socket (no TLS), off the async runtime.
    fn admin(&self, db: &str, sql: &str) {
        let (dir, port, db, sql) = (
            self.dir.path().to_path_buf(),
            self.port,
            db.to_string(),
            sql.to_string(),
        );
        std::thread::spawn(move || {
            let mut client = postgres::Config::new()
                .host_path(&dir)
                .port(port)
                .user("bosun")
                .dbname(&db)
                .connect(postgres::NoTls)
                .unwrap();
            client.batch_execute(&sql).unwrap();
        })
        .join()
        .unwrap();
    }

    /// A fresh database owned by `owner`.
    fn scratch_db(&self, owner: &str) -> String {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "bosun_tls_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        self.admin("postgres", &format!("CREATE DATABASE {name} OWNER {owner}"));
        name
    }

    /// `(application_name, ssl)` of every connection to `db`, as the server sees them.
    fn connections(&self, db: &str) -> Vec<(String, bool)> {
        let (dir, port, db) = (self.dir.path().to_path_buf(), self.port, db.to_string());
        std::thread::spawn(move || {
            let mut client = postgres::Config::new()
                .host_path(&dir)
                .port(port)
                .user("bosun")
                .dbname("postgres")
                .connect(postgres::NoTls)
                .unwrap();
            client
                .query(
                    "SELECT a.application_name, s.ssl FROM pg_stat_activity a
                     JOIN pg_stat_ssl s ON s.pid = a.pid WHERE a.datname = $1",
                    &[&db],
                )
                .unwrap()
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect()
        })
        .join()
        .unwrap()
    }

    /// A URL to `db` on this server: `host` is the name the client checks, reached at
    /// 127.0.0.1 whatever it is.
    fn url(&self, user: &str, host: &str, db: &str, params: &str) -> String {
        format!(
            "postgres://{user}@{host}:{}/{db}?hostaddr=127.0.0.1&{params}",
            self.port
        )
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let mut cmd = match self.runs_as {
            Some(_) => {
                let mut c = Command::new("runuser");
                c.args(["-u", "nobody", "--"])
                    .arg(self.bindir.join("pg_ctl"));
                c
            }
            None => Command::new(self.bindir.join("pg_ctl")),
        };
        let _ = cmd
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-m", "immediate", "-w", "stop"])
            .output();
    }
}

/// The shared server of one kind, started by the first case that needs it and stopped
/// when the last case holding it ends.
fn shared(slot: &'static Mutex<Weak<PgServer>>, tls: bool) -> Option<Arc<PgServer>> {
    let bindir = bindir_or_skip()?;
    let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(server) = slot.upgrade() {
        return Some(server);
    }
    let server = Arc::new(PgServer::start(bindir, tls));
    *slot = Arc::downgrade(&server);
    Some(server)
}

fn tls_server() -> Option<Arc<PgServer>> {
    static SLOT: Mutex<Weak<PgServer>> = Mutex::new(Weak::new());
    shared(&SLOT, true)
}

fn plain_server() -> Option<Arc<PgServer>> {
    static SLOT: Mutex<Weak<PgServer>> = Mutex::new(Weak::new());
    shared(&SLOT, false)
}

async fn open(url: &str) -> PostgresStore {
    match PostgresStore::open(url).await {
        Ok(store) => store,
        Err(e) => panic!("opening {url}: {e}"),
    }
}

async fn refused(url: &str) -> String {
    match PostgresStore::open(url).await {
        Ok(store) => {
            store.close().await;
            panic!("{url} was accepted")
        }
        Err(e) => {
            eprintln!("refused as it should be: {e}");
            e.to_string()
        }
    }
}

/// The store's smoke: it migrated, and a write reads back.
async fn smoke(store: &PostgresStore) {
    assert!(store.schema_version().await.unwrap() > 0);
    let audit = Audit {
        org: None,
        actor: "system".into(),
        token_id: None,
        action: "org.create".into(),
        target: "org:tls".into(),
        detail: serde_json::json!({}),
    };
    store
        .create_org(
            &NewOrg {
                id: "tls".into(),
                name: "Over TLS".into(),
                admin: None,
            },
            &audit,
        )
        .await
        .unwrap();
    let org = store
        .get_org("tls")
        .await
        .unwrap()
        .expect("the org just written");
    assert_eq!(org.name, "Over TLS");
}

/// Every connection the store holds to `db` (the pool's and the signal listener's) is
/// encrypted, or none is.
fn assert_all_ssl(server: &PgServer, db: &str, want: bool) {
    let conns = server.connections(db);
    assert!(
        conns.iter().any(|(app, _)| app == "bosun-listener"),
        "the listener's connection is among {conns:?}"
    );
    assert!(conns.len() >= 2, "pool and listener: {conns:?}");
    assert!(
        conns.iter().all(|(_, ssl)| *ssl == want),
        "ssl = {want} for all of {conns:?}"
    );
}

#[tokio::test]
async fn verify_full_with_the_servers_ca_encrypts_every_connection() {
    let Some(server) = tls_server() else { return };
    let db = server.scratch_db("bosun");
    let url = server.url(
        "bosun",
        SERVER_NAME,
        &db,
        &format!(
            "sslmode=verify-full&sslrootcert={}",
            server.pki().ca.display()
        ),
    );
    let store = open(&url).await;
    smoke(&store).await;
    assert_all_ssl(&server, &db, true);
    store.close().await;
}

#[tokio::test]
async fn verify_full_refuses_a_certificate_from_another_ca() {
    let Some(server) = tls_server() else { return };
    let db = server.scratch_db("bosun");
    let other = server.pki().other_ca.display().to_string();
    for mode in ["verify-full", "verify-ca"] {
        let url = server.url(
            "bosun",
            SERVER_NAME,
            &db,
            &format!("sslmode={mode}&sslrootcert={other}"),
        );
        let err = refused(&url).await;
        assert!(err.contains("certificate not trusted"), "{mode}: {err}");
        assert!(err.contains(&other), "{mode}: names the CA file: {err}");
    }
}

#[tokio::test]
async fn verify_full_refuses_a_host_the_certificate_does_not_name_and_verify_ca_does_not_check_it()
{
    let Some(server) = tls_server() else { return };
    let db = server.scratch_db("bosun");
    let ca = server.pki().ca.display().to_string();
    let url = |mode: &str| {
        server.url(
            "bosun",
            "127.0.0.1",
            &db,
            &format!("sslmode={mode}&sslrootcert={ca}"),
        )
    };
    let err = refused(&url("verify-full")).await;
    assert!(
        err.contains("does not name host \"127.0.0.1\"") && err.contains(SERVER_NAME),
        "{err}"
    );
    let store = open(&url("verify-ca")).await;
    smoke(&store).await;
    assert_all_ssl(&server, &db, true);
    store.close().await;
}

#[tokio::test]
async fn require_encrypts_without_a_ca_and_checks_the_chain_when_given_one() {
    let Some(server) = tls_server() else { return };
    let db = server.scratch_db("bosun");
    let store = open(&server.url("bosun", "127.0.0.1", &db, "sslmode=require")).await;
    smoke(&store).await;
    assert_all_ssl(&server, &db, true);
    store.close().await;
    // As in libpq: a root certificate makes `require` check the chain.
    let err = refused(&server.url(
        "bosun",
        "127.0.0.1",
        &db,
        &format!(
            "sslmode=require&sslrootcert={}",
            server.pki().other_ca.display()
        ),
    ))
    .await;
    assert!(err.contains("certificate not trusted"), "{err}");
}

#[tokio::test]
async fn no_sslmode_prefers_tls_when_the_server_offers_it() {
    let Some(server) = tls_server() else { return };
    let db = server.scratch_db("bosun");
    let store = open(&server.url("bosun", "127.0.0.1", &db, "application_name=bosun")).await;
    assert_all_ssl(&server, &db, true);
    store.close().await;
}

#[tokio::test]
async fn a_server_without_tls_is_refused_by_verify_full_and_require_but_not_by_prefer() {
    let Some(server) = plain_server() else { return };
    let db = server.scratch_db("bosun");
    let dir = tempfile::tempdir().unwrap();
    let (ca, _) = ca("Bosun test CA");
    let ca_path = dir.path().join("ca.pem");
    std::fs::write(&ca_path, ca).unwrap();
    for params in [
        format!("sslmode=verify-full&sslrootcert={}", ca_path.display()),
        "sslmode=require".to_string(),
    ] {
        let err = refused(&server.url("bosun", SERVER_NAME, &db, &params)).await;
        assert!(
            err.contains("server does not support TLS"),
            "{params}: {err}"
        );
    }
    for params in [
        "sslmode=prefer",
        "sslmode=disable",
        "application_name=bosun",
    ] {
        let store = open(&server.url("bosun", SERVER_NAME, &db, params)).await;
        smoke_or_reopened(&store).await;
        assert_all_ssl(&server, &db, false);
        store.close().await;
    }
}

/// `smoke` on a database that may already hold its org (a second store on it).
async fn smoke_or_reopened(store: &PostgresStore) {
    if store.get_org("tls").await.unwrap().is_none() {
        smoke(store).await;
    }
}

#[tokio::test]
async fn a_client_certificate_logs_in_where_the_server_asks_for_one() {
    let Some(server) = tls_server() else { return };
    let db = server.scratch_db(CERT_USER);
    let pki = server.pki();
    let base = format!("sslmode=verify-full&sslrootcert={}", pki.ca.display());
    let err = refused(&server.url(CERT_USER, SERVER_NAME, &db, &base)).await;
    assert!(err.contains("certificate"), "{err}");
    let url = server.url(
        CERT_USER,
        SERVER_NAME,
        &db,
        &format!(
            "{base}&sslcert={}&sslkey={}",
            pki.client_cert.display(),
            pki.client_key.display()
        ),
    );
    let store = open(&url).await;
    smoke(&store).await;
    assert_all_ssl(&server, &db, true);
    store.close().await;
}

#[tokio::test]
async fn scram_binds_to_the_tls_channel() {
    let Some(server) = tls_server() else { return };
    let db = server.scratch_db(SCRAM_USER);
    let url = format!(
        "postgres://{SCRAM_USER}:{SCRAM_PASSWORD}@{SERVER_NAME}:{}/{db}?hostaddr=127.0.0.1\
         &sslmode=verify-full&sslrootcert={}&channel_binding=require",
        server.port,
        server.pki().ca.display()
    );
    let store = open(&url).await;
    smoke(&store).await;
    assert_all_ssl(&server, &db, true);
    store.close().await;
}
