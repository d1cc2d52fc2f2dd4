//! [`RedisChannels`]: channels shared by several instances of a seller through Redis (feature
//! `redis`). Each write is one compare-and-set script on the record's version, so two instances
//! never move one channel from the same state: the loser withholds its answer. Run Redis with
//! `appendfsync always` for a charge to be on disk before its answer is released.

use async_trait::async_trait;

use super::store::{ChannelRecord, ChannelStore, ChannelStoreError};

/// Writes `ARGV[3]` (the record) at version `ARGV[2]` when the stored version is `ARGV[1]`
/// (empty: no record yet), and lists the channel (`ARGV[4]`) in the set `KEYS[2]`.
const PUT: &str = r"
local stored = redis.call('HGET', KEYS[1], 'version')
if (stored == false and ARGV[1] == '') or (stored ~= false and stored == ARGV[1]) then
  redis.call('HSET', KEYS[1], 'version', ARGV[2], 'record', ARGV[3])
  redis.call('SADD', KEYS[2], ARGV[4])
  return 1
end
return 0
";

/// Channel records in Redis under a key prefix (one per seller).
#[derive(Clone)]
pub struct RedisChannels {
    client: redis::Client,
    /// Made at the first use (or by [`RedisChannels::connect`]); it reconnects by itself after.
    connection: std::sync::Arc<tokio::sync::OnceCell<redis::aio::ConnectionManager>>,
    prefix: String,
    put: redis::Script,
}

impl std::fmt::Debug for RedisChannels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the URL: it may carry a password.
        f.debug_struct("RedisChannels").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

fn failed(e: &redis::RedisError) -> ChannelStoreError {
    ChannelStoreError(format!("redis: {}", e.category()))
}

impl RedisChannels {
    /// The channels under `prefix` in the Redis at `url` (`redis://[:password@]host:port[/db]`).
    ///
    /// # Errors
    /// When `url` is not a Redis URL or Redis cannot be reached.
    pub async fn connect(url: &str, prefix: &str) -> Result<Self, ChannelStoreError> {
        let channels = Self::open(url, prefix)?;
        channels.connection().await?;
        Ok(channels)
    }

    /// The channels under `prefix` in the Redis at `url`, connected at their first use (a
    /// store that cannot be reached then answers [`ChannelStoreError`], and is tried again at
    /// the next use).
    ///
    /// # Errors
    /// When `url` is not a Redis URL.
    pub fn open(url: &str, prefix: &str) -> Result<Self, ChannelStoreError> {
        let client = redis::Client::open(url).map_err(|e| failed(&e))?;
        Ok(Self {
            client,
            connection: std::sync::Arc::default(),
            prefix: prefix.to_owned(),
            put: redis::Script::new(PUT),
        })
    }

    /// Whether Redis answers (a `PING`).
    ///
    /// # Errors
    /// When it cannot be reached.
    pub async fn ping(&self) -> Result<(), ChannelStoreError> {
        let mut c = self.connection().await?;
        redis::cmd("PING").query_async::<String>(&mut c).await.map(drop).map_err(|e| failed(&e))
    }

    async fn connection(&self) -> Result<redis::aio::ConnectionManager, ChannelStoreError> {
        let made = self.connection.get_or_try_init(|| self.client.get_connection_manager()).await;
        made.cloned().map_err(|e| failed(&e))
    }

    fn record_key(&self, channel_id: &str) -> String {
        format!("{}:channel:{channel_id}", self.prefix)
    }

    fn ids(&self) -> String {
        format!("{}:channels", self.prefix)
    }
}

fn parse(text: Option<String>) -> Result<Option<ChannelRecord>, ChannelStoreError> {
    text.map(|t| serde_json::from_str(&t).map_err(|e| ChannelStoreError(format!("a stored record: {e}")))).transpose()
}

#[async_trait]
impl ChannelStore for RedisChannels {
    async fn get(&self, channel_id: &str) -> Result<Option<ChannelRecord>, ChannelStoreError> {
        let mut c = self.connection().await?;
        let text: Option<String> = redis::cmd("HGET")
            .arg(self.record_key(channel_id))
            .arg("record")
            .query_async(&mut c)
            .await
            .map_err(|e| failed(&e))?;
        parse(text)
    }

    async fn put(&self, record: &ChannelRecord, expected: Option<u64>) -> Result<bool, ChannelStoreError> {
        let version = expected.map_or(1, |v| v + 1);
        let stored = ChannelRecord { version, ..record.clone() };
        let json = serde_json::to_string(&stored).map_err(|e| ChannelStoreError(e.to_string()))?;
        let mut c = self.connection().await?;
        let written: i64 = self
            .put
            .key(self.record_key(&record.channel_id))
            .key(self.ids())
            .arg(expected.map(|v| v.to_string()).unwrap_or_default())
            .arg(version.to_string())
            .arg(json)
            .arg(&record.channel_id)
            .invoke_async(&mut c)
            .await
            .map_err(|e| failed(&e))?;
        Ok(written == 1)
    }

    async fn all(&self) -> Result<Vec<ChannelRecord>, ChannelStoreError> {
        let mut c = self.connection().await?;
        let ids: Vec<String> =
            redis::cmd("SMEMBERS").arg(self.ids()).query_async(&mut c).await.map_err(|e| failed(&e))?;
        let mut records = Vec::with_capacity(ids.len());
        for id in ids {
            records.extend(self.get(&id).await?);
        }
        Ok(records)
    }

    /// Clones of one `RedisChannels` are one store (one lock per channel in the process);
    /// another one opened on the same prefix is another instance, kept apart by the
    /// compare-and-set alone.
    fn key(&self) -> String {
        format!("redis {:p}", std::sync::Arc::as_ptr(&self.connection))
    }
}
