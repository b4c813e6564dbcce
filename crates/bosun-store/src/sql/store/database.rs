//! [`DatabaseStore`] for both backends: each method delegates to `sql/database.rs`.

use super::super::*;

#[async_trait]
impl DatabaseStore for db::Store {
    async fn schema_version(&self) -> Result<i64> {
        self.read(database::schema_version).await
    }

    async fn ping(&self) -> Result<()> {
        self.read(database::ping).await
    }

    fn last_unavailable(&self) -> Option<DateTime<Utc>> {
        self.inner.availability.last_unavailable()
    }

    fn write_fault(&self) -> Option<String> {
        self.inner.availability.write_fault()
    }

    async fn close(&self) {
        db::close(self).await;
    }
}
