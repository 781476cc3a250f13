//! The real `tollgate` binary, end to end: serve, check, reload on edit, clean SIGTERM exit;
//! and `check-config`'s exit codes.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::support::{Reply, eventually, one_limit, request};

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

/// A `tollgate serve` process; killed on drop if still running.
pub(crate) struct Process {
    child: Child,
    pub(crate) addr: SocketAddr,
    /// The gRPC (Envoy RLS) address, when `server.grpc` is set.
    pub(crate) grpc: Option<SocketAddr>,
    log: Arc<Mutex<String>>,
    /// The thread copying stderr into `log`; joined once the process has exited, so the log
    /// holds every line the process wrote.
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Process {
    /// Starts `tollgate serve --config <path>` and waits (10 s at most) for its listening line.
    pub(crate) fn serve(config: &Path) -> Process {
        let mut command = Command::new(BIN);
        command.args(["serve", "--config"]).arg(config);
        Process::start(command)
    }

    /// Starts `tollgate serve` with no config file, on a free port.
    fn serve_without_config() -> Process {
        let mut command = Command::new(BIN);
        command.arg("serve");
        Process::start(command)
    }

    fn start(mut command: Command) -> Process {
        let mut child = command
            .env("RUST_LOG", "tollgate_server=debug")
            .env("TOLLGATE_HTTP", "127.0.0.1:0")
            .env_remove("TOLLGATE_GRPC")
            .env_remove("TOLLGATE_REDIS_URL")
            .env_remove("TOLLGATE_ADMIN_TOKEN")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tollgate");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        let sink = Arc::clone(&log);
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("addr=") {
                    let _ = tx.send(line.clone());
                }
                if let Ok(mut l) = sink.lock() {
                    l.push_str(&line);
                    l.push('\n');
                }
            }
        });
        // `listening addr=127.0.0.1:8080 grpc=127.0.0.1:8081 …` (`grpc=off` without one).
        let field = |line: &str, name: &str| {
            line.split(name)
                .nth(1)
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<SocketAddr>().ok())
        };
        let (addr, grpc) = match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(line) => (
                field(&line, " addr=").expect("listening address"),
                field(&line, " grpc="),
            ),
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "tollgate did not start listening within 10 s; log:\n{}",
                    log.lock().map(|l| l.clone()).unwrap_or_default()
                );
            }
        };
        Process {
            child,
            addr,
            grpc,
            log,
            reader: Some(reader),
        }
    }

    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn log(&self) -> String {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Whether the log shows `text` within 10 s.
    pub(crate) async fn logged(&self, text: &str) -> bool {
        eventually(Duration::from_secs(10), || async {
            self.log().contains(text)
        })
        .await
    }

    /// SIGTERM, then a clean exit within 10 s.
    pub(crate) fn terminate(&mut self) {
        self.signal("TERM");
        let status = self.wait();
        assert!(status.success(), "exit {status:?}; log:\n{}", self.log());
    }

    pub(crate) async fn post(&self, path: &str, body: &str) -> Reply {
        request(self.addr, "POST", path, Bytes::from(body.to_owned()), &[]).await
    }

    /// Sends `signal` (e.g. `TERM`) with the `kill` command.
    pub(crate) fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("run `kill` (from procps)");
        assert!(status.success(), "kill -{signal} failed");
    }

    /// Waits (10 s at most) for the process to exit.
    pub(crate) fn wait(&mut self) -> ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                // stderr is closed now: the reader reaches its end.
                if let Some(reader) = self.reader.take() {
                    let _ = reader.join();
                }
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "tollgate did not exit within 10 s; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Runs `tollgate serve --config <config>`, which must exit by itself within 15 s (a start-up
/// refusal): its exit status and its stderr.
pub(crate) fn serve_refused(config: &Path) -> (ExitStatus, String) {
    let mut child = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(config)
        .env("TOLLGATE_HTTP", "127.0.0.1:0")
        .env_remove("TOLLGATE_REDIS_URL")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tollgate");
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("tollgate kept running where it must refuse to start");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let output = child.wait_with_output().expect("output");
    (status, String::from_utf8_lossy(&output.stderr).into_owned())
}

/// `text` written to `tollgate.toml` in a new temporary directory (removed on drop).
pub(crate) fn config_file(text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, text).expect("write");
    (dir, path)
}

/// A `tollgate serve` with a gRPC port and `[envoy] config_dir = "ratelimit"` holding `yaml`
/// (file name, contents), `envoy` added to `[envoy]`, on a fresh Redis when `redis` (which it
/// holds), else on the memory store.
pub(crate) struct EnvoyServe {
    pub(crate) process: Process,
    _dir: tempfile::TempDir,
    _redis: Option<tollgate_testkit::RedisServer>,
}

impl EnvoyServe {
    pub(crate) fn start(redis: bool, envoy: &str, yaml: &[(&str, &str)]) -> EnvoyServe {
        let redis = redis.then(tollgate_testkit::RedisServer::start);
        // Port 0: the process binds a free port itself (`Process::grpc`).
        let grpc = "127.0.0.1:0";
        let store = redis.as_ref().map_or(String::new(), |r| {
            format!("[store]\nredis = \"{}\"\ntimeout = \"2s\"\n\n", r.url())
        });
        let (dir, path) = config_file(&format!(
            "[server]\ngrpc = \"{grpc}\"\n\n{store}[envoy]\nconfig_dir = \"ratelimit\"\n{envoy}\n"
        ));
        let at = dir.path().join("ratelimit");
        std::fs::create_dir_all(&at).expect("mkdir");
        for (name, text) in yaml {
            std::fs::write(at.join(name), text).expect("write yaml");
        }
        EnvoyServe {
            process: Process::serve(&path),
            _dir: dir,
            _redis: redis,
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Serve from a file, check, edit the file and see the new limits, then SIGTERM: a clean exit.
#[tokio::test]
async fn serve_reload_and_terminate() {
    let server = "[server]\nhttp = \"127.0.0.1:0\"\n";
    let (_dir, path) = config_file(&format!(
        "{server}{}",
        one_limit("e2e", "sliding_log", 1, "1h", r#""user""#, "deny")
    ));
    let mut process = Process::serve(&path);
    let body = r#"{"limit": "e2e", "key": {"user": "1"}}"#;
    assert_eq!(process.post("/v1/check", body).await.status, 200);
    let refused = process.post("/v1/check", body).await;
    assert_eq!(refused.status, 429, "{refused:?}");

    let edited = format!(
        "{server}{}",
        one_limit("e2e", "sliding_log", 3, "1h", r#""user""#, "deny")
    );
    std::fs::write(&path, edited).expect("write");
    let reloaded = eventually(Duration::from_secs(10), || async {
        process.post("/v1/check", body).await.status == 200
    })
    .await;
    assert!(
        reloaded,
        "the raised limit never took effect; log:\n{}",
        process.log()
    );
    assert!(process.logged("config reloaded").await, "{}", process.log());

    process.terminate();
    assert!(process.log().contains("shutting down"), "{}", process.log());
}

/// A config file truncated to nothing on a running service is refused on reload (logged as
/// such): the old limit keeps answering, with its counter, until a valid file lands.
#[tokio::test]
async fn a_truncated_config_is_refused_on_reload() {
    let (_dir, path) = config_file(&one_limit(
        "trunc",
        "sliding_log",
        2,
        "1h",
        r#""user""#,
        "deny",
    ));
    let mut process = Process::serve(&path);
    let body = r#"{"limit": "trunc", "key": {"user": "1"}}"#;
    assert_eq!(process.post("/v1/check", body).await.status, 200);

    std::fs::File::create(&path).expect("truncate");
    let refused = process.logged("config reload refused").await;
    assert!(
        refused,
        "the empty file was not refused; log:\n{}",
        process.log()
    );
    assert!(
        process.log().contains("no [[limits]] defined"),
        "{}",
        process.log()
    );
    assert!(
        !process.log().contains("config reloaded"),
        "{}",
        process.log()
    );
    let second = process.post("/v1/check", body).await;
    assert_eq!(
        second.status, 200,
        "the old limit still answers: {second:?}"
    );
    let third = process.post("/v1/check", body).await;
    assert_eq!(third.status, 429, "with its counter: {third:?}");

    std::fs::write(
        &path,
        one_limit("trunc", "sliding_log", 3, "1h", r#""user""#, "deny"),
    )
    .expect("write");
    let reloaded = eventually(Duration::from_secs(10), || async {
        process.post("/v1/check", body).await.status == 200
    })
    .await;
    assert!(
        reloaded,
        "the valid file never landed; log:\n{}",
        process.log()
    );
    process.terminate();
}

/// A reload that drops limits the running config has is applied, with a warning naming them.
#[tokio::test]
async fn a_reload_removing_limits_warns_with_their_names() {
    let kept = one_limit("kept", "gcra", 1, "1h", "", "deny");
    let (_dir, path) = config_file(&format!(
        "{kept}{}{}",
        one_limit("gone_a", "gcra", 1, "1h", "", "deny"),
        one_limit("gone_b", "gcra", 1, "1h", "", "deny")
    ));
    let mut process = Process::serve(&path);
    std::fs::write(&path, &kept).expect("write");
    let warned = process.logged("config reload removes limits").await;
    assert!(warned, "no warning; log:\n{}", process.log());
    let log = process.log();
    let line = log
        .lines()
        .find(|l| l.contains("removes limits"))
        .unwrap_or_default();
    assert!(
        line.contains("WARN")
            && line.contains(r#""gone_a""#)
            && line.contains(r#""gone_b""#)
            && !line.contains("kept"),
        "{line}"
    );
    // Logged right after the warning: waited for, not read from the same snapshot.
    let reloaded = process.logged("config reloaded").await;
    assert!(reloaded, "{}", process.log());
    process.terminate();
}

/// Started without a config file, the service survives SIGHUP (whose default action would
/// terminate it) and keeps answering.
#[tokio::test]
async fn sighup_without_config_is_ignored() {
    let mut process = Process::serve_without_config();
    process.signal("HUP");
    let logged = process.logged("nothing to reload").await;
    assert!(logged, "SIGHUP not handled; log:\n{}", process.log());
    let health = request(process.addr, "GET", "/healthz", Bytes::new(), &[]).await;
    assert_eq!(health.status, 200, "{}", process.log());
    process.terminate();
}

/// SIGHUP re-reads the file.
#[tokio::test]
async fn sighup_reloads() {
    let (_dir, path) = config_file(&format!(
        "[server]\nhttp = \"127.0.0.1:0\"\n{}",
        one_limit("hup", "gcra", 1, "1h", "", "deny")
    ));
    let mut process = Process::serve(&path);
    process.signal("HUP");
    let seen = process.logged("SIGHUP").await;
    assert!(seen, "no reload on SIGHUP; log:\n{}", process.log());
    assert_eq!(
        process
            .post("/v1/check", r#"{"limit": "hup"}"#)
            .await
            .status,
        200,
        "still serving"
    );
    process.signal("INT");
    assert!(process.wait().success(), "log:\n{}", process.log());
}

/// A SIGHUP while the service is starting, its port already accepting connections but its
/// store still being opened (a Redis that accepts and never answers), does not terminate it:
/// it goes on to serve. It died of SIGHUP's default action, silently (exit 129).
#[test]
fn sighup_during_start_up_does_not_terminate() {
    let mute = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let redis = mute.local_addr().expect("addr");
    // Accepts and holds every connection, and never answers.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        while let Ok((stream, _)) = mute.accept() {
            held.push(stream);
        }
    });
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let text = format!(
        "[store]\nredis = \"redis://{redis}\"\n{}",
        one_limit("hup", "gcra", 1, "1h", "", "allow")
    );
    let (_dir, path) = config_file(&text);
    let mut child = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&path)
        .env("TOLLGATE_HTTP", port.to_string())
        .env_remove("TOLLGATE_REDIS_URL")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tollgate");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(port).is_err() {
        assert!(Instant::now() < deadline, "the port never accepted");
        assert!(child.try_wait().expect("try_wait").is_none(), "exited");
        std::thread::sleep(Duration::from_millis(5));
    }
    let hup = Command::new("kill")
        .args(["-HUP", &child.id().to_string()])
        .status()
        .expect("run `kill` (from procps)");
    assert!(hup.success());
    // Start-up goes on (the store's connect times out, the limit's policy applies) to serve.
    let deadline = Instant::now() + Duration::from_secs(15);
    let served = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            let output = child.wait_with_output().expect("output");
            panic!(
                "tollgate exited ({status:?}) after a SIGHUP during start-up; log:\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let mut stream = match std::net::TcpStream::connect(port) {
            Ok(stream) => stream,
            Err(e) => panic!("the port stopped accepting: {e}"),
        };
        use std::io::{Read as _, Write as _};
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let _ = stream.write_all(b"GET /healthz HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n");
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        if answer.starts_with("HTTP/1.1 200") {
            break true;
        }
        if Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = child.kill();
    let output = child.wait_with_output().expect("output");
    assert!(
        served,
        "never served; log:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A SIGHUP sent while the file is being written (a reloader that signals on an editor's
/// first write) does not apply the half-written file: it is read twice, 100 ms apart, and
/// left to the polls when the two differ. The half file (limit `b` missing) was applied at
/// once, with its warning that `b` is removed, until the poll put `b` back.
#[tokio::test]
async fn sighup_on_a_file_being_written_does_not_apply_half_of_it() {
    let whole = format!(
        "[server]\nhttp = \"127.0.0.1:0\"\n{}{}",
        one_limit("a", "gcra", 5, "1h", "", "deny"),
        one_limit("b", "gcra", 5, "1h", "", "deny")
    );
    let (_dir, path) = config_file(&whole);
    let mut process = Process::serve(&path);
    let half = whole
        .split("[[limits]]")
        .take(2)
        .collect::<Vec<_>>()
        .join("[[limits]]");
    std::fs::write(&path, half).expect("write half");
    process.signal("HUP");
    tokio::time::sleep(Duration::from_millis(30)).await;
    std::fs::write(&path, &whole).expect("write the rest");
    let signalled = process.logged("SIGHUP").await;
    assert!(signalled, "{}", process.log());
    // Past the SIGHUP's second read and two polls.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert!(
        !process.log().contains("removes limits"),
        "half the file was applied; log:\n{}",
        process.log()
    );
    let b = process.post("/v1/check", r#"{"limit": "b"}"#).await;
    assert_eq!(b.status, 200, "{}", process.log());
    process.signal("INT");
    assert!(process.wait().success(), "log:\n{}", process.log());
}

/// `check-config` exits 0 on a valid file and non-zero naming the field on an invalid one.
#[test]
fn check_config_exit_codes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let good = dir.path().join("good.toml");
    std::fs::write(&good, one_limit("cc", "gcra", 1, "1s", "", "deny")).expect("write");
    let out = Command::new(BIN)
        .arg("check-config")
        .arg(&good)
        .output()
        .expect("run");
    assert!(out.status.success(), "{out:?}");

    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, one_limit("cc", "gcra", 1, "1 sec", "", "deny")).expect("write");
    let out = Command::new(BIN)
        .arg("check-config")
        .arg(&bad)
        .output()
        .expect("run");
    assert!(!out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("bad.toml: limits[0].period: \"1 sec\" is not a duration"),
        "{stderr}"
    );
}

/// A config path naming a device or a FIFO is refused at once, saying what it is: before,
/// `check-config /dev/zero` grew without bound and a FIFO hung it (and `serve` alike).
#[test]
fn check_config_refuses_a_device_or_a_fifo() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("tollgate.toml");
    let made = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("run mkfifo");
    assert!(made.success());
    for (path, says) in [
        (Path::new("/dev/zero"), "a character device"),
        (fifo.as_path(), "a FIFO"),
    ] {
        let mut child = Command::new(BIN)
            .arg("check-config")
            .arg(path)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run");
        // Bounded: a hang is the failure (the child is killed, the test fails).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while child.try_wait().expect("wait").is_none() {
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("check-config {} did not end", path.display());
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let out = child.wait_with_output().expect("output");
        assert!(!out.status.success(), "{out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{}: {stderr}", path.display());
    }
}

/// `check-config` refuses a Redis URL the Redis client would refuse (here a database that is
/// not a number): exit 1, naming `store.redis` and the reason, without the password. Before,
/// it said "ok" and `serve` then took the URL for a Redis down for ever.
#[test]
fn check_config_refuses_a_redis_url_the_client_refuses() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bad_url.toml");
    let toml = format!(
        "[store]\nredis = \"redis://:hunter2-secret@127.0.0.1:1/abc\"\n{}",
        one_limit("cc", "gcra", 1, "1s", "", "deny")
    );
    std::fs::write(&path, toml).expect("write");
    let mut command = Command::new(BIN);
    command.arg("check-config").arg(&path);
    let out = output_within_10s(&mut command);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        stderr.contains("bad_url.toml: store.redis: ")
            && stderr.contains("Invalid database number"),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter2-secret"), "{stderr}");
}

/// `check-config` on a file whose `tls_key` is not its `tls_cert`'s: exit 1, the problem on
/// stderr naming `server.tls_key`, and no "ok" on stdout (docs/service.md: "exit 0, or exit 1
/// with the problem on stderr"). Before, it printed "ok" and then the TLS error.
#[test]
fn check_config_refuses_a_key_that_is_not_the_certificates() {
    let tls = tollgate_testkit::TlsFiles::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tls_mismatch.toml");
    let toml = format!(
        "[server]\ntls_cert = {:?}\ntls_key = {:?}\n{}",
        tls.server_cert(),
        tls.client_key(),
        one_limit("cc", "gcra", 1, "1s", "", "deny")
    );
    std::fs::write(&path, toml).expect("write");
    let mut command = Command::new(BIN);
    command.arg("check-config").arg(&path);
    let out = output_within_10s(&mut command);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stderr.contains("server.tls_key"), "{stderr}");
    assert!(!stdout.contains("ok"), "stdout: {stdout}");
}

/// A command whose reader closes its output early (`tollgate … | head -1`) ends quietly and
/// successfully, as command-line tools do, instead of panicking on the closed pipe.
#[test]
fn commands_end_quietly_when_their_reader_closes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let runs: [&[&str]; 2] = [
        &["check-config", "examples/tollgate.toml"],
        &[
            "replay",
            "examples/access.log",
            "--config",
            "examples/tollgate.toml",
            "--key",
            "user=$remote_user",
        ],
    ];
    for args in runs {
        // The pipe's reading end is gone before the command writes: its first write fails.
        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader);
        let mut command = Command::new(BIN);
        command
            .current_dir(&root)
            .args(args)
            .env_remove("TOLLGATE_REDIS_URL")
            .stdout(writer)
            .stderr(Stdio::piped());
        let child = command.spawn().expect("spawn tollgate");
        let out = finish_within_10s(child, &command);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {:?}\n{stderr}", out.status);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// Runs `command` to its end, 10 s at most (killed and failed after that).
fn output_within_10s(command: &mut Command) -> std::process::Output {
    let child = command
        .env("TOLLGATE_HTTP", "127.0.0.1:0")
        .env_remove("TOLLGATE_GRPC")
        .env_remove("TOLLGATE_REDIS_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tollgate");
    finish_within_10s(child, command)
}

/// Waits for `child` (spawned from `command`) to end, 10 s at most (killed and failed after
/// that).
fn finish_within_10s(mut child: Child, command: &Command) -> std::process::Output {
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "{command:?} still running after 10 s; stderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// `check-config` and `serve` refuse a file without limits (empty, or `[server]` only),
/// saying why, instead of accepting a service that knows no limit.
#[test]
fn a_file_without_limits_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, text) in [
        ("empty.toml", ""),
        ("server_only.toml", "[server]\nhttp = \"127.0.0.1:0\"\n"),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write");
        let mut check = Command::new(BIN);
        check.arg("check-config").arg(&path);
        let mut serve = Command::new(BIN);
        serve.args(["serve", "--config"]).arg(&path);
        for command in [&mut check, &mut serve] {
            let out = output_within_10s(command);
            assert!(!out.status.success(), "{command:?}: {out:?}");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.contains(&format!(
                    "{name}: limits: no [[limits]] defined; a config file needs at least one limit"
                )),
                "{command:?}: {stderr}"
            );
        }
    }
}

/// An unreachable Redis does not stop start-up; the log says so, password redacted.
#[test]
fn unreachable_redis_starts_anyway_without_leaking_the_password() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tollgate.toml");
    // Port 1 on loopback: nothing listens there, the connection is refused at once. The
    // service starts anyway (limits answer by their policy) and says so, password redacted.
    let toml = format!(
        "[store]\nredis = \"redis://:hunter2-secret@127.0.0.1:1\"\n{}",
        one_limit("r", "gcra", 1, "1s", "", "deny")
    );
    std::fs::write(&path, toml).expect("write");
    let process = Process::serve(&path);
    let log = process.log();
    assert!(log.contains("redis is unreachable at start"), "{log}");
    assert!(!log.contains("hunter2-secret"), "{log}");
}
