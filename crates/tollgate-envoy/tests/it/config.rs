//! The `[envoy]` section: parsing and validation against the limits, naming the field.

use std::sync::Arc;

use tollgate::{Algorithm, Limit, Limiter, MemoryStore, Quota};
use tollgate_envoy::{EnvoyRules, Snapshot};

use crate::support::rules;

fn limiter() -> Arc<Limiter<MemoryStore>> {
    let limit = |name: &str, key: &[&str]| {
        Limit::new(name, Algorithm::Gcra, Quota::per_second(5).expect("quota"))
            .expect("limit")
            .keyed_by(key.iter().copied())
            .expect("key")
    };
    Arc::new(
        Limiter::builder(MemoryStore::new())
            .limit(limit("per_ip", &["ip"]))
            .limit(limit("per_user_route", &["user", "route"]))
            .build()
            .expect("limiter"),
    )
}

fn error_for(toml_text: &str) -> tollgate_envoy::RulesError {
    Snapshot::new(&rules(toml_text), limiter()).expect_err("invalid rules")
}

/// A valid section compiles; defaults are off.
#[test]
fn valid_rules_compile() {
    let r = rules(
        r#"
[[envoy.rules]]
domain = "edge"
limit = "per_user_route"
descriptor = [{ key = "user_id", part = "user" }, { key = "path", part = "route" }, { key = "method", value = "POST" }]
"#,
    );
    assert!(!r.response_headers);
    assert!(!r.rules[0].shadow);
    let snapshot = Snapshot::new(&r, limiter()).expect("valid");
    assert!(!snapshot.response_headers());
    assert_eq!(EnvoyRules::default().rules.len(), 0);
}

/// Unknown fields are refused by the parser, which names them.
#[test]
fn unknown_fields_are_refused() {
    #[derive(Debug, serde::Deserialize)]
    struct File {
        #[allow(dead_code)]
        envoy: EnvoyRules,
    }
    for (text, field) in [
        ("[envoy]\nheaders = true\n", "headers"),
        (
            "[[envoy.rules]]\ndomain = \"d\"\nlimit = \"per_ip\"\ndescriptor = []\nshaddow = true\n",
            "shaddow",
        ),
        (
            "[[envoy.rules]]\ndomain = \"d\"\nlimit = \"per_ip\"\ndescriptor = [{ key = \"k\", prt = \"ip\" }]\n",
            "prt",
        ),
    ] {
        let err = toml::from_str::<File>(text).expect_err(text).to_string();
        assert!(err.contains(field), "{err}");
    }
}

/// Each invalid rule is refused with the path of the offending field.
#[test]
fn invalid_rules_name_their_field() {
    let cases = [
        (
            r#"[[envoy.rules]]
domain = ""
limit = "per_ip"
descriptor = [{ key = "ip", part = "ip" }]"#,
            "envoy.rules[0].domain",
        ),
        (
            r#"[[envoy.rules]]
domain = "d"
limit = "per_ip"
descriptor = []"#,
            "envoy.rules[0].descriptor",
        ),
        (
            r#"[[envoy.rules]]
domain = "d"
limit = "per_ip"
descriptor = [{ key = "ip", part = "ip" }]
[[envoy.rules]]
domain = "d"
limit = "nope"
descriptor = [{ key = "ip", part = "ip" }]"#,
            "envoy.rules[1].limit",
        ),
        (
            r#"[[envoy.rules]]
domain = "d"
limit = "per_ip"
descriptor = [{ key = "ip", part = "user" }]"#,
            "envoy.rules[0].descriptor[0].part",
        ),
        (
            r#"[[envoy.rules]]
domain = "d"
limit = "per_user_route"
descriptor = [{ key = "u", part = "user" }, { key = "v", part = "user" }]"#,
            "envoy.rules[0].descriptor[1].part",
        ),
        (
            r#"[[envoy.rules]]
domain = "d"
limit = "per_user_route"
descriptor = [{ key = "u", part = "user" }]"#,
            "envoy.rules[0].descriptor",
        ),
        (
            r#"[[envoy.rules]]
domain = "d"
limit = "per_ip"
descriptor = [{ key = "", part = "ip" }]"#,
            "envoy.rules[0].descriptor[0].key",
        ),
    ];
    for (text, field) in cases {
        let err = error_for(text);
        assert_eq!(err.field, field, "{text}\n{err}");
        assert!(err.to_string().starts_with(field), "{err}");
    }
}

/// The limit headers' names must be HTTP header names; the error names the field. Unset
/// names take the reference's defaults; names are checked even while the headers are off.
#[test]
fn limit_header_names_are_checked() {
    let e = error_for("[envoy]\nlimit_response_headers = true\nlimit_reset_header = \"X Reset\"\n");
    assert_eq!(e.field, "envoy.limit_reset_header", "{e}");
    assert!(e.reason.contains("\"X Reset\""), "{e}");
    let e = error_for("[envoy]\nlimit_response_headers = true\nlimit_limit_header = \"\"\n");
    assert_eq!(e.field, "envoy.limit_limit_header", "{e}");
    Snapshot::new(
        &rules("[envoy]\nlimit_response_headers = true\n"),
        limiter(),
    )
    .expect("defaults are valid");
    let e = error_for("[envoy]\nlimit_remaining_header = \"a:b\"\n");
    assert_eq!(e.field, "envoy.limit_remaining_header", "{e}");
}

/// `Snapshot::limit_for` answers what a call would decide a descriptor by: the first
/// `[[envoy.rules]]` rule whose shape it has (fixed values must match), with the key parts
/// its entries give; nothing for another shape or an unknown domain. `domains` lists them.
#[test]
fn limit_for_names_the_limit_and_key_a_descriptor_matches() {
    let r = rules(
        r#"
[[envoy.rules]]
domain = "edge"
limit = "per_user_route"
descriptor = [{ key = "user_id", part = "user" }, { key = "path", part = "route" }, { key = "method", value = "POST" }]

[[envoy.rules]]
domain = "edge"
limit = "per_ip"
descriptor = [{ key = "remote_address", part = "ip" }]

[[envoy.rules]]
domain = "api"
limit = "per_ip"
descriptor = [{ key = "ip", part = "ip" }]
"#,
    );
    let snapshot = Snapshot::new(&r, limiter()).expect("valid");
    assert_eq!(snapshot.domains(), ["api", "edge"]);
    let found = snapshot
        .limit_for(
            "edge",
            &[("user_id", "42"), ("path", "/x"), ("method", "POST")],
        )
        .expect("the first rule");
    assert_eq!(&*found.0, "per_user_route");
    assert_eq!(
        found.1,
        [
            ("user".to_owned(), "42".to_owned()),
            ("route".to_owned(), "/x".to_owned())
        ]
    );
    assert!(
        snapshot
            .limit_for(
                "edge",
                &[("user_id", "42"), ("path", "/x"), ("method", "GET")]
            )
            .is_none(),
        "a fixed value that differs matches nothing"
    );
    let (limit, key) = snapshot
        .limit_for("edge", &[("remote_address", "10.0.0.1")])
        .expect("the second rule");
    assert_eq!(
        (&*limit, key),
        ("per_ip", vec![("ip".to_owned(), "10.0.0.1".to_owned())])
    );
    assert!(
        snapshot
            .limit_for("api", &[("remote_address", "10.0.0.1")])
            .is_none()
    );
    assert!(snapshot.limit_for("nowhere", &[("ip", "1")]).is_none());
}
