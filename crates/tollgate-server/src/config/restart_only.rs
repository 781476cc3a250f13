//! Which `[server]` and `[store]` settings a reload cannot apply.
//!
//! A reload swaps the limits and the Envoy rules. The listeners, the store's connection, the
//! connection caps and the timeouts are built once, at start-up. An edit to one of them in the
//! running file waits for a restart, and the operator must hear so, by name: a reload that
//! said only "unchanged" would let them believe a new `store.timeout` is in force.

use super::{Config, ServerConfig, StoreConfig};

impl Config {
    /// The settings that differ between `self` (running) and `next` and take effect only on a
    /// restart, named as in the file; empty when none do.
    pub fn restart_only_changes(&self, next: &Config) -> Vec<&'static str> {
        // Destructured whole: a field added to either section does not compile until it is
        // listed here.
        let ServerConfig {
            http,
            grpc,
            tls,
            unix_mode,
            admin_token,
            header_timeout,
            body_timeout,
            idle_timeout,
            max_connections,
            shutdown_timeout,
            max_acquire_wait,
            history_interval,
        } = &self.server;
        let StoreConfig {
            backend,
            timeout,
            namespace,
            max_keys,
            deny_cache_entries,
            max_batch,
            connection,
        } = &self.store;
        let (s, t) = (&next.server, &next.store);
        [
            (*http != s.http, "server.http"),
            (*grpc != s.grpc, "server.grpc"),
            (*tls != s.tls, "server.tls_*"),
            (*unix_mode != s.unix_mode, "server.unix_mode"),
            (*admin_token != s.admin_token, "server.admin_token"),
            (*header_timeout != s.header_timeout, "server.header_timeout"),
            (*body_timeout != s.body_timeout, "server.body_timeout"),
            (*idle_timeout != s.idle_timeout, "server.idle_timeout"),
            (
                *max_connections != s.max_connections,
                "server.max_connections",
            ),
            (
                *shutdown_timeout != s.shutdown_timeout,
                "server.shutdown_timeout",
            ),
            (
                *max_acquire_wait != s.max_acquire_wait,
                "server.max_acquire_wait",
            ),
            (
                *history_interval != s.history_interval,
                "server.history_interval",
            ),
            (*backend != t.backend, "store.redis/cluster/sentinel"),
            (*timeout != t.timeout, "store.timeout"),
            (*namespace != t.namespace, "store.prefix"),
            (*max_keys != t.max_keys, "store.max_keys"),
            (
                *deny_cache_entries != t.deny_cache_entries,
                "store.deny_cache",
            ),
            (*max_batch != t.max_batch, "store.coalesce/max_batch"),
            (
                *connection != t.connection,
                "store.tls_*/username/password/sentinel_*",
            ),
        ]
        .into_iter()
        .filter_map(|(changed, name)| changed.then_some(name))
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, Overrides};

    const LIMIT: &str = "[[limits]]\nname = \"a\"\nalgorithm = \"gcra\"\nlimit = 5\n\
                         period = \"1m\"\non_store_error = \"deny\"\n";

    fn parse(text: &str) -> Config {
        Config::parse(text, "test.toml", &Overrides::default()).expect("valid")
    }

    #[test]
    fn names_each_setting_that_waits_for_a_restart() {
        let running = parse(&format!("[store]\ntimeout = \"50ms\"\n{LIMIT}"));
        let next = parse(&format!(
            "[server]\nmax_connections = 100\nheader_timeout = \"3s\"\n\
             [store]\ntimeout = \"80ms\"\nprefix = \"other\"\n{LIMIT}"
        ));
        assert_eq!(
            running.restart_only_changes(&next),
            [
                "server.header_timeout",
                "server.max_connections",
                "store.timeout",
                "store.prefix"
            ]
        );
    }

    #[test]
    fn the_same_settings_written_otherwise_are_no_change() {
        let running = parse(&format!("[store]\ntimeout = \"50ms\"\n{LIMIT}"));
        // The same timeout left to its default (50 ms), and a limit changed: nothing waits
        // for a restart.
        let next = parse(&format!(
            "[server]\nidle_timeout = \"60s\"\n{}",
            LIMIT.replace("limit = 5", "limit = 6")
        ));
        assert_eq!(
            running.restart_only_changes(&next),
            Vec::<&str>::new(),
            "{running:?}"
        );
    }
}
