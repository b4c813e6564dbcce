//! The copies of the templates, in bulk SQL, with ids and references of their own.

use super::*;

// --- the copies, in bulk SQL --------------------------------------------------------------

#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Dialect {
    Sqlite,
    Postgres,
}

pub(crate) enum Conn {
    Sqlite(rusqlite::Connection),
    Postgres(Box<postgres::Client>),
}

pub(crate) struct Bulk {
    pub(crate) conn: Conn,
    pub(crate) d: Dialect,
}

impl Bulk {
    pub(crate) fn open(backend: &Backend) -> R<Bulk> {
        Ok(match backend {
            Backend::Sqlite(p) => {
                let c = rusqlite::Connection::open(p)?;
                c.busy_timeout(std::time::Duration::from_secs(30))?;
                c.pragma_update(None, "journal_mode", "WAL")?;
                c.pragma_update(None, "synchronous", "NORMAL")?;
                c.pragma_update(None, "foreign_keys", "ON")?;
                // A large page cache: the copies' ids land all over the indexes.
                c.pragma_update(None, "cache_size", -1024 * 1024)?;
                c.pragma_update(None, "temp_store", "MEMORY")?;
                Bulk {
                    conn: Conn::Sqlite(c),
                    d: Dialect::Sqlite,
                }
            }
            Backend::Postgres(u) => {
                let c = postgres::Client::connect(u, postgres::NoTls)?;
                Bulk {
                    conn: Conn::Postgres(Box::new(c)),
                    d: Dialect::Postgres,
                }
            }
        })
    }

    pub(crate) fn batch(&mut self, sql: &str) -> R<()> {
        let done: R<()> = match &mut self.conn {
            Conn::Sqlite(c) => c.execute_batch(sql).map_err(Into::into),
            Conn::Postgres(c) => c.batch_execute(sql).map_err(Into::into),
        };
        done.map_err(|e| format!("{e}\nin: {sql}").into())
    }

    /// Runs one statement; the rows it changed.
    pub(crate) fn exec(&mut self, sql: &str) -> R<u64> {
        let done: R<u64> = match &mut self.conn {
            Conn::Sqlite(c) => c.execute(sql, []).map(|n| n as u64).map_err(Into::into),
            Conn::Postgres(c) => c.execute(sql, &[]).map_err(Into::into),
        };
        done.map_err(|e| format!("{e}\nin: {sql}").into())
    }

    /// Every row of a query whose columns are all text (cast them).
    pub(crate) fn texts(&mut self, sql: &str) -> R<Vec<Vec<Option<String>>>> {
        let mut out = Vec::new();
        match &mut self.conn {
            Conn::Sqlite(c) => {
                let mut stmt = c.prepare(sql)?;
                let n = stmt.column_count();
                let mut rows = stmt.query([])?;
                while let Some(row) = rows.next()? {
                    out.push(
                        (0..n)
                            .map(|i| row.get::<_, Option<String>>(i))
                            .collect::<Result<_, _>>()?,
                    );
                }
            }
            Conn::Postgres(c) => {
                for row in c.query(sql, &[])? {
                    out.push(
                        (0..row.len())
                            .map(|i| row.try_get::<_, Option<String>>(i))
                            .collect::<Result<_, _>>()?,
                    );
                }
            }
        }
        Ok(out)
    }

    /// The number a `SELECT COUNT(*) …` gives.
    pub(crate) fn count(&mut self, sql: &str) -> R<i64> {
        let rows = self.texts(&format!("SELECT CAST(({sql}) AS TEXT)"))?;
        let v = rows
            .first()
            .and_then(|r| r.first().cloned().flatten())
            .ok_or_else(|| format!("no count from {sql}"))?;
        Ok(v.parse()?)
    }

    pub(crate) fn columns(&mut self, table: &str) -> R<Vec<String>> {
        let sql = match self.d {
            Dialect::Sqlite => {
                format!("SELECT name FROM pragma_table_info('{table}') ORDER BY cid")
            }
            Dialect::Postgres => format!(
                "SELECT CAST(column_name AS TEXT) FROM information_schema.columns
                 WHERE table_schema = current_schema() AND table_name = '{table}'
                 ORDER BY ordinal_position"
            ),
        };
        let cols: Vec<String> = self
            .texts(&sql)?
            .into_iter()
            .filter_map(|r| r.into_iter().next().flatten())
            .collect();
        if cols.is_empty() {
            return Err(format!("no table {table}").into());
        }
        Ok(cols)
    }

    pub(crate) fn text_type(&self) -> &'static str {
        match self.d {
            Dialect::Sqlite => "TEXT",
            Dialect::Postgres => "TEXT COLLATE \"C\"",
        }
    }

    /// `e` as `w` lower-case hex digits.
    pub(crate) fn hex(&self, e: &str, w: u32) -> String {
        match self.d {
            Dialect::Sqlite => format!("printf('%0{w}x', {e})"),
            Dialect::Postgres => format!("lpad(to_hex({e}), {w}, '0')"),
        }
    }

    /// `e` as `w` decimal digits.
    pub(crate) fn dec(&self, e: &str, w: usize) -> String {
        match self.d {
            Dialect::Sqlite => format!("printf('%0{w}d', {e})"),
            Dialect::Postgres => format!("lpad(CAST({e} AS TEXT), {w}, '0')"),
        }
    }
}

pub(crate) fn lit(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// The SQL that turns template rows into copies (aliases: `k` the copy, `t` the template row).
pub(crate) struct Copier<'a> {
    pub(crate) b: &'a mut Bulk,
    pub(crate) k: i64,
    pub(crate) width: usize,
    /// Template runs and run tokens (id multipliers).
    pub(crate) nr: i64,
    pub(crate) nt: i64,
    pub(crate) t0: i64,
    pub(crate) stretch: i64,
    pub(crate) hosted: i64,
}

impl Copier<'_> {
    /// The copy's stack number of template stack number `e`.
    pub(crate) fn j(&self, e: &str) -> String {
        format!("(k.m * {} + {e})", self.k)
    }

    pub(crate) fn sid(&self, e: &str) -> String {
        format!("'stack-' || {}", self.b.dec(&self.j(e), self.width))
    }

    /// A template time moved into the copy's history.
    pub(crate) fn time(&self, e: &str) -> String {
        format!(
            "({t0} - ({t0} - {e}) * {s} - k.shift)",
            t0 = self.t0,
            s = self.stretch
        )
    }

    pub(crate) fn h40(x: &str) -> String {
        format!("((({x}) * {MUL} + {ADD}) % {H40})")
    }

    /// The copy of template run `a` (an alias of `seed_tpl_run`).
    pub(crate) fn rid(&self, a: &str) -> String {
        let x = format!("k.c * {} + {a}.ord", self.nr);
        format!(
            "'run-' || {} || {}",
            self.b.hex(&self.time(&format!("{a}.created_at")), 11),
            self.b.hex(&Self::h40(&x), 10)
        )
    }

    /// The copy of template run `a`, or NULL when `a` matched nothing.
    pub(crate) fn rid_or_null(&self, a: &str) -> String {
        format!(
            "CASE WHEN {a}.id IS NULL THEN NULL ELSE {} END",
            self.rid(a)
        )
    }

    pub(crate) fn token_x(&self, a: &str) -> String {
        format!("(k.c * {} + {a}.ord)", self.nt)
    }

    pub(crate) fn tid(&self, a: &str) -> String {
        let x = self.token_x(a);
        format!(
            "'tok_' || {} || {}",
            self.b.hex(&Self::h40(&x), 10),
            self.b.hex(&format!("(({x} * 40503 + 7) % 16777216)"), 6)
        )
    }

    /// `column` with the template's upstream id (`ts.up_id`) replaced by the copy's.
    pub(crate) fn with_upstream(&self, column: &str) -> String {
        format!(
            "CASE WHEN ts.up_id IS NULL THEN {column} ELSE replace({column}, '\"' || ts.up_id || '\"', '\"' || {} || '\"') END",
            self.sid("ts.up")
        )
    }

    /// `INSERT INTO table (…) SELECT … FROM …`: every column of `table` is either in
    /// `set` (an expression) or in `keep` (copied as it is); a column in neither is an
    /// error, so a new column the copies would get wrong cannot slip through.
    pub(crate) fn insert(
        &mut self,
        table: &str,
        set: &[(&str, String)],
        keep: &[&str],
        skip: &[&str],
        from: &str,
    ) -> R<u64> {
        let cols = self.b.columns(table)?;
        let mut names = Vec::new();
        let mut exprs = Vec::new();
        for c in &cols {
            if skip.contains(&c.as_str()) {
                continue;
            }
            if let Some((_, e)) = set.iter().find(|(n, _)| *n == c.as_str()) {
                exprs.push(e.clone());
            } else if keep.contains(&c.as_str()) {
                exprs.push(format!("t.{c}"));
            } else {
                return Err(format!(
                    "seed does not know column {table}.{c}: say in crates/bosun-store/examples/seed/copies.rs how a copy gets it"
                )
                .into());
            }
            names.push(c.clone());
        }
        for (n, _) in set {
            if !cols.iter().any(|c| c == n) {
                return Err(
                    format!("seed sets {table}.{n}, which the schema does not have").into(),
                );
            }
        }
        let sql = format!(
            "INSERT INTO {table} ({}) SELECT {} FROM {from}",
            names.join(", "),
            exprs.join(", ")
        );
        self.b.exec(&sql)
    }

    /// Copies every template row for the copies in `seed_copy` into org `org` (stack
    /// numbers below `n`); the rows written.
    pub(crate) fn copy_chunk(&mut self, org: &str, n: u64) -> R<u64> {
        let o = lit(org);
        let within = |c: &Copier, e: &str| format!("{} < {n}", c.j(e));
        let mut rows = 0;

        let sid = self.sid("ts.t");
        let set = [
            ("org_id", o.clone()),
            ("id", sid.clone()),
            (
                "name",
                format!("CASE WHEN t.name = t.id THEN {sid} ELSE t.name END"),
            ),
            ("depends_on", self.with_upstream("t.depends_on")),
            ("created_at", self.time("t.created_at")),
            ("updated_at", self.time("t.updated_at")),
        ];
        let keep = [
            "repository",
            "branch",
            "path",
            "watch_paths",
            "engine",
            "engine_binary",
            "engine_version",
            "tier",
            "autodeploy",
            "environment",
            "variables",
            "drift_detection",
            "runner_pool",
            "repo_key",
            "aws",
            "pr_feedback",
            "labels",
        ];
        let from = format!(
            "tpl_stacks t JOIN seed_tpl_stack ts ON ts.id = t.id JOIN seed_copy k ON 1 = 1
             WHERE {} ORDER BY k.m, ts.t",
            within(self, "ts.t")
        );
        rows += self.insert("stacks", &set, &keep, &[], &from)?;

        let set = [
            ("org_id", o.clone()),
            ("stack_id", sid.clone()),
            ("upstream", self.sid("ts.up")),
        ];
        let from = format!(
            "tpl_stack_dependencies t JOIN seed_tpl_stack ts ON ts.id = t.stack_id
             JOIN seed_copy k ON 1 = 1 WHERE {}",
            within(self, "ts.t")
        );
        rows += self.insert("stack_dependencies", &set, &[], &[], &from)?;

        let runner = format!(
            "'rnr_' || {} || {}",
            self.b
                .hex(&format!("({} % {})", self.j("ts.t"), self.hosted), 6),
            self.b.hex(
                &Self::h40(&format!("{} % {}", self.j("ts.t"), self.hosted)),
                10
            )
        );
        let set = [
            ("id", self.rid("r")),
            ("org_id", o.clone()),
            ("stack_id", sid.clone()),
            (
                "triggered_by",
                format!(
                    "CASE WHEN ts.up_id IS NOT NULL AND t.triggered_by = 'stack:' || ts.up_id
                          THEN 'stack:' || {}
                          WHEN rt.id IS NOT NULL THEN 'run:' || {}
                          ELSE t.triggered_by END",
                    self.sid("ts.up"),
                    self.rid("rt")
                ),
            ),
            ("retry_of", self.rid_or_null("rr")),
            ("upstream_run", self.rid_or_null("ru")),
            (
                "runner_id",
                format!("CASE WHEN t.runner_id IS NULL THEN NULL ELSE {runner} END"),
            ),
            ("last_heartbeat", self.time("t.last_heartbeat")),
            ("phase_started_at", self.time("t.phase_started_at")),
            ("blocked_since", self.time("t.blocked_since")),
            ("created_at", self.time("t.created_at")),
            ("updated_at", self.time("t.updated_at")),
        ];
        let keep = [
            "kind",
            "trigger",
            "state",
            "phase",
            "needs_lease",
            "leased",
            "started",
            "cancel_requested",
            "reason",
            "commit_sha",
            "branch",
            "plan_summary",
            "blocked_by",
            "late_write",
            "fencing",
            "pull_request",
            "delivery_id",
            "held",
            "consumed",
            "lock_waits",
            "summarised_at",
            "gate",
            "pool",
        ];
        let from = format!(
            "tpl_runs t JOIN seed_tpl_run r ON r.id = t.id
             JOIN seed_tpl_stack ts ON ts.id = t.stack_id JOIN seed_copy k ON 1 = 1
             LEFT JOIN seed_tpl_run rr ON rr.id = t.retry_of
             LEFT JOIN seed_tpl_run ru ON ru.id = t.upstream_run
             LEFT JOIN seed_tpl_run rt ON rt.id = substr(t.triggered_by, 5)
             WHERE {} ORDER BY k.m, r.ord",
            within(self, "ts.t")
        );
        rows += self.insert("runs", &set, &keep, &[], &from)?;

        let set = [
            ("run_id", self.rid("r")),
            ("started_at", self.time("t.started_at")),
            ("ended_at", self.time("t.ended_at")),
        ];
        let from = format!(
            "tpl_run_phases t JOIN seed_tpl_run r ON r.id = t.run_id JOIN seed_copy k ON 1 = 1
             WHERE {} ORDER BY k.m, r.ord, t.phase_ord",
            within(self, "r.t")
        );
        rows += self.insert("run_phases", &set, &["state"], &["rowid"], &from)?;

        let set = [
            ("run_id", self.rid("r")),
            ("received_at", self.time("t.received_at")),
        ];
        let from = format!(
            "tpl_run_logs t JOIN seed_tpl_run r ON r.id = t.run_id JOIN seed_copy k ON 1 = 1
             WHERE {} ORDER BY k.m, r.ord, t.seq",
            within(self, "r.t")
        );
        rows += self.insert("run_logs", &set, &["seq", "text", "phase"], &[], &from)?;

        let set = [
            ("run_id", self.rid("r")),
            ("upstream_run_id", self.rid("ru")),
        ];
        let from = format!(
            "tpl_run_holds t JOIN seed_tpl_run r ON r.id = t.run_id
             JOIN seed_tpl_run ru ON ru.id = t.upstream_run_id JOIN seed_copy k ON 1 = 1
             WHERE {}",
            within(self, "r.t")
        );
        rows += self.insert("run_holds", &set, &["outcome", "reason"], &[], &from)?;

        let x = self.token_x("tk");
        let secret_hash = format!(
            "{} || {} || '5f3c1e8a9b7d2046e1c0a9f8b7d6e5c4b3a29180f7e6d5c4'",
            self.b.hex(&Self::h40(&x), 10),
            self.b.hex(&x, 10)
        );
        let set = [
            ("id", self.tid("tk")),
            ("secret_hash", secret_hash),
            ("description", format!("'run ' || {}", self.rid("r"))),
            ("org_id", o.clone()),
            ("run_id", self.rid("r")),
            ("stack_id", sid.clone()),
            ("created_at", self.time("t.created_at")),
            ("expires_at", self.time("t.expires_at")),
            ("revoked_at", self.time("t.revoked_at")),
            ("read_stacks", self.with_upstream("t.read_stacks")),
        ];
        let from = format!(
            "tpl_tokens t JOIN seed_tpl_token tk ON tk.id = t.id JOIN seed_tpl_run r ON r.id = t.run_id
             JOIN seed_tpl_stack ts ON ts.t = r.t JOIN seed_copy k ON 1 = 1
             WHERE {} ORDER BY k.m, tk.ord",
            within(self, "r.t")
        );
        rows += self.insert("tokens", &set, &["kind", "user_id", "pool"], &[], &from)?;

        let set = [
            ("run_id", self.rid("r")),
            ("org_id", o.clone()),
            ("stack_id", sid.clone()),
            ("checked_at", self.time("t.checked_at")),
            ("reconcile_run", self.rid_or_null("rc")),
        ];
        let from = format!(
            "tpl_drift_checks t JOIN seed_tpl_run r ON r.id = t.run_id
             JOIN seed_tpl_stack ts ON ts.id = t.stack_id JOIN seed_copy k ON 1 = 1
             LEFT JOIN seed_tpl_run rc ON rc.id = t.reconcile_run WHERE {}",
            within(self, "ts.t")
        );
        rows += self.insert("drift_checks", &set, &["result"], &[], &from)?;

        let set = [
            ("subject_id", self.rid("r")),
            ("org_id", o.clone()),
            ("target", sid.clone()),
            ("decided_at", self.time("t.decided_at")),
        ];
        let keep = [
            "subject_kind",
            "environments",
            "requested_by",
            "decision",
            "decided_by",
            "comment",
        ];
        let from = format!(
            "tpl_approvals t JOIN seed_tpl_run r ON r.id = t.subject_id
             JOIN seed_tpl_stack ts ON ts.id = t.target JOIN seed_copy k ON 1 = 1 WHERE {}",
            within(self, "ts.t")
        );
        rows += self.insert("approvals", &set, &keep, &[], &from)?;

        let set = [
            ("org_id", o.clone()),
            ("stack_id", sid.clone()),
            (
                "lock_holder_id",
                format!(
                    "CASE WHEN rl.id IS NULL THEN t.lock_holder_id ELSE {} END",
                    self.rid("rl")
                ),
            ),
            ("lock_acquired_at", self.time("t.lock_acquired_at")),
        ];
        let keep = [
            "current_version",
            "lock_id",
            "lock_operation",
            "lock_info",
            "lock_who",
            "lock_version",
            "lock_created",
            "lock_path",
            "lock_holder_kind",
        ];
        let from = format!(
            "tpl_state_heads t JOIN seed_tpl_stack ts ON ts.id = t.stack_id JOIN seed_copy k ON 1 = 1
             LEFT JOIN seed_tpl_run rl ON t.lock_holder_kind = 'run' AND rl.id = t.lock_holder_id
             WHERE {}",
            within(self, "ts.t")
        );
        rows += self.insert("state_heads", &set, &keep, &[], &from)?;

        let set = [
            ("org_id", o.clone()),
            ("stack_id", sid.clone()),
            (
                "writer_id",
                format!(
                    "CASE WHEN rw.id IS NULL THEN t.writer_id ELSE {} END",
                    self.rid("rw")
                ),
            ),
            (
                "token_id",
                format!(
                    "CASE WHEN tk.id IS NULL THEN t.token_id ELSE {} END",
                    self.tid("tk")
                ),
            ),
            ("created_at", self.time("t.created_at")),
        ];
        let keep = [
            "version",
            "serial",
            "lineage",
            "checksum",
            "size",
            "writer_kind",
            "late_write",
            "forced",
            "outputs",
            "body",
            "recovery_reason",
        ];
        let from = format!(
            "tpl_state_versions t JOIN seed_tpl_stack ts ON ts.id = t.stack_id JOIN seed_copy k ON 1 = 1
             LEFT JOIN seed_tpl_run rw ON t.writer_kind = 'run' AND rw.id = t.writer_id
             LEFT JOIN seed_tpl_token tk ON tk.id = t.token_id
             WHERE {} ORDER BY k.m, ts.t, t.version",
            within(self, "ts.t")
        );
        rows += self.insert("state_versions", &set, &keep, &[], &from)?;

        let set = [
            ("org_id", o.clone()),
            ("stack_id", sid.clone()),
            ("since", self.time("t.since")),
            ("last_fire_at", self.time("t.last_fire_at")),
            ("last_fire_run", self.rid_or_null("rf")),
            // Computed through the store once the copies are in (`fill_drift_stale_at`):
            // the copies' checks are stretched in time, their intervals are not.
            ("stale_at", "NULL".into()),
            ("alert_at", "NULL".into()),
        ];
        let from = format!(
            "tpl_drift_schedules t JOIN seed_tpl_stack ts ON ts.id = t.stack_id JOIN seed_copy k ON 1 = 1
             LEFT JOIN seed_tpl_run rf ON rf.id = t.last_fire_run WHERE {}",
            within(self, "ts.t")
        );
        rows += self.insert(
            "drift_schedules",
            &set,
            &["schedule", "timezone", "next_at", "last_fire_note"],
            &[],
            &from,
        )?;

        // Audit records about a template stack or run, about the copy's.
        let stack_sid = self.sid("COALESCE(ts1.t, ts2.t)");
        let stack_tid = "COALESCE(ts1.id, ts2.id)";
        let run = self.rid("r");
        let set = [
            ("at", self.time("t.at")),
            ("org_id", o.clone()),
            (
                "target",
                format!("CASE WHEN r.id IS NULL THEN 'stack:' || {stack_sid} ELSE 'run:' || {run} END"),
            ),
            (
                "detail",
                format!(
                    "replace(CASE WHEN r.id IS NULL THEN t.detail
                             ELSE replace(t.detail, '\"' || r.id || '\"', '\"' || {run} || '\"') END,
                             '\"' || {stack_tid} || '\"', '\"' || {stack_sid} || '\"')"
                ),
            ),
        ];
        let from = format!(
            "tpl_audit_log t
             LEFT JOIN seed_tpl_stack ts1 ON t.target LIKE 'stack:%' AND ts1.id = substr(t.target, 7)
             LEFT JOIN seed_tpl_run r ON t.target LIKE 'run:%' AND r.id = substr(t.target, 5)
             LEFT JOIN seed_tpl_stack ts2 ON ts2.t = r.t
             JOIN seed_copy k ON 1 = 1
             WHERE (ts1.id IS NOT NULL OR r.id IS NOT NULL) AND {}
             ORDER BY k.m, t.seq",
            within(self, "COALESCE(ts1.t, ts2.t)")
        );
        rows += self.insert(
            "audit_log",
            &set,
            &["actor", "token_id", "action"],
            &["seq"],
            &from,
        )?;
        Ok(rows)
    }
}

/// Per template stack: how many rows of a kind it has (the copies' expected counts).
pub(crate) struct TemplateCounts {
    pub(crate) runs: Vec<i64>,
    pub(crate) versions: Vec<i64>,
    pub(crate) phases: Vec<i64>,
    pub(crate) logs: Vec<i64>,
}

impl TemplateCounts {
    pub(crate) fn of(v: &[i64], n: u64) -> i64 {
        let k = v.len() as u64;
        (0..n).map(|j| v[(j % k) as usize]).sum()
    }
}

pub(crate) struct Copied {
    pub(crate) rows: u64,
    pub(crate) seconds: f64,
    pub(crate) counts: TemplateCounts,
}

pub(crate) fn copy_all(args: &Args, tpl: &Templates) -> R<Copied> {
    let mut b = Bulk::open(&args.backend)?;
    let k = args.templates as i64;
    let width = args.width();
    let tt = b.text_type();
    let tpl_org = lit(TEMPLATE_ORG);

    // The templates, frozen in temporary tables: the copies read only these.
    let in_runs = format!("run_id IN (SELECT id FROM runs WHERE org_id = {tpl_org})");
    for (table, filter, extra) in [
        ("stacks", format!("org_id = {tpl_org}"), ""),
        ("stack_dependencies", format!("org_id = {tpl_org}"), ""),
        ("runs", format!("org_id = {tpl_org}"), ""),
        ("run_phases", in_runs.clone(), "rowid AS phase_ord, "),
        ("run_logs", in_runs.clone(), ""),
        ("run_holds", in_runs.clone(), ""),
        ("tokens", format!("kind = 'run' AND org_id = {tpl_org}"), ""),
        ("drift_checks", format!("org_id = {tpl_org}"), ""),
        ("approvals", format!("org_id = {tpl_org}"), ""),
        ("state_heads", format!("org_id = {tpl_org}"), ""),
        ("state_versions", format!("org_id = {tpl_org}"), ""),
        ("drift_schedules", format!("org_id = {tpl_org}"), ""),
        ("audit_log", format!("org_id = {tpl_org}"), ""),
    ] {
        b.batch(&format!(
            "CREATE TEMP TABLE tpl_{table} AS SELECT {extra}* FROM {table} WHERE {filter}"
        ))?;
    }
    // What the copies cannot map: none of it may be in the templates.
    for (what, sql) in [
        ("runs from a delivery", "SELECT COUNT(*) FROM tpl_runs WHERE delivery_id IS NOT NULL"),
        ("runs with consumed outputs", "SELECT COUNT(*) FROM tpl_runs WHERE consumed IS NOT NULL"),
        ("runs that waited for a lock", "SELECT COUNT(*) FROM tpl_runs WHERE lock_waits IS NOT NULL OR blocked_by IS NOT NULL"),
        ("plan-run approvals", "SELECT COUNT(*) FROM tpl_approvals WHERE subject_kind <> 'stack_run'"),
        ("stacks with two upstreams", "SELECT COUNT(*) FROM (SELECT stack_id FROM tpl_stack_dependencies GROUP BY stack_id HAVING COUNT(*) > 1) x"),
    ] {
        let n = b.count(sql)?;
        if n != 0 {
            return Err(format!("the templates have {n} {what}, which seed cannot copy").into());
        }
    }

    // Helper tables: template stacks (number, upstream), runs and tokens (ordinals).
    b.batch(&format!(
        "CREATE TEMP TABLE seed_tpl_stack (id {tt} PRIMARY KEY, t BIGINT NOT NULL UNIQUE, up BIGINT, up_id {tt});
         CREATE TEMP TABLE seed_tpl_run (id {tt} PRIMARY KEY, ord BIGINT NOT NULL, t BIGINT NOT NULL, created_at BIGINT NOT NULL);
         CREATE TEMP TABLE seed_tpl_token (id {tt} PRIMARY KEY, ord BIGINT NOT NULL);
         CREATE TEMP TABLE seed_copy (m BIGINT PRIMARY KEY, c BIGINT NOT NULL, shift BIGINT NOT NULL);"
    ))?;
    let deps: HashMap<String, String> = b
        .texts("SELECT stack_id, upstream FROM tpl_stack_dependencies")?
        .into_iter()
        .filter_map(|r| Some((r.first()?.clone()?, r.get(1)?.clone()?)))
        .collect();
    let stacks: Vec<String> = b
        .texts("SELECT id FROM tpl_stacks ORDER BY id")?
        .into_iter()
        .filter_map(|r| r.into_iter().next().flatten())
        .collect();
    if stacks.len() as i64 != k {
        return Err(format!("{} template stacks, expected {k}", stacks.len()).into());
    }
    let number: HashMap<&str, usize> = stacks
        .iter()
        .enumerate()
        .map(|(i, s)| (s.as_str(), i))
        .collect();
    let mut values = Vec::new();
    for (i, s) in stacks.iter().enumerate() {
        let (up, up_id) = match deps.get(s) {
            Some(u) => (
                number
                    .get(u.as_str())
                    .ok_or("an upstream outside the templates")?
                    .to_string(),
                lit(u),
            ),
            None => ("NULL".into(), "NULL".into()),
        };
        values.push(format!("({}, {i}, {up}, {up_id})", lit(s)));
    }
    insert_values(&mut b, "seed_tpl_stack", &values)?;
    let runs = b.texts(
        "SELECT id, stack_id, CAST(created_at AS TEXT) FROM tpl_runs ORDER BY created_at, id",
    )?;
    let mut values = Vec::new();
    for (ord, r) in runs.iter().enumerate() {
        let (Some(Some(id)), Some(Some(stack)), Some(Some(at))) = (r.first(), r.get(1), r.get(2))
        else {
            return Err("a template run without id, stack or time".into());
        };
        let t = number
            .get(stack.as_str())
            .ok_or("a run of no template stack")?;
        values.push(format!("({}, {ord}, {t}, {at})", lit(id)));
    }
    insert_values(&mut b, "seed_tpl_run", &values)?;
    let tokens = b.texts("SELECT id FROM tpl_tokens ORDER BY created_at, id")?;
    let values: Vec<String> = tokens
        .iter()
        .enumerate()
        .filter_map(|(ord, r)| Some(format!("({}, {ord})", lit(r.first()?.as_deref()?))))
        .collect();
    insert_values(&mut b, "seed_tpl_token", &values)?;
    if b.d == Dialect::Postgres {
        b.batch("ANALYZE seed_tpl_stack; ANALYZE seed_tpl_run; ANALYZE seed_tpl_token;")?;
    }

    let per_stack = |b: &mut Bulk, sql: &str| -> R<Vec<i64>> {
        let mut v = vec![0i64; k as usize];
        for r in b.texts(sql)? {
            if let (Some(Some(s)), Some(Some(n))) = (r.first(), r.get(1)) {
                if let Some(i) = number.get(s.as_str()) {
                    v[*i] = n.parse()?;
                }
            }
        }
        Ok(v)
    };
    let counts = TemplateCounts {
        runs: per_stack(&mut b, "SELECT stack_id, CAST(COUNT(*) AS TEXT) FROM tpl_runs GROUP BY stack_id")?,
        versions: per_stack(&mut b, "SELECT stack_id, CAST(COUNT(*) AS TEXT) FROM tpl_state_versions GROUP BY stack_id")?,
        phases: per_stack(&mut b, "SELECT r.stack_id, CAST(COUNT(*) AS TEXT) FROM tpl_run_phases p JOIN tpl_runs r ON r.id = p.run_id GROUP BY r.stack_id")?,
        logs: per_stack(&mut b, "SELECT r.stack_id, CAST(COUNT(*) AS TEXT) FROM tpl_run_logs l JOIN tpl_runs r ON r.id = l.run_id GROUP BY r.stack_id")?,
    };

    let nr = (runs.len() as i64).max(1);
    let nt = (tokens.len() as i64).max(1);
    let targets = args.targets();
    let most_blocks = targets
        .iter()
        .map(|(_, n)| (*n as i64 + k - 1) / k)
        .max()
        .unwrap_or(1);
    if most_blocks >= BLOCKS_PER_ORG {
        return Err(format!("{most_blocks} copies of each template: give more --templates").into());
    }
    let top_c = (targets.len() as i64 + 1) * BLOCKS_PER_ORG;
    if top_c.saturating_mul(nr.max(nt)) >= H40 {
        return Err("too many template runs for the id space: give fewer --templates".into());
    }
    let wall = (tpl.end_ms - tpl.start_ms).max(1);
    let stretch = (HISTORY_MS / wall).max(1);
    let block_shift = (SPREAD_MS / most_blocks.max(1)).max(1);
    let mut c = Copier {
        b: &mut b,
        k,
        width,
        nr,
        nt,
        t0: tpl.end_ms,
        stretch,
        hosted: tpl.hosted_runners,
    };

    let started = Instant::now();
    let mut total = 0u64;
    let blocks_per_chunk = ((args.chunk as i64 + k - 1) / k).max(1);
    for (o, (org, n)) in targets.iter().enumerate() {
        let o = o as i64 + 1;
        let blocks = (*n as i64 + k - 1) / k;
        let org_started = Instant::now();
        let mut org_rows = 0u64;
        let mut m0 = 0;
        while m0 < blocks {
            let m1 = (m0 + blocks_per_chunk).min(blocks);
            let values: Vec<String> = (m0..m1)
                .map(|m| {
                    format!(
                        "({m}, {}, {})",
                        o * BLOCKS_PER_ORG + m,
                        m * block_shift + o * 977
                    )
                })
                .collect();
            c.b.batch("BEGIN")?;
            c.b.exec("DELETE FROM seed_copy")?;
            insert_values(c.b, "seed_copy", &values)?;
            let rows = c.copy_chunk(org, *n)?;
            c.b.batch("COMMIT")?;
            org_rows += rows;
            total += rows;
            let done = ((m1 * k) as u64).min(*n);
            let secs = org_started.elapsed().as_secs_f64();
            log(format!(
                "copies: {org}: {done}/{n} stacks, {org_rows} rows in {secs:.1}s ({} rows/s, {} stacks/s)",
                per_s(org_rows, secs),
                per_s(done, secs)
            ));
            m0 = m1;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    log(format!(
        "copies: {total} rows in {seconds:.1}s ({} rows/s)",
        per_s(total, seconds)
    ));

    // Counts against the templates'.
    let all_orgs = targets.iter().map(|(_, n)| *n).collect::<Vec<_>>();
    let expect = |v: &[i64]| -> i64 {
        all_orgs
            .iter()
            .map(|n| TemplateCounts::of(v, *n))
            .sum::<i64>()
            + v.iter().sum::<i64>()
    };
    for (table, v) in [
        ("runs", &counts.runs),
        ("state_versions", &counts.versions),
        ("run_phases", &counts.phases),
        ("run_logs", &counts.logs),
    ] {
        let found = b.count(&format!("SELECT COUNT(*) FROM {table}"))?;
        let want = expect(v);
        if found != want {
            return Err(format!("{table}: {found} rows, expected {want}").into());
        }
        log(format!("check: {table}: {found} rows, as expected"));
    }

    Ok(Copied {
        rows: total,
        seconds,
        counts,
    })
}

/// Brings the copied store to rest as a long-running server's would be: on PostgreSQL
/// `VACUUM (ANALYZE)`, as autovacuum would have run by the time a store grew this large
/// (statistics and the visibility map up to date — after [`settle`], so the statistics
/// see the columns the store computes), then a `CHECKPOINT`, so the gigabytes just
/// written are not flushed under the measurements that follow; on SQLite the WAL folded
/// in, as the server's close does (the server never analyzes SQLite). Returns the seconds
/// it took.
pub(crate) fn analyze(args: &Args) -> R<f64> {
    let mut b = Bulk::open(&args.backend)?;
    let started = Instant::now();
    match b.d {
        Dialect::Postgres => b.batch("VACUUM (ANALYZE)")?,
        Dialect::Sqlite => b.batch("PRAGMA wal_checkpoint(TRUNCATE)")?,
    }
    let seconds = started.elapsed().as_secs_f64();
    if b.d == Dialect::Postgres {
        log(format!("VACUUM (ANALYZE) in {seconds:.1}s"));
        // Superusers and `pg_checkpoint` only: without it the checkpointer's own pace
        // flushes the pages later, and the figures are noisier for it.
        let flushed = Instant::now();
        match b.batch("CHECKPOINT") {
            Ok(()) => log(format!(
                "CHECKPOINT in {:.1}s",
                flushed.elapsed().as_secs_f64()
            )),
            Err(e) => log(format!("warning: no CHECKPOINT after seeding ({e})")),
        }
    }
    Ok(seconds)
}

pub(crate) fn insert_values(b: &mut Bulk, table: &str, values: &[String]) -> R<()> {
    for chunk in values.chunks(500) {
        b.exec(&format!("INSERT INTO {table} VALUES {}", chunk.join(", ")))?;
    }
    Ok(())
}
