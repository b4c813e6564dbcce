//! [`SignalStore`] for both backends: each method delegates to `sql/signals.rs`.

use super::super::*;

#[async_trait]
impl SignalStore for db::Store {
    fn publish(&self, signal: Signal) {
        db::publish(self, signal);
    }

    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Signal> {
        self.inner.signals.subscribe()
    }
}
