//! The templates, made through the Store API the way the server makes its data.

use super::*;

// --- the templates, through the Store API -------------------------------------------------

/// What a template run is made to do.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Scenario {
    /// Plan with changes, confirmed (or approved), applied: a state version.
    Apply,
    NoChanges,
    PlanFails,
    /// The runner went silent: the stale sweep's force-fail.
    Stale,
    /// The phase ran past its timeout.
    Timeout,
    /// Planned, then discarded (or rejected).
    Discard,
    /// Canceled while queued.
    Cancel,
    ApplyFails,
    /// A proposed run's plan.
    Proposed {
        changes: bool,
    },
    /// A drift check.
    Drift {
        changes: bool,
    },
    /// Planned with changes, then left waiting in `unconfirmed`.
    Hold,
}

/// Round `r`'s run of template stack `t`: what it does, its kind and trigger.
pub(crate) fn scenario(t: u64, r: u32, drift: bool) -> (Scenario, RunKind, Trigger) {
    use Scenario::*;
    match r % 10 {
        0 | 3 | 6 => (Apply, RunKind::Tracked, Trigger::Manual),
        1 => (
            Proposed { changes: true },
            RunKind::Proposed,
            Trigger::PullRequest,
        ),
        2 => (NoChanges, RunKind::Tracked, Trigger::Manual),
        4 if t % 7 == 3 => (Stale, RunKind::Tracked, Trigger::Manual),
        4 if t % 13 == 5 => (Timeout, RunKind::Tracked, Trigger::Manual),
        4 => (PlanFails, RunKind::Tracked, Trigger::Manual),
        5 if t % 9 == 2 => (Cancel, RunKind::Tracked, Trigger::Manual),
        5 => (Discard, RunKind::Tracked, Trigger::Manual),
        7 => (ApplyFails, RunKind::Tracked, Trigger::Manual),
        8 => (Apply, RunKind::Tracked, Trigger::Retry),
        _ if drift => (
            Drift {
                changes: (t / 10).is_multiple_of(3),
            },
            RunKind::Drift,
            Trigger::Schedule,
        ),
        _ => (
            Proposed { changes: false },
            RunKind::Proposed,
            Trigger::PullRequest,
        ),
    }
}

/// The template stack `t` depends on, if any (one at most, in the same block of ten).
pub(crate) fn upstream(t: u64) -> Option<u64> {
    (t % 10 == 9).then(|| t - 5)
}

pub(crate) fn stack_input(t: u64, width: usize) -> StackInput {
    let env = ENVS[(t % 3) as usize];
    let svc = t % 50;
    let mut variables = BTreeMap::new();
    if t.is_multiple_of(4) {
        variables.insert("REGION".into(), REGIONS[(t % 3) as usize].to_string());
        variables.insert("INSTANCE_COUNT".into(), (1 + t % 7).to_string());
        variables.insert("DB_PASSWORD".into(), format!("secret://{env}/db-password"));
    }
    StackInput {
        id: stack_id(t, width),
        name: t
            .is_multiple_of(7)
            .then(|| format!("Service {svc} ({env})")),
        repository: REPOS[(t % REPOS.len() as u64) as usize].to_string(),
        branch: t.is_multiple_of(11).then(|| "release".to_string()),
        path: t
            .is_multiple_of(2)
            .then(|| format!("envs/{env}/svc-{svc:02}")),
        watch_paths: if t.is_multiple_of(3) {
            vec![
                "modules/network".into(),
                format!("modules/svc-{svc:02}"),
                format!("envs/{env}"),
            ]
        } else {
            Vec::new()
        },
        engine: t.is_multiple_of(5).then(|| "terraform".to_string()),
        engine_binary: None,
        engine_version: t.is_multiple_of(5).then(|| "1.8.2".to_string()),
        tier: Some(TIERS[(t % 3) as usize].to_string()),
        autodeploy: t.is_multiple_of(11),
        environment: (t.is_multiple_of(7) || t % 6 == 1).then(|| env.to_string()),
        variables,
        depends_on: upstream(t)
            .map(|u| {
                vec![DependencyInput {
                    stack: stack_id(u, width),
                    outputs: BTreeMap::from([("vpc_id".to_string(), "vpc_id".to_string())]),
                    trigger_always: false,
                }]
            })
            .unwrap_or_default(),
        // Weekly, on Sunday at 03:MM UTC: the bench never sees thousands of checks fire.
        drift_detection: t.is_multiple_of(10).then(|| DriftInput {
            schedule: format!("{} 3 * * 0", t % 60),
            reconcile: t.is_multiple_of(20),
            timezone: None,
        }),
        runner_pool: None,
        aws: None,
        pr_feedback: None,
        labels: if t.is_multiple_of(2) {
            vec![env.to_string(), format!("svc-{svc:02}")]
        } else {
            Vec::new()
        },
    }
}

pub(crate) fn lineage(t: u64) -> String {
    let h = hex::encode(Sha256::digest(format!("lineage {t}").as_bytes()));
    format!(
        "{}-{}-4{}-a{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

/// A small Terraform v4 state: five outputs (one sensitive, one that changes with every
/// version) and three resources, about 2 KiB.
pub(crate) fn state_body(t: u64, serial: u64) -> R<Vec<u8>> {
    let svc = t % 50;
    let env = ENVS[(t % 3) as usize];
    let provider = "provider[\"registry.terraform.io/hashicorp/aws\"]";
    let doc = json!({
        "version": 4,
        "terraform_version": "1.8.2",
        "serial": serial,
        "lineage": lineage(t),
        "outputs": {
            "vpc_id": {"value": format!("vpc-{:08x}", h40(t as i64) & 0xffff_ffff), "type": "string"},
            "subnet_ids": {"value": [format!("subnet-{:06x}a", t), format!("subnet-{:06x}b", t)],
                           "type": ["list", "string"]},
            "endpoint": {"value": format!("https://svc-{svc:02}.{env}.internal.example:8443"), "type": "string"},
            "release": {"value": format!("r{serial}"), "type": "string"},
            "db_password": {"value": format!("{:016x}", h40(serial as i64 * 31 + t as i64)),
                            "type": "string", "sensitive": true},
        },
        "resources": [
            {"mode": "managed", "type": "aws_security_group", "name": "app", "provider": provider,
             "instances": [{"schema_version": 1, "attributes": {
                 "id": format!("sg-{:010x}", h40(t as i64 + 1)), "name": format!("svc-{svc:02}-{env}"),
                 "ingress": [{"from_port": 8443, "to_port": 8443, "protocol": "tcp", "cidr_blocks": ["10.0.0.0/8"]}],
                 "tags": {"Service": format!("svc-{svc:02}"), "Env": env}}}]},
            {"mode": "managed", "type": "aws_instance", "name": "app", "provider": provider,
             "instances": [{"index_key": 0, "schema_version": 1, "attributes": {
                 "id": format!("i-{:012x}", h40(t as i64 + 2)), "ami": "ami-0c55b159cbfafe1f0",
                 "instance_type": "t3.small", "subnet_id": format!("subnet-{:06x}a", t),
                 "tags": {"Name": format!("svc-{svc:02}-{env}"), "Release": format!("r{serial}")}},
                 "dependencies": ["aws_security_group.app"]}]},
            {"mode": "managed", "type": "aws_route53_record", "name": "app", "provider": provider,
             "instances": [{"schema_version": 2, "attributes": {
                 "id": format!("Z{:012X}_svc-{svc:02}.{env}.internal.example_CNAME", h40(t as i64 + 3)),
                 "name": format!("svc-{svc:02}.{env}.internal.example"), "type": "CNAME", "ttl": 300}}]}
        ],
        "check_results": null
    });
    Ok(serde_json::to_vec_pretty(&doc)?)
}

pub(crate) fn plan_summary(changes: bool, t: u64) -> Value {
    if !changes {
        return json!({"has_changes": false, "add": 0, "change": 0, "destroy": 0,
                      "resource_changes": [], "output_changes": {}});
    }
    let add = (t % 3) as u32;
    json!({
        "has_changes": true, "add": add, "change": 1, "destroy": 0,
        "resource_changes": (0..add).map(|i| json!({"address": format!("aws_instance.worker[{i}]"), "action": "create"}))
            .chain(std::iter::once(json!({"address": "aws_instance.app[0]", "action": "update"})))
            .collect::<Vec<_>>(),
        "output_changes": {"release": "update"},
    })
}

pub(crate) const INIT_LOG: &str = "Initializing the backend...\n\nSuccessfully configured the backend \"http\"! \
Terraform will automatically\nuse this backend unless the backend configuration changes.\n\n\
Initializing provider plugins...\n- Reusing previous version of hashicorp/aws from the dependency lock file\n\
- Using previously-installed hashicorp/aws v5.31.0\n\nTerraform has been successfully initialized!\n";

pub(crate) fn plan_log(changes: bool, t: u64) -> String {
    let mut s = String::from(
        "aws_security_group.app: Refreshing state... [id=sg-0a1b2c3d4e]\n\
         aws_instance.app[0]: Refreshing state... [id=i-0f1e2d3c4b5a]\n\
         aws_route53_record.app: Refreshing state... [id=Z0ABCDEF123456_svc.internal.example_CNAME]\n\n",
    );
    if changes {
        let add = t % 3;
        s.push_str(
            "Terraform used the selected providers to generate the following execution\nplan. \
             Resource actions are indicated with the following symbols:\n  + create\n  ~ update in-place\n\n\
             Terraform will perform the following actions:\n\n  # aws_instance.app[0] will be updated in-place\n  \
             ~ resource \"aws_instance\" \"app\" {\n        id            = \"i-0f1e2d3c4b5a\"\n      \
             ~ tags          = {\n          ~ \"Release\" = \"r41\" -> \"r42\"\n        }\n        \
             # (31 unchanged attributes hidden)\n    }\n\n",
        );
        s.push_str(&format!(
            "Plan: {add} to add, 1 to change, 0 to destroy.\n\nChanges to Outputs:\n  ~ release = \"r41\" -> \"r42\"\n"
        ));
    } else {
        s.push_str(
            "No changes. Your infrastructure matches the configuration.\n\nTerraform has compared \
             your real infrastructure against your configuration\nand found no differences, so no \
             changes are needed.\n",
        );
    }
    s
}

pub(crate) const APPLY_LOG: &str = "aws_instance.app[0]: Modifying... [id=i-0f1e2d3c4b5a]\n\
aws_instance.app[0]: Still modifying... [id=i-0f1e2d3c4b5a, 10s elapsed]\n\
aws_instance.app[0]: Modifications complete after 14s [id=i-0f1e2d3c4b5a]\n\n\
Apply complete! Resources: 0 added, 1 changed, 0 destroyed.\n\nOutputs:\n\n\
endpoint = \"https://svc.internal.example:8443\"\nrelease = \"r42\"\nvpc_id = \"vpc-0a1b2c3d\"\n";

pub(crate) const FAIL_LOG: &str = "\u{2577}\n\u{2502} Error: creating EC2 Instance: InvalidParameterValue: \
Value (t3.nano) for parameter instanceType is invalid.\n\u{2502} \n\u{2502}   with aws_instance.worker[0],\n\
\u{2502}   on main.tf line 42, in resource \"aws_instance\" \"worker\":\n\u{2502}   42: resource \"aws_instance\" \"worker\" {\n\u{2575}\n";

pub(crate) struct Seeder {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) width: usize,
    pub(crate) admin_token: String,
    pub(crate) runner: RunnerRecord,
    pub(crate) rng: Rng,
    pub(crate) specs: Vec<StackSpec>,
    /// What each template run is to do (runs the store made itself — held dependency
    /// runs, reconciles — are not here).
    pub(crate) scenario: HashMap<String, Scenario>,
    pub(crate) serial: Vec<u64>,
    pub(crate) versions: Vec<u32>,
    pub(crate) max_versions: u32,
    /// Each stack's latest run created in the rounds (a retry's `retry_of`).
    pub(crate) last_run: Vec<Option<String>>,
    /// Store calls made.
    pub(crate) calls: u64,
}

impl Seeder {
    pub(crate) fn t_of(&self, stack: &str) -> R<u64> {
        stack
            .strip_prefix("stack-")
            .and_then(|n| n.parse::<u64>().ok())
            .ok_or_else(|| format!("not a template stack: {stack:?}").into())
    }

    pub(crate) fn gated(&self, t: u64) -> bool {
        self.specs[t as usize]
            .environment
            .as_ref()
            .is_some_and(|e| e.as_str() == "prod")
    }

    pub(crate) fn audit(&self, actor: &str, action: &str, target: String, detail: Value) -> Audit {
        Audit {
            org: Some(TEMPLATE_ORG.into()),
            actor: actor.into(),
            token_id: (actor == "user:admin").then(|| self.admin_token.clone()),
            action: action.into(),
            target,
            detail,
        }
    }

    /// A run id as the server makes it: creation time in ms (11 hex) and 5 random bytes.
    pub(crate) fn new_run_id(&mut self) -> String {
        format!(
            "run-{:011x}{}",
            Utc::now().timestamp_millis(),
            hex::encode(self.rng.bytes::<5>())
        )
    }

    pub(crate) async fn create_run(
        &mut self,
        t: u64,
        kind: RunKind,
        trigger: Trigger,
        retry_of: Option<String>,
    ) -> R<RunRecord> {
        let id = self.new_run_id();
        let spec = &self.specs[t as usize];
        let run = NewRun {
            id: id.clone(),
            org: TEMPLATE_ORG.into(),
            stack: spec.id.to_string(),
            kind,
            trigger,
            triggered_by: if trigger == Trigger::PullRequest {
                "system".into()
            } else {
                "user:admin".into()
            },
            commit: None,
            branch: spec.branch.clone(),
            retry_of,
            pull_request: (kind == RunKind::Proposed).then_some(1000 + t as i64),
        };
        let actor = if trigger == Trigger::PullRequest {
            "system"
        } else {
            "user:admin"
        };
        let audit = self.audit(
            actor,
            "run.create",
            format!("run:{id}"),
            json!({"stack": run.stack, "kind": kind.as_str(), "trigger": trigger.as_str()}),
        );
        self.calls += 1;
        Ok(self.store.create_run(&run, Some(&audit)).await?)
    }

    pub(crate) async fn event(
        &mut self,
        run: &RunRecord,
        event: Event,
        runner: bool,
        update: RunUpdate,
        audit: Option<Audit>,
    ) -> R<RunRecord> {
        self.calls += 1;
        let input = RunEventInput {
            event,
            fencing: runner.then_some(run.fencing),
            update,
            audit,
        };
        Ok(self.store.run_event(&run.id, &input).await?.run)
    }

    pub(crate) async fn logs(&mut self, run: &RunRecord, text: &str) -> R<()> {
        self.calls += 2;
        let seq = self.store.next_log_seq(&run.id).await?;
        self.store
            .append_logs(&run.id, run.fencing, &[(seq, text.to_string())])
            .await?;
        Ok(())
    }

    /// The token a leased phase runs with, as the server mints it (revoked as the run ends).
    pub(crate) async fn run_token(&mut self, run: &RunRecord) -> R<String> {
        let t = self.t_of(&run.stack)?;
        let secret = format_token(TokenKind::Run, &self.rng.bytes::<32>());
        let id = format!("tok_{}", hex::encode(self.rng.bytes::<8>()));
        let token = NewToken {
            id: id.clone(),
            kind: TokenKind::Run,
            secret_hash: hash_token(&secret),
            description: format!("run {}", run.id),
            user: None,
            org: Some(run.org.clone()),
            pool: None,
            run: Some(run.id.clone()),
            stack: Some(run.stack.clone()),
            read_stacks: upstream(t)
                .map(|u| vec![stack_id(u, self.width)])
                .unwrap_or_default(),
            expires_at: Some(Utc::now() + Duration::hours(2)),
        };
        self.calls += 1;
        self.store.create_token(&token, None).await?;
        Ok(id)
    }

    pub(crate) fn lock_of(&mut self, holder: Writer, who: &str) -> Lock {
        let b = self.rng.bytes::<16>();
        let h = hex::encode(b);
        Lock {
            id: format!(
                "{}-{}-4{}-8{}-{}",
                &h[0..8],
                &h[8..12],
                &h[13..16],
                &h[17..20],
                &h[20..32]
            ),
            operation: "OperationTypeApply".into(),
            info: String::new(),
            who: who.into(),
            version: "1.8.2".into(),
            created: Utc::now().to_rfc3339(),
            path: String::new(),
            holder,
            acquired_at: Utc::now(),
        }
    }

    /// Locks, writes the next version and unlocks, as Terraform's http backend does.
    pub(crate) async fn write_state(
        &mut self,
        t: u64,
        writer: Writer,
        token: Option<String>,
    ) -> R<()> {
        let stack = self.specs[t as usize].id.to_string();
        let (who, liveness) = match &writer {
            Writer::Run(_) => ("runner@bosun", WriterLiveness::LiveRun),
            Writer::User(_) => ("alice@laptop", WriterLiveness::Person),
        };
        let lock = self.lock_of(writer.clone(), who);
        self.store.lock_state(TEMPLATE_ORG, &stack, &lock).await?;
        self.serial[t as usize] += 1;
        let body = state_body(t, self.serial[t as usize])?;
        let doc = StateDoc::parse(&body)?;
        let new = NewStateVersion {
            body,
            doc,
            request: WriteRequest {
                writer,
                liveness,
                lock_id: Some(lock.id.clone()),
                force: false,
            },
            token_id: token,
            recovery_reason: None,
        };
        self.store
            .write_state(TEMPLATE_ORG, &stack, &new, None)
            .await?;
        let audit = self.audit(
            "user:admin",
            "state.unlock",
            format!("stack:{stack}"),
            json!({}),
        );
        self.store
            .unlock_state(
                TEMPLATE_ORG,
                &stack,
                &UnlockRequest::Holder { id: lock.id },
                &audit,
            )
            .await?;
        self.versions[t as usize] += 1;
        self.calls += 3;
        Ok(())
    }

    /// Leases and runs every phase waiting for a runner, until none is left.
    pub(crate) async fn drain(&mut self) -> R<()> {
        loop {
            self.calls += 1;
            let Some(run) = self.store.lease_run(&self.runner).await? else {
                return Ok(());
            };
            let scenario = match self.scenario.get(&run.id) {
                Some(s) => *s,
                // Held dependency runs plan nothing new; reconciles apply.
                None if run.trigger == Trigger::Dependency => Scenario::NoChanges,
                None => Scenario::Apply,
            };
            let token = self.run_token(&run).await?;
            match run.phase {
                Phase::Plan => self.plan(run, scenario).await?,
                Phase::Apply => self.apply(run, scenario, token).await?,
            }
        }
    }

    pub(crate) async fn plan(&mut self, run: RunRecord, scenario: Scenario) -> R<()> {
        use Scenario::*;
        let t = self.t_of(&run.stack)?;
        let commit = hex::encode(&Sha256::digest(run.id.as_bytes())[..20]);
        self.logs(&run, INIT_LOG).await?;
        let update = RunUpdate {
            commit: Some(commit),
            ..Default::default()
        };
        let run = self
            .event(&run, Event::PhaseStarted, true, update, None)
            .await?;
        let run = match scenario {
            PlanFails => {
                self.logs(&run, FAIL_LOG).await?;
                let update = RunUpdate {
                    reason: Some("terraform plan exited with status 1".into()),
                    ..Default::default()
                };
                self.event(&run, Event::PhaseFailed, true, update, None)
                    .await?
            }
            Stale => {
                self.event(&run, Event::Stale, false, RunUpdate::default(), None)
                    .await?
            }
            Timeout => {
                let update = RunUpdate {
                    reason: Some(
                        "the phase ran past its tier's timeout; the engine was stopped".into(),
                    ),
                    ..Default::default()
                };
                self.event(&run, Event::Timeout, false, update, None)
                    .await?
            }
            _ => {
                let changes = match scenario {
                    NoChanges => false,
                    Proposed { changes } | Drift { changes } => changes,
                    _ => true,
                };
                self.logs(&run, &plan_log(changes, t)).await?;
                let update = RunUpdate {
                    plan_summary: Some(plan_summary(changes, t)),
                    ..Default::default()
                };
                self.event(&run, Event::planned(changes), true, update, None)
                    .await?
            }
        };
        if run.kind == RunKind::Drift && run.state.is_terminal() {
            self.settle_drift(&run, t).await?;
        }
        if run.state == RunState::Unconfirmed {
            match scenario {
                Hold => {}
                Discard => self.decide(&run, t, false).await?,
                _ => self.decide(&run, t, true).await?,
            }
        }
        Ok(())
    }

    /// Confirms or discards an unconfirmed run — through an approval when its stack's
    /// environment requires one.
    pub(crate) async fn decide(&mut self, run: &RunRecord, t: u64, go: bool) -> R<()> {
        self.calls += 1;
        if self.gated(t) {
            let decision = if go {
                Decision::Approve
            } else {
                Decision::Reject
            };
            let comment = (!go).then(|| "not during the freeze".to_string());
            let actor = format!("user:{APPROVER}");
            let audit = Audit {
                token_id: None,
                ..self.audit(
                    &actor,
                    if go {
                        "approval.approve"
                    } else {
                        "approval.reject"
                    },
                    format!("run:{}", run.id),
                    json!({"kind": "stack_run", "environments": ["prod"],
                           "requested_by": run.triggered_by, "comment": comment}),
                )
            };
            let input = ApprovalDecisionInput {
                org: TEMPLATE_ORG.into(),
                subject: run.id.clone(),
                decision,
                decided_by: actor,
                comment,
                audit,
            };
            self.store.decide_approval(&input).await?;
        } else {
            let (event, action) = if go {
                (Event::Confirm, "run.confirm")
            } else {
                (Event::Discard, "run.discard")
            };
            let audit = self.audit("user:admin", action, format!("run:{}", run.id), json!({}));
            self.event(run, event, false, RunUpdate::default(), Some(audit))
                .await?;
        }
        Ok(())
    }

    pub(crate) async fn apply(
        &mut self,
        run: RunRecord,
        scenario: Scenario,
        token: String,
    ) -> R<()> {
        let t = self.t_of(&run.stack)?;
        let commit = run.commit.clone();
        let update = RunUpdate {
            commit,
            ..Default::default()
        };
        let run = self
            .event(&run, Event::PhaseStarted, true, update, None)
            .await?;
        self.logs(&run, INIT_LOG).await?;
        if scenario == Scenario::ApplyFails {
            // The engine locked the state and failed: the run's end releases its lock.
            let lock = self.lock_of(Writer::Run(run.id.clone()), "runner@bosun");
            self.calls += 1;
            self.store
                .lock_state(TEMPLATE_ORG, &run.stack, &lock)
                .await?;
            self.logs(&run, FAIL_LOG).await?;
            let update = RunUpdate {
                reason: Some("terraform apply exited with status 1".into()),
                ..Default::default()
            };
            self.event(&run, Event::PhaseFailed, true, update, None)
                .await?;
            return Ok(());
        }
        if self.versions[t as usize] < self.max_versions {
            self.write_state(t, Writer::Run(run.id.clone()), Some(token))
                .await?;
        }
        self.logs(&run, APPLY_LOG).await?;
        self.event(&run, Event::ApplyFinished, true, RunUpdate::default(), None)
            .await?;
        Ok(())
    }

    /// Settles an ended drift run as the scheduler does, starting a reconcile when the
    /// stack asks for one.
    pub(crate) async fn settle_drift(&mut self, run: &RunRecord, t: u64) -> R<()> {
        let result = match (run.state, &run.plan_summary) {
            (RunState::Finished, Some(p)) if p["has_changes"] == json!(true) => {
                DriftResult::DriftDetected
            }
            (RunState::Finished, Some(_)) => DriftResult::NoDrift,
            _ => DriftResult::Failed,
        };
        let spec = &self.specs[t as usize];
        let reconcile = (result == DriftResult::DriftDetected
            && spec.drift_detection.as_ref().is_some_and(|d| d.reconcile))
        .then(|| NewRun {
            id: String::new(),
            org: TEMPLATE_ORG.into(),
            stack: spec.id.to_string(),
            kind: RunKind::Tracked,
            trigger: Trigger::Schedule,
            triggered_by: format!("run:{}", run.id),
            commit: None,
            branch: spec.branch.clone(),
            retry_of: None,
            pull_request: None,
        });
        let reconcile = match reconcile {
            Some(mut r) => {
                r.id = self.new_run_id();
                Some(r)
            }
            None => None,
        };
        self.calls += 1;
        self.store
            .settle_drift_run(&run.id, result, reconcile.as_ref())
            .await?;
        Ok(())
    }

    /// Fires stack `t`'s drift schedule now, starting its drift run.
    pub(crate) async fn fire_drift(&mut self, t: u64, scenario: Scenario) -> R<()> {
        let spec = self.specs[t as usize].clone();
        let Some(drift) = &spec.drift_detection else {
            return Ok(());
        };
        let schedule = drift.parsed()?;
        let record = self
            .store
            .drift_schedules(Some(TEMPLATE_ORG), Some(spec.id.as_str()))
            .await?
            .pop()
            .ok_or("a drift stack without its schedule")?;
        let armed = record.state.ok_or("a drift schedule not armed")?;
        let now = Utc::now();
        let next = schedule
            .next_after(armed.next_at)
            .ok_or("a schedule that never fires")?;
        let id = self.new_run_id();
        self.scenario.insert(id.clone(), scenario);
        let fire = DriftFire {
            org: TEMPLATE_ORG.into(),
            stack: spec.id.to_string(),
            schedule: drift.schedule.clone(),
            timezone: drift.timezone.clone(),
            expected_next: Some(armed.next_at),
            next_at: next,
            since: None,
            run: Some(NewRun {
                id,
                org: TEMPLATE_ORG.into(),
                stack: spec.id.to_string(),
                kind: RunKind::Drift,
                trigger: Trigger::Schedule,
                triggered_by: "system".into(),
                commit: None,
                branch: spec.branch.clone(),
                retry_of: None,
                pull_request: None,
            }),
            note: None,
            now,
        };
        self.calls += 2;
        self.store.fire_drift_schedule(&fire).await?;
        Ok(())
    }

    pub(crate) async fn arm_drift(&mut self, t: u64) -> R<()> {
        let spec = &self.specs[t as usize];
        let Some(drift) = &spec.drift_detection else {
            return Ok(());
        };
        let now = Utc::now();
        let next = drift
            .parsed()?
            .next_after(now)
            .ok_or("a schedule that never fires")?;
        let fire = DriftFire {
            org: TEMPLATE_ORG.into(),
            stack: spec.id.to_string(),
            schedule: drift.schedule.clone(),
            timezone: drift.timezone.clone(),
            expected_next: None,
            next_at: next,
            since: Some(now),
            run: None,
            note: None,
            now,
        };
        self.calls += 1;
        self.store.fire_drift_schedule(&fire).await?;
        Ok(())
    }
}

/// What the template phase leaves for the copies.
pub(crate) struct Templates {
    pub(crate) admin_token: String,
    /// When the templates began and ended (ms): the copies' time stretch.
    pub(crate) start_ms: i64,
    pub(crate) end_ms: i64,
    pub(crate) hosted_runners: i64,
}

pub(crate) async fn open_store(backend: &Backend) -> R<Arc<dyn Store>> {
    Ok(match backend {
        Backend::Sqlite(p) => Arc::new(SqliteStore::open(p).await?),
        Backend::Postgres(u) => Arc::new(PostgresStore::open(u).await?),
    })
}

pub(crate) async fn make_templates(args: &Args) -> R<Templates> {
    let store = open_store(&args.backend).await?;
    let width = args.width();
    let mut rng = Rng::from_os()?;

    // The admin token the bench authenticates with, made as the server's first start does.
    let secret = format_token(TokenKind::Personal, &os_random_32()?);
    let admin_token = format!("tok_{}", hex::encode(rng.bytes::<8>()));
    let seeded = store
        .bootstrap(&Bootstrap {
            org: BIG_ORG.into(),
            user: ADMIN.into(),
            token: NewToken {
                id: admin_token.clone(),
                kind: TokenKind::Personal,
                secret_hash: hash_token(&secret),
                description: "bootstrap admin token".into(),
                user: Some(ADMIN.into()),
                org: None,
                pool: None,
                run: None,
                stack: None,
                read_stacks: Vec::new(),
                expires_at: None,
            },
        })
        .await?;
    if !seeded {
        return Err("the store already has users: seed an empty store".into());
    }
    write_private(&args.token_file, &secret)?;

    let admin_audit = |org: Option<&str>, action: &str, target: String, detail: Value| Audit {
        org: org.map(str::to_string),
        actor: "user:admin".into(),
        token_id: Some(admin_token.clone()),
        action: action.into(),
        target,
        detail,
    };
    store
        .create_user(
            &NewUser {
                id: APPROVER.into(),
                server_admin: false,
            },
            &admin_audit(None, "user.create", format!("user:{APPROVER}"), json!({})),
        )
        .await?;
    let mut orgs = vec![TEMPLATE_ORG.to_string()];
    orgs.extend(args.targets().into_iter().map(|(o, _)| o));
    for org in &orgs {
        if org != BIG_ORG {
            let name = if org == TEMPLATE_ORG {
                "Seed templates".to_string()
            } else {
                format!("Team {}", org.trim_start_matches("team-"))
            };
            store
                .create_org(
                    &NewOrg {
                        id: org.clone(),
                        name,
                        admin: Some(ADMIN.into()),
                    },
                    &admin_audit(Some(org), "org.create", format!("org:{org}"), json!({})),
                )
                .await?;
        }
        store
            .set_member(
                org,
                APPROVER,
                Role::Admin,
                &admin_audit(
                    Some(org),
                    "org.member.set",
                    format!("user:{APPROVER}"),
                    json!({"role": "admin"}),
                ),
            )
            .await?;
        for (i, env) in ENVS.iter().enumerate() {
            store
                .create_environment(
                    &NewEnvironment {
                        org: org.clone(),
                        id: env.to_string(),
                        vars: BTreeMap::from([(
                            "region".to_string(),
                            json!(REGIONS[i % REGIONS.len()]),
                        )]),
                        requires_approval: *env == "prod",
                        protected: false,
                        hosts_from: None,
                    },
                    &admin_audit(
                        Some(org),
                        "environment.create",
                        format!("environment:{env}"),
                        json!({}),
                    ),
                )
                .await?;
        }
    }

    // Runners: a fifth in the server's hosted pool (every org's list shows them), the
    // rest in pools of org `default`.
    let hosted = (args.runners as i64 / 5).max(1);
    let mut seed_runner = None;
    for i in 0..args.runners as i64 {
        let (org, pool, name) = if i < hosted {
            (None, "hosted".to_string(), format!("hosted-{i:04}"))
        } else {
            let pool = ["edge", "batch", "secure"][(i % 3) as usize];
            (
                Some(BIG_ORG.to_string()),
                pool.to_string(),
                format!("{pool}-{i:04}"),
            )
        };
        let r = store
            .register_runner(&RunnerRecord {
                id: runner_id(i),
                org,
                pool,
                name,
                version: env!("CARGO_PKG_VERSION").into(),
                drained: false,
                last_seen: Utc::now(),
                created_at: Utc::now(),
                egress: None,
            })
            .await?;
        if i == 0 {
            seed_runner = Some(r);
        }
    }
    let runner = seed_runner.ok_or("no runner registered")?;

    let start = Utc::now();
    let k = args.templates;
    let mut s = Seeder {
        store: store.clone(),
        width,
        admin_token: admin_token.clone(),
        runner,
        rng,
        specs: Vec::new(),
        scenario: HashMap::new(),
        serial: vec![0; k as usize],
        versions: vec![0; k as usize],
        max_versions: args.versions_per_stack,
        last_run: vec![None; k as usize],
        calls: 0,
    };
    for t in 0..k {
        let spec = StackSpec::from_input(stack_input(t, width))?;
        let audit = s.audit(
            "user:admin",
            "stack.create",
            format!("stack:{}", spec.id),
            json!({"name": spec.name, "repository": spec.repository.to_string()}),
        );
        s.calls += 1;
        store.create_stack(TEMPLATE_ORG, &spec, &audit).await?;
        s.specs.push(spec);
        s.arm_drift(t).await?;
    }

    // Rounds: run r of every stack, then run r + 1, so each stack's runs spread over the
    // whole history once stretched.
    for r in 0..args.runs_per_stack {
        for t in 0..k {
            let drift = s.specs[t as usize].drift_detection.is_some();
            let (scenario, kind, trigger) = scenario(t, r, drift);
            if kind == RunKind::Drift {
                s.fire_drift(t, scenario).await?;
            } else {
                let retry_of = match trigger {
                    Trigger::Retry => s.last_run[t as usize].clone(),
                    _ => None,
                };
                let trigger = if trigger == Trigger::Retry && retry_of.is_none() {
                    Trigger::Manual
                } else {
                    trigger
                };
                let run = s.create_run(t, kind, trigger, retry_of).await?;
                s.scenario.insert(run.id.clone(), scenario);
                if kind == RunKind::Tracked {
                    s.last_run[t as usize] = Some(run.id.clone());
                }
                if scenario == Scenario::Cancel {
                    let audit = s.audit(
                        "user:admin",
                        "run.cancel",
                        format!("run:{}", run.id),
                        json!({}),
                    );
                    s.calls += 1;
                    store.cancel_run(&run.id, &audit).await?;
                }
            }
            s.drain().await?;
        }
        log(format!(
            "templates: round {}/{} ({} store calls)",
            r + 1,
            args.runs_per_stack,
            s.calls
        ));
    }
    // Versions written from a laptop, up to the number each stack should have.
    for t in 0..k {
        while s.versions[t as usize] < args.versions_per_stack {
            let token = Some(s.admin_token.clone());
            s.write_state(t, Writer::User(ADMIN.into()), token).await?;
        }
    }
    // Open at the end: plans waiting for confirmation (every 25th stack, none of them in
    // `prod`) or for approval (every 42nd, all in `prod`), locks held from a laptop, and
    // runs queued (behind nothing: no runner is serving).
    for t in (0..k).filter(|t| t % 25 == 12 || t % 42 == 14) {
        let run = s
            .create_run(t, RunKind::Tracked, Trigger::Manual, None)
            .await?;
        s.scenario.insert(run.id, Scenario::Hold);
        s.drain().await?;
    }
    for t in (0..k).filter(|t| t % 50 == 7) {
        let stack = s.specs[t as usize].id.to_string();
        let lock = s.lock_of(Writer::User(ADMIN.into()), "dana@laptop");
        s.calls += 1;
        store.lock_state(TEMPLATE_ORG, &stack, &lock).await?;
    }
    for t in (0..k).filter(|t| t.is_multiple_of(25)) {
        s.create_run(t, RunKind::Tracked, Trigger::Manual, None)
            .await?;
    }
    let end = Utc::now();
    let secs = (end - start).num_milliseconds() as f64 / 1000.0;
    log(format!(
        "templates: {k} stacks made through the Store API in {secs:.1}s ({} store calls, {}/s)",
        s.calls,
        per_s(s.calls, secs)
    ));
    store.close().await;
    Ok(Templates {
        admin_token,
        start_ms: start.timestamp_millis(),
        end_ms: end.timestamp_millis(),
        hosted_runners: hosted,
    })
}
