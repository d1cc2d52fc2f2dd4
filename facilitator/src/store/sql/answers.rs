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

use super::batch::Batch;
use super::{SqlStore, to_i64};
use crate::store::{AnswerClaim, AnswerStore, NewPayment, Pass, StoreError, StoreResult};

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
    /// Claims the first answer of `p`'s ticket, and records the pass it buys, inside the
    /// transaction that inserts `p`.
    pub(super) fn insert_first_answer(&self, batch: &mut Batch, p: &NewPayment) -> StoreResult<()> {
        let Some(ticket) = &p.ticket else { return Ok(()) };
        if let Some(pass) = &ticket.pass {
            let seconds = to_i64(pass.seconds.saturating_mul(1_000), "pass length")?;
            batch.push(
                "INSERT INTO passes (payment_id, account_id, scope, payer, network, valid_until) VALUES (?, ?, ?, ?, ?, ?)",
                vec![
                    p.id.as_str().into(),
                    p.owner_account.as_str().into(),
                    pass.scope.as_str().into(),
                    p.from.as_str().into(),
                    p.network.to_string().into(),
                    p.created_at.timestamp_millis().saturating_add(seconds).into(),
                ],
            );
        }
        batch.push(
            "INSERT INTO answers (payment_id, uses, served, request, window_ms, opened_at) VALUES (?, ?, 1, ?, ?, ?)",
            vec![
                p.id.as_str().into(),
                i64::from(ticket.uses).into(),
                ticket.request.as_deref().into(),
                window_ms(ticket)?.into(),
                p.created_at.timestamp_millis().into(),
            ],
        );
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

    async fn find_pass(&self, account: &str, scope: &str, payer: &str, at: DateTime<Utc>) -> StoreResult<Option<Pass>> {
        let sql = self.sql(
            "SELECT passes.payment_id, passes.network, passes.valid_until FROM passes \
             JOIN payments ON payments.id = passes.payment_id \
             WHERE passes.account_id = ? AND passes.scope = ? AND passes.payer = ? AND passes.valid_until > ? \
             AND payments.status = 'confirmed' ORDER BY passes.valid_until DESC LIMIT 1",
        );
        let row = sqlx::query(&sql)
            .bind(account)
            .bind(scope)
            .bind(payer)
            .bind(at.timestamp_millis())
            .fetch_optional(&self.pool)
            .await?;
        let Some(row) = row else { return Ok(None) };
        let network: String = row.try_get("network")?;
        Ok(Some(Pass {
            payment_id: row.try_get("payment_id")?,
            network: network.parse().map_err(|_| StoreError::Database(format!("passes.network holds {network}")))?,
            valid_until: crate::clock::from_millis(row.try_get("valid_until")?),
        }))
    }

    async fn claim_sign_in_nonce(
        &self,
        account: &str,
        nonce: &str,
        expires_at: DateTime<Utc>,
        at: DateTime<Utc>,
    ) -> StoreResult<bool> {
        let purge = self.sql("DELETE FROM sign_in_nonces WHERE expires_at < ?");
        sqlx::query(&purge).bind(at.timestamp_millis()).execute(&self.pool).await?;
        let sql = self.sql(
            "INSERT INTO sign_in_nonces (account_id, nonce, expires_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING \
             RETURNING nonce",
        );
        let row = sqlx::query(&sql)
            .bind(account)
            .bind(nonce)
            .bind(expires_at.timestamp_millis())
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.is_some())
    }
}
