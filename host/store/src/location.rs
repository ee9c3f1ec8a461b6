//! Where the state lives: the SQLite file in the home (the default), or a PostgreSQL database
//! several processes and machines share (`[store] url`, or `TALARIA_STORE_URL`).

use std::path::{Path, PathBuf};

use crate::{Result, Store};

/// The environment variable that points every talaria at one PostgreSQL database (it wins over
/// `[store] url`, and keeps a password out of config.toml).
pub const URL_ENV: &str = "TALARIA_STORE_URL";

/// Where a home's state is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A SQLite file (`$TALARIA_HOME/state.db`).
    File(PathBuf),
    /// A PostgreSQL URL.
    Postgres(String),
}

impl Location {
    /// The home's store: `TALARIA_STORE_URL`, else `url` (from `[store]`), else `home/state.db`.
    pub fn of_home(home: &Path, url: Option<&str>) -> Self {
        let from_env = std::env::var(URL_ENV).ok().filter(|u| !u.trim().is_empty());
        match from_env.as_deref().or(url).map(str::trim).filter(|u| !u.is_empty()) {
            Some(url) => Self::Postgres(url.to_string()),
            None => Self::File(home.join("state.db")),
        }
    }

    /// Open it for reading and writing, migrating its schema.
    ///
    /// # Errors
    /// As [`Store::open`] or [`Store::connect`].
    pub async fn open(&self) -> Result<Store> {
        match self {
            Self::File(path) => Store::open(path),
            Self::Postgres(url) => Store::connect(url).await,
        }
    }

    /// Open it for a command that only reads (a read-only home still works with a file).
    ///
    /// # Errors
    /// As [`Store::open_for_reading`] or [`Store::connect`].
    pub async fn open_for_reading(&self) -> Result<Store> {
        match self {
            Self::File(path) => Store::open_for_reading(path),
            Self::Postgres(url) => Store::connect(url).await,
        }
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::File(path) => write!(f, "{}", path.display()),
            Self::Postgres(url) => write!(f, "PostgreSQL at {}", crate::pg::without_password(url)),
        }
    }
}
