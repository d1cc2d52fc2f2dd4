//! Writes that go together, sent together.
//!
//! A payment's insert or change writes several rows in one transaction: the payment, its history
//! entries and counters, its first answer, its announcement, its webhook deliveries. Through sqlx
//! each statement on SQLite is a trip to the connection's worker thread and back, four context
//! switches, which cost a settlement more CPU than its statements (issue 45). A [`Batch`] goes to
//! SQLite as one query, whose `?` parameters sqlx binds in order across its statements: the whole
//! list is one trip. PostgreSQL prepares one statement per query: there they run one after
//! another, each with its placeholders numbered.

use sqlx::any::{AnyArguments, AnyRow};
use sqlx::query::Query;
use sqlx::{Any, AnyConnection};

use super::{Backend, SqlStore, number_placeholders};

/// One bound value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Value {
    Text(Option<String>),
    Int(Option<i64>),
    Bool(bool),
    Bytes(Option<Vec<u8>>),
}

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Self::Text(Some(v.to_owned()))
    }
}

impl From<&String> for Value {
    fn from(v: &String) -> Self {
        Self::Text(Some(v.clone()))
    }
}

impl From<String> for Value {
    fn from(v: String) -> Self {
        Self::Text(Some(v))
    }
}

impl From<Option<&str>> for Value {
    fn from(v: Option<&str>) -> Self {
        Self::Text(v.map(str::to_owned))
    }
}

impl From<Option<String>> for Value {
    fn from(v: Option<String>) -> Self {
        Self::Text(v)
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Self::Int(Some(v))
    }
}

impl From<Option<i64>> for Value {
    fn from(v: Option<i64>) -> Self {
        Self::Int(v)
    }
}

impl From<Option<Vec<u8>>> for Value {
    fn from(v: Option<Vec<u8>>) -> Self {
        Self::Bytes(v)
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Self::Bool(v)
    }
}

/// Statements to run in order, inside the caller's transaction, written with `?` placeholders.
#[derive(Debug, Default)]
pub(super) struct Batch {
    statements: Vec<(String, Vec<Value>)>,
}

impl Batch {
    /// Adds `sql` with its values, one per `?`.
    pub(super) fn push(&mut self, sql: impl Into<String>, values: Vec<Value>) {
        let sql = sql.into();
        debug_assert_eq!(sql.matches('?').count(), values.len(), "one value per placeholder: {sql}");
        self.statements.push((sql, values));
    }

    /// The statements as one SQLite query, and its values in order.
    fn joined(&self) -> (String, impl Iterator<Item = &Value>) {
        let sql = self.statements.iter().map(|(sql, _)| sql.as_str()).collect::<Vec<_>>().join(";\n");
        (sql, self.statements.iter().flat_map(|(_, values)| values))
    }
}

fn bind<'q>(query: Query<'q, Any, AnyArguments<'q>>, value: &'q Value) -> Query<'q, Any, AnyArguments<'q>> {
    match value {
        Value::Text(v) => query.bind(v.as_deref()),
        Value::Int(v) => query.bind(*v),
        Value::Bool(v) => query.bind(*v),
        Value::Bytes(v) => query.bind(v.as_deref()),
    }
}

impl SqlStore {
    /// Runs `batch` on `conn` (inside the caller's transaction, which the first error leaves to
    /// roll back): the rows its statements return, in order.
    pub(super) async fn run(&self, conn: &mut AnyConnection, batch: &Batch) -> Result<Vec<AnyRow>, sqlx::Error> {
        if batch.statements.is_empty() {
            return Ok(Vec::new());
        }
        match self.backend {
            Backend::Sqlite => {
                let (sql, values) = batch.joined();
                let query = values.fold(sqlx::query(&sql), bind);
                query.fetch_all(&mut *conn).await
            }
            Backend::Postgres => {
                let mut rows = Vec::new();
                for (sql, values) in &batch.statements {
                    let sql = number_placeholders(sql);
                    let query = values.iter().fold(sqlx::query(&sql), bind);
                    rows.extend(query.fetch_all(&mut *conn).await?);
                }
                Ok(rows)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_one_query_with_its_values_in_order() {
        let mut batch = Batch::default();
        batch.push("INSERT INTO a VALUES (?, ?)", vec![1_i64.into(), "x".into()]);
        batch.push("UPDATE b SET c = ? WHERE d = ?", vec![None::<String>.into(), true.into()]);
        let (sql, values) = batch.joined();
        assert_eq!(sql, "INSERT INTO a VALUES (?, ?);\nUPDATE b SET c = ? WHERE d = ?");
        let values: Vec<_> = values.cloned().collect();
        assert_eq!(values, vec![Value::Int(Some(1)), "x".into(), Value::Text(None), Value::Bool(true)]);
    }
}
