//! What every runner call shares: the fencing number it carries (`?fencing=`), and the
//! answer saying where a run's log continues.

use serde::{Deserialize, Serialize};

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct FencingQuery {
    pub fencing: i64,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct NextSeq {
    pub next_seq: i64,
}
