//! The few lines of RESP the harness speaks to the servers and sentinels it spawns.
//!
//! The harness must not depend on the Redis client under test (a bug there would hide in the
//! harness too), so it sends commands and reads replies itself: one command per connection,
//! a reply read whole (nested arrays included, as `SENTINEL REPLICAS` and `CLUSTER SLOTS`
//! send them), with a read timeout so that a frozen server fails the test instead of hanging
//! it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// How long one reply may take before the command fails.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// One RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    /// `+OK`
    Status(String),
    /// `-ERR …`
    Error(String),
    /// `:42`
    Integer(i64),
    /// `$3\r\nfoo`, or `$-1` (`None`).
    Bulk(Option<String>),
    /// `*2\r\n…`, or `*-1` (`None`).
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// Parses the reply at the start of `buf`: `Ok(None)` while it is incomplete, else the
    /// reply and the bytes it took.
    pub(crate) fn parse(buf: &[u8]) -> Result<Option<(Reply, usize)>, String> {
        let Some(line_end) = buf.windows(2).position(|w| w == b"\r\n") else {
            return Ok(None);
        };
        let line = String::from_utf8_lossy(&buf[1..line_end]).into_owned();
        let after = line_end + 2;
        let number = || -> Result<i64, String> {
            line.parse()
                .map_err(|_| format!("bad length or integer {line:?} in RESP reply"))
        };
        match buf.first() {
            Some(b'+') => Ok(Some((Reply::Status(line), after))),
            Some(b'-') => Ok(Some((Reply::Error(line), after))),
            Some(b':') => Ok(Some((Reply::Integer(number()?), after))),
            Some(b'$') => {
                let Ok(len) = usize::try_from(number()?) else {
                    return Ok(Some((Reply::Bulk(None), after)));
                };
                if buf.len() < after + len + 2 {
                    return Ok(None);
                }
                let text = String::from_utf8_lossy(&buf[after..after + len]).into_owned();
                Ok(Some((Reply::Bulk(Some(text)), after + len + 2)))
            }
            Some(b'*') => {
                let Ok(count) = usize::try_from(number()?) else {
                    return Ok(Some((Reply::Array(None), after)));
                };
                let mut items = Vec::with_capacity(count.min(1024));
                let mut at = after;
                for _ in 0..count {
                    match Reply::parse(&buf[at..])? {
                        Some((item, used)) => {
                            items.push(item);
                            at += used;
                        }
                        None => return Ok(None),
                    }
                }
                Ok(Some((Reply::Array(Some(items)), at)))
            }
            other => Err(format!(
                "unexpected RESP type byte {other:?} in {:?}",
                String::from_utf8_lossy(buf)
            )),
        }
    }

    /// Every string and integer in the reply, nested arrays flattened in order (a nil is
    /// skipped): `SENTINEL MASTER`'s field/value pairs, `CLUSTER GETKEYSINSLOT`'s keys.
    pub(crate) fn strings(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.flatten_into(&mut out);
        out
    }

    fn flatten_into(&self, out: &mut Vec<String>) {
        match self {
            Reply::Status(s) | Reply::Error(s) | Reply::Bulk(Some(s)) => out.push(s.clone()),
            Reply::Integer(i) => out.push(i.to_string()),
            Reply::Bulk(None) | Reply::Array(None) => {}
            Reply::Array(Some(items)) => items.iter().for_each(|i| i.flatten_into(out)),
        }
    }

    /// The items of an array reply (empty for a nil or any other reply).
    pub(crate) fn items(&self) -> &[Reply] {
        match self {
            Reply::Array(Some(items)) => items,
            _ => &[],
        }
    }

    /// The text of a status, bulk string or integer reply.
    pub(crate) fn text(&self) -> Option<String> {
        match self {
            Reply::Status(s) | Reply::Bulk(Some(s)) => Some(s.clone()),
            Reply::Integer(i) => Some(i.to_string()),
            _ => None,
        }
    }
}

/// Sends one command (an array of bulk strings) to `127.0.0.1:port` and returns the raw bytes
/// of its reply. With `password`, `AUTH <password>` goes first on the same connection, and
/// an error reply to it fails the call.
pub(crate) fn exchange(
    port: u16,
    password: Option<&str>,
    args: &[&str],
) -> std::io::Result<Vec<u8>> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(READ_TIMEOUT))?;
    let mut out = Vec::new();
    if let Some(password) = password {
        encode(&mut out, &["AUTH", password]);
    }
    encode(&mut out, args);
    stream.write_all(&out)?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let mut skip_auth = password.is_some();
    loop {
        match Reply::parse(&reply) {
            Ok(Some((Reply::Error(e), _))) if skip_auth => {
                return Err(std::io::Error::other(format!("AUTH failed: {e}")));
            }
            Ok(Some((_, used))) if skip_auth => {
                reply.drain(..used);
                skip_auth = false;
                continue;
            }
            Ok(Some(_)) => return Ok(reply),
            Ok(None) => {}
            Err(e) => return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
        }
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "connection closed before a whole reply ({:?} so far)",
                    String::from_utf8_lossy(&reply)
                ),
            ));
        }
        reply.extend_from_slice(&buf[..n]);
    }
}

/// Sends one command and returns its reply, parsed.
pub(crate) fn request(port: u16, password: Option<&str>, args: &[&str]) -> std::io::Result<Reply> {
    let raw = exchange(port, password, args)?;
    match Reply::parse(&raw) {
        Ok(Some((reply, _))) => Ok(reply),
        Ok(None) => Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "incomplete reply",
        )),
        Err(e) => Err(std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
    }
}

/// Sends one command and returns the raw RESP reply as text (lossy UTF-8).
pub(crate) fn command(port: u16, args: &[&str]) -> std::io::Result<String> {
    exchange(port, None, args).map(|raw| String::from_utf8_lossy(&raw).into_owned())
}

fn encode(out: &mut Vec<u8>, args: &[&str]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::Reply;

    #[test]
    fn parses_nested_arrays_and_waits_for_the_rest() {
        let raw = b"*3\r\n$4\r\nname\r\n:7\r\n*2\r\n+OK\r\n$-1\r\n";
        let (reply, used) = Reply::parse(raw).expect("well-formed").expect("complete");
        assert_eq!(used, raw.len());
        assert_eq!(reply.strings(), ["name", "7", "OK"]);
        for cut in 0..raw.len() {
            assert_eq!(
                Reply::parse(&raw[..cut]).expect("well-formed prefix"),
                None,
                "prefix of {cut} bytes"
            );
        }
    }

    #[test]
    fn a_bulk_string_may_hold_crlf() {
        let raw = b"$7\r\na\r\nb\r\nc\r\n";
        let (reply, _) = Reply::parse(raw).expect("ok").expect("complete");
        assert_eq!(reply, Reply::Bulk(Some("a\r\nb\r\nc".to_owned())));
    }
}
