//! Config errors name the file, the field and the reason; secrets never show.

use tollgate_server::config::{Backend, Config, ConfigError, FieldError, Overrides};

fn limit(extra: &str) -> String {
    format!(
        "[[limits]]\nname = \"ok\"\nalgorithm = \"gcra\"\nlimit = 1\nperiod = \"1s\"\non_store_error = \"deny\"\n\n[[limits]]\n{extra}\n"
    )
}

const GOOD: &str = "name = \"b\"\nalgorithm = \"fixed_window\"\nlimit = 10\nperiod = \"1m\"\non_store_error = \"allow\"";

fn error(text: &str) -> (Option<String>, String) {
    let err = Config::parse(text, "cfg.toml", &Overrides::default()).expect_err(text);
    (err.field().map(str::to_owned), err.to_string())
}

/// Each invalid field is named as written in the file, with the reason.
#[test]
fn errors_name_the_field() {
    let cases: &[(String, &str, &str)] = &[
        (
            limit(&GOOD.replace("\"1m\"", "\"0s\"")),
            "limits[1].period",
            "must be at least 1ms",
        ),
        (
            limit(&GOOD.replace("\"1m\"", "\"1 minute\"")),
            "limits[1].period",
            "is not a duration",
        ),
        (
            limit(&GOOD.replace("limit = 10", "limit = 0")),
            "limits[1].limit",
            "must be at least 1",
        ),
        (
            limit(
                &GOOD
                    .replace("limit = 10", "limit = 1000000000")
                    .replace("\"1m\"", "\"1s\""),
            ),
            "limits[1].limit",
            "one unit per microsecond",
        ),
        (
            limit(&format!("{GOOD}\nkey = [\"user\", \"user\"]")),
            "limits[1].key",
            "is named twice",
        ),
        (
            "[store]\ndeny_cache_entries = 0\n".to_owned() + &limit(GOOD),
            "store.deny_cache_entries",
            "must be at least 1",
        ),
        (
            "[store]\nmax_batch = 0\n".to_owned() + &limit(GOOD),
            "store.max_batch",
            "must be at least 1",
        ),
        (
            "[store]\nmax_batch = 1025\n".to_owned() + &limit(GOOD),
            "store.max_batch",
            "must be at most 1024",
        ),
        (
            limit(&GOOD.replace("fixed_window", "leaky")),
            "limits[1].algorithm",
            "unknown algorithm",
        ),
        (
            limit(&GOOD.replace("\"b\"", "\"b c\"")),
            "limits[1].name",
            "is invalid",
        ),
        (
            limit(&GOOD.replace("\"b\"", "\"ok\"")),
            "limits[1].name",
            "already the name of limits[0]",
        ),
        // The Envoy limit overrides' counters: a limit of that name would share them.
        (
            limit(&GOOD.replace("\"b\"", "\"envoy.override.minute\"")),
            "limits[1].name",
            "is reserved",
        ),
        (
            limit(&GOOD.replace("on_store_error = \"allow\"", "")),
            "limits[1]",
            "missing field `on_store_error`",
        ),
        (
            limit(&GOOD.replace("\"allow\"", "\"maybe\"")),
            "limits[1].on_store_error",
            "unknown variant `maybe`",
        ),
        (
            limit(&format!("{GOOD}\nburst = 5")),
            "limits[1].burst",
            "only applies to token_bucket and gcra",
        ),
        (
            limit(&format!("{GOOD}\nbuckets = 5")),
            "limits[1].buckets",
            "only applies to sliding_window",
        ),
        (
            limit(&format!(
                "{}\nbuckets = 0",
                GOOD.replace("fixed_window", "sliding_window")
            )),
            "limits[1].buckets",
            "must be at least 1",
        ),
        (
            limit(&format!(
                "{}\nburst = 0",
                GOOD.replace("fixed_window", "gcra")
            )),
            "limits[1].burst",
            "must be at least 1",
        ),
        (
            limit(&format!("{GOOD}\nkey = [\"us er\"]")),
            "limits[1].key",
            "is invalid",
        ),
        (
            limit(&format!("{GOOD}\nlimits = 3")),
            "limits[1].limits",
            "unknown field `limits`",
        ),
        (
            limit(&GOOD.replace("limit = 10", "limit = \"10\"")),
            "limits[1].limit",
            "invalid type",
        ),
        (
            "[server]\nhttp = \"localhost\"".into(),
            "server.http",
            "not a listen address",
        ),
        (
            "[server]\nadmin_token = \"short\"".into(),
            "server.admin_token",
            "at least 8 characters",
        ),
        // Never sendable in a bearer header: every reset would answer 401.
        (
            "[server]\nadmin_token = \"k8s-secret-token\\n\"".into(),
            "server.admin_token",
            "only visible ASCII",
        ),
        (
            "[server]\nadmin_token = \" padded-token \"".into(),
            "server.admin_token",
            "only visible ASCII",
        ),
        (
            "[server]\nadmin_token = \"pässwörd-token\"".into(),
            "server.admin_token",
            "only visible ASCII",
        ),
        (
            "[server]\nport = 1".into(),
            "server.port",
            "unknown field `port`",
        ),
        (
            "[store]\nredis = \"localhost:6379\"".into(),
            "store.redis",
            "is not a URL",
        ),
        (
            "[store]\nredis = \"redis://a\"\ncluster = [\"redis://b\"]".into(),
            "store",
            "not both",
        ),
        (
            "[store]\ncluster = []".into(),
            "store.cluster",
            "at least one node",
        ),
        (
            "[store]\ncluster = [\"redis://a:1\", \"http://b\"]".into(),
            "store.cluster[1]",
            "scheme",
        ),
        (
            "[store]\ntimeout = \"0ms\"".into(),
            "store.timeout",
            "between 1ms and 30s",
        ),
        (
            "[store]\nprefix = \"a b\"".into(),
            "store.prefix",
            "is invalid",
        ),
        (
            "[server]\nheader_timeout = \"0ms\"".into(),
            "server.header_timeout",
            "must be between 1ms and 1h",
        ),
        (
            "[server]\nidle_timeout = \"2h\"".into(),
            "server.idle_timeout",
            "must be between 1ms and 1h",
        ),
        (
            "[server]\nmax_acquire_wait = \"2h\"".into(),
            "server.max_acquire_wait",
            "must be between 1ms and 1h",
        ),
        (
            "[server]\nbody_timeout = \"soon\"".into(),
            "server.body_timeout",
            "is not a duration",
        ),
        (
            "[server]\nmax_connections = 0".into(),
            "server.max_connections",
            "must be at least 1",
        ),
        ("[stor]\n".into(), "stor", "unknown field `stor`"),
        (
            limit(&format!("{GOOD}\nmode = \"approximate\"")),
            "limits[1].mode",
            "is not a mode",
        ),
        (
            limit(&format!(
                "{}\nmode = \"lease\"",
                GOOD.replace("fixed_window", "gcra")
            )),
            "limits[1].mode",
            "fixed_window algorithm only",
        ),
        (
            limit(&format!("{GOOD}\nlease = 5")),
            "limits[1].lease",
            "only applies to mode = \"lease\"",
        ),
        (
            limit(&format!("{GOOD}\nmode = \"exact\"\nlease_ttl = \"1s\"")),
            "limits[1].lease_ttl",
            "only applies to mode = \"lease\"",
        ),
        (
            limit(&format!("{GOOD}\nmode = \"lease\"\nlease = 0")),
            "limits[1].lease",
            "must be at least 1",
        ),
        (
            limit(&format!("{GOOD}\nmode = \"lease\"\nlease = 11")),
            "limits[1].lease",
            "must be at most the limit (10)",
        ),
        (
            limit(&format!("{GOOD}\nmode = \"lease\"\nlease_ttl = \"0s\"")),
            "limits[1].lease_ttl",
            "must be at least 1ms",
        ),
    ];
    for (text, field, reason) in cases {
        let (got_field, message) = error(text);
        assert_eq!(got_field.as_deref(), Some(*field), "{message}");
        assert!(
            message.starts_with(&format!("cfg.toml: {field}: ")),
            "{message}"
        );
        assert!(message.contains(reason), "expected {reason:?} in {message}");
    }
}

/// `mode = "lease"` with its settings builds a lease-mode limit; without them, defaults.
#[test]
fn lease_mode_is_read() {
    let text = limit(&format!(
        "{GOOD}\nmode = \"lease\"\nlease = 4\nlease_ttl = \"250ms\""
    ));
    let config = Config::parse(&text, "cfg.toml", &Overrides::default()).expect("valid");
    let lease = config.limits[1].limit.lease_mode().expect("lease mode");
    assert_eq!(lease.fixed_units(), Some(4));
    assert_eq!(lease.lease_ttl(), std::time::Duration::from_millis(250));
    let text = limit(&format!("{GOOD}\nmode = \"lease\""));
    let config = Config::parse(&text, "cfg.toml", &Overrides::default()).expect("valid");
    let lease = config.limits[1].limit.lease_mode().expect("lease mode");
    assert_eq!(lease.fixed_units(), None);
    assert_eq!(lease.lease_ttl(), tollgate::DEFAULT_LEASE_TTL);
    let text = limit(&format!("{GOOD}\nmode = \"exact\""));
    let config = Config::parse(&text, "cfg.toml", &Overrides::default()).expect("valid");
    assert!(config.limits[1].limit.lease_mode().is_none());
}

/// A file without `[[limits]]` is refused: an empty file (one truncated to nothing) or one
/// with `[server]` only would leave a service that answers every check `unknown limit`.
#[test]
fn a_file_without_limits_is_refused() {
    for text in [
        "",
        "\n# nothing yet\n",
        "[server]\nhttp = \"127.0.0.1:0\"\n",
    ] {
        let (field, message) = error(text);
        assert_eq!(field.as_deref(), Some("limits"), "{text:?}: {message}");
        assert_eq!(
            message,
            "cfg.toml: limits: no [[limits]] defined; a config file needs at least one limit",
            "{text:?}"
        );
    }
}

/// An error keeps its typed cause, reachable through `source()`: the core's `LimitError`,
/// the address parser's error (for a bad environment override too), TOML's error.
#[test]
fn errors_keep_their_cause() {
    let text = limit(&GOOD.replace("limit = 10", "limit = 0"));
    let err = Config::parse(&text, "cfg.toml", &Overrides::default()).expect_err("limit 0");
    let core = std::error::Error::source(&err)
        .and_then(std::error::Error::source)
        .and_then(|e| e.downcast_ref::<tollgate::LimitError>());
    assert!(
        matches!(core, Some(tollgate::LimitError::Zero { field: "limit" })),
        "{err:?}"
    );

    let bad = Overrides {
        http: Some("nowhere".into()),
        ..Overrides::default()
    };
    let err = Config::parse(&limit(GOOD), "cfg.toml", &bad).expect_err("bad env");
    assert!(
        matches!(&err, ConfigError::Invalid { source: FieldError::Address(e), .. } if e.text == "nowhere"),
        "{err:?}"
    );
    let parser = std::error::Error::source(&err).and_then(std::error::Error::source);
    assert!(
        parser.is_some_and(|e| e.is::<std::net::AddrParseError>()),
        "{err:?}"
    );

    let err = Config::parse("[server\n", "cfg.toml", &Overrides::default()).expect_err("syntax");
    assert!(
        matches!(
            &err,
            ConfigError::Invalid {
                source: FieldError::Toml(_),
                ..
            }
        ),
        "{err:?}"
    );
}

/// A TOML syntax error names the file and the line.
#[test]
fn syntax_errors_name_the_line() {
    let (_, message) = error("[server]\nhttp = \"127.0.0.1:1\"\nadmin_token = \n");
    assert!(message.starts_with("cfg.toml: "), "{message}");
    assert!(message.contains("(line 3)"), "{message}");
}

/// A secret written as a number (no quotes) is refused naming its field, without its value,
/// which serde's own message quoted into the log and `check-config`'s output.
#[test]
fn a_secret_of_the_wrong_type_is_not_quoted() {
    for (text, field) in [
        (
            "[server]\nadmin_token = 98765432123\n",
            "server.admin_token",
        ),
        (
            "[store]\nredis = \"redis://cache\"\npassword = 98765432123\n",
            "store.password",
        ),
        (
            "[store]\nsentinel = [\"redis://s1:26379\"]\nsentinel_master = \"m\"\n\
             sentinel_password = 98765.4321\n",
            "store.sentinel_password",
        ),
    ] {
        let (named, message) = error(&format!("{text}{}", limit(GOOD)));
        assert_eq!(named.as_deref(), Some(field), "{message}");
        assert!(
            !message.contains("98765") && message.contains("a string in quotes"),
            "{message}"
        );
    }
}

/// `server.grpc` on `server.http`'s port or socket (or on the same port of the unspecified
/// address) is refused naming `server.grpc`: `check-config` said "ok", and `serve` then
/// failed to bind. Port 0 (a free port each) and another port are fine.
#[test]
fn grpc_on_the_http_listener_is_refused() {
    for (http, grpc) in [
        ("127.0.0.1:18434", "127.0.0.1:18434"),
        ("0.0.0.0:18434", "127.0.0.1:18434"),
        ("unix:/tmp/t.sock", "unix:/tmp/t.sock"),
    ] {
        let text = format!(
            "[server]\nhttp = {http:?}\ngrpc = {grpc:?}\n{}",
            limit(GOOD)
        );
        let (field, message) = error(&text);
        assert_eq!(field.as_deref(), Some("server.grpc"), "{message}");
        assert!(message.contains("where server.http listens"), "{message}");
    }
    for (http, grpc) in [
        ("127.0.0.1:0", "127.0.0.1:0"),
        ("127.0.0.1:18434", "127.0.0.1:18435"),
        ("127.0.0.1:18434", "127.0.0.2:18434"),
    ] {
        let text = format!(
            "[server]\nhttp = {http:?}\ngrpc = {grpc:?}\n{}",
            limit(GOOD)
        );
        Config::parse(&text, "cfg.toml", &Overrides::default()).expect("distinct listeners");
    }
}

/// A key written twice is named with its table (the parser names no field for it), on its
/// own line.
#[test]
fn a_key_written_twice_is_named() {
    let (field, message) = error("[server]\nhttp = \"127.0.0.1:1\"\nhttp = \"127.0.0.1:2\"\n");
    assert_eq!(field.as_deref(), Some("server.http"), "{message}");
    assert!(message.contains("duplicate key"), "{message}");
    assert!(message.contains("(line 3)"), "{message}");
    let twice = format!("{}name = \"again\"\n", limit(GOOD));
    let (field, message) = error(&twice);
    assert_eq!(field.as_deref(), Some("limits[1].name"), "{message}");
}

/// An error at a line's start (a misspelt key) names that line; it named the one before.
#[test]
fn an_error_at_a_lines_start_names_that_line() {
    let (field, message) = error(&format!("[server]\nhtp = \"x\"\n{}", limit(GOOD)));
    assert_eq!(field.as_deref(), Some("server.htp"), "{message}");
    assert!(message.contains("(line 2)"), "{message}");
}

/// `store.cluster` or `store.sentinel` written as a string, not a list, is refused without
/// quoting it: a URL may hold a password, and serde's message quoted it.
#[test]
fn a_url_list_written_as_a_string_is_not_quoted() {
    for field in ["cluster", "sentinel"] {
        let text = format!(
            "[store]\n{field} = \"redis://:S3CRETpw@127.0.0.1:7000\"\n{}",
            limit(GOOD)
        );
        let (named, message) = error(&text);
        assert_eq!(
            named.as_deref(),
            Some(format!("store.{field}").as_str()),
            "{message}"
        );
        assert!(
            !message.contains("S3CRET") && message.contains("a list of URLs"),
            "{message}"
        );
    }
}

/// Defaults: memory store, 50 ms timeout, `tollgate` prefix, 127.0.0.1:8080, the `[server]`
/// timeouts (a partial request closed within 10 s, drain within 20 s); `key` absent
/// means one global key.
#[test]
fn defaults() {
    let config = Config::parse(&limit(GOOD), "cfg.toml", &Overrides::default()).expect("valid");
    assert_eq!(config.store.backend, Backend::Memory);
    assert_eq!(config.store.timeout, std::time::Duration::from_millis(50));
    assert_eq!(config.store.namespace.prefix(), "tollgate");
    assert_eq!(
        config.store.max_batch,
        Some(tollgate_redis::DEFAULT_MAX_BATCH),
        "coalescing on by default"
    );
    let off = format!("[store]\ncoalesce = false\nmax_batch = 8\n{}", limit(GOOD));
    let off = Config::parse(&off, "cfg.toml", &Overrides::default()).expect("valid");
    assert_eq!(off.store.max_batch, None);
    let eight = format!("[store]\nmax_batch = 8\n{}", limit(GOOD));
    let eight = Config::parse(&eight, "cfg.toml", &Overrides::default()).expect("valid");
    assert_eq!(eight.store.max_batch, Some(8));
    assert_eq!(config.server.http.to_string(), "127.0.0.1:8080");
    let s = &config.server;
    let secs = std::time::Duration::from_secs;
    assert_eq!(
        (s.header_timeout, s.body_timeout, s.idle_timeout),
        (secs(10), secs(10), secs(60))
    );
    assert_eq!((s.max_connections, s.shutdown_timeout), (4096, secs(20)));
    assert_eq!(s.max_acquire_wait, secs(60));
    assert_eq!(config.limits[1].limit.key_parts(), Some(&[][..]));
    assert!(!config.limits[1].shadow);
}

/// Environment overrides replace the file's values (one Redis replaces the file's cluster),
/// and a bad one is named by its variable.
#[test]
fn environment_overrides() {
    let text = format!(
        "[server]\nhttp = \"127.0.0.1:1\"\n[store]\ncluster = [\"redis://a:1\"]\n{}",
        limit(GOOD)
    );
    let text = text.as_str();
    let overrides = Overrides {
        http: Some("0.0.0.0:9000".into()),
        grpc: Some("0.0.0.0:9001".into()),
        redis_url: Some("redis://:pw-in-env@cache:6380/1".into()),
        admin_token: Some("from-the-environment".into()),
        ..Overrides::default()
    };
    let config = Config::parse(text, "cfg.toml", &overrides).expect("valid");
    assert_eq!(config.server.http.to_string(), "0.0.0.0:9000");
    assert_eq!(
        config.server.grpc.map(|a| a.to_string()).as_deref(),
        Some("0.0.0.0:9001")
    );
    assert!(
        matches!(&config.store.backend, Backend::Redis(url) if url.expose() == "redis://:pw-in-env@cache:6380/1")
    );
    assert_eq!(
        config.server.admin_token.as_ref().map(|t| t.expose()),
        Some("from-the-environment")
    );

    let bad_values = [
        Overrides {
            http: Some("nowhere".into()),
            ..Overrides::default()
        },
        Overrides {
            grpc: Some("nowhere".into()),
            ..Overrides::default()
        },
        Overrides {
            redis_url: Some("http://cache".into()),
            ..Overrides::default()
        },
        Overrides {
            admin_token: Some("short".into()),
            ..Overrides::default()
        },
    ];
    let variables = [
        "TOLLGATE_HTTP",
        "TOLLGATE_GRPC",
        "TOLLGATE_REDIS_URL",
        "TOLLGATE_ADMIN_TOKEN",
    ];
    for (bad, variable) in bad_values.iter().zip(variables) {
        let err = Config::parse(text, "cfg.toml", bad).expect_err(variable);
        assert_eq!(err.field(), Some(variable), "{err}");
        assert!(
            err.to_string()
                .starts_with(&format!("cfg.toml: {variable}: ")),
            "{err}"
        );
    }
}

/// Neither the Redis password nor the admin token appears in Debug output.
#[test]
fn secrets_are_redacted() {
    let text = format!(
        "[server]\nadmin_token = \"token-xyz-123\"\n[store]\nredis = \"redis://user:pa55word@cache:6379\"\n{}",
        limit(GOOD)
    );
    let config = Config::parse(&text, "cfg.toml", &Overrides::default()).expect("valid");
    let debug = format!("{config:?}");
    assert!(!debug.contains("pa55word"), "{debug}");
    assert!(!debug.contains("token-xyz-123"), "{debug}");
    assert!(debug.contains("redis://user:***@cache:6379"), "{debug}");
}

/// A Redis URL of the right shape that the Redis client refuses (a bad database number, a URL
/// that does not parse) is a config error naming its field, or the variable that replaced it,
/// never quoting the password; before, it passed and `serve` took it for a Redis down for ever.
#[test]
fn urls_the_redis_client_refuses_name_their_field() {
    let bad = [
        (
            "redis://:pw-hidden@127.0.0.1:1/abc",
            "Invalid database number",
        ),
        ("redis://u:pw-hidden@[::1", "Redis URL did not parse"),
        ("redis://u:pw-hidden ret@h ost:1", "Redis URL did not parse"),
    ];
    let good = "redis://127.0.0.1:1";
    for (url, reason) in bad {
        let files = [
            ("store.redis", format!("[store]\nredis = \"{url}\"\n")),
            (
                "store.cluster[1]",
                format!("[store]\ncluster = [\"{good}\", \"{url}\"]\n"),
            ),
            (
                "store.sentinel[0]",
                format!("[store]\nsentinel = [\"{url}\"]\nsentinel_master = \"m\"\n"),
            ),
        ];
        for (field, store) in files {
            let (named, message) = error(&format!("{store}{}", limit(GOOD)));
            assert_eq!(named.as_deref(), Some(field), "{url}: {message}");
            assert!(
                message.starts_with(&format!("cfg.toml: {field}: ")),
                "{url}: {message}"
            );
            assert!(message.contains(reason), "{url}: {message}");
            assert!(!message.contains("pw-hidden"), "{url}: {message}");
        }
        let overrides = Overrides {
            redis_url: Some(url.into()),
            ..Overrides::default()
        };
        let err = Config::parse(&limit(GOOD), "cfg.toml", &overrides).expect_err(url);
        assert_eq!(err.field(), Some("TOLLGATE_REDIS_URL"), "{err}");
        assert!(err.to_string().contains(reason), "{err}");
        assert!(!err.to_string().contains("pw-hidden"), "{err}");
    }
}

/// The shipped example is valid.
#[test]
fn shipped_example_is_valid() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/tollgate.toml");
    let config = Config::load(std::path::Path::new(path), &Overrides::default())
        .expect("examples/tollgate.toml");
    assert!(config.limits.len() >= 3);
    assert_eq!(config.store.backend, Backend::Memory);
    assert!(config.server.grpc.is_some(), "the example serves gRPC");
    assert!(config.envoy.rules.len() >= 2, "the example has Envoy rules");
}

/// `[store]`'s TLS, credentials and Sentinel fields: each mistake names its field, files are
/// read relative to the config file, and no password or private key reaches `Debug`.
#[test]
fn redis_connection_fields_are_checked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let origin = dir.path().join("cfg.toml");
    let origin = origin.to_str().expect("utf-8 path");
    std::fs::write(
        dir.path().join("ca.pem"),
        "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
    )
    .expect("write");
    std::fs::write(
        dir.path().join("key.pem"),
        "-----BEGIN PRIVATE KEY-----\nsecret-key-bytes\n-----END PRIVATE KEY-----\n",
    )
    .expect("write");
    std::fs::write(dir.path().join("not.pem"), "hello").expect("write");
    std::fs::write(dir.path().join("pw"), "from-a-file\n").expect("write");
    std::fs::write(dir.path().join("empty"), "\n").expect("write");
    let parse = |store: &str| {
        Config::parse(
            &format!("[store]\n{store}\n{}", limit(GOOD)),
            origin,
            &Overrides::default(),
        )
    };
    let tls = "redis = \"rediss://cache:6380\"\n";
    let cases: &[(String, &str, &str)] = &[
        (
            format!("{tls}tls_cert = \"ca.pem\""),
            "store.tls_cert",
            "needs tls_key too",
        ),
        (
            format!("{tls}tls_key = \"key.pem\""),
            "store.tls_key",
            "needs tls_cert too",
        ),
        (
            format!("{tls}tls_ca = \"missing.pem\""),
            "store.tls_ca",
            "cannot read",
        ),
        (
            format!("{tls}tls_ca = \"not.pem\""),
            "store.tls_ca",
            "holds no PEM certificate",
        ),
        (
            format!("{tls}tls_cert = \"ca.pem\"\ntls_key = \"ca.pem\""),
            "store.tls_key",
            "holds no PEM private key",
        ),
        (
            "redis = \"redis://cache\"\ntls_ca = \"ca.pem\"".to_owned(),
            "store.tls_ca",
            "use rediss://",
        ),
        (
            "redis = \"redis://cache\"\ntls_insecure = true".to_owned(),
            "store.tls_insecure",
            "use rediss://",
        ),
        (
            format!("{tls}password = \"x\"\npassword_file = \"pw\""),
            "store.password",
            "not both",
        ),
        (
            format!("{tls}password_file = \"empty\""),
            "store.password_file",
            "must not be empty",
        ),
        (
            "sentinel = [\"redis://s:26379\"]".to_owned(),
            "store.sentinel",
            "needs sentinel_master",
        ),
        (
            "sentinel = []\nsentinel_master = \"m\"".to_owned(),
            "store.sentinel",
            "at least one",
        ),
        (
            "redis = \"redis://cache\"\nsentinel_master = \"m\"".to_owned(),
            "store.sentinel_master",
            "needs sentinel",
        ),
        (
            "redis = \"redis://c\"\nsentinel = [\"redis://s:26379\"]\nsentinel_master = \"m\""
                .to_owned(),
            "store",
            "not several",
        ),
        (
            "username = \"u\"".to_owned(),
            "store.username",
            "needs redis, cluster or sentinel",
        ),
    ];
    for (store, field, reason) in cases {
        let err = parse(store).expect_err(store);
        assert_eq!(err.field(), Some(*field), "{store}: {err}");
        assert!(err.to_string().contains(reason), "{store}: {err}");
    }

    let config = parse(&format!(
        "{tls}tls_ca = \"ca.pem\"\ntls_cert = \"ca.pem\"\ntls_key = \"key.pem\"\nusername = \"app\"\npassword_file = \"pw\""
    ))
    .expect("valid");
    let c = &config.store.connection;
    assert_eq!(
        c.password.as_ref().map(|p| p.expose()),
        Some("from-a-file"),
        "the newline is not the password's"
    );
    assert_eq!(c.username.as_deref(), Some("app"));
    assert!(c.tls_ca.is_some() && c.tls_client.is_some());
    let debug = format!("{config:?}");
    assert!(
        !debug.contains("from-a-file") && !debug.contains("secret-key-bytes"),
        "{debug}"
    );

    let config = parse("sentinel = [\"redis://s1:26379\", \"redis://:sentinel-pw@s2:26379\"]\nsentinel_master = \"mymaster\"\nsentinel_password = \"sp\"")
        .expect("valid");
    assert!(
        matches!(&config.store.backend, Backend::Sentinel { master, sentinels } if master == "mymaster" && sentinels.len() == 2)
    );
    assert_eq!(config.store.backend.name(), "redis_sentinel");
    let debug = format!("{config:?}");
    assert!(
        !debug.contains("sentinel-pw") && !debug.contains("\"sp\""),
        "{debug}"
    );

    // The environment's password replaces the file's, whichever way the file gave it.
    let overrides = Overrides {
        redis_password: Some("from-env".into()),
        ..Overrides::default()
    };
    let text = format!("[store]\n{tls}password_file = \"pw\"\n{}", limit(GOOD));
    let config = Config::parse(&text, origin, &overrides).expect("valid");
    assert_eq!(
        config
            .store
            .connection
            .password
            .as_ref()
            .map(|p| p.expose()),
        Some("from-env")
    );
}
