//! A `redis-server` spawned for one test binary or one test, on a free port.
//!
//! Tests never use a Redis that happens to run on the machine (6379 or any other): each spawns
//! its own, with persistence off and its log in a temporary directory, so that every failure
//! message can show what the server said. The process is killed and reaped on drop.
//!
//! What it deliberately does not do: download or build Redis. A missing binary is a loud
//! failure that says how to install it, never a skipped test.

use std::fmt;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::command_stats::CommandStats;

/// How long a spawned server gets to answer PING.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);

/// What to tell someone whose machine has no Redis.
pub(crate) const INSTALL_HINT: &str = "install it: apt-get install redis-server redis-tools";

/// A running `redis-server` owned by this process.
pub struct RedisServer {
    port: u16,
    dir: TempDir,
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
        let dir = tempfile::Builder::new()
            .prefix("tollgate-redis-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}"));
        let mut server = RedisServer {
            port: free_port(false),
            dir,
            child: None,
            pid: std::sync::OnceLock::new(),
        };
        server.spawn(&[]);
        server
    }

    /// Spawns a server on `port` in `dir` with extra `args`, for the cluster harness.
    pub(crate) fn start_in(dir: TempDir, port: u16, extra: &[&str]) -> RedisServer {
        let mut server = RedisServer {
            port,
            dir,
            child: None,
            pid: std::sync::OnceLock::new(),
        };
        server.spawn(extra);
        server
    }

    fn spawn(&mut self, extra: &[&str]) {
        let bin = server_bin();
        if !on_path(&bin) {
            panic!("{bin} not found: {INSTALL_HINT} (or set REDIS_SERVER_BIN)");
        }
        let log = self.log_path();
        // A shell supervises the server: it kills it (SIGKILL) as soon as its stdin closes,
        // which happens when this handle is dropped, and also when the test process dies or
        // exits without running destructors (a server kept in a `static`). So no server
        // outlives its tests.
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(r#"bin=$1; shift; "$bin" "$@" & pid=$!; read _ignored; kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null; exit 0"#)
            .arg("tollgate-redis-supervisor")
            .arg(&bin)
            .arg("--port")
            .arg(self.port.to_string())
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--save")
            .arg("")
            .arg("--appendonly")
            .arg("no")
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(&log)
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {bin} under sh: {e}"));
        self.child = Some(child);
        self.pid = std::sync::OnceLock::new();
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if command(self.port, &["PING"]).is_ok_and(|reply| reply.starts_with("+PONG")) {
                return;
            }
            if Instant::now() > deadline {
                self.kill();
                panic!(
                    "{bin} did not answer PING on port {} within {START_TIMEOUT:?}\nlog:\n{}",
                    self.port,
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The connection URL, `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path())
            .unwrap_or_else(|e| format!("(no log at {}: {e})", self.log_path().display()))
    }

    /// The temporary directory the server runs in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Kills the server (SIGKILL) and waits for it, keeping the port for [`RedisServer::restart`].
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Closing stdin makes the supervisor SIGKILL the server and wait for it.
            drop(child.stdin.take());
            let _ = child.wait();
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

    /// Starts the server again on the same port (after [`RedisServer::kill`]); its data is
    /// gone, as after a crash without persistence.
    ///
    /// # Panics
    /// As [`RedisServer::start`].
    pub fn restart(&mut self) {
        self.kill();
        self.spawn(&[]);
    }

    /// Sends one command and returns the raw RESP reply, panicking with the log on failure.
    ///
    /// # Panics
    /// When the server cannot be reached.
    pub fn cmd(&self, args: &[&str]) -> String {
        command(self.port, args).unwrap_or_else(|e| {
            panic!(
                "command {args:?} to redis on port {} failed: {e}\nlog:\n{}",
                self.port,
                self.log()
            )
        })
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
            .field("running", &self.child.is_some())
            .finish_non_exhaustive()
    }
}

/// The binary to run: `$REDIS_SERVER_BIN` or `redis-server`.
pub(crate) fn server_bin() -> String {
    std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".to_owned())
}

/// Whether `bin` names an executable file (a path, or a name found on `$PATH`).
fn on_path(bin: &str) -> bool {
    if bin.contains('/') {
        return Path::new(bin).is_file();
    }
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(bin).is_file()))
}

/// A port nothing listens on now (never 6379). With `bus`, port + 10000 is free as well (the
/// cluster bus port).
pub(crate) fn free_port(bus: bool) -> u16 {
    for _ in 0..200 {
        let Ok(listener) = TcpListener::bind("127.0.0.1:0") else {
            continue;
        };
        let Ok(addr) = listener.local_addr() else {
            continue;
        };
        let port = addr.port();
        if port == 6379 {
            continue;
        }
        if !bus {
            return port;
        }
        if port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
    panic!("no free port found on 127.0.0.1")
}

/// Sends one command (RESP array of bulk strings) and reads one reply, as raw text.
pub(crate) fn command(port: u16, args: &[&str]) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut out = format!("*{}\r\n", args.len());
    for a in args {
        out.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    stream.write_all(out.as_bytes())?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        reply.extend_from_slice(&buf[..n]);
        if reply_complete(&reply) {
            break;
        }
    }
    Ok(String::from_utf8_lossy(&reply).into_owned())
}

/// Whether `r` holds one whole simple reply (status, error, integer or bulk string).
fn reply_complete(r: &[u8]) -> bool {
    let Some(line_end) = r.windows(2).position(|w| w == b"\r\n") else {
        return false;
    };
    match r.first() {
        Some(b'$') => {
            let len: i64 = std::str::from_utf8(&r[1..line_end])
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(-1);
            len < 0 || r.len() >= line_end + 2 + len as usize + 2
        }
        // Arrays are not parsed: callers only use simple replies and bulk strings.
        _ => true,
    }
}
