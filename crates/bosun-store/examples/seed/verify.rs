//! Reading the seeded store back through the Store API.

use super::*;

// --- reading it back through the Store API ------------------------------------------------

pub(crate) async fn count_stacks(store: &dyn Store, org: &str) -> R<u64> {
    let mut n = 0;
    let mut after: Option<String> = None;
    loop {
        let page = store.list_stacks(org, after.as_deref(), 1000).await?;
        n += page.len() as u64;
        match page.last() {
            Some(last) if page.len() == 1000 => after = Some(last.spec.id.to_string()),
            _ => return Ok(n),
        }
    }
}

/// The sampled stack numbers of org `default`: spread over the whole range.
pub(crate) fn sample_numbers(n: u64, want: u64) -> Vec<u64> {
    let want = want.min(n);
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    let mut i = 0u64;
    while (out.len() as u64) < want && i < want * 4 {
        let j = (h40(i as i64) as u64) % n;
        if seen.insert(j) {
            out.push(j);
        }
        i += 1;
    }
    out
}

/// What the store computes of the copies, computed through it: the drift schedules'
/// stale_at as a server computes it, and the run and decision counts (one delta each, from
/// the store's triggers) folded as the server's metric-counts duty does.
pub(crate) async fn settle(args: &Args) -> R<()> {
    let store = open_store(&args.backend).await?;
    while store.fill_drift_stale_at(1000).await? == 1000 {}
    store.fold_metric_counts().await?;
    store.close().await;
    Ok(())
}

pub(crate) async fn verify(args: &Args, copied: &Copied) -> R<f64> {
    let started = Instant::now();
    let store = open_store(&args.backend).await?;
    let width = args.width();
    let k = args.templates;
    let mut orgs = args.targets();
    orgs.push((TEMPLATE_ORG.to_string(), k));
    for (org, n) in &orgs {
        let found = count_stacks(store.as_ref(), org).await?;
        if found != *n {
            return Err(format!("org {org}: {found} stacks listed, expected {n}").into());
        }
    }
    let runners = store
        .list_runners(BIG_ORG, None, args.runners + 1)
        .await?
        .len();
    if runners != args.runners as usize {
        return Err(format!(
            "{runners} runners listed in {BIG_ORG}, expected {}",
            args.runners
        )
        .into());
    }

    let mut samples = String::new();
    let sample = sample_numbers(args.stacks, args.samples);
    let mut checked_runs = 0;
    for (i, j) in sample.iter().enumerate() {
        let t = (j % k) as usize;
        let id = stack_id(*j, width);
        let deep = i < 100;
        let stack = store
            .get_stack(BIG_ORG, &id)
            .await?
            .ok_or_else(|| format!("stack {id} does not read back"))?;
        samples.push_str(&format!("stack {id}\n"));
        let runs = store.list_runs(BIG_ORG, Some(&id), None, 1000).await?;
        if runs.len() as i64 != copied.counts.runs[t] {
            return Err(format!(
                "stack {id}: {} runs, expected {}",
                runs.len(),
                copied.counts.runs[t]
            )
            .into());
        }
        for r in &runs {
            samples.push_str(&format!("run {}\n", r.id));
            let stamp = i64::from_str_radix(r.id.get(4..15).unwrap_or(""), 16)?;
            if stamp != r.created_at.timestamp_millis() || r.stack != id {
                return Err(format!("run {} of {id}: id and record disagree", r.id).into());
            }
            if deep {
                let again = store
                    .get_run(&r.id)
                    .await?
                    .ok_or("a listed run does not read back")?;
                let phases = store.run_phases(&again.id).await?;
                if phases.is_empty() || phases.windows(2).any(|w| w[0].started_at > w[1].started_at)
                {
                    return Err(format!("run {}: phases missing or out of order", r.id).into());
                }
                let ran = phases.iter().any(|p| p.state == RunState::Planning);
                if ran && store.read_logs(&again.id, None, 100).await?.is_empty() {
                    return Err(format!("run {}: no log", r.id).into());
                }
                if let Some(up) = &again.retry_of {
                    store
                        .get_run(up)
                        .await?
                        .ok_or("a retry of a run that is not there")?;
                }
                checked_runs += 1;
            }
        }
        let versions = store.list_state_versions(BIG_ORG, &id, None, 1000).await?;
        if versions.len() as i64 != copied.counts.versions[t] {
            return Err(format!(
                "stack {id}: {} state versions, expected {}",
                versions.len(),
                copied.counts.versions[t]
            )
            .into());
        }
        for v in &versions {
            samples.push_str(&format!("version {id} {}\n", v.version));
        }
        if deep {
            for v in &versions {
                let (meta, body) = store
                    .state_version(BIG_ORG, &id, Some(v.version))
                    .await?
                    .ok_or("a listed state version does not read back")?;
                if hex::encode(Sha256::digest(&body)) != meta.checksum {
                    return Err(
                        format!("stack {id} version {}: checksum mismatch", v.version).into(),
                    );
                }
                if let Writer::Run(run) = &meta.writer {
                    store
                        .get_run(run)
                        .await?
                        .ok_or("a state writer run that is not there")?;
                }
            }
            let head = store.state_head(BIG_ORG, &id).await?;
            if head.current.map(|c| c.version) != versions.first().map(|v| v.version) {
                return Err(format!("stack {id}: the current version is not the newest").into());
            }
            let drift = store.drift_schedules(Some(BIG_ORG), Some(&id)).await?;
            if drift.len() != usize::from(stack.spec.drift_detection.is_some()) {
                return Err(format!("stack {id}: drift schedule does not match the stack").into());
            }
            for d in &stack.spec.depends_on {
                store
                    .get_stack(BIG_ORG, d.stack.as_str())
                    .await?
                    .ok_or("an upstream stack that is not there")?;
            }
        }
    }
    if let Some(path) = &args.samples_file {
        std::fs::write(path, samples)?;
    }
    store.close().await;
    let secs = started.elapsed().as_secs_f64();
    log(format!(
        "check: every org's stacks listed; {} sampled stacks read back, {checked_runs} runs in depth ({secs:.1}s)",
        sample.len()
    ));
    Ok(secs)
}
