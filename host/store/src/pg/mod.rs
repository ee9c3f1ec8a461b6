//! The state on PostgreSQL, for operators whose gateways and jobs run in several processes or
//! on several machines: `[store] url = "postgres://…"`.
//!
//! The driver is tokio-postgres with a deadpool pool, on a small runtime of the engine's own:
//! [`Store`](crate::Store)'s methods are synchronous (SQLite's are), so each one hands its work
//! to that runtime and waits for the answer on a plain channel. That works from any thread, an
//! async one included, exactly as a call blocked on SQLite's lock does.
//!
//! Coordination is PostgreSQL's, not ours: transactions, row locks, advisory locks
//! (`pg_advisory_xact_lock`) where a check and a write must not interleave across processes
//! (a plugin's quota), and numbered migrations applied under one advisory lock, so processes
//! starting together migrate once.

mod copy;
mod cron;
mod gateway;
mod inbox;
mod kv;
mod lease;
mod schema;
mod search;
mod sessions;

use std::future::Future;
use std::pin::Pin;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};

use crate::{Error, Result};

/// Connections one process keeps at most.
const POOL_SIZE: usize = 16;

/// A pooled client, for the work of one call.
pub(crate) type Client = deadpool_postgres::Object;

/// The work of one call: a future over a pooled client.
type Work<T> = Box<dyn FnOnce(Client) -> Pin<Box<dyn Future<Output = Result<T>> + Send>> + Send>;

/// The PostgreSQL engine.
pub(crate) struct Pg {
    runtime: Option<tokio::runtime::Runtime>,
    pool: Pool,
    /// Where to connect, for the connection that listens for notices.
    config: tokio_postgres::Config,
    /// The URL without its password, for messages.
    shown: String,
}

impl Drop for Pg {
    fn drop(&mut self) {
        // Never blocks: a `Store` may be dropped on an async thread.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// `url` with any password replaced by `***`.
pub(crate) fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    let (auth, host) = match rest.split_once('@') {
        Some(parts) => parts,
        None => return url.to_string(),
    };
    match auth.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_string(),
    }
}

impl Pg {
    /// Connect, and migrate the schema.
    pub(crate) fn connect(url: &str) -> Result<Self> {
        let shown = without_password(url);
        let failed = |detail: String| Error::Postgres { url: shown.clone(), detail };
        let config: tokio_postgres::Config = url.parse().map_err(|e| {
            failed(format!("not a PostgreSQL URL ({e}); write it as postgres://USER:PASSWORD@HOST:PORT/DATABASE"))
        })?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("talaria-pg")
            .enable_all()
            .build()
            .map_err(|e| failed(format!("cannot start its runtime: {e}")))?;
        let manager = Manager::from_config(
            config.clone(),
            tokio_postgres::NoTls,
            ManagerConfig { recycling_method: RecyclingMethod::Fast },
        );
        let pool = {
            let _entered = runtime.enter();
            Pool::builder(manager)
                .max_size(POOL_SIZE)
                .runtime(deadpool_postgres::Runtime::Tokio1)
                .build()
                .map_err(|e| failed(e.to_string()))?
        };
        let pg = Self { runtime: Some(runtime), pool, config, shown };
        pg.run(|mut client| Box::pin(async move { schema::migrate(&mut client).await }))?;
        Ok(pg)
    }

    /// Run `work` with a pooled client on the engine's runtime, and wait for it.
    pub(crate) fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce(Client) -> Pin<Box<dyn Future<Output = Result<T>> + Send>> + Send + 'static,
    ) -> Result<T> {
        let work: Work<T> = Box::new(work);
        let (tx, rx) = std::sync::mpsc::channel();
        let (pool, shown) = (self.pool.clone(), self.shown.clone());
        let Some(runtime) = &self.runtime else {
            return Err(Error::Postgres { url: shown, detail: "the connection is closed".into() });
        };
        runtime.spawn(async move {
            let out = match pool.get().await {
                Ok(client) => work(client).await,
                Err(e) => Err(Error::Postgres { url: shown, detail: format!("cannot connect: {e}") }),
            };
            let _ = tx.send(out);
        });
        rx.recv().unwrap_or_else(|_| {
            Err(Error::Postgres { url: self.shown.clone(), detail: "the database call stopped".into() })
        })
    }
}

impl Pg {
    /// `NOTIFY` every listener of the database.
    pub(crate) fn notify(&self, text: &str) -> Result<()> {
        let text = text.to_string();
        self.run(move |client| {
            Box::pin(async move {
                client.exec("SELECT pg_notify($1, $2)", &[&crate::notice::CHANNEL, &text]).await.map_err(sql)?;
                Ok(())
            })
        })
    }

    /// Listen for notices on a connection of its own, handing each to `tx`, for as long as the
    /// engine runs; a lost connection is made again, and its subscribers told to look again.
    /// Returns once the first connection listens (or after a few seconds without one), so
    /// what is notified after it is heard.
    pub(crate) fn listen(&self, tx: tokio::sync::broadcast::Sender<crate::notice::Notice>) {
        let Some(runtime) = &self.runtime else { return };
        let config = self.config.clone();
        let (ready, listening) = std::sync::mpsc::channel::<()>();
        runtime.spawn(async move {
            loop {
                match config.connect(tokio_postgres::NoTls).await {
                    Ok((client, mut connection)) => {
                        let forward = tx.clone();
                        let driver = tokio::spawn(async move {
                            while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                                match message {
                                    Ok(tokio_postgres::AsyncMessage::Notification(n)) => {
                                        let _ = forward.send(crate::notice::Notice::decode(n.payload()));
                                    }
                                    Ok(_) => {}
                                    Err(e) => {
                                        tracing::warn!("the connection listening for notices failed: {e}");
                                        return;
                                    }
                                }
                            }
                        });
                        let listen = format!("LISTEN {}", crate::notice::CHANNEL);
                        if client.batch_execute(&listen).await.is_ok() {
                            let _ = ready.send(());
                            // Whatever happened while nobody listened.
                            let _ = tx.send(crate::notice::Notice::resync());
                            let _ = driver.await;
                        } else {
                            driver.abort();
                        }
                        drop(client);
                    }
                    Err(e) => tracing::warn!("cannot connect to listen for notices: {e}"),
                }
                if tx.receiver_count() == 0 {
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        });
        let _ = listening.recv_timeout(std::time::Duration::from_secs(5));
    }
}

/// Queries through statements each pooled connection prepares once and keeps (a query by text
/// alone is parsed and planned on every call, one more round trip each).
pub(crate) trait Cached: deadpool_postgres::GenericClient {
    fn q<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn tokio_postgres::types::ToSql + Sync)],
    ) -> impl Future<Output = std::result::Result<Vec<tokio_postgres::Row>, tokio_postgres::Error>> + Send + 'a {
        async move {
            let statement = self.prepare_cached(sql).await?;
            self.query(&statement, params).await
        }
    }

    fn q1<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn tokio_postgres::types::ToSql + Sync)],
    ) -> impl Future<Output = std::result::Result<tokio_postgres::Row, tokio_postgres::Error>> + Send + 'a {
        async move {
            let statement = self.prepare_cached(sql).await?;
            self.query_one(&statement, params).await
        }
    }

    fn qopt<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn tokio_postgres::types::ToSql + Sync)],
    ) -> impl Future<Output = std::result::Result<Option<tokio_postgres::Row>, tokio_postgres::Error>> + Send + 'a {
        async move {
            let statement = self.prepare_cached(sql).await?;
            self.query_opt(&statement, params).await
        }
    }

    fn exec<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn tokio_postgres::types::ToSql + Sync)],
    ) -> impl Future<Output = std::result::Result<u64, tokio_postgres::Error>> + Send + 'a {
        async move {
            let statement = self.prepare_cached(sql).await?;
            self.execute(&statement, params).await
        }
    }
}

impl<C: deadpool_postgres::GenericClient> Cached for C {}

/// A driver error as a store error.
pub(crate) fn sql(e: tokio_postgres::Error) -> Error {
    match e.as_db_error() {
        Some(db) => Error::Pg(format!("{} ({})", db.message(), db.code().code())),
        None => Error::Pg(e.to_string()),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::without_password;

    /// A store on a fresh database of the test process's PostgreSQL.
    pub(crate) fn store() -> crate::Store {
        let url = talaria_test_support::postgres::Postgres::shared().database();
        crate::Store::connect(&url).expect("connect to PostgreSQL")
    }

    /// Two stores on one database stand for two processes: counters never hand out a number
    /// twice, the quota holds across them, and a second connect finds the schema migrated.
    #[test]
    fn writers_in_two_processes_queue_on_the_database() {
        let url = talaria_test_support::postgres::Postgres::shared().database();
        let (a, b) = (crate::Store::connect(&url).expect("a"), crate::Store::connect(&url).expect("b"));
        let mut seen: Vec<i64> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..8)
                .map(|i| {
                    let store = if i % 2 == 0 { &a } else { &b };
                    scope.spawn(move || {
                        (0..25).map(|_| store.kv_increment("p", "n", 1).expect("inc")).collect::<Vec<_>>()
                    })
                })
                .collect();
            handles.into_iter().flat_map(|h| h.join().expect("join")).collect()
        });
        seen.sort_unstable();
        assert_eq!(seen, (1..=200).collect::<Vec<i64>>());
        let big = vec![0u8; crate::MAX_VALUE_BYTES];
        let filled: Vec<bool> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..12)
                .map(|i| {
                    let (store, big) = (if i % 2 == 0 { &a } else { &b }, &big);
                    scope.spawn(move || store.kv_set("q", &format!("k{i}"), big).is_ok())
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("join")).collect()
        });
        assert_eq!(filled.iter().filter(|ok| **ok).count(), 9, "ten MiB hold nine one-MiB values and their keys");
        assert!(a.kv_usage("q").expect("usage").1 <= 10 * 1024 * 1024);
    }

    #[test]
    fn passwords_stay_out_of_messages() {
        assert_eq!(without_password("postgres://talaria:s3cret@db:5432/state"), "postgres://talaria:***@db:5432/state");
        assert_eq!(
            without_password("postgresql:///state?host=/run/postgresql"),
            "postgresql:///state?host=/run/postgresql"
        );
    }
}
