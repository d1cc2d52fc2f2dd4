//! [`AnswerStore`] in SQL: the `answers` table, one row per payment that buys answers.
//!
//! Every count is one statement the database decides: the first answer is inserted with its
//! payment (in the payment's transaction, [`SqlStore::insert_first_answer`]); each later one by
//! an upsert whose update applies only while the ticket allows it, so two instances claiming the
//! last answer at once get one answer between them.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::Row;
use tollgate_protocol::ticket::{Answered, Ticket};

use super::{SqlStore, to_i64};
use crate::store::{AnswerClaim, AnswerStore, NewPayment, StoreError, StoreResult};

/// A ticket's window in milliseconds, as stored.
fn window_ms(ticket: &Ticket) -> StoreResult<i64> {
    to_i64(ticket.seconds.saturating_mul(1_000), "ticket window")
}

/// A count read back from the table.
fn count(row: &sqlx::any::AnyRow, column: &str) -> StoreResult<u32> {
    let n: i64 = row.try_get(column)?;
    u32::try_from(n).map_err(|_| StoreError::Database(format!("answers.{column} holds {n}")))
}

impl SqlStore {
    /// Claims the first answer of `p`'s ticket, inside the transaction that inserts `p`.
    pub(super) async fn insert_first_answer(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        p: &NewPayment,
    ) -> StoreResult<()> {
        let Some(ticket) = &p.ticket else { return Ok(()) };
        let sql = self.sql(
            "INSERT INTO answers (payment_id, uses, served, request, window_ms, opened_at) VALUES (?, ?, 1, ?, ?, ?)",
        );
        sqlx::query(&sql)
            .bind(&p.id)
            .bind(i64::from(ticket.uses))
            .bind(ticket.request.as_deref())
            .bind(window_ms(ticket)?)
            .bind(p.created_at.timestamp_millis())
            .execute(&mut **tx)
            .await?;
        Ok(())
    }
}

#[async_trait]
impl AnswerStore for SqlStore {
    async fn claim_answer(&self, payment_id: &str, ticket: &Ticket, at: DateTime<Utc>) -> StoreResult<AnswerClaim> {
        // A ticket with nothing served counts this answer as its first (and starts its window
        // anew, for this request); one with answers served counts a repeat of its first request
        // within its window; none past its uses.
        let sql = self.sql(
            "INSERT INTO answers (payment_id, uses, served, request, window_ms, opened_at) VALUES (?, ?, 1, ?, ?, ?) \
             ON CONFLICT (payment_id) DO UPDATE SET served = answers.served + 1, \
             request = CASE WHEN answers.served = 0 THEN excluded.request ELSE answers.request END, \
             opened_at = CASE WHEN answers.served = 0 THEN excluded.opened_at ELSE answers.opened_at END \
             WHERE answers.served < answers.uses AND (answers.served = 0 OR (answers.request = excluded.request \
             AND excluded.opened_at < answers.opened_at + answers.window_ms)) \
             RETURNING served, uses",
        );
        let now = at.timestamp_millis();
        let claimed = sqlx::query(&sql)
            .bind(payment_id)
            .bind(i64::from(ticket.uses))
            .bind(ticket.request.as_deref())
            .bind(window_ms(ticket)?)
            .bind(now)
            .fetch_optional(&self.pool)
            .await?;
        if let Some(row) = claimed {
            return Ok(AnswerClaim::Claimed(Answered { served: count(&row, "served")?, uses: count(&row, "uses")? }));
        }
        // Not counted: say why, from the row as it stands.
        let sql = self.sql("SELECT served, uses, request, window_ms FROM answers WHERE payment_id = ?");
        let row = sqlx::query(&sql).bind(payment_id).fetch_one(&self.pool).await?;
        let (served, uses) = (count(&row, "served")?, count(&row, "uses")?);
        let first: Option<String> = row.try_get("request")?;
        let window: i64 = row.try_get("window_ms")?;
        Ok(if served >= uses {
            AnswerClaim::UsedUp(Answered { served, uses })
        } else if first.is_none() || first != ticket.request {
            AnswerClaim::OtherRequest
        } else {
            AnswerClaim::Expired { seconds: u64::try_from(window / 1_000).unwrap_or_default() }
        })
    }

    async fn release_answer(&self, payment_id: &str) -> StoreResult<Option<Answered>> {
        let sql = self
            .sql("UPDATE answers SET served = served - 1 WHERE payment_id = ? AND served > 0 RETURNING served, uses");
        let row = match sqlx::query(&sql).bind(payment_id).fetch_optional(&self.pool).await? {
            Some(row) => row,
            // Nothing counted to give back: as it stands, if it has a ticket.
            None => {
                let sql = self.sql("SELECT served, uses FROM answers WHERE payment_id = ?");
                match sqlx::query(&sql).bind(payment_id).fetch_optional(&self.pool).await? {
                    Some(row) => row,
                    None => return Ok(None),
                }
            }
        };
        Ok(Some(Answered { served: count(&row, "served")?, uses: count(&row, "uses")? }))
    }
}
