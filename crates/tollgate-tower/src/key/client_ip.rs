//! The client's IP address, believed only as far as the proxies in front are trusted.
//!
//! By default the key is the connection's peer address and forwarding headers are ignored:
//! anyone can write `X-Forwarded-For`. With trusted proxies configured (CIDRs), and only when
//! the peer is one of them, the configured header is walked from the right: each entry was
//! appended by the hop to its right, so the walk goes on while that hop is trusted and stops
//! at the first address that is not — the client. The leftmost entry is believed only when
//! every hop after it is a trusted proxy. An entry that is not an address (`unknown`, an
//! obfuscated node, junk) from a trusted proxy stops the walk with a [`KeyError`], rather than
//! guessing.
//!
//! IPv6 clients get whole prefixes cheaply (a /64 is one subscriber), so they are grouped by
//! a prefix (default /64); IPv4 by /32 unless configured. IPv4-mapped IPv6 addresses
//! (`::ffff:a.b.c.d`) count as IPv4.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use http::request::Parts;

use super::forwarded::{self, Hop};
use super::{KeyExtractor, KeyParts};
use crate::{ConfigError, KeyError};

pub use ipnet::IpNet;

/// Which forwarding header trusted proxies write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProxyHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2`.
    #[default]
    XForwardedFor,
    /// `Forwarded: for=client, for=proxy1` (RFC 7239).
    Forwarded,
}

impl ProxyHeader {
    fn name(self) -> &'static str {
        match self {
            ProxyHeader::XForwardedFor => "x-forwarded-for",
            ProxyHeader::Forwarded => "forwarded",
        }
    }
}

/// Where the connection's peer address is found in a request.
pub type PeerAddress = fn(&Parts) -> Option<IpAddr>;

/// The client's IP address (grouped by prefix) as the part `ip`.
#[derive(Debug, Clone)]
pub struct ClientIp {
    name: Arc<str>,
    trusted: Arc<[IpNet]>,
    header: ProxyHeader,
    v4_prefix: u8,
    v6_prefix: u8,
    peer: PeerAddress,
}

impl Default for ClientIp {
    fn default() -> Self {
        ClientIp::new()
    }
}

impl ClientIp {
    /// The peer address, IPv4 as /32 and IPv6 grouped by /64, no proxy trusted.
    pub fn new() -> ClientIp {
        ClientIp {
            name: Arc::from("ip"),
            trusted: Arc::from([]),
            header: ProxyHeader::default(),
            v4_prefix: 32,
            v6_prefix: 64,
            peer: default_peer,
        }
    }

    /// Believes forwarding headers from peers in these networks (`"10.0.0.0/8".parse()?`).
    pub fn trusted_proxies(mut self, proxies: impl IntoIterator<Item = IpNet>) -> ClientIp {
        self.trusted = proxies.into_iter().map(|n| n.trunc()).collect();
        self
    }

    /// Which header the trusted proxies write (default `X-Forwarded-For`).
    pub fn proxy_header(mut self, header: ProxyHeader) -> ClientIp {
        self.header = header;
        self
    }

    /// Groups IPv4 clients by this prefix length (default 32).
    ///
    /// # Errors
    /// [`ConfigError::InvalidPrefix`] above 32.
    pub fn ipv4_prefix(mut self, len: u8) -> Result<ClientIp, ConfigError> {
        if len > 32 {
            return Err(ConfigError::InvalidPrefix {
                setting: "ipv4_prefix",
                len,
                max: 32,
            });
        }
        self.v4_prefix = len;
        Ok(self)
    }

    /// Groups IPv6 clients by this prefix length (default 64).
    ///
    /// # Errors
    /// [`ConfigError::InvalidPrefix`] above 128.
    pub fn ipv6_prefix(mut self, len: u8) -> Result<ClientIp, ConfigError> {
        if len > 128 {
            return Err(ConfigError::InvalidPrefix {
                setting: "ipv6_prefix",
                len,
                max: 128,
            });
        }
        self.v6_prefix = len;
        Ok(self)
    }

    /// Names the part `name` instead of `ip`.
    pub fn part_name(mut self, name: impl Into<Arc<str>>) -> ClientIp {
        self.name = name.into();
        self
    }

    /// Where the peer address comes from. The default reads axum's `ConnectInfo<SocketAddr>`
    /// (feature `axum`) or a plain `SocketAddr` extension; hyper and tonic users pass their
    /// own (tonic: `TcpConnectInfo::remote_addr`).
    pub fn peer_address(mut self, peer: PeerAddress) -> ClientIp {
        self.peer = peer;
        self
    }

    /// The client address this extractor believes, before grouping.
    ///
    /// # Errors
    /// [`KeyError::NoPeerAddress`], or [`KeyError::BadForwardedEntry`] when a trusted proxy
    /// sent an entry that is not an address.
    pub fn client_ip(&self, request: &Parts) -> Result<IpAddr, KeyError> {
        let peer = (self.peer)(request)
            .ok_or(KeyError::NoPeerAddress)?
            .to_canonical();
        if !self.is_trusted(peer) {
            return Ok(peer);
        }
        // Rightmost first, parsed as the walk goes: nothing left of the client is read.
        match self.header {
            ProxyHeader::XForwardedFor => {
                self.walk(peer, forwarded::x_forwarded_for(&request.headers))
            }
            ProxyHeader::Forwarded => self.walk(peer, forwarded::forwarded(&request.headers)),
        }
    }

    /// The first hop from the right that is not a trusted proxy (`peer`, trusted, when there
    /// is none; the leftmost when every hop is trusted).
    fn walk(&self, peer: IpAddr, hops: impl Iterator<Item = Hop>) -> Result<IpAddr, KeyError> {
        let mut client = peer;
        for hop in hops {
            client = hop
                .map_err(|entry| KeyError::BadForwardedEntry {
                    header: self.header.name(),
                    entry: entry.chars().take(64).collect(),
                })?
                .to_canonical();
            if !self.is_trusted(client) {
                break;
            }
        }
        Ok(client)
    }

    /// The key value for `ip`: the address itself at full length, else `network/len`.
    pub fn group(&self, ip: IpAddr) -> String {
        let ip = ip.to_canonical();
        let len = match ip {
            IpAddr::V4(_) => self.v4_prefix,
            IpAddr::V6(_) => self.v6_prefix,
        };
        match IpNet::new(ip, len) {
            Ok(net) if len < net.max_prefix_len() => net.trunc().to_string(),
            _ => ip.to_string(),
        }
    }

    fn is_trusted(&self, ip: IpAddr) -> bool {
        self.trusted.iter().any(|net| net.contains(&ip))
    }
}

impl KeyExtractor for ClientIp {
    fn extract(&self, request: &Parts, key: &mut KeyParts) -> Result<(), KeyError> {
        let ip = self.client_ip(request)?;
        key.push(self.name.clone(), self.group(ip));
        Ok(())
    }

    fn part_names(&self) -> Vec<&str> {
        vec![&self.name]
    }
}

fn default_peer(request: &Parts) -> Option<IpAddr> {
    #[cfg(feature = "axum")]
    if let Some(info) = request
        .extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
    {
        return Some(info.0.ip());
    }
    request.extensions.get::<SocketAddr>().map(|a| a.ip())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(peer: &str, xff: &[&'static str]) -> Parts {
        let mut b = http::Request::builder();
        for v in xff {
            b = b.header("x-forwarded-for", *v);
        }
        let (mut p, ()) = b.body(()).expect("request").into_parts();
        p.extensions
            .insert(SocketAddr::new(peer.parse().expect("ip"), 4000));
        p
    }

    fn net(s: &str) -> IpNet {
        s.parse().expect("cidr")
    }

    /// Grouping: IPv4 whole, IPv6 by /64, mapped IPv4 as IPv4, custom prefixes.
    #[test]
    fn groups_by_prefix() {
        let c = ClientIp::new();
        assert_eq!(c.group("203.0.113.9".parse().expect("ip")), "203.0.113.9");
        assert_eq!(
            c.group("2001:db8:1:2:aaaa::1".parse().expect("ip")),
            "2001:db8:1:2::/64"
        );
        assert_eq!(c.group("::ffff:1.2.3.4".parse().expect("ip")), "1.2.3.4");
        let c = ClientIp::new()
            .ipv4_prefix(24)
            .and_then(|c| c.ipv6_prefix(128))
            .expect("valid");
        assert_eq!(
            c.group("203.0.113.9".parse().expect("ip")),
            "203.0.113.0/24"
        );
        assert_eq!(c.group("2001:db8::1".parse().expect("ip")), "2001:db8::1");
        assert!(ClientIp::new().ipv4_prefix(33).is_err());
    }

    /// The walk stops at the first untrusted hop from the right and never believes a spoofed
    /// leftmost entry.
    #[test]
    fn walks_from_the_right() {
        let c = ClientIp::new().trusted_proxies([net("10.0.0.0/8")]);
        let ip = |p: &Parts| c.client_ip(p).expect("ip").to_string();
        // untrusted peer: header ignored
        assert_eq!(ip(&parts("198.51.100.1", &["1.1.1.1"])), "198.51.100.1");
        // trusted peer: rightmost untrusted entry, spoofed leftmost ignored
        assert_eq!(
            ip(&parts("10.0.0.1", &["6.6.6.6, 203.0.113.5, 10.0.0.2"])),
            "203.0.113.5"
        );
        // trusted peer without header: the peer
        assert_eq!(ip(&parts("10.0.0.1", &[])), "10.0.0.1");
        // every hop trusted: the leftmost, which is itself trusted
        assert_eq!(
            ip(&parts("10.0.0.1", &["10.9.9.9", "10.0.0.2"])),
            "10.9.9.9"
        );
        // junk left of the client is never read, bytes that are not UTF-8 included (they
        // made the whole line one bad entry: a 400)
        assert_eq!(
            ip(&parts("10.0.0.1", &["junk, 203.0.113.5"])),
            "203.0.113.5"
        );
        let mut raw = parts("10.0.0.1", &[]);
        raw.headers.insert(
            "x-forwarded-for",
            http::HeaderValue::from_bytes(b"\xff\xfe, 203.0.113.5").expect("header bytes"),
        );
        assert_eq!(ip(&raw), "203.0.113.5");
        // junk from a trusted hop is an error
        assert!(matches!(
            c.client_ip(&parts("10.0.0.1", &["203.0.113.5, junk"])),
            Err(KeyError::BadForwardedEntry { .. })
        ));
    }

    /// A trusted proxy passes on whatever the client wrote to the left of the header: a
    /// hostile header of 8,000 entries before the client's address costs the walk the
    /// entries it reads, here one (the whole header was parsed, 8,001 entries, 1.4 ms a
    /// request). Also through two proxies, and with `Forwarded`. Counted, not timed.
    #[test]
    fn a_huge_header_is_read_only_as_far_as_the_client() {
        let mut junk = String::new();
        for i in 0..8_000 {
            junk.push_str(&format!("1.2.{}.{}, ", i / 256 % 256, i % 256));
        }
        let parsed = |c: &ClientIp, name: &'static str, value: String| {
            let (mut p, ()) = http::Request::builder()
                .header(name, value)
                .body(())
                .expect("request")
                .into_parts();
            p.extensions
                .insert(SocketAddr::new("10.0.0.1".parse().expect("ip"), 4000));
            forwarded::PARSED.with(|n| n.set(0));
            let ip = c.client_ip(&p).expect("ip").to_string();
            (ip, forwarded::PARSED.with(std::cell::Cell::get))
        };
        let c = ClientIp::new().trusted_proxies([net("10.0.0.0/8")]);
        assert_eq!(
            parsed(&c, "x-forwarded-for", format!("{junk}203.0.113.5")),
            ("203.0.113.5".to_owned(), 1)
        );
        assert_eq!(
            parsed(
                &c,
                "x-forwarded-for",
                format!("{junk}203.0.113.5, 10.0.0.2")
            ),
            ("203.0.113.5".to_owned(), 2)
        );
        let c = c.proxy_header(ProxyHeader::Forwarded);
        let elements = junk.replace("1.2.", "for=1.2.");
        assert_eq!(
            parsed(&c, "forwarded", format!("{elements}for=203.0.113.5")),
            ("203.0.113.5".to_owned(), 1)
        );
    }

    /// `Forwarded` from a proxy that appends its element to the client's line: a client that
    /// leaves a quote open (`for=6.6.6.6;x="`) named its own address (every request a fresh
    /// key, no limit); now the line is refused.
    #[test]
    fn an_unclosed_quote_names_no_client() {
        let c = ClientIp::new()
            .trusted_proxies([net("10.0.0.0/8")])
            .proxy_header(ProxyHeader::Forwarded);
        let forwarded = |value: &'static str| {
            let (mut p, ()) = http::Request::builder()
                .header("forwarded", value)
                .body(())
                .expect("request")
                .into_parts();
            p.extensions
                .insert(SocketAddr::new("10.0.0.1".parse().expect("ip"), 4000));
            p
        };
        assert_eq!(
            c.client_ip(&forwarded("for=203.0.113.5"))
                .expect("ip")
                .to_string(),
            "203.0.113.5"
        );
        assert!(matches!(
            c.client_ip(&forwarded(r#"for=6.6.6.6;x=", for=203.0.113.5"#)),
            Err(KeyError::BadForwardedEntry { .. })
        ));
    }
}
