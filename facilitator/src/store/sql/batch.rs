//! Writes that go together, sent together.
//!
//! A payment's insert or change writes several rows in one transaction: the payment, its history
//! entries and counters, its first answer, its announcement, its webhook deliveries. A [`Batch`]
//! lists them, with their values, for [`super::writer::Writer`] to send: to SQLite as one query
//! (one trip to its connection's worker thread, where each statement through sqlx is a trip of
//! its own, four context switches), to PostgreSQL one after another.

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

    /// The statements in order, each with its values.
    pub(super) fn statements(&self) -> impl Iterator<Item = (&str, &[Value])> {
        self.statements.iter().map(|(sql, values)| (sql.as_str(), values.as_slice()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_keeps_its_statements_and_values_in_order() {
        let mut batch = Batch::default();
        batch.push("INSERT INTO a VALUES (?, ?)", vec![1_i64.into(), "x".into()]);
        batch.push("UPDATE b SET c = ? WHERE d = ?", vec![None::<String>.into(), true.into()]);
        let statements: Vec<_> = batch.statements().collect();
        assert_eq!(statements[0], ("INSERT INTO a VALUES (?, ?)", &[Value::Int(Some(1)), "x".into()][..]));
        assert_eq!(statements[1], ("UPDATE b SET c = ? WHERE d = ?", &[Value::Text(None), Value::Bool(true)][..]));
        assert_eq!(statements.len(), 2);
    }
}
