//! [`ServerTls`]: `[server] tls_cert`, `tls_key`, `tls_client_ca`, `tls_client_names`, as
//! paths, checked for what goes with what.
//!
//! The config only names the files; they are read when the service starts and whenever they
//! change (`crate::tls`), not here. So `check-config` and a config reload never fail on a
//! certificate being rotated at that moment, and a broken certificate keeps the old one
//! serving instead of refusing the whole config.

use std::path::{Path, PathBuf};

use super::raw::RawConfig;
use super::{ConfigError, FieldError, ListenAddress};

/// The TLS of the TCP listeners (a `unix:` listener is served in plaintext).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTls {
    /// `tls_cert`: the certificate chain (PEM), the server's own first.
    pub cert: PathBuf,
    /// `tls_key`: its private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// `tls_client_ca`: when set, every client must present a certificate that chains to one
    /// of these CAs (PEM), on both listeners (mTLS).
    pub client_ca: Option<PathBuf>,
    /// `tls_client_names`: when not empty, a gRPC client's certificate must also carry one of
    /// these names: a DNS or URI subject alternative name (a SPIFFE ID), or its subject's
    /// common name. The HTTP API's admin calls have their own token.
    pub client_names: Vec<String>,
}

/// `[server]`'s TLS fields: `None` without `tls_cert`; paths taken from `base` (the config
/// file's directory) when relative.
///
/// TLS that no listener would apply is refused, not ignored: with `http` and `grpc` both
/// `unix:` sockets (plaintext), or `tls_client_names` with gRPC on a `unix:` socket or no
/// gRPC listener at all (the names are checked on gRPC only), the
/// client checks the operator wrote would silently not run. So are an empty
/// `tls_client_names` (it checks nothing), a name with `*` (compared exactly, it never
/// matches), and one with whitespace at an end or a control character (no certificate's name
/// has them; a common name may hold a space inside).
pub(super) fn server_tls(
    raw: &RawConfig,
    origin: &str,
    base: &Path,
    http: &ListenAddress,
    grpc: Option<&ListenAddress>,
) -> Result<Option<ServerTls>, ConfigError> {
    let invalid = |field, e| ConfigError::invalid(origin, raw.name_of(field), e);
    let s = &raw.server;
    let path = |field: &'static str, given: &str| {
        if given.is_empty() {
            return Err(invalid(field, FieldError::Empty));
        }
        Ok(base.join(given))
    };
    let names = s.tls_client_names.clone().unwrap_or_default();
    if let Some(i) = names.iter().position(String::is_empty) {
        let field = format!("server.tls_client_names[{i}]");
        return Err(ConfigError::invalid(origin, field, FieldError::Empty));
    }
    if let Some(i) = names.iter().position(|n| n.contains('*')) {
        let field = format!("server.tls_client_names[{i}]");
        let e = FieldError::WildcardName(names[i].clone());
        return Err(ConfigError::invalid(origin, field, e));
    }
    if let Some(i) = names
        .iter()
        .position(|n| n.trim() != n || n.chars().any(char::is_control))
    {
        let field = format!("server.tls_client_names[{i}]");
        let e = FieldError::UnmatchableName(names[i].clone());
        return Err(ConfigError::invalid(origin, field, e));
    }
    let (cert, key) = match (&s.tls_cert, &s.tls_key) {
        (None, None) => {
            if s.tls_client_ca.is_some() {
                return Err(invalid(
                    "server.tls_client_ca",
                    FieldError::Needs("tls_cert"),
                ));
            }
            if s.tls_client_names.is_some() {
                return Err(invalid(
                    "server.tls_client_names",
                    FieldError::Needs("tls_client_ca"),
                ));
            }
            return Ok(None);
        }
        (Some(_), None) => return Err(invalid("server.tls_cert", FieldError::Needs("tls_key"))),
        (None, Some(_)) => return Err(invalid("server.tls_key", FieldError::Needs("tls_cert"))),
        (Some(cert), Some(key)) => (path("server.tls_cert", cert)?, path("server.tls_key", key)?),
    };
    let client_ca = s
        .tls_client_ca
        .as_deref()
        .map(|ca| path("server.tls_client_ca", ca))
        .transpose()?;
    if client_ca.is_none() && s.tls_client_names.is_some() {
        return Err(invalid(
            "server.tls_client_names",
            FieldError::Needs("tls_client_ca"),
        ));
    }
    if s.tls_client_names.is_some() && names.is_empty() {
        return Err(invalid(
            "server.tls_client_names",
            FieldError::NoClientNames,
        ));
    }
    let is_tcp = |a: &ListenAddress| a.tcp().is_some();
    if !is_tcp(http) && !grpc.is_some_and(is_tcp) {
        let listeners = match grpc {
            Some(grpc) => format!("server.http = {http}, server.grpc = {grpc}"),
            None => format!("server.http = {http}, no server.grpc"),
        };
        return Err(invalid(
            "server.tls_cert",
            FieldError::TlsWithoutTcp(listeners),
        ));
    }
    if grpc.is_none() && !names.is_empty() {
        return Err(invalid(
            "server.tls_client_names",
            FieldError::NamesWithoutGrpc,
        ));
    }
    if let Some(grpc) = grpc.filter(|g| !is_tcp(g))
        && !names.is_empty()
    {
        return Err(invalid(
            "server.tls_client_names",
            FieldError::NamesWithoutTlsGrpc(grpc.to_string()),
        ));
    }
    Ok(Some(ServerTls {
        cert,
        key,
        client_ca,
        client_names: names,
    }))
}

/// The default `server.unix_mode`: the owner and its group may connect.
pub const DEFAULT_UNIX_MODE: u32 = 0o660;

/// `server.unix_mode`: permission bits only (`0o660`; a decimal `660` is refused, it is not
/// what was meant).
pub(super) fn unix_mode(raw: &RawConfig, origin: &str) -> Result<u32, ConfigError> {
    match raw.server.unix_mode {
        None => Ok(DEFAULT_UNIX_MODE),
        Some(mode) if mode <= 0o777 => Ok(mode),
        Some(mode) => Err(ConfigError::invalid(
            origin,
            raw.name_of("server.unix_mode"),
            FieldError::NotAMode(mode),
        )),
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, Overrides};

    const LIMIT: &str = "[[limits]]\nname = \"a\"\nalgorithm = \"gcra\"\nlimit = 1\nperiod = \"1s\"\non_store_error = \"deny\"\n";

    fn error(server: &str) -> String {
        let text = format!("[server]\n{server}\n{LIMIT}");
        Config::parse(&text, "/etc/t/t.toml", &Overrides::default())
            .expect_err("invalid")
            .to_string()
    }

    /// Each TLS field that needs another is named, with what it needs; a decimal mode is
    /// refused with the octal form to write.
    #[test]
    fn errors_name_the_field() {
        assert_eq!(
            error("tls_cert = \"c\""),
            "/etc/t/t.toml: server.tls_cert: needs tls_key too"
        );
        assert_eq!(
            error("tls_key = \"k\""),
            "/etc/t/t.toml: server.tls_key: needs tls_cert too"
        );
        assert_eq!(
            error("tls_client_ca = \"ca\""),
            "/etc/t/t.toml: server.tls_client_ca: needs tls_cert too"
        );
        assert_eq!(
            error("tls_cert = \"c\"\ntls_key = \"k\"\ntls_client_names = [\"x\"]"),
            "/etc/t/t.toml: server.tls_client_names: needs tls_client_ca too"
        );
        assert_eq!(
            error("unix_mode = 660"),
            "/etc/t/t.toml: server.unix_mode: 0o1224 is not a file mode: write permission bits in octal, e.g. 0o660"
        );
        assert!(error("grpc = \"unix:\"").contains("server.grpc"));
    }

    /// TLS that would apply to nothing is refused, naming the field: both listeners on
    /// `unix:` sockets (plaintext), names with gRPC on a socket, an empty list of names, a
    /// name with `*` (names are compared exactly). Before, the first two were accepted and
    /// served in plaintext without the client checks, silently.
    #[test]
    fn tls_that_would_check_nothing_is_refused() {
        let tls = "tls_cert = \"c\"\ntls_key = \"k\"\ntls_client_ca = \"ca\"";
        let names = "tls_client_names = [\"envoy.edge.svc\"]";
        let unix = "http = \"unix:/run/t/http.sock\"\ngrpc = \"unix:/run/t/grpc.sock\"";
        let e = error(&format!("{unix}\n{tls}\n{names}"));
        assert!(
            e.starts_with("/etc/t/t.toml: server.tls_cert: TLS is configured but no listener is TCP (server.http = unix:/run/t/http.sock, server.grpc = unix:/run/t/grpc.sock)"),
            "{e}"
        );
        let e = error(&format!("http = \"unix:/run/t/http.sock\"\n{tls}"));
        assert!(e.contains("server.tls_cert: TLS is configured but no listener is TCP (server.http = unix:/run/t/http.sock, no server.grpc)"), "{e}");
        let e = error(&format!("grpc = \"unix:/run/t/grpc.sock\"\n{tls}\n{names}"));
        assert!(
            e.starts_with("/etc/t/t.toml: server.tls_client_names: server.grpc is a unix: socket (unix:/run/t/grpc.sock), served in plaintext: the names would never be checked"),
            "{e}"
        );
        // No gRPC listener: the names (checked on gRPC only) would check nothing.
        let e = error(&format!("{tls}\n{names}"));
        assert!(
            e.starts_with("/etc/t/t.toml: server.tls_client_names: the names are checked on the gRPC listener only, and there is no server.grpc"),
            "{e}"
        );
        let e = error(&format!("{tls}\ntls_client_names = []"));
        assert!(
            e.starts_with("/etc/t/t.toml: server.tls_client_names: an empty list names no client, so it would check nothing"),
            "{e}"
        );
        let e = error(&format!(
            "{tls}\ntls_client_names = [\"envoy\", \"*.edge.svc\"]"
        ));
        assert!(
            e.starts_with("/etc/t/t.toml: server.tls_client_names[1]: \"*.edge.svc\": names are compared exactly, so a `*` would never match"),
            "{e}"
        );
        for bad in [
            r#"" envoy.edge.svc""#,
            r#""envoy.edge.svc\n""#,
            r#""envoy\u0000x""#,
        ] {
            let e = error(&format!(
                "grpc = \"127.0.0.1:8081\"\n{tls}\ntls_client_names = [\"envoy\", {bad}]"
            ));
            assert!(
                e.starts_with("/etc/t/t.toml: server.tls_client_names[1]: ")
                    && e.contains("a name with whitespace at an end or a control character matches no certificate's name"),
                "{bad}: {e}"
            );
        }
        // A common name may hold a space inside.
        let text = format!(
            "[server]\nhttp = \"127.0.0.1:8080\"\ngrpc = \"127.0.0.1:8081\"\n{tls}\ntls_client_names = [\"Envoy Proxy\"]\n{LIMIT}"
        );
        let config = Config::parse(&text, "/etc/t/t.toml", &Overrides::default()).expect("valid");
        assert_eq!(
            config.server.tls.expect("tls").client_names,
            ["Envoy Proxy"]
        );

        // HTTP on a socket, gRPC on TCP: TLS (and the names) apply to gRPC.
        let text = format!(
            "[server]\nhttp = \"unix:/run/t/http.sock\"\ngrpc = \"127.0.0.1:8081\"\n{tls}\n{names}\n{LIMIT}"
        );
        let config = Config::parse(&text, "/etc/t/t.toml", &Overrides::default()).expect("valid");
        assert_eq!(
            config.server.tls.expect("tls").client_names,
            ["envoy.edge.svc"]
        );
    }

    /// Relative paths are taken from the config file's directory; `unix:` addresses parse.
    #[test]
    fn paths_are_relative_to_the_file() {
        let text = format!(
            "[server]\ngrpc = \"unix:/run/t.sock\"\nunix_mode = 0o600\ntls_cert = \"c.pem\"\ntls_key = \"/k.pem\"\n{LIMIT}"
        );
        let config = Config::parse(&text, "/etc/t/t.toml", &Overrides::default()).expect("valid");
        let tls = config.server.tls.expect("tls");
        assert_eq!(tls.cert, std::path::Path::new("/etc/t/c.pem"));
        assert_eq!(tls.key, std::path::Path::new("/k.pem"));
        assert_eq!(config.server.unix_mode, 0o600);
        assert_eq!(
            config.server.grpc.map(|a| a.to_string()).as_deref(),
            Some("unix:/run/t.sock")
        );
    }
}
