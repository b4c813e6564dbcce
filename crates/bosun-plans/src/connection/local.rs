//! The `local` connection: commands as child processes of this machine.

use async_trait::async_trait;

use super::{ConnError, Connection, Output, RunRequest};

#[derive(Debug, Default)]
pub struct LocalConnection;

impl LocalConnection {
    pub fn new() -> Self {
        LocalConnection
    }
}

#[async_trait]
impl Connection for LocalConnection {
    async fn run(&self, _request: &RunRequest) -> Result<Output, ConnError> {
        Err(ConnError::Other(
            "local connections are not implemented yet".into(),
        ))
    }

    async fn close(&self) {}
}
