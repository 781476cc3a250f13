//! The start-up check that the Redis user may run every command tollgate sends
//! (`src/permissions.rs` holds the script and the list).

use tollgate::StoreError;

use super::connection::Connection;
use super::redis_store::RedisStore;
use crate::resets::reset_channel;

impl RedisStore {
    /// Checks that the Redis user may run every command tollgate sends, on keys under
    /// `prefix` and its reset channel (`permissions.rs`): a missing permission is found now,
    /// with the command named, rather than by the first request that needs it. Before Redis
    /// 7 (no `redis.acl_check_cmd`) nothing is checked.
    ///
    /// # Errors
    /// [`StoreError::Auth`] naming each command refused; the call's own failure.
    pub async fn check_permissions(&self, prefix: &str) -> Result<(), StoreError> {
        let script = &*crate::permissions::PERMISSIONS_SCRIPT;
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(script.get_hash())
            .arg(1)
            .arg(format!("{prefix}:permission-check"))
            .arg(reset_channel(prefix));
        let sentinel = matches!(self.inner.connection, Connection::Sentinel(_));
        for line in crate::permissions::lines(self.is_cluster(), sentinel) {
            cmd.arg(line);
        }
        let reply = match self.guarded(self.clone().eval(cmd)).await {
            Err(StoreError::Auth(cause)) => {
                return Err(StoreError::Auth(
                    format!(
                        "the Redis user may not run EVALSHA on keys {prefix}:* ({cause}); see docs/redis.md for the ACL tollgate needs"
                    )
                    .into(),
                ));
            }
            other => other?,
        };
        match crate::permissions::decode(reply)? {
            Some(checked) if !checked.refused.is_empty() => {
                Err(crate::permissions::refused(&checked.refused, prefix))
            }
            Some(checked) => {
                if !checked.unchecked.is_empty() {
                    // Not a refusal: the first call that needs one of these says more.
                    tracing::warn!(
                        commands = ?checked.unchecked,
                        "redis could not check these permissions at start"
                    );
                }
                Ok(())
            }
            None => {
                tracing::info!("redis before 7: the user's permissions cannot be checked at start");
                Ok(())
            }
        }
    }
}
