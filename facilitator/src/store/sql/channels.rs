//! [`ChannelStore`] in SQL: the `batch_channels` table. The first account recorded for a channel
//! keeps it: an insert that a second cannot repeat, then a read of whoever holds it.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::Row;
use tollgate_protocol::Network;

use super::SqlStore;
use crate::store::{ChannelStore, StoreResult};

#[async_trait]
impl ChannelStore for SqlStore {
    async fn record_channel(
        &self,
        network: &Network,
        channel_id: &str,
        account: &str,
        at: DateTime<Utc>,
    ) -> StoreResult<String> {
        let insert = self.sql(
            "INSERT INTO batch_channels (network, channel_id, account_id, created_at) VALUES (?, ?, ?, ?) \
             ON CONFLICT (network, channel_id) DO NOTHING",
        );
        sqlx::query(&insert)
            .bind(network.to_string())
            .bind(channel_id)
            .bind(account)
            .bind(at.timestamp_millis())
            .execute(&self.pool)
            .await?;
        Ok(self.channel_account(network, channel_id).await?.unwrap_or_else(|| account.to_owned()))
    }

    async fn channel_account(&self, network: &Network, channel_id: &str) -> StoreResult<Option<String>> {
        let sql = self.sql("SELECT account_id FROM batch_channels WHERE network = ? AND channel_id = ?");
        let row = sqlx::query(&sql).bind(network.to_string()).bind(channel_id).fetch_optional(&self.pool).await?;
        Ok(match row {
            Some(row) => Some(row.try_get("account_id")?),
            None => None,
        })
    }
}
