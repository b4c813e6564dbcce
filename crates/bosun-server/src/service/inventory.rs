//! Inventory import: an inventory file (the YAML `bosun plan exec --inventory` reads)
//! parsed off the async workers, every environment and host in it checked, then created
//! or replaced in one transaction — the work behind the API's import handler. A host
//! behind a bastion (`proxy_jump`) is refused: the server keeps no bastions, and a host
//! stored without its bastion would be connected to directly.

use bosun_api::{InventoryImportAnswer, InventoryImportRequest};
use bosun_core::plan_resources as rules;
use bosun_core::ValidationError;
use bosun_plans::model::{self as engine};
use bosun_store::{InventoryImport, NewEnvironment, NewHost};
use serde_json::json;

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::service::hosts::check_host;
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
        engine::parse_inventory_as_written,
    )
    .await?
    .map_err(parse_error)?;
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
        });
    }
    let mut hosts = Vec::new();
    for h in &inv.hosts {
        if let Some(bastion) = &h.proxy_jump {
            return Err(ValidationError::new(
                format!("hosts.{}.proxy_jump", h.name),
                format!(
                    "host {:?} is reached through bastion {:?}, and the server does not keep bastions: run plans that need one with `bosun plan exec`",
                    h.name, bastion.name
                ),
            )
            .into());
        }
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
        };
        let prefix = format!("hosts.{}.", h.name);
        check_host(&prefix, &host)?;
        hosts.push(host);
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
