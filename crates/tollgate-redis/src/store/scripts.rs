//! [`Scripts`]: whether the scripts are loaded on the store's connection, so that one load
//! answers every call that met the same `NOSCRIPT`.

use tollgate::StoreError;

use super::connection::Connection;
use crate::error::classify;
use crate::script::all_scripts;

/// The scripts' load state on this store's connection: a generation counter, bumped by each
/// load, so that the calls that met one `NOSCRIPT` wait for one load instead of each sending
/// its own.
#[derive(Default)]
pub(super) struct Scripts {
    generation: std::sync::atomic::AtomicU64,
    loading: tokio::sync::Mutex<()>,
}

impl Scripts {
    pub(super) fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Loads every script, unless another call already did since generation `seen`.
    pub(super) async fn reload(
        &self,
        connection: &Connection,
        seen: u64,
    ) -> Result<(), StoreError> {
        let _one_at_a_time = self.loading.lock().await;
        if self.generation() != seen {
            return Ok(());
        }
        for script in all_scripts() {
            let loaded = match connection {
                Connection::Single(c) => script.load_async(&mut c.manager()).await,
                Connection::Sentinel(s) => script.load_async(&mut s.manager()).await,
                Connection::Cluster(c) => script.load_async(&mut c.routed()).await,
            };
            loaded.map_err(classify)?;
        }
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        metrics::counter!("tollgate_redis_script_loads_total").increment(1);
        Ok(())
    }
}
