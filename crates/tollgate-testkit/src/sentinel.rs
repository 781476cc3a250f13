//! One Redis Sentinel process of a [`SentinelGroup`](crate::SentinelGroup), on a free port,
//! with its config file and log in a temporary directory of its own.
//!
//! A directory each, because a sentinel rewrites its config file as it learns the other
//! sentinels, the replicas and each new master (and refuses to start on a file it cannot
//! write); the file is part of what a failure message may need. Run under the same `sh`
//! supervisor as the servers, so it dies with the test.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Instant;

use tempfile::TempDir;

use crate::redis_server::{SpawnFailure, free_port, on_free_ports, server_bin, temp_dir};
use crate::resp::{Reply, request};
use crate::supervisor::{self, on_path};
use crate::{START_TIMEOUT, TlsFiles};

/// What to tell someone whose machine has no Sentinel.
const SENTINEL_HINT: &str = "install it: apt-get install redis-server redis-tools redis-sentinel";

/// A running Redis Sentinel owned by this process; dropped, it is killed.
pub struct Sentinel {
    port: u16,
    tls_port: Option<u16>,
    dir: TempDir,
    child: Option<Child>,
}

impl Sentinel {
    /// Writes a config file of `lines` after the sentinel's own (`port`, `bind`, `dir`,
    /// `logfile`, and with `tls` a TLS port and `tls-replication yes`, so that it talks TLS
    /// to the servers and the other sentinels), starts the sentinel on it and waits until it
    /// answers PING.
    /// When its port was taken before it bound it, the sentinel starts again on new ports
    /// (as a server does: [`crate::RedisServer::start`]).
    pub(crate) fn start(lines: &[String], tls: Option<&TlsFiles>) -> Sentinel {
        on_free_ports(|| {
            let mut sentinel = Sentinel::configure(lines, tls);
            sentinel.try_spawn().map(|()| sentinel)
        })
    }

    /// A sentinel not yet started, its config written on free ports.
    fn configure(lines: &[String], tls: Option<&TlsFiles>) -> Sentinel {
        Sentinel::configure_on(lines, tls, free_port(false))
    }

    /// A sentinel not yet started, its config written for `port` (and a free TLS port).
    fn configure_on(lines: &[String], tls: Option<&TlsFiles>, port: u16) -> Sentinel {
        let dir = temp_dir("tollgate-sentinel-");
        let mut config = format!(
            "port {port}\nbind 127.0.0.1\ndir {}\nlogfile {}\n",
            dir.path().display(),
            dir.path().join("sentinel.log").display()
        );
        let tls_port = tls.map(|tls| {
            let tls_port = free_port(false);
            config.push_str(&format!(
                "tls-port {tls_port}\ntls-cert-file {}\ntls-key-file {}\ntls-ca-cert-file {}\n\
                 tls-auth-clients no\ntls-replication yes\n",
                tls.server_cert().display(),
                tls.server_key().display(),
                tls.ca().display()
            ));
            tls_port
        });
        for line in lines {
            config.push_str(line);
            config.push('\n');
        }
        let path = dir.path().join("sentinel.conf");
        std::fs::write(&path, config)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        Sentinel {
            port,
            tls_port,
            dir,
            child: None,
        }
    }

    fn spawn(&mut self) {
        if let Err(failure) = self.try_spawn() {
            panic!("{}", failure.message());
        }
    }

    /// Runs `redis-sentinel <conf>` (`$REDIS_SENTINEL_BIN`), or `redis-server <conf>
    /// --sentinel` when there is no `redis-sentinel`, and waits for its PING.
    fn try_spawn(&mut self) -> Result<(), SpawnFailure> {
        let config = self.config_path();
        let explicit = std::env::var("REDIS_SENTINEL_BIN").ok();
        let (bin, args): (String, Vec<&Path>) = match explicit {
            Some(bin) => (bin, vec![&config]),
            None if on_path("redis-sentinel") => ("redis-sentinel".to_owned(), vec![&config]),
            None => (server_bin(), vec![&config, Path::new("--sentinel")]),
        };
        if !on_path(&bin) {
            panic!("{bin} not found: {SENTINEL_HINT} (or set REDIS_SENTINEL_BIN)");
        }
        self.child = Some(supervisor::spawn(&bin, args, self.dir.path()));
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            // A PONG counts only while our sentinel runs: on a port taken by another server,
            // that one answers while ours has exited.
            if matches!(self.request(&["PING"]), Ok(Reply::Status(s)) if s == "PONG")
                && !supervisor::exited(self.dir.path())
            {
                return Ok(());
            }
            if supervisor::exited(self.dir.path()) {
                self.kill();
                let log = self.log();
                let message = format!("{bin} on port {} exited at start\nlog:\n{log}", self.port);
                return Err(SpawnFailure::of_exit(message, &log));
            }
            if Instant::now() > deadline {
                self.kill();
                return Err(SpawnFailure::Other(format!(
                    "{bin} did not answer PING on port {} within {START_TIMEOUT:?}\nlog:\n{}",
                    self.port,
                    self.log()
                )));
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// The sentinel's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its URL, `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The port it listens TLS on, for a sentinel of a TLS group.
    ///
    /// # Panics
    /// When the sentinel was started without TLS.
    pub fn tls_port(&self) -> u16 {
        self.tls_port
            .unwrap_or_else(|| panic!("sentinel on port {} has no TLS port", self.port))
    }

    /// Its TLS URL, `rediss://127.0.0.1:<tls_port>/`.
    ///
    /// # Panics
    /// When the sentinel was started without TLS.
    pub fn tls_url(&self) -> String {
        format!("rediss://127.0.0.1:{}/", self.tls_port())
    }

    /// Its config file, as the sentinel last rewrote it.
    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("sentinel.conf")
    }

    /// Its log so far, followed by its config file (for failure messages).
    pub fn log(&self) -> String {
        let path = self.dir.path().join("sentinel.log");
        let log = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| format!("(no log at {}: {e})", path.display()));
        let config = std::fs::read_to_string(self.config_path())
            .unwrap_or_else(|e| format!("(no config: {e})"));
        let printed = supervisor::printed(self.dir.path());
        format!("{log}{printed}--- sentinel.conf ---\n{config}")
    }

    /// Whether the process is running (not killed).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Kills the sentinel (SIGKILL) and waits for it.
    pub fn kill(&mut self) {
        if let Some(child) = self.child.take() {
            supervisor::stop(child);
        }
    }

    /// Starts a killed sentinel again, on the config file as it last rewrote it.
    ///
    /// # Panics
    /// When it does not answer PING within [`START_TIMEOUT`].
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Sends one command and returns every string of its reply, nested arrays flattened:
    /// `SENTINEL MASTER mymaster` gives its field/value pairs.
    ///
    /// # Panics
    /// When the sentinel cannot be reached or answers an error.
    pub fn array(&self, args: &[&str]) -> Vec<String> {
        match self.request(args) {
            Ok(Reply::Error(e)) => panic!(
                "{args:?} to sentinel on port {}: {e}\nlog:\n{}",
                self.port,
                self.log()
            ),
            Ok(reply) => reply.strings(),
            Err(e) => panic!(
                "{args:?} to sentinel on port {} failed: {e}\nlog:\n{}",
                self.port,
                self.log()
            ),
        }
    }

    /// Sends one command and returns its parsed reply.
    pub(crate) fn request(&self, args: &[&str]) -> std::io::Result<Reply> {
        request(self.port, None, args)
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        self.kill();
    }
}

impl fmt::Debug for Sentinel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sentinel")
            .field("port", &self.port)
            .field("tls_port", &self.tls_port)
            .field("running", &self.child.is_some())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::net::{TcpListener, TcpStream};

    use super::*;

    /// A sentinel whose port was taken before it bound it fails as a taken port (so that
    /// [`Sentinel::start`] tries new ports), not as a broken sentinel. The port is taken as in
    /// CI, by an outgoing connection's end.
    #[test]
    fn a_taken_port_is_told_apart() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let holder = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let taken = holder.local_addr().expect("addr").port();
        let mut sentinel = Sentinel::configure_on(&[], None, taken);
        match sentinel.try_spawn() {
            Err(SpawnFailure::PortTaken(_)) => {}
            Err(other) => panic!("not told as a taken port: {}", other.message()),
            Ok(()) => panic!("a sentinel came up on a taken port {taken}"),
        }
        let started = Sentinel::start(&[], None);
        assert_ne!(started.port(), taken);
        drop(holder);
    }
}
