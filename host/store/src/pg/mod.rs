//! The state on PostgreSQL, for operators whose gateways and jobs run in several processes or
//! on several machines: `[store] url = "postgres://…"`.
//!
//! The driver is tokio-postgres with a deadpool pool, on the caller's tokio runtime: each
//! method of [`Store`](crate::Store) takes a pooled connection, sends its statements (pipelined
//! where one does not need another's answer) and gives the connection back.
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
mod turns;

use std::future::Future;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};

use crate::{Error, Result};

/// Connections one process keeps at most.
const POOL_SIZE: usize = 16;

/// A pooled client, for the work of one call.
pub(crate) type Client = deadpool_postgres::Object;

/// The PostgreSQL engine.
pub(crate) struct Pg {
    pool: Pool,
    /// Where to connect, for the connection that listens for notices.
    config: tokio_postgres::Config,
    /// The URL without its password, for messages.
    shown: String,
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
    pub(crate) async fn connect(url: &str) -> Result<Self> {
        let shown = without_password(url);
        let failed = |detail: String| Error::Postgres { url: shown.clone(), detail };
        let config: tokio_postgres::Config = url.parse().map_err(|e| {
            failed(format!("not a PostgreSQL URL ({e}); write it as postgres://USER:PASSWORD@HOST:PORT/DATABASE"))
        })?;
        let manager = Manager::from_config(
            config.clone(),
            tokio_postgres::NoTls,
            ManagerConfig { recycling_method: RecyclingMethod::Fast },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            // The connection used last is taken first: a call finds its statements prepared and
            // its server process warm, and connections beyond the load's need stay idle. The
            // default, oldest first, cycles through all of them: in the scale-out bench a lone
            // chat's first turn took 36-48 ms with it, 6-7 ms with this.
            .queue_mode(deadpool_postgres::QueueMode::Lifo)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(|e| failed(e.to_string()))?;
        let pg = Self { pool, config, shown };
        schema::migrate(&mut pg.client().await?).await?;
        Ok(pg)
    }

    /// A pooled client, connecting one when none is free.
    pub(crate) async fn client(&self) -> Result<Client> {
        self.pool
            .get()
            .await
            .map_err(|e| Error::Postgres { url: self.shown.clone(), detail: format!("cannot connect: {e}") })
    }
}

impl Pg {
    /// `NOTIFY` every listener of the database.
    pub(crate) async fn notify(&self, text: &str) -> Result<()> {
        let client = self.client().await?;
        client.exec("SELECT pg_notify($1, $2)", &[&crate::notice::CHANNEL, &text]).await.map_err(sql)?;
        Ok(())
    }

    /// Listen for notices on a connection of its own, handing each to `tx`, for as long as the
    /// engine runs; a lost connection is made again, and its subscribers told to look again.
    /// Returns once the first connection listens (or after a few seconds without one), so
    /// what is notified after it is heard.
    pub(crate) async fn listen(&self, tx: tokio::sync::broadcast::Sender<crate::notice::Notice>) {
        let config = self.config.clone();
        let (ready, listening) = tokio::sync::mpsc::channel::<()>(1);
        tokio::spawn(async move {
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
                            let _ = ready.try_send(());
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
        let mut listening = listening;
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), listening.recv()).await;
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

/// Give the lease back (when it is still `token`'s) and send `notice`, in one statement.
pub(super) async fn release_lease_in(
    c: &impl deadpool_postgres::GenericClient,
    session_id: &str,
    token: &str,
    notice: &str,
) -> Result<()> {
    c.exec(
        "WITH gone AS (DELETE FROM session_leases WHERE session_id = $1 AND token = $2) SELECT pg_notify($3, $4)",
        &[&session_id, &token, &crate::notice::CHANNEL, &notice],
    )
    .await
    .map_err(sql)?;
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::without_password;

    /// A store on a fresh database of the test process's PostgreSQL.
    pub(crate) async fn store() -> crate::Store {
        let url = talaria_test_support::postgres::Postgres::shared().database();
        crate::Store::connect(&url).await.expect("connect to PostgreSQL")
    }

    /// Two stores on one database stand for two processes: counters never hand out a number
    /// twice, the quota holds across them, and a second connect finds the schema migrated.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn writers_in_two_processes_queue_on_the_database() {
        let url = talaria_test_support::postgres::Postgres::shared().database();
        let (a, b) = (crate::Store::connect(&url).await.expect("a"), crate::Store::connect(&url).await.expect("b"));
        let (a, b) = (std::sync::Arc::new(a), std::sync::Arc::new(b));
        let mut counters = tokio::task::JoinSet::new();
        for i in 0..8 {
            let store = if i % 2 == 0 { a.clone() } else { b.clone() };
            counters.spawn(async move {
                let mut seen = Vec::new();
                for _ in 0..25 {
                    seen.push(store.kv_increment("p", "n", 1).await.expect("inc"));
                }
                seen
            });
        }
        let mut seen: Vec<i64> = counters.join_all().await.into_iter().flatten().collect();
        seen.sort_unstable();
        assert_eq!(seen, (1..=200).collect::<Vec<i64>>());
        let big = std::sync::Arc::new(vec![0u8; crate::MAX_VALUE_BYTES]);
        let mut fillers = tokio::task::JoinSet::new();
        for i in 0..12 {
            let (store, big) = (if i % 2 == 0 { a.clone() } else { b.clone() }, big.clone());
            fillers.spawn(async move { store.kv_set("q", &format!("k{i}"), &big).await.is_ok() });
        }
        let filled = fillers.join_all().await;
        assert_eq!(filled.iter().filter(|ok| **ok).count(), 9, "ten MiB hold nine one-MiB values and their keys");
        assert!(a.kv_usage("q").await.expect("usage").1 <= 10 * 1024 * 1024);
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
