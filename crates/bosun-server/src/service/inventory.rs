//! Inventory import: an inventory file (the YAML `bosun plan exec --inventory` reads)
//! parsed off the async workers, every environment and host in it checked, then created
//! or replaced in one transaction — the work behind the API's import handler.
//!
//! A host's bastion (`proxy_jump`, or the file's `defaults.proxy_jump`) is kept by name.
//! It may be a host of the file or one the org already has: the file's bastions are
//! resolved over the org's hosts as the import would leave them
//! (`super::hosts::check_bastions`), and a bastion that is neither, a `local` one or a
//! chain that goes round in a cycle is refused naming `hosts.NAME.proxy_jump` (or
//! `defaults.proxy_jump`). Nothing of a refused file is stored.

use bosun_api::{InventoryImportAnswer, InventoryImportRequest};
use bosun_core::plan_resources as rules;
use bosun_plans::model::{self as engine};
use bosun_store::{InventoryImport, NewEnvironment, NewHost};
use serde_json::json;

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::service::hosts::{check_bastions, check_host, Written};
use crate::service::plans::{parse_error, parse_off_workers, PARSE_BUDGET};

/// Imports an inventory file for `caller`: every environment and host in it is created,
/// or replaced when it exists, in one transaction; nothing else changes. `~` in paths
/// stays as written (the runner's home).
pub async fn import(
    state: &AppState,
    caller: &Caller,
    org: &str,
    body: InventoryImportRequest,
) -> Result<InventoryImportAnswer, ApiError> {
    let file = body.file.clone().unwrap_or_else(|| "inventory.yaml".into());
    let inv = parse_off_workers(
        "inventory",
        &file,
        &body.source,
        PARSE_BUDGET,
        engine::parse_inventory_unresolved,
    )
    .await?
    .map_err(parse_error)?;
    let engine::UnresolvedInventory {
        inventory: inv,
        jumps,
    } = inv;
    let mut environments = Vec::new();
    for (id, e) in &inv.environments {
        let field = format!("environments.{id}");
        rules::environment_id(&field, id)?;
        for k in e.vars.keys() {
            rules::var_name(&format!("{field}.vars.{k}"), k)?;
        }
        environments.push(NewEnvironment {
            org: org.to_string(),
            id: id.clone(),
            vars: e.vars.clone(),
            requires_approval: e.requires_approval,
            protected: e.protected,
            // An inventory file has no sources: the store keeps an existing one's.
            hosts_from: None,
        });
    }
    let mut hosts = Vec::new();
    for (h, jump) in inv.hosts.iter().zip(&jumps) {
        let host = NewHost {
            org: org.to_string(),
            name: h.name.clone(),
            address: h.address.clone(),
            port: h.port,
            user: h.user.clone(),
            connection: match h.connection {
                engine::ConnectionKind::Local => "local".into(),
                engine::ConnectionKind::Ssh => "ssh".into(),
            },
            labels: h.labels.clone(),
            vars: h.vars.clone(),
            environment: h.environment.clone(),
            identity_file: h
                .identity_file
                .as_ref()
                .map(|p| p.to_string_lossy().into_owned()),
            host_key: h.host_key.clone(),
            known_hosts: h
                .known_hosts
                .as_ref()
                .map(|p| p.to_string_lossy().into_owned()),
            proxy_jump: jump.as_ref().map(|j| j.bastion.clone()),
        };
        let prefix = format!("hosts.{}.", h.name);
        check_host(&prefix, &host)?;
        hosts.push(host);
    }
    if jumps.iter().any(Option::is_some) || hosts.iter().any(|h| h.connection == "local") {
        let stored = state.store.list_hosts(org).await?;
        let written: Vec<Written<'_>> = hosts
            .iter()
            .zip(&jumps)
            .map(|(host, jump)| Written {
                host,
                prefix: format!("hosts.{}.", host.name),
                written_at: jump.as_ref().map(|j| j.written_at.clone()),
            })
            .collect();
        check_bastions(&stored, &written, "this inventory or of the org")?;
    }
    let audit = caller.audit(
        Some(org),
        "inventory.import",
        format!("inventory:{file}"),
        json!({}),
    );
    let done = state
        .store
        .import_inventory(
            &InventoryImport {
                org: org.to_string(),
                environments,
                hosts,
            },
            &audit,
        )
        .await?;
    Ok(InventoryImportAnswer {
        environments_created: done.environments_created,
        environments_updated: done.environments_updated,
        hosts_created: done.hosts_created,
        hosts_updated: done.hosts_updated,
    })
}
