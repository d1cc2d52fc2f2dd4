//! The schema migrations, compiled into the binary: every file of `migrations/sqlite/` and
//! `migrations/postgres/` (the same names in both), handed to sqlx's migrator as it would read
//! them from the folder — same versions, descriptions and checksums — without sqlx's `migrate!`
//! macro, whose build compiles a second copy of sqlx's drivers for the compiler (about a minute
//! of a cold build). A test checks this list against the folders.

use std::borrow::Cow;

use sqlx::error::BoxDynError;
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};

use super::Backend;

/// `(file stem, SQLite text, PostgreSQL text)` of every migration, oldest first.
macro_rules! migrations {
    ($($stem:literal),* $(,)?) => {
        &[$((
            $stem,
            include_str!(concat!("../../../migrations/sqlite/", $stem, ".sql")),
            include_str!(concat!("../../../migrations/postgres/", $stem, ".sql")),
        )),*]
    };
}

const FILES: &[(&str, &str, &str)] = migrations![
    "20261122000001_initial",
    "20261122000002_wallets",
    "20261123000001_payment_core",
    "20261124000001_scale_out",
    "20261125000001_webhooks",
    "20261126000001_transaction_per_side",
    "20261127000001_sponsorship",
    "20261127000002_dashboard_sessions",
    "20261128000001_answers",
    "20261128000002_passes",
    "20261207000001_discovery",
    "20261207000002_discovery_owner",
];

/// The migrations of one backend.
#[derive(Debug, Clone, Copy)]
struct Embedded(Backend);

impl MigrationSource<'static> for Embedded {
    fn resolve(self) -> futures_util::future::BoxFuture<'static, Result<Vec<Migration>, BoxDynError>> {
        Box::pin(async move { migrations(self.0) })
    }
}

/// A file's migration, named as sqlx names one read from its folder: the version before the
/// first `_`, the rest of the stem with `_` as spaces.
fn migrations(backend: Backend) -> Result<Vec<Migration>, BoxDynError> {
    FILES
        .iter()
        .map(|(stem, sqlite, postgres)| {
            let (version, description) = stem.split_once('_').ok_or("a migration file has no description")?;
            let sql = match backend {
                Backend::Sqlite => sqlite,
                Backend::Postgres => postgres,
            };
            Ok(Migration::new(
                version.parse()?,
                Cow::Owned(description.replace('_', " ")),
                MigrationType::Simple,
                Cow::Borrowed(*sql),
                false,
            ))
        })
        .collect()
}

/// The migrator of `backend`'s schema.
pub(super) async fn migrator(backend: Backend) -> Result<Migrator, sqlx::migrate::MigrateError> {
    Migrator::new(Embedded(backend)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file of both folders is listed, in order, and read as sqlx reads the folder.
    #[test]
    fn the_list_is_the_folders() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
        for (backend, folder) in [(Backend::Sqlite, "sqlite"), (Backend::Postgres, "postgres")] {
            let mut stems: Vec<String> = std::fs::read_dir(dir.join(folder))
                .unwrap()
                .map(|e| e.unwrap().path().file_stem().unwrap().to_string_lossy().into_owned())
                .collect();
            stems.sort();
            assert_eq!(stems, FILES.iter().map(|f| f.0).collect::<Vec<_>>(), "{folder}");
            let from_folder = sqlx::migrate::resolve_blocking(&dir.join(folder)).unwrap();
            let embedded = migrations(backend).unwrap();
            assert_eq!(embedded.len(), from_folder.len());
            for (ours, (theirs, _)) in embedded.iter().zip(&from_folder) {
                assert_eq!(
                    (ours.version, &ours.description, &ours.checksum, ours.no_tx),
                    (theirs.version, &theirs.description, &theirs.checksum, theirs.no_tx)
                );
            }
        }
    }
}
