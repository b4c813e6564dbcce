//! The `ssh` connection.

use async_trait::async_trait;

use super::{ConnError, ConnectOptions, Connection, Output, RunRequest};
use crate::model::Host;

pub struct SshConnection;

impl SshConnection {
    pub async fn connect(host: &Host, _options: &ConnectOptions) -> Result<Self, ConnError> {
        Err(ConnError::Other(format!(
            "ssh connections are not implemented yet ({})",
            host.name
        )))
    }
}

#[async_trait]
impl Connection for SshConnection {
    async fn run(&self, _request: &RunRequest) -> Result<Output, ConnError> {
        Err(ConnError::Other(
            "ssh connections are not implemented yet".into(),
        ))
    }

    async fn close(&self) {}
}
