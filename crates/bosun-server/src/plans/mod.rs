//! Plans on the server: hosts, environments and plan files, and the runs of
//! plans. One module per part.

pub mod resources;
pub mod runs;
pub mod schedule;
pub mod secrets;
pub mod triggers;
