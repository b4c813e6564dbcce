//! What plans run against (one source for both backends; see `super::db`): environments (with the users granted approval on
//! them), hosts and plan files, all org-scoped. A host's environment is a foreign key
//! without cascade: deleting an environment that hosts are in is refused, naming them.
//! A host's bastion (`proxy_jump`) is another host of its org, by name: every write
//! checks the chains it touches inside its transaction (a bastion the org has, an `ssh`
//! one, no cycle), and a host others jump through is neither deleted nor made `local`.
//! An inventory import upserts environments, then hosts, in one transaction, and checks
//! the bastions once every host is written (a host may jump through one the same file
//! adds later).

use super::audit::append_audit;
use super::*;

const ENV_COLUMNS: &str =
    "org_id, id, vars, requires_approval, protected, created_at, updated_at, hosts_from";

type EnvRow = (String, String, String, bool, bool, i64, i64, Option<String>);

fn env_row(r: &Row<'_>) -> db::Result<EnvRow> {
    EnvRow::try_from(r)
}

fn vars_map(what: &str, text: &str) -> Result<BTreeMap<String, Value>> {
    serde_json::from_str(text).map_err(|e| corrupt(what, e))
}

fn env_record(r: EnvRow) -> Result<EnvironmentRecord> {
    Ok(EnvironmentRecord {
        vars: vars_map("environment vars", &r.2)?,
        org: r.0,
        id: r.1,
        requires_approval: r.3,
        protected: r.4,
        grants: Vec::new(),
        hosts_from: r
            .7
            .map(|t| serde_json::from_str(&t))
            .transpose()
            .map_err(|e| corrupt("environment hosts_from", e))?,
        created_at: from_millis(r.5)?,
        updated_at: from_millis(r.6)?,
    })
}

fn with_grants(c: &Connection, mut env: EnvironmentRecord) -> Result<EnvironmentRecord> {
    let mut stmt = c.prepare_cached(
        "SELECT user_id FROM environment_grants WHERE org_id = ?1 AND environment_id = ?2
         ORDER BY user_id",
    )?;
    let rows = stmt.query_map(params![env.org, env.id], |r| r.get::<_, String>(0))?;
    env.grants = rows.collect::<db::Result<_>>()?;
    Ok(env)
}

pub(super) fn load_env(c: &Connection, org: &str, id: &str) -> Result<Option<EnvironmentRecord>> {
    let found = query_decoded(
        c,
        &format!("SELECT {ENV_COLUMNS} FROM environments WHERE org_id = ?1 AND id = ?2"),
        params![org, id],
        env_row,
        env_record,
    )?
    .pop();
    found.map(|e| with_grants(c, e)).transpose()
}

pub(super) fn list_envs(c: &Connection, org: &str) -> Result<Vec<EnvironmentRecord>> {
    let envs = query_decoded(
        c,
        &format!("SELECT {ENV_COLUMNS} FROM environments WHERE org_id = ?1 ORDER BY id"),
        params![org],
        env_row,
        env_record,
    )?;
    envs.into_iter().map(|e| with_grants(c, e)).collect()
}

fn env_exists(c: &Connection, org: &str, id: &str) -> Result<bool> {
    exists(
        c,
        "SELECT 1 FROM environments WHERE org_id = ?1 AND id = ?2",
        params![org, id],
    )
}

fn require_org(c: &Connection, org: &str) -> Result<()> {
    if exists(c, "SELECT 1 FROM orgs WHERE id = ?1", params![org])? {
        Ok(())
    } else {
        Err(StoreError::NotFound(format!("org {org:?}")))
    }
}

fn insert_env(tx: &Transaction<'_>, e: &NewEnvironment, by: &str) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO environments (org_id, id, vars, requires_approval, protected,
            created_at, updated_at, updated_by, hosts_from)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7, ?8)",
    )?
    .execute(params![
        e.org,
        e.id,
        json!(e.vars).to_string(),
        e.requires_approval,
        e.protected,
        millis(Utc::now()),
        by,
        e.hosts_from.as_ref().map(Value::to_string),
    ])
    .map_err(|err| exists_or(err, || format!("environment {:?}", e.id)))?;
    super::approvals::regate_environment(tx, &e.org, &e.id)
}

/// Returns whether the environment existed. An inventory import (`keep_sources`) keeps
/// the environment's `hosts_from`: an inventory file does not have it.
fn update_env_row(
    tx: &Transaction<'_>,
    e: &NewEnvironment,
    by: &str,
    keep_sources: bool,
) -> Result<bool> {
    let n = tx
        .prepare_cached(
            "UPDATE environments SET vars = ?3, requires_approval = ?4, protected = ?5,
                updated_at = ?6, updated_by = ?7,
                hosts_from = CASE WHEN ?9 = 1 THEN hosts_from ELSE ?8 END
             WHERE org_id = ?1 AND id = ?2",
        )?
        .execute(params![
            e.org,
            e.id,
            json!(e.vars).to_string(),
            e.requires_approval,
            e.protected,
            millis(Utc::now()),
            by,
            e.hosts_from.as_ref().map(Value::to_string),
            i64::from(keep_sources),
        ])?;
    if n > 0 {
        super::approvals::regate_environment(tx, &e.org, &e.id)?;
        if !keep_sources && e.hosts_from.is_none() {
            drop_sourced_hosts(tx, &e.org, &e.id)?;
        }
    }
    Ok(n > 0)
}

/// Removes the hosts `owner` (an environment, or `plan:<name>`) took from stacks'
/// outputs: it takes none any more. Refused while other hosts jump through one.
fn drop_sourced_hosts(tx: &Transaction<'_>, org: &str, owner: &str) -> Result<()> {
    let names: Vec<String> = tx
        .prepare_cached("SELECT name FROM hosts WHERE org_id = ?1 AND source_env = ?2")?
        .query_map(params![org, owner], |r| r.get(0))?
        .collect::<db::Result<_>>()?;
    for name in names {
        let jumping = jumping_through(tx, org, &name)?;
        if !jumping.is_empty() {
            return Err(StoreError::HostInUse {
                host: name,
                hosts: jumping,
            });
        }
        tx.prepare_cached("DELETE FROM hosts WHERE org_id = ?1 AND name = ?2")?
            .execute(params![org, name])?;
    }
    Ok(())
}

const HOST_COLUMNS: &str = "org_id, name, address, port, \"user\", connection, labels, vars,
    environment_id, identity_file, host_key, known_hosts, created_at, updated_at, proxy_jump,
    source";

type HostRow = (
    String,
    String,
    String,
    i64,
    Option<String>,
    String,
    String,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    i64,
    i64,
    Option<String>,
    Option<String>,
);

fn host_row(r: &Row<'_>) -> db::Result<HostRow> {
    HostRow::try_from(r)
}

fn host_record(r: HostRow) -> Result<HostRecord> {
    let (
        org,
        name,
        address,
        port,
        user,
        connection,
        labels,
        vars,
        env,
        id_file,
        key,
        kh,
        c,
        u,
        jump,
        source,
    ) = r;
    Ok(HostRecord {
        port: u16::try_from(port).map_err(|e| corrupt("host port", e))?,
        labels: serde_json::from_str(&labels).map_err(|e| corrupt("host labels", e))?,
        vars: vars_map("host vars", &vars)?,
        org,
        name,
        address,
        user,
        connection,
        environment: env,
        identity_file: id_file,
        host_key: key,
        known_hosts: kh,
        proxy_jump: jump,
        source: source
            .map(|t| serde_json::from_str(&t))
            .transpose()
            .map_err(|e| corrupt("host source", e))?,
        created_at: from_millis(c)?,
        updated_at: from_millis(u)?,
    })
}

pub(super) fn load_host(c: &Connection, org: &str, name: &str) -> Result<Option<HostRecord>> {
    Ok(query_decoded(
        c,
        &format!("SELECT {HOST_COLUMNS} FROM hosts WHERE org_id = ?1 AND name = ?2"),
        params![org, name],
        host_row,
        host_record,
    )?
    .pop())
}

fn check_host_env(tx: &Transaction<'_>, h: &NewHost) -> Result<()> {
    match &h.environment {
        Some(env) if !env_exists(tx, &h.org, env)? => {
            Err(StoreError::UnknownEnvironment(env.clone()))
        }
        _ => Ok(()),
    }
}

/// The hosts of `org` whose bastion is `name`, by name.
fn jumping_through(c: &Connection, org: &str, name: &str) -> Result<Vec<String>> {
    let names = c
        .prepare_cached(
            "SELECT name FROM hosts WHERE org_id = ?1 AND proxy_jump = ?2 ORDER BY name",
        )?
        .query_map(params![org, name], |r| r.get(0))?
        .collect::<db::Result<_>>()?;
    Ok(names)
}

/// Refuses making `h` a `local` host while other hosts jump through it.
fn check_still_a_bastion(tx: &Transaction<'_>, h: &NewHost) -> Result<()> {
    if h.connection != "local" {
        return Ok(());
    }
    let hosts = jumping_through(tx, &h.org, &h.name)?;
    if hosts.is_empty() {
        Ok(())
    } else {
        Err(StoreError::HostInUse {
            host: h.name.clone(),
            hosts,
        })
    }
}

/// Checks the bastion chain of host `name` of `org` as it stands in `tx`: every bastion
/// a host of the org with `connection: ssh`, and no host met twice. A chain's length is
/// the server's to limit (it parses the org's hosts as an inventory).
fn check_host_bastion(tx: &Transaction<'_>, org: &str, name: &str) -> Result<()> {
    let hop = |host: &str| -> Result<Option<(String, Option<String>)>> {
        Ok(tx
            .prepare_cached(
                "SELECT connection, proxy_jump FROM hosts WHERE org_id = ?1 AND name = ?2",
            )?
            .query_row(params![org, host], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?)
    };
    let Some((connection, Some(first))) = hop(name)? else {
        return Ok(());
    };
    let refuse = |why: String| StoreError::InvalidBastion {
        host: name.to_string(),
        bastion: first.clone(),
        why,
    };
    if connection == "local" {
        return Err(refuse(
            "a host with connection `local` is this machine: it has no bastion".into(),
        ));
    }
    let mut chain = vec![name.to_string()];
    let mut next = Some(first.clone());
    while let Some(bastion) = next {
        let Some((connection, jump)) = hop(&bastion)? else {
            return Err(refuse(format!("the org has no host {bastion:?}")));
        };
        if connection == "local" {
            return Err(refuse(format!(
                "host {bastion:?} has connection `local`: a bastion is an ssh host"
            )));
        }
        if let Some(k) = chain.iter().position(|c| *c == bastion) {
            let mut cycle = chain[k..].to_vec();
            cycle.push(bastion);
            return Err(refuse(format!(
                "the chain of bastions goes round in a cycle: {}",
                cycle.join(" → ")
            )));
        }
        chain.push(bastion);
        next = jump;
    }
    Ok(())
}

fn insert_host(tx: &Transaction<'_>, h: &NewHost, by: &str) -> Result<()> {
    check_host_env(tx, h)?;
    tx.prepare_cached(
        "INSERT INTO hosts (org_id, name, address, port, \"user\", connection, labels, vars,
            environment_id, identity_file, host_key, known_hosts, created_at, updated_at,
            updated_by, proxy_jump)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?13, ?14, ?15)",
    )?
    .execute(params![
        h.org,
        h.name,
        h.address,
        h.port,
        h.user,
        h.connection,
        json!(h.labels).to_string(),
        json!(h.vars).to_string(),
        h.environment,
        h.identity_file,
        h.host_key,
        h.known_hosts,
        millis(Utc::now()),
        by,
        h.proxy_jump,
    ])
    .map_err(|e| exists_or(e, || format!("host {:?}", h.name)))?;
    Ok(())
}

/// Returns whether the host existed.
fn update_host_row(tx: &Transaction<'_>, h: &NewHost, by: &str) -> Result<bool> {
    check_host_env(tx, h)?;
    check_still_a_bastion(tx, h)?;
    let n = tx
        .prepare_cached(
            "UPDATE hosts SET address = ?3, port = ?4, \"user\" = ?5, connection = ?6,
                labels = ?7, vars = ?8, environment_id = ?9, identity_file = ?10,
                host_key = ?11, known_hosts = ?12, updated_at = ?13, updated_by = ?14,
                proxy_jump = ?15
             WHERE org_id = ?1 AND name = ?2",
        )?
        .execute(params![
            h.org,
            h.name,
            h.address,
            h.port,
            h.user,
            h.connection,
            json!(h.labels).to_string(),
            json!(h.vars).to_string(),
            h.environment,
            h.identity_file,
            h.host_key,
            h.known_hosts,
            millis(Utc::now()),
            by,
            h.proxy_jump,
        ])?;
    Ok(n > 0)
}

const PLAN_COLUMNS: &str = "org_id, name, source, version, created_at, updated_at, updated_by";

type PlanRow = (String, String, String, i64, i64, i64, String);

fn plan_row(r: &Row<'_>) -> db::Result<PlanRow> {
    PlanRow::try_from(r)
}

fn plan_record(r: PlanRow) -> Result<PlanRecord> {
    Ok(PlanRecord {
        org: r.0,
        name: r.1,
        source: r.2,
        version: r.3,
        created_at: from_millis(r.4)?,
        updated_at: from_millis(r.5)?,
        updated_by: r.6,
    })
}

pub(super) fn load_plan(c: &Connection, org: &str, name: &str) -> Result<Option<PlanRecord>> {
    Ok(query_decoded(
        c,
        &format!("SELECT {PLAN_COLUMNS} FROM plans WHERE org_id = ?1 AND name = ?2"),
        params![org, name],
        plan_row,
        plan_record,
    )?
    .pop())
}

pub(super) fn create_environment(
    tx: &Transaction<'_>,
    e: &NewEnvironment,
    audit: &Audit,
) -> Result<EnvironmentRecord> {
    require_org(tx, &e.org)?;
    insert_env(tx, e, &audit.actor)?;
    append_audit(tx, audit)?;
    load_env(tx, &e.org, &e.id)?.ok_or_else(|| vanished("environment"))
}

pub(super) fn update_environment(
    tx: &Transaction<'_>,
    e: &NewEnvironment,
    audit: &Audit,
) -> Result<EnvironmentRecord> {
    if !update_env_row(tx, e, &audit.actor, false)? {
        return Err(StoreError::NotFound(format!("environment {:?}", e.id)));
    }
    append_audit(tx, audit)?;
    load_env(tx, &e.org, &e.id)?.ok_or_else(|| vanished("environment"))
}

pub(super) fn delete_environment(
    tx: &Transaction<'_>,
    org: &str,
    id: &str,
    audit: &Audit,
) -> Result<bool> {
    if !env_exists(tx, org, id)? {
        return Ok(false);
    }
    let hosts: Vec<String> = tx
        .prepare_cached(
            "SELECT name FROM hosts WHERE org_id = ?1 AND environment_id = ?2
             ORDER BY name",
        )?
        .query_map(params![org, id], |r| r.get(0))?
        .collect::<db::Result<_>>()?;
    if !hosts.is_empty() {
        return Err(StoreError::EnvironmentInUse {
            environment: id.to_string(),
            hosts,
        });
    }
    tx.prepare_cached("DELETE FROM environments WHERE org_id = ?1 AND id = ?2")?
        .execute(params![org, id])?;
    super::approvals::regate_environment(tx, org, id)?;
    append_audit(tx, audit)?;
    Ok(true)
}

pub(super) fn grant(
    tx: &Transaction<'_>,
    org: &str,
    env: &str,
    user: &str,
    audit: &Audit,
) -> Result<bool> {
    if !env_exists(tx, org, env)? {
        return Err(StoreError::NotFound(format!("environment {env:?}")));
    }
    if !exists(tx, "SELECT 1 FROM users WHERE id = ?1", params![user])? {
        return Err(StoreError::NotFound(format!("user {user:?}")));
    }
    let n = tx
        .prepare_cached(
            "INSERT INTO environment_grants (org_id, environment_id, user_id,
                granted_at, granted_by)
             VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT DO NOTHING",
        )?
        .execute(params![org, env, user, millis(Utc::now()), audit.actor])?;
    if n > 0 {
        append_audit(tx, audit)?;
    }
    Ok(n > 0)
}

pub(super) fn revoke(
    tx: &Transaction<'_>,
    org: &str,
    env: &str,
    user: &str,
    audit: &Audit,
) -> Result<bool> {
    if !env_exists(tx, org, env)? {
        return Err(StoreError::NotFound(format!("environment {env:?}")));
    }
    let n = tx
        .prepare_cached(
            "DELETE FROM environment_grants
             WHERE org_id = ?1 AND environment_id = ?2 AND user_id = ?3",
        )?
        .execute(params![org, env, user])?;
    if n > 0 {
        append_audit(tx, audit)?;
    }
    Ok(n > 0)
}

pub(super) fn create_host(tx: &Transaction<'_>, h: &NewHost, audit: &Audit) -> Result<HostRecord> {
    require_org(tx, &h.org)?;
    insert_host(tx, h, &audit.actor)?;
    check_host_bastion(tx, &h.org, &h.name)?;
    append_audit(tx, audit)?;
    load_host(tx, &h.org, &h.name)?.ok_or_else(|| vanished("host"))
}

pub(super) fn update_host(tx: &Transaction<'_>, h: &NewHost, audit: &Audit) -> Result<HostRecord> {
    if !update_host_row(tx, h, &audit.actor)? {
        return Err(StoreError::NotFound(format!("host {:?}", h.name)));
    }
    check_host_bastion(tx, &h.org, &h.name)?;
    append_audit(tx, audit)?;
    load_host(tx, &h.org, &h.name)?.ok_or_else(|| vanished("host"))
}

pub(super) fn list_hosts(c: &Connection, org: &str) -> Result<Vec<HostRecord>> {
    query_decoded(
        c,
        &format!("SELECT {HOST_COLUMNS} FROM hosts WHERE org_id = ?1 ORDER BY name"),
        params![org],
        host_row,
        host_record,
    )
}

pub(super) fn list_hosts_page(
    c: &Connection,
    org: &str,
    after: &str,
    limit: u32,
) -> Result<Vec<HostRecord>> {
    query_decoded(
        c,
        &format!(
            "SELECT {HOST_COLUMNS} FROM hosts WHERE org_id = ?1 AND name > ?2
             ORDER BY name LIMIT ?3"
        ),
        params![org, after, limit],
        host_row,
        host_record,
    )
}

pub(super) fn delete_host(
    tx: &Transaction<'_>,
    org: &str,
    name: &str,
    audit: &Audit,
) -> Result<bool> {
    let hosts = jumping_through(tx, org, name)?;
    if !hosts.is_empty() {
        return Err(StoreError::HostInUse {
            host: name.to_string(),
            hosts,
        });
    }
    let n = tx
        .prepare_cached("DELETE FROM hosts WHERE org_id = ?1 AND name = ?2")?
        .execute(params![org, name])?;
    if n > 0 {
        append_audit(tx, audit)?;
    }
    Ok(n > 0)
}

pub(super) fn import_inventory(
    tx: &Transaction<'_>,
    import: &InventoryImport,
    audit: &Audit,
) -> Result<InventoryImported> {
    require_org(tx, &import.org)?;
    let mut out = InventoryImported::default();
    for e in &import.environments {
        if update_env_row(tx, e, &audit.actor, true)? {
            out.environments_updated.push(e.id.clone());
        } else {
            insert_env(tx, e, &audit.actor)?;
            out.environments_created.push(e.id.clone());
        }
    }
    for h in &import.hosts {
        // A host taken from a stack's output is its environment's sources' to change.
        let sourced: Option<Option<String>> = tx
            .prepare_cached("SELECT source_env FROM hosts WHERE org_id = ?1 AND name = ?2")?
            .query_row(params![import.org, h.name], |r| r.get(0))
            .optional()?;
        if let Some(Some(env)) = sourced {
            return Err(StoreError::AlreadyExists(format!(
                "host {:?} (taken from a stack's output by environment {env:?}; an inventory \
                 does not replace it)",
                h.name
            )));
        }
        if update_host_row(tx, h, &audit.actor)? {
            out.hosts_updated.push(h.name.clone());
        } else {
            insert_host(tx, h, &audit.actor)?;
            out.hosts_created.push(h.name.clone());
        }
    }
    // Once every host is written: a host may jump through one written after it.
    for h in &import.hosts {
        check_host_bastion(tx, &import.org, &h.name)?;
    }
    let mut audit = audit.clone();
    if let Value::Object(detail) = &mut audit.detail {
        detail.insert(
            "environments_created".into(),
            json!(out.environments_created),
        );
        detail.insert(
            "environments_updated".into(),
            json!(out.environments_updated),
        );
        detail.insert("hosts_created".into(), json!(out.hosts_created));
        detail.insert("hosts_updated".into(), json!(out.hosts_updated));
    }
    append_audit(tx, &audit)?;
    Ok(out)
}

pub(super) fn save_plan(tx: &Transaction<'_>, p: &NewPlan, audit: &Audit) -> Result<PlanRecord> {
    require_org(tx, &p.org)?;
    // A plan fed by a stack is a node of the org's dependency graph: its edge is checked
    // like a stack's `depends_on` (the stack exists, no cycle closes).
    let plan = bosun_core::graph::Node::plan(p.name.as_str());
    let edges: Vec<bosun_core::graph::Edge> = p
        .on_stack_change
        .iter()
        .map(|(stack, outputs)| bosun_core::graph::Edge::feeds(stack, &p.name, outputs))
        .collect();
    super::graph::check_upstreams(tx, &p.org, &plan, &edges, "on_stack_change.stack")?;
    let now = millis(Utc::now());
    tx.prepare_cached(
        "INSERT INTO plans (org_id, name, source, version, created_at, updated_at,
            updated_by, watch_stack, watch_outputs)
         VALUES (?1, ?2, ?3, 1, ?4, ?4, ?5, ?6, ?7)
         ON CONFLICT (org_id, name) DO UPDATE SET source = excluded.source,
            version = plans.version + 1, updated_at = excluded.updated_at,
            updated_by = excluded.updated_by, watch_stack = excluded.watch_stack,
            watch_outputs = excluded.watch_outputs",
    )?
    .execute(params![
        p.org,
        p.name,
        p.source,
        now,
        audit.actor,
        p.on_stack_change.as_ref().map(|(stack, _)| stack.clone()),
        p.on_stack_change
            .as_ref()
            .map(|(_, outputs)| json!(outputs).to_string()),
    ])?;
    let saved = load_plan(tx, &p.org, &p.name)?.ok_or_else(|| vanished("plan"))?;
    let schedule = super::approvals::save_file_schedule(tx, p, &audit.actor)?;
    let mut audit = audit.clone();
    if let Value::Object(detail) = &mut audit.detail {
        detail.insert("version".into(), json!(saved.version));
        if let Some(change) = schedule {
            detail.insert("schedule".into(), json!(change));
        }
    }
    append_audit(tx, &audit)?;
    Ok(saved)
}

pub(super) fn list_plans(c: &Connection, org: &str) -> Result<Vec<PlanRecord>> {
    query_decoded(
        c,
        &format!("SELECT {PLAN_COLUMNS} FROM plans WHERE org_id = ?1 ORDER BY name"),
        params![org],
        plan_row,
        plan_record,
    )
}

pub(super) fn list_plans_page(
    c: &Connection,
    org: &str,
    after: &str,
    limit: u32,
) -> Result<Vec<PlanRecord>> {
    query_decoded(
        c,
        &format!(
            "SELECT {PLAN_COLUMNS} FROM plans WHERE org_id = ?1 AND name > ?2
             ORDER BY name LIMIT ?3"
        ),
        params![org, after, limit],
        plan_row,
        plan_record,
    )
}

pub(super) fn delete_plan(
    tx: &Transaction<'_>,
    org: &str,
    name: &str,
    audit: &Audit,
) -> Result<bool> {
    let n = tx
        .prepare_cached("DELETE FROM plans WHERE org_id = ?1 AND name = ?2")?
        .execute(params![org, name])?;
    if n > 0 {
        // The hosts its targets took from stacks' outputs go with it.
        drop_sourced_hosts(tx, org, &format!("plan:{name}"))?;
        append_audit(tx, audit)?;
    }
    Ok(n > 0)
}

/// Replaces the hosts `s.owner` (an environment, or a plan's targets) takes from stacks'
/// outputs with `s.hosts`, in one transaction: a host already there from this owner is
/// updated (when it changed), a new one added, one no longer given removed. A name taken
/// by a host added by hand, or taken from another owner's sources, is refused naming it:
/// a stack's output never replaces a host someone else manages.
pub(super) fn sync_sourced_hosts(
    tx: &Transaction<'_>,
    s: &SourcedHosts,
    audit: &Audit,
) -> Result<SourcedSync> {
    require_org(tx, &s.org)?;
    if let Some(env) = &s.environment {
        if !env_exists(tx, &s.org, env)? {
            return Err(StoreError::UnknownEnvironment(env.clone()));
        }
    }
    let mut out = SourcedSync::default();
    for (host, source) in &s.hosts {
        let owner: Option<Option<String>> = tx
            .prepare_cached("SELECT source_env FROM hosts WHERE org_id = ?1 AND name = ?2")?
            .query_row(params![s.org, host.name], |r| r.get(0))
            .optional()?;
        let current = load_host(tx, &s.org, &host.name)?;
        match owner {
            None => {
                insert_host(tx, host, &audit.actor)?;
                out.added.push(host.name.clone());
            }
            Some(Some(owner)) if owner == s.owner => {
                let unchanged = current.as_ref().is_some_and(|c| {
                    c.address == host.address
                        && c.port == host.port
                        && c.user == host.user
                        && c.labels == host.labels
                        && c.vars == host.vars
                        && c.host_key == host.host_key
                        && c.identity_file == host.identity_file
                        && c.known_hosts == host.known_hosts
                        && c.environment == host.environment
                        && c.source.as_ref() == Some(source)
                });
                if unchanged {
                    continue;
                }
                update_host_row(tx, host, &audit.actor)?;
                out.updated.push(host.name.clone());
            }
            Some(Some(owner)) => {
                return Err(StoreError::AlreadyExists(format!(
                    "host {:?} (taken from a stack's output by {owner:?})",
                    host.name
                )))
            }
            Some(None) => {
                return Err(StoreError::AlreadyExists(format!(
                    "host {:?} (added by hand or by an inventory import)",
                    host.name
                )))
            }
        }
        tx.prepare_cached(
            "UPDATE hosts SET source_env = ?3, source = ?4 WHERE org_id = ?1 AND name = ?2",
        )?
        .execute(params![s.org, host.name, s.owner, source.to_string()])?;
        check_host_bastion(tx, &s.org, &host.name)?;
    }
    let stale: Vec<String> = tx
        .prepare_cached(
            "SELECT name FROM hosts WHERE org_id = ?1 AND source_env = ?2 ORDER BY name",
        )?
        .query_map(params![s.org, s.owner], |r| r.get(0))?
        .collect::<db::Result<Vec<String>>>()?
        .into_iter()
        .filter(|name| !s.hosts.iter().any(|(h, _)| &h.name == name))
        .collect();
    for name in stale {
        let jumping = jumping_through(tx, &s.org, &name)?;
        if !jumping.is_empty() {
            return Err(StoreError::HostInUse {
                host: name,
                hosts: jumping,
            });
        }
        tx.prepare_cached("DELETE FROM hosts WHERE org_id = ?1 AND name = ?2")?
            .execute(params![s.org, name])?;
        out.removed.push(name);
    }
    if !(out.added.is_empty() && out.updated.is_empty() && out.removed.is_empty()) {
        let mut audit = audit.clone();
        audit.detail = json!({"owner": s.owner, "added": out.added,
            "updated": out.updated, "removed": out.removed});
        append_audit(tx, &audit)?;
    }
    Ok(out)
}
