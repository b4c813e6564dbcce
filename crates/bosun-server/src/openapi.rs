//! The OpenAPI document, generated from the handlers' annotations and the wire types.

use axum::Json;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

#[derive(OpenApi)]
#[openapi(
    info(title = "Bosun API", description = "Bosun control plane: stacks, runs, state, plans."),
    paths(
        crate::tenancy::whoami,
        crate::tenancy::list_orgs,
        crate::tenancy::create_org,
        crate::tenancy::get_org,
        crate::tenancy::create_user,
        crate::tenancy::list_members,
        crate::tenancy::put_member,
        crate::tenancy::delete_member,
        crate::tenancy::list_audit,
        crate::tenancy::list_server_audit,
        crate::tokens::create_personal,
        crate::tokens::list_personal,
        crate::tokens::revoke_personal,
        crate::tokens::create_pool,
        crate::tokens::list_pool,
        crate::tokens::revoke_pool,
        crate::stacks::list,
        crate::stacks::create,
        crate::stacks::show,
        crate::stacks::update,
        crate::stacks::delete,
        crate::state::backend,
        crate::state::backend_write,
        crate::state::list_versions,
        crate::state::show_version,
        crate::state::show_lock,
        crate::state::force_unlock,
        crate::state::put_recovered,
        crate::outputs::show,
        crate::runs::trigger,
        crate::runs::list,
        crate::runs::show,
        crate::runs::confirm,
        crate::runs::discard,
        crate::runs::cancel,
        crate::runs::retry,
        crate::runs::logs,
        crate::runs::logs_stream,
        crate::drift::start_check,
        crate::runners::register,
        crate::runners::lease,
        crate::runners::heartbeat,
        crate::runners::next_log_seq,
        crate::runners::append_logs,
        crate::runners::put_plan,
        crate::runners::get_plan,
        crate::runners::report,
        crate::runners::abandon,
        crate::runners::list,
        crate::runners::drain,
        crate::vcs::list_triggers,
        crate::secrets::list,
        crate::secrets::put,
        crate::secrets::delete,
        crate::identity::rotate,
        crate::notify::api::list,
        crate::notify::api::create,
        crate::notify::api::show,
        crate::notify::api::update,
        crate::notify::api::delete,
        crate::notify::api::deliveries,
        crate::notify::api::test,
        crate::plans::resources::list_hosts,
        crate::plans::resources::create_host,
        crate::plans::resources::show_host,
        crate::plans::resources::update_host,
        crate::plans::resources::delete_host,
        crate::plans::resources::list_environments,
        crate::plans::resources::create_environment,
        crate::plans::resources::show_environment,
        crate::plans::resources::update_environment,
        crate::plans::resources::delete_environment,
        crate::plans::resources::grant,
        crate::plans::resources::revoke,
        crate::plans::resources::list_plans,
        crate::plans::resources::upload_plan,
        crate::plans::resources::lint_plan,
        crate::plans::resources::show_plan,
        crate::plans::resources::delete_plan,
        crate::plans::resources::import_inventory,
        crate::plans::runs::create,
        crate::plans::runs::list,
        crate::plans::runs::show,
        crate::plans::runs::abort,
        crate::plans::runs::logs,
        crate::plans::runs::logs_stream,
        crate::plans::runs::runner_heartbeat,
        crate::plans::runs::runner_next_log_seq,
        crate::plans::runs::runner_logs,
        crate::plans::runs::runner_results,
        crate::plans::runs::runner_report,
        crate::approvals::list,
        crate::approvals::decisions,
        crate::approvals::approve,
        crate::approvals::reject,
        crate::plans::schedule::show,
        crate::plans::schedule::set,
        crate::plans::schedule::clear,
    ),
    modifiers(&BearerAuth),
    security(("bearer" = []))
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The generated document.
pub fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

pub async fn serve() -> Json<utoipa::openapi::OpenApi> {
    Json(document())
}
