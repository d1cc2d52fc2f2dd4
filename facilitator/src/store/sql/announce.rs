//! PostgreSQL's announcements of payment changes and key deletions (`LISTEN`/`NOTIFY`).
//!
//! A payment change is written to `payment_events` in the transaction that makes it
//! ([`SqlStore::announce`]); a trigger announces its id on `tollgate_payment_events` when that
//! transaction commits, and a trigger on `api_keys` announces deletions on `tollgate_api_keys`.
//! Payloads are `<schema>:<id>`: channels are database-wide, so a listener ignores other schemas'.
//! PostgreSQL delivers notifications in commit order, and the compare-and-set on a payment's
//! status orders its changes' commits: each listener sees a payment's changes in order, once.

use async_trait::async_trait;
use sqlx::postgres::PgListener;
use sqlx::{AnyPool, Row};
use tollgate_protocol::gateway::PaymentStatus;

use super::batch::Batch;
use super::{Backend, SqlStore};
use crate::store::{Announcement, Announcements, PaymentNotice, PaymentRoute, StoreError, StoreResult, StoredPayment};

/// The channel of payment changes.
pub const PAYMENT_CHANNEL: &str = "tollgate_payment_events";
/// The channel of key deletions.
pub const KEY_CHANNEL: &str = "tollgate_api_keys";

impl SqlStore {
    /// Writes `stored`'s change for every instance to hear (PostgreSQL; nothing on SQLite, where
    /// the instance publishes its own changes), in `batch`: inside the transaction that made it.
    pub(super) fn announce(&self, batch: &mut Batch, stored: &StoredPayment) {
        if self.backend != Backend::Postgres {
            return;
        }
        let PaymentNotice { route: r, message } = PaymentNotice::of(stored);
        let [from, to] = r.wallets;
        batch.push(
            "INSERT INTO payment_events (payment_id, owner_account, counterparty_account, from_address, to_address, \
             status, body, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            vec![
                r.payment_id.into(),
                r.owner_account.into(),
                r.counterparty_account.into(),
                from.into(),
                to.into(),
                r.status.as_str().into(),
                message.into(),
                stored.updated_at.timestamp_millis().into(),
            ],
        );
    }
}

/// A listening connection and the pool to read announced changes with.
pub struct PgAnnouncements {
    listener: PgListener,
    pool: AnyPool,
    /// `<schema>:`, the prefix of this database's payloads.
    prefix: String,
}

impl PgAnnouncements {
    /// Listens on both channels.
    pub(super) async fn listen(url: &str, pool: AnyPool) -> StoreResult<Self> {
        let schema: String =
            sqlx::query("SELECT CAST(current_schema() AS TEXT) AS s").fetch_one(&pool).await?.try_get("s")?;
        let mut listener = PgListener::connect(url).await?;
        listener.listen_all([PAYMENT_CHANNEL, KEY_CHANNEL]).await?;
        Ok(Self { listener, pool, prefix: format!("{schema}:") })
    }

    async fn payment(&self, id: i64) -> StoreResult<Option<PaymentNotice>> {
        let row = sqlx::query(
            "SELECT payment_id, owner_account, counterparty_account, from_address, to_address, status, body \
             FROM payment_events WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let status: String = row.try_get("status")?;
        let route = PaymentRoute {
            payment_id: row.try_get("payment_id")?,
            owner_account: row.try_get("owner_account")?,
            counterparty_account: row.try_get("counterparty_account")?,
            wallets: [row.try_get("from_address")?, row.try_get("to_address")?],
            status: PaymentStatus::from_wire(&status)
                .ok_or_else(|| StoreError::Database(format!("unreadable status in payment_events: {status}")))?,
        };
        Ok(Some(PaymentNotice { route, message: row.try_get("body")? }))
    }
}

#[async_trait]
impl Announcements for PgAnnouncements {
    async fn next(&mut self) -> StoreResult<Announcement> {
        loop {
            // `None`: the connection dropped; the next call reconnects and listens again.
            let Some(notification) = self.listener.try_recv().await? else { return Ok(Announcement::Gap) };
            let Some(payload) = notification.payload().strip_prefix(self.prefix.as_str()) else { continue };
            match notification.channel() {
                PAYMENT_CHANNEL => {
                    let Ok(id) = payload.parse::<i64>() else { continue };
                    // Gone only if purged already (hours later): nothing to tell.
                    if let Some(notice) = self.payment(id).await? {
                        return Ok(Announcement::Payment(notice));
                    }
                }
                KEY_CHANNEL => return Ok(Announcement::KeyDeleted(payload.to_owned())),
                _ => {}
            }
        }
    }
}
