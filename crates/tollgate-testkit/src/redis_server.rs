//! A `redis-server` spawned for one test binary or one test, on a free port.
//!
//! Tests never use a Redis that happens to run on the machine (6379 or any other): each spawns
//! its own, with persistence off and its log in a temporary directory, so that every failure
//! message can show what the server said. The process is killed and reaped on drop.
//!
//! A server can also listen TLS ([`RedisServer::start_tls`]) on a second port: its plaintext
//! port stays open, so that the harness's own commands ([`RedisServer::cmd`],
//! [`RedisServer::command_stats`], the readiness PING) never need TLS, and only the client
//! under test speaks it.
//!
//! What it deliberately does not do: download or build Redis. A missing binary is a loud
//! failure that says how to install it, never a skipped test.

use std::fmt;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::command_stats::CommandStats;
use crate::resp::{Reply, exchange, request};
use crate::rng::Rng;
use crate::supervisor::{self, on_path};
use crate::{TlsFiles, TlsServer};

/// How long a spawned server gets to answer PING.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);

/// How many ports a spawned server (alone, a cluster node, a sentinel group's data node or
/// sentinel) tries: a free port is checked free and let go ([`free_port`]), and another
/// process can bind it before the server does.
const PORT_ATTEMPTS: usize = 5;

/// Why a spawned server did not come up.
pub(crate) enum SpawnFailure {
    /// Its port (or TLS port) was taken before it bound it: worth another port.
    PortTaken(String),
    /// Anything else: the message to panic with.
    Other(String),
}

impl SpawnFailure {
    /// The failure of a process that exited at start, saying `message`, by its `log`.
    pub(crate) fn of_exit(message: String, log: &str) -> SpawnFailure {
        if log.contains("Address already in use") {
            SpawnFailure::PortTaken(message)
        } else {
            SpawnFailure::Other(message)
        }
    }

    /// What to panic with, whatever the failure.
    pub(crate) fn message(self) -> String {
        match self {
            SpawnFailure::PortTaken(message) | SpawnFailure::Other(message) => message,
        }
    }
}

/// What to tell someone whose machine has no Redis.
pub(crate) const INSTALL_HINT: &str = "install it: apt-get install redis-server redis-tools";

/// A running `redis-server` owned by this process.
pub struct RedisServer {
    port: u16,
    /// The TLS port, for a server started with TLS.
    tls_port: Option<u16>,
    dir: TempDir,
    /// The arguments after the harness's own (kept for [`RedisServer::restart`]).
    extra: Vec<String>,
    /// The `--requirepass` among `extra`, sent with `AUTH` before each harness command.
    password: Option<String>,
    child: Option<Child>,
    /// The server's own pid (the child is its supervising shell), read once when needed.
    pid: std::sync::OnceLock<u32>,
}

impl RedisServer {
    /// Spawns `redis-server` (or `$REDIS_SERVER_BIN`) on a free port and waits until it
    /// answers PING.
    ///
    /// # Panics
    /// When the binary is missing (the message says how to install it), or the server does not
    /// answer within [`START_TIMEOUT`] (the message holds its log).
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// As [`RedisServer::start`], with `args` after the harness's own (`--requirepass pw`,
    /// `--user "alice on >pw ~* +@all"`, `--maxmemory 1mb`, …); [`RedisServer::restart`]
    /// passes them again. With `--requirepass`, the harness's commands authenticate first.
    ///
    /// # Panics
    /// As [`RedisServer::start`], and when an argument makes the server exit.
    pub fn start_with(args: &[&str]) -> RedisServer {
        RedisServer::start_on_free_ports("tollgate-redis-", |_| {
            let args = args.iter().map(|a| (*a).to_owned()).collect();
            (free_port(false), None, args)
        })
    }

    /// As [`RedisServer::start`], and listening TLS too, on [`RedisServer::tls_port`], with
    /// the certificates of `tls` as `options` say. The plaintext port stays open (the
    /// harness's own commands use it).
    ///
    /// # Panics
    /// As [`RedisServer::start`].
    pub fn start_tls(tls: &TlsFiles, options: TlsServer) -> RedisServer {
        RedisServer::start_tls_with(tls, options, &[])
    }

    /// [`RedisServer::start_tls`] with `args` after the TLS ones, as in
    /// [`RedisServer::start_with`].
    ///
    /// # Panics
    /// As [`RedisServer::start_with`].
    pub fn start_tls_with(tls: &TlsFiles, options: TlsServer, args: &[&str]) -> RedisServer {
        RedisServer::start_on_free_ports("tollgate-redis-tls-", |_| {
            let port = free_port(false);
            let tls_port = free_port(false);
            let mut all = options.args(tls, tls_port);
            all.extend(args.iter().map(|a| (*a).to_owned()));
            (port, Some(tls_port), all)
        })
    }

    /// A server on the ports and with the arguments `choose` gives for a new directory named
    /// `prefix…` (its path given, for arguments that name files in it); when a port was taken
    /// before the server bound it, on new ones, up to [`PORT_ATTEMPTS`] times.
    pub(crate) fn start_on_free_ports(
        prefix: &str,
        mut choose: impl FnMut(&Path) -> (u16, Option<u16>, Vec<String>),
    ) -> RedisServer {
        on_free_ports(|| {
            let dir = temp_dir(prefix);
            let (port, tls_port, args) = choose(dir.path());
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            RedisServer::try_start_in(dir, port, tls_port, &args)
        })
    }

    /// Spawns a server on `port` (and `tls_port`, whose `--tls-*` arguments are among
    /// `extra`) in `dir` with `extra` arguments.
    fn try_start_in(
        dir: TempDir,
        port: u16,
        tls_port: Option<u16>,
        extra: &[&str],
    ) -> Result<RedisServer, SpawnFailure> {
        let password = extra
            .iter()
            .position(|a| *a == "--requirepass")
            .and_then(|i| extra.get(i + 1))
            .map(|p| (*p).to_owned());
        let mut server = RedisServer {
            port,
            tls_port,
            dir,
            extra: extra.iter().map(|a| (*a).to_owned()).collect(),
            password,
            child: None,
            pid: std::sync::OnceLock::new(),
        };
        server.try_spawn()?;
        Ok(server)
    }

    fn spawn(&mut self) {
        if let Err(failure) = self.try_spawn() {
            panic!("{}", failure.message());
        }
    }

    /// Spawns the server on its ports and waits for its PING (see [`START_TIMEOUT`]).
    fn try_spawn(&mut self) -> Result<(), SpawnFailure> {
        let bin = server_bin();
        if !on_path(&bin) {
            panic!("{bin} not found: {INSTALL_HINT} (or set REDIS_SERVER_BIN)");
        }
        let log = self.log_path();
        let mut args: Vec<std::ffi::OsString> = vec![
            "--port".into(),
            self.port.to_string().into(),
            "--bind".into(),
            "127.0.0.1".into(),
            "--save".into(),
            "".into(),
            "--appendonly".into(),
            "no".into(),
            "--dir".into(),
            self.dir.path().into(),
            "--logfile".into(),
            log.into(),
        ];
        args.extend(self.extra.iter().map(Into::into));
        self.child = Some(supervisor::spawn(&bin, args, self.dir.path()));
        self.pid = std::sync::OnceLock::new();
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            // A PONG counts only while our server runs: on a port taken by another server,
            // that one answers while ours has exited.
            if exchange(self.port, self.password.as_deref(), &["PING"])
                .is_ok_and(|reply| reply.starts_with(b"+PONG"))
                && !supervisor::exited(self.dir.path())
            {
                return Ok(());
            }
            if supervisor::exited(self.dir.path()) {
                self.kill();
                let log = self.log();
                let message = format!(
                    "{bin} on port {} exited at start (arguments {:?})\nlog:\n{log}",
                    self.port, self.extra,
                );
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
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The connection URL, `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The port the server listens on (plaintext).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Whether the server listens TLS too ([`RedisServer::start_tls`]).
    pub fn is_tls(&self) -> bool {
        self.tls_port.is_some()
    }

    /// The port the server listens TLS on.
    ///
    /// # Panics
    /// When the server was started without TLS.
    pub fn tls_port(&self) -> u16 {
        self.tls_port.unwrap_or_else(|| {
            panic!(
                "redis on port {} was started without TLS: use start_tls",
                self.port
            )
        })
    }

    /// The TLS connection URL, `rediss://127.0.0.1:<tls_port>/`.
    ///
    /// # Panics
    /// When the server was started without TLS.
    pub fn tls_url(&self) -> String {
        format!("rediss://127.0.0.1:{}/", self.tls_port())
    }

    /// Whether `port` is one of this server's ports, plaintext or TLS.
    pub(crate) fn listens_on(&self, port: u16) -> bool {
        self.port == port || self.tls_port == Some(port)
    }

    /// The server's log so far, and whatever it printed (a config error), for failure
    /// messages.
    pub fn log(&self) -> String {
        let log = std::fs::read_to_string(self.log_path())
            .unwrap_or_else(|e| format!("(no log at {}: {e})", self.log_path().display()));
        format!("{log}{}", supervisor::printed(self.dir.path()))
    }

    /// The temporary directory the server runs in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Kills the server (SIGKILL) and waits for it, keeping the port for [`RedisServer::restart`].
    pub fn kill(&mut self) {
        if let Some(child) = self.child.take() {
            supervisor::stop(child);
        }
    }

    /// Freezes the server (SIGSTOP): connections stay open, nothing is answered, as with a
    /// Redis stuck in a long command or a host that stalls. [`RedisServer::resume`] thaws it.
    ///
    /// # Panics
    /// When the server's pid cannot be read or the signal cannot be sent.
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// Thaws a server frozen by [`RedisServer::pause`] (SIGCONT).
    ///
    /// # Panics
    /// As [`RedisServer::pause`].
    pub fn resume(&self) {
        self.signal("CONT");
    }

    /// How often `command` ran and the µs it took in all, since the start or the last
    /// `CONFIG RESETSTAT` (`cmdstat_<command>` in `INFO commandstats`; a subcommand is
    /// written `script|load`). Zero before its first call.
    ///
    /// # Panics
    /// When the server cannot be reached, or the line is malformed.
    pub fn command_stats(&self, command: &str) -> CommandStats {
        let info = self.cmd(&["INFO", "commandstats"]);
        let prefix = format!("cmdstat_{command}:");
        let Some(line) = info.lines().find_map(|l| l.strip_prefix(prefix.as_str())) else {
            return CommandStats::default();
        };
        let field = |name: &str| -> u64 {
            line.split(',')
                .find_map(|kv| kv.trim().strip_prefix(name))
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or_else(|| panic!("no {name} in {line:?}")) as u64
        };
        CommandStats {
            calls: field("calls="),
            usec: field("usec="),
        }
    }

    /// Error replies the server has sent so far (`total_error_replies` in `INFO stats`).
    ///
    /// # Panics
    /// When the server cannot be reached or the field is missing.
    pub fn error_replies(&self) -> u64 {
        let info = self.cmd(&["INFO", "stats"]);
        info.lines()
            .find_map(|l| l.strip_prefix("total_error_replies:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no total_error_replies in INFO stats: {info}"))
    }

    /// CPU time (user + system) the server process has used so far, from `/proc`: unlike
    /// throughput, it hardly moves when other processes load the machine.
    ///
    /// # Panics
    /// When the pid or `/proc/<pid>/stat` cannot be read.
    pub fn cpu_time(&self) -> Duration {
        crate::process_cpu_time(self.pid())
    }

    /// The server's own pid (read from `INFO server` once per start).
    fn pid(&self) -> u32 {
        *self.pid.get_or_init(|| {
            let info = self.cmd(&["INFO", "server"]);
            info.lines()
                .find_map(|l| l.strip_prefix("process_id:"))
                .and_then(|p| p.trim().parse::<u32>().ok())
                .unwrap_or_else(|| panic!("no process_id in INFO server: {info}"))
        })
    }

    fn signal(&self, name: &str) {
        let pid = self.pid();
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(pid.to_string())
            .status()
            .unwrap_or_else(|e| panic!("cannot run kill: {e}"));
        assert!(status.success(), "kill -{name} {pid} failed: {status}");
    }

    /// Whether the server process is running (not killed).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Starts the server again on the same ports with the same arguments (after
    /// [`RedisServer::kill`]); its data is gone, as after a crash without persistence (a
    /// cluster node keeps its `nodes.conf`, so it rejoins as itself).
    ///
    /// # Panics
    /// As [`RedisServer::start`].
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Sends one command and returns the raw RESP reply (read whole, nested arrays included),
    /// panicking with the log on failure.
    ///
    /// # Panics
    /// When the server cannot be reached.
    pub fn cmd(&self, args: &[&str]) -> String {
        exchange(self.port, self.password.as_deref(), args)
            .map(|raw| String::from_utf8_lossy(&raw).into_owned())
            .unwrap_or_else(|e| self.failed(args, &e))
    }

    /// Sends one command and returns every string and integer of its reply, nested arrays
    /// flattened in order (nils skipped): `KEYS`, `ROLE`, `CLUSTER GETKEYSINSLOT`,
    /// `CONFIG GET`'s name/value pairs.
    ///
    /// # Panics
    /// When the server cannot be reached or answers an error.
    pub fn array(&self, args: &[&str]) -> Vec<String> {
        match self.reply(args) {
            Reply::Error(e) => panic!(
                "command {args:?} to redis on port {} failed: {e}\nlog:\n{}",
                self.port,
                self.log()
            ),
            reply => reply.strings(),
        }
    }

    /// Sends one command and returns its parsed reply.
    pub(crate) fn reply(&self, args: &[&str]) -> Reply {
        self.try_reply(args)
            .unwrap_or_else(|e| self.failed(args, &e))
    }

    /// Sends one command and returns its parsed reply, or why it could not.
    pub(crate) fn try_reply(&self, args: &[&str]) -> std::io::Result<Reply> {
        request(self.port, self.password.as_deref(), args)
    }

    /// The panic of a command that could not be sent or answered.
    fn failed(&self, args: &[&str], e: &std::io::Error) -> ! {
        panic!(
            "command {args:?} to redis on port {} failed: {e}\nlog:\n{}",
            self.port,
            self.log()
        )
    }

    /// Sends one command whose reply is an integer (`PTTL`, `DBSIZE`, …) and returns it.
    ///
    /// # Panics
    /// When the server cannot be reached or the reply is not an integer.
    pub fn integer(&self, args: &[&str]) -> i64 {
        let reply = self.cmd(args);
        reply
            .trim()
            .strip_prefix(':')
            .and_then(|digits| digits.parse().ok())
            .unwrap_or_else(|| panic!("{args:?}: not an integer reply: {reply:?}"))
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

impl fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisServer")
            .field("port", &self.port)
            .field("tls_port", &self.tls_port)
            .field("running", &self.child.is_some())
            .finish_non_exhaustive()
    }
}

/// The binary to run: `$REDIS_SERVER_BIN` or `redis-server`.
pub(crate) fn server_bin() -> String {
    std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".to_owned())
}

/// A port nothing listens on now (never 6379). With `bus`, port + 10000 is free as well (the
/// cluster bus port).
///
/// Chosen at random below the kernel's ephemeral range (`ip_local_port_range`, from 32768 by
/// default), where no outgoing connection takes its local port: between the check and the
/// server's bind, and while a test holds a killed server's port to start it again, only an
/// explicit bind could take it. A port the kernel picked (binding port 0) came from that
/// range, and an outgoing connection took one first more than once in CI. No port is handed
/// out twice in a process, so two tests running at once never draw the same one. When the
/// range leaves no room below it, the kernel picks, as before.
pub(crate) fn free_port(bus: bool) -> u16 {
    // Above 6379 too, so Redis's own port is never drawn.
    const LOWEST: u16 = 10_000;
    let ephemeral = ephemeral_start();
    let end = if bus {
        ephemeral.saturating_sub(BUS_OFFSET)
    } else {
        ephemeral
    };
    if end <= LOWEST + 1_000 {
        return kernel_free_port(bus);
    }
    let mut handed_out = handed_out();
    let mut rng = Rng(port_seed());
    for _ in 0..1_000 {
        let port = LOWEST + u16::try_from(rng.below(u64::from(end - LOWEST))).unwrap_or(0);
        let bus_port = bus.then_some(port + BUS_OFFSET);
        let ours = [Some(port), bus_port];
        if ours.iter().flatten().any(|p| handed_out.contains(p)) {
            continue;
        }
        let free = ours
            .iter()
            .flatten()
            .all(|&p| TcpListener::bind(("127.0.0.1", p)).is_ok());
        if free {
            handed_out.extend(ours.iter().flatten());
            return port;
        }
    }
    panic!("no free port found on 127.0.0.1 between {LOWEST} and {end}")
}

/// A cluster node's bus port is its port + 10000.
const BUS_OFFSET: u16 = 10_000;

/// The ports (bus ports too) [`free_port`] has handed out in this process, locked.
fn handed_out() -> std::sync::MutexGuard<'static, Vec<u16>> {
    static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    HANDED_OUT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The first port of the kernel's ephemeral range (32768 when it cannot be read).
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// A seed of its own for each call: the time, the process and a count, so that the threads
/// and processes of a test run draw different ports.
fn port_seed() -> u64 {
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    (nanos ^ (u64::from(std::process::id()) << 32) ^ call.wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1
}

/// A port the kernel picks (binding port 0), with its bus port free too (`bus`), not handed
/// out before.
fn kernel_free_port(bus: bool) -> u16 {
    let mut handed_out = handed_out();
    for _ in 0..200 {
        let Ok(listener) = TcpListener::bind("127.0.0.1:0") else {
            continue;
        };
        let Ok(addr) = listener.local_addr() else {
            continue;
        };
        let port = addr.port();
        let bus_port = bus.then(|| port.checked_add(BUS_OFFSET)).flatten();
        let ours = [Some(port), bus_port];
        if port == 6379
            || (bus && bus_port.is_none())
            || ours.iter().flatten().any(|p| handed_out.contains(p))
        {
            continue;
        }
        if bus_port.is_some_and(|b| TcpListener::bind(("127.0.0.1", b)).is_err()) {
            continue;
        }
        handed_out.extend(ours.iter().flatten());
        return port;
    }
    panic!("no free port found on 127.0.0.1")
}

/// What `attempt` starts; when its port was taken before it bound it, what a new `attempt`
/// starts (on new ports), up to [`PORT_ATTEMPTS`] times.
///
/// # Panics
/// On any other failure, or the last taken port, with its message.
pub(crate) fn on_free_ports<T>(mut attempt: impl FnMut() -> Result<T, SpawnFailure>) -> T {
    let mut taken = String::new();
    for _ in 0..PORT_ATTEMPTS {
        match attempt() {
            Ok(started) => return started,
            Err(SpawnFailure::PortTaken(message)) => taken = message,
            Err(SpawnFailure::Other(message)) => panic!("{message}"),
        }
    }
    panic!("{taken}\n(its port was taken before it bound it, {PORT_ATTEMPTS} times)")
}

/// A new temporary directory whose name starts with `prefix`.
pub(crate) fn temp_dir(prefix: &str) -> TempDir {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Free ports are drawn below the ephemeral range, bus ports too, so that no outgoing
    /// connection can take one; and they are free.
    #[test]
    fn free_ports_are_below_the_ephemeral_range() {
        let ephemeral = ephemeral_start();
        for bus in [false, true] {
            for _ in 0..50 {
                let port = free_port(bus);
                let highest = if bus { port + BUS_OFFSET } else { port };
                assert!(
                    highest < ephemeral,
                    "{port} (bus: {bus}) reaches {ephemeral}"
                );
                assert_ne!(port, 6379);
                TcpListener::bind(("127.0.0.1", port)).expect("the port is free");
            }
        }
    }

    /// A port taken before the server binds it costs a second port, not the test: the
    /// server comes up on the next one and answers there. The port is taken as in CI, by an
    /// outgoing connection's end (it answers no PING, and the server cannot bind it).
    #[test]
    fn a_taken_port_is_replaced_by_a_free_one() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let holder =
            std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let taken = holder.local_addr().expect("addr").port();
        let tries = std::cell::Cell::new(0);
        let server = RedisServer::start_on_free_ports("tollgate-redis-taken-", |_| {
            tries.set(tries.get() + 1);
            let port = if tries.get() == 1 {
                taken
            } else {
                free_port(false)
            };
            (port, None, Vec::new())
        });
        assert_eq!(
            tries.get(),
            2,
            "the taken port was tried once, then a free one"
        );
        assert_ne!(server.port(), taken);
        assert!(
            server.cmd(&["PING"]).contains("PONG"),
            "the server answers on its new port"
        );
        drop(holder);
    }
}
