//! [`FakeSentinel`]: a process-local stand-in for a Redis Sentinel that answers what a test
//! tells it to: a stale master, garbage, or nothing at all.
//!
//! A real sentinel cannot be made to lie, yet the sentinels a client meets can be stale (one
//! cut off from the others keeps naming the master it knew), misconfigured, or broken; a
//! client must not let one of them decide for the group. This speaks just enough RESP over a
//! TCP listener on a free port: `SENTINEL get-master-addr-by-name` gets the reply set by
//! [`FakeSentinel::name_master`] or [`FakeSentinel::answer_raw`], `SUBSCRIBE` a confirmation
//! (and nothing after it), `ROLE` no reply ever (so that, named as a master, it is a node
//! that accepts connections and then freezes), anything else `+OK`.

use std::fmt;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::resp::Reply;

/// What the fake shares with its connection threads.
struct Shared {
    /// The raw RESP reply to `SENTINEL get-master-addr-by-name`.
    answer: Mutex<Vec<u8>>,
    asked: AtomicU64,
    roles: AtomicU64,
    stop: AtomicBool,
    /// Every accepted connection, to shut down on drop.
    conns: Mutex<Vec<TcpStream>>,
}

/// A fake sentinel listening on `127.0.0.1`; dropped, it closes every connection.
pub struct FakeSentinel {
    port: u16,
    shared: Arc<Shared>,
}

impl FakeSentinel {
    /// A fake naming `127.0.0.1:<port>` as the master of any name.
    ///
    /// # Panics
    /// When it cannot listen.
    pub fn naming(port: u16) -> FakeSentinel {
        let fake = FakeSentinel::start();
        fake.name_master("127.0.0.1", port);
        fake
    }

    /// A fake that knows no master (`*-1`) until told otherwise.
    ///
    /// # Panics
    /// When it cannot listen.
    pub fn start() -> FakeSentinel {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a fake sentinel");
        let port = listener.local_addr().expect("its address").port();
        let shared = Arc::new(Shared {
            answer: Mutex::new(b"*-1\r\n".to_vec()),
            asked: AtomicU64::new(0),
            roles: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            conns: Mutex::new(Vec::new()),
        });
        let accepting = Arc::clone(&shared);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if accepting.stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                if let Ok(clone) = conn.try_clone() {
                    lock(&accepting.conns).push(clone);
                }
                let serving = Arc::clone(&accepting);
                std::thread::spawn(move || serve(conn, &serving));
            }
        });
        FakeSentinel { port, shared }
    }

    /// From now on, names `host:port` as the master.
    pub fn name_master(&self, host: &str, port: u16) {
        let port = port.to_string();
        let mut raw = b"*2\r\n".to_vec();
        for part in [host, port.as_str()] {
            raw.extend_from_slice(format!("${}\r\n{part}\r\n", part.len()).as_bytes());
        }
        *lock(&self.shared.answer) = raw;
    }

    /// From now on, answers `raw` (RESP, sent as is) when asked for the master.
    pub fn answer_raw(&self, raw: &[u8]) {
        *lock(&self.shared.answer) = raw.to_vec();
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its URL, `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// How many times it was asked for the master.
    pub fn asked(&self) -> u64 {
        self.shared.asked.load(Ordering::SeqCst)
    }

    /// How many times it was sent `ROLE` (and did not answer): a client checked it as a
    /// master it was named as.
    pub fn roles_asked(&self) -> u64 {
        self.shared.roles.load(Ordering::SeqCst)
    }
}

/// Answers one connection's commands until it closes or the fake is dropped.
fn serve(mut conn: TcpStream, shared: &Shared) {
    let _ = conn.set_read_timeout(Some(Duration::from_millis(100)));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !shared.stop.load(Ordering::SeqCst) {
        match conn.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(_) => return,
        }
        loop {
            let (args, used) = match Reply::parse(&buf) {
                Ok(Some((request, used))) => (request.strings(), used),
                Ok(None) => break,
                Err(_) => return,
            };
            buf.drain(..used);
            let Some(reply) = answer(&args, shared) else {
                continue;
            };
            if conn.write_all(&reply).is_err() {
                return;
            }
        }
    }
}

/// The reply to one command, or `None` for none.
fn answer(args: &[String], shared: &Shared) -> Option<Vec<u8>> {
    let word = |i: usize| {
        args.get(i)
            .map(|a| a.to_ascii_lowercase())
            .unwrap_or_default()
    };
    match word(0).as_str() {
        "sentinel" if word(1) == "get-master-addr-by-name" => {
            shared.asked.fetch_add(1, Ordering::SeqCst);
            Some(lock(&shared.answer).clone())
        }
        "role" => {
            shared.roles.fetch_add(1, Ordering::SeqCst);
            None
        }
        "subscribe" => {
            let mut raw = Vec::new();
            for (n, channel) in args.iter().skip(1).enumerate() {
                raw.extend_from_slice(
                    format!(
                        "*3\r\n$9\r\nsubscribe\r\n${}\r\n{channel}\r\n:{}\r\n",
                        channel.len(),
                        n + 1
                    )
                    .as_bytes(),
                );
            }
            Some(raw)
        }
        _ => Some(b"+OK\r\n".to_vec()),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Drop for FakeSentinel {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop, which then sees `stop`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        for conn in lock(&self.shared.conns).drain(..) {
            let _ = conn.shutdown(Shutdown::Both);
        }
    }
}

impl fmt::Debug for FakeSentinel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FakeSentinel")
            .field("port", &self.port)
            .field("asked", &self.asked())
            .finish_non_exhaustive()
    }
}
