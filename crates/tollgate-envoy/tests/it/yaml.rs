//! The loader of the reference service's YAML files: every field read, every refusal naming
//! the file and the path in it, directory rules, generated limit names.

use std::path::Path;
use std::time::Duration;

use tollgate::{Algorithm, OnStoreError};
use tollgate_envoy::{ImportError, Unit, load_dir, parse_file};

fn parse(text: &str) -> Result<tollgate_envoy::Domain, ImportError> {
    parse_file(text, Path::new("conf/a.yaml"))
}

/// The refusal of `text`: (path in the file, reason); the file is always named.
fn refusal(text: &str) -> (String, String) {
    let e = parse(text).expect_err("refused");
    assert_eq!(e.file(), Path::new("conf/a.yaml"), "{e}");
    assert!(e.to_string().starts_with("conf/a.yaml: "), "{e}");
    match e {
        ImportError::Invalid { path, reason, .. } => (path, reason),
        other => panic!("not a validation error: {other}"),
    }
}

/// Every field of the format is read into the tree.
#[test]
fn every_field_is_read() {
    let d = parse(
        r#"
domain: shop
descriptors:
  - key: route
    value: "/files/*"
    share_threshold: true
    shadow_mode: true
    detailed_metric: true
    value_to_metric: true
    metadata: { owner: team-a }
    rate_limit:
      name: files
      unit: Hour
      requests_per_unit: 7
      replaces:
        - name: other
  - key: user
    quota_mode: false
    descriptors:
      - key: method
        value: GET
        rate_limit: { unlimited: true }
"#,
    )
    .expect("valid");
    assert_eq!(d.name, "shop");
    let files = &d.descriptors[0];
    assert_eq!(
        (files.key.as_str(), files.value.as_deref()),
        ("route", Some("/files/*"))
    );
    assert!(
        files.share_threshold
            && files.shadow_mode
            && files.detailed_metric
            && files.value_to_metric
    );
    let rl = files.rate_limit.as_ref().expect("rate_limit");
    assert_eq!(rl.unit, Some(Unit::Hour));
    assert_eq!(rl.requests_per_unit, 7);
    assert_eq!(rl.name.as_deref(), Some("files"));
    assert_eq!(rl.replaces, vec!["other".to_owned()]);
    assert!(!rl.unlimited);
    let user = &d.descriptors[1];
    assert!(user.rate_limit.is_none() && user.value.is_none());
    assert_eq!(user.descriptors[0].path, "descriptors[1].descriptors[0]");
    assert!(
        user.descriptors[0]
            .rate_limit
            .as_ref()
            .is_some_and(|r| r.unlimited && r.unit.is_none())
    );
}

/// The seven units of the reference's protocol, with its lengths (month 30 days, year 365).
#[test]
fn units() {
    for (word, unit, secs) in [
        ("second", Unit::Second, 1),
        ("minute", Unit::Minute, 60),
        ("hour", Unit::Hour, 3_600),
        ("day", Unit::Day, 86_400),
        ("week", Unit::Week, 7 * 86_400),
        ("month", Unit::Month, 30 * 86_400),
        ("YEAR", Unit::Year, 365 * 86_400),
    ] {
        assert_eq!(Unit::parse(word), Some(unit), "{word}");
        assert_eq!(unit.period(), Duration::from_secs(secs), "{word}");
    }
}

/// Each of the reference's refusals, with the path of the offending node.
#[test]
fn refusals_name_the_path() {
    let cases: &[(&str, &str, &str)] = &[
        ("domain: ''\n", "domain", "must not be empty"),
        (
            "domain: d\ndescriptors:\n  - value: x\n",
            "descriptors[0].key",
            "empty key",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n  - key: b\n    descriptors:\n      - key: c\n        rate_limit: { unit: fortnight, requests_per_unit: 1 }\n",
            "descriptors[1].descriptors[0].rate_limit.unit",
            "invalid rate limit unit \"fortnight\"",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    value: v\n  - key: a\n    value: v\n",
            "descriptors[1]",
            "duplicate key \"a_v\" (already at descriptors[0])",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: { unlimited: true, unit: second }\n",
            "descriptors[0].rate_limit.unit",
            "should not specify rate limit unit when unlimited",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: { name: n, unit: second, requests_per_unit: 1, replaces: [{ name: n }] }\n",
            "descriptors[0].rate_limit.replaces[0].name",
            "replaces should not contain name of same descriptor",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: { unit: second, requests_per_unit: 1, replaces: [{ name: '' }] }\n",
            "descriptors[0].rate_limit.replaces[0].name",
            "should not have an empty replaces entry",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limits: {}\n",
            "descriptors[0].rate_limits",
            "unknown field",
        ),
        ("domain: d\nbogus: 1\n", "bogus", "unknown field"),
        (
            "domain: d\ndescriptors:\n  - key: a\n    1: x\n",
            "descriptors[0]",
            "key is not a string: 1",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: { requests_per_unit: 1 }\n",
            "descriptors[0].rate_limit.unit",
            "required",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: { unit: second, requests_per_unit: -1 }\n",
            "descriptors[0].rate_limit.requests_per_unit",
            "whole number",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    quota_mode: 1\n",
            "descriptors[0].quota_mode",
            "true or false",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    value: x\n    share_threshold: true\n",
            "descriptors[0].share_threshold",
            "wildcard",
        ),
        ("- a\n", "(top)", "must be a map"),
    ];
    for (text, path, reason) in cases {
        let (got_path, got_reason) = refusal(text);
        assert_eq!(&got_path, path, "{text}");
        assert!(got_reason.contains(reason), "{text}: {got_reason}");
    }
}

/// Not YAML: a syntax error naming the file.
#[test]
fn syntax_error_names_the_file() {
    let e = parse("domain: [unclosed\n").expect_err("refused");
    assert!(matches!(e, ImportError::Syntax { .. }), "{e}");
    assert!(e.to_string().starts_with("conf/a.yaml: "), "{e}");
}

/// A directory: `.yaml` and `.yml` files in name order, dot files and others skipped; a domain
/// in two files is refused naming both.
#[test]
fn directory() {
    let dir = tempfile::tempdir().expect("temp dir");
    let write =
        |name: &str, text: &str| std::fs::write(dir.path().join(name), text).expect("write");
    write("b.yml", "domain: two\n");
    write("a.yaml", "domain: one\n");
    write(".hidden.yaml", "not: [valid\n");
    write("notes.txt", "not yaml at all: [\n");
    let imported = load_dir(dir.path()).expect("valid");
    let names: Vec<&str> = imported.domains.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["one", "two"]);

    write("c.yaml", "domain: one\n");
    let e = load_dir(dir.path()).expect_err("duplicate domain");
    assert_eq!(e.file(), dir.path().join("c.yaml"));
    assert_eq!(e.path(), Some("domain"));
    assert!(e.to_string().contains("duplicate domain \"one\""), "{e}");
    assert!(e.to_string().contains("a.yaml"), "{e}");

    let missing = load_dir(&dir.path().join("nope")).expect_err("missing dir");
    assert!(matches!(missing, ImportError::Read { .. }), "{missing}");
}

/// Generated limits: readable names from domain and path, hashed when long, keyed by one part
/// per level, fixed windows of one unit failing open unless told otherwise; unlimited and
/// 0-per-unit entries get no limit.
#[test]
fn generated_limits() {
    let dir = tempfile::tempdir().expect("temp dir");
    let long = "v".repeat(80);
    std::fs::write(
        dir.path().join("a.yaml"),
        format!(
            r#"
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - {{ key: to_number, rate_limit: {{ unit: day, requests_per_unit: 5 }} }}
  - {{ key: to_number, rate_limit: {{ unit: day, requests_per_unit: 100 }} }}
  - key: long
    value: "{long}"
    rate_limit: {{ unit: second, requests_per_unit: 1 }}
  - key: ldap
    rate_limit: {{ unlimited: true }}
  - key: blocked
    rate_limit: {{ unit: second, requests_per_unit: 0 }}
"#
        ),
    )
    .expect("write");
    let imported = load_dir(dir.path()).expect("valid");
    let limits = imported
        .limits(Algorithm::FixedWindow, OnStoreError::Allow)
        .expect("limits");
    let names: Vec<&str> = limits.iter().map(|l| l.name()).collect();
    assert_eq!(names.len(), 3, "{names:?}");
    assert_eq!(names[0], "messaging.message_type_marketing.to_number");
    assert_eq!(names[1], "messaging.to_number");
    assert_eq!(names[2].len(), 64, "{}", names[2]);
    assert!(names[2].starts_with("messaging.long_vvv"), "{}", names[2]);
    let first = &limits[0];
    assert_eq!(first.algorithm(), Algorithm::FixedWindow);
    assert_eq!(first.policy(), OnStoreError::Allow);
    assert_eq!(first.quota().limit(), 5);
    assert_eq!(first.quota().period(), Duration::from_secs(86_400));
    let parts: Vec<&str> = first
        .key_parts()
        .expect("keyed")
        .iter()
        .map(|p| &**p)
        .collect();
    assert_eq!(parts, ["d0", "d1"]);
    let again = load_dir(dir.path()).expect("valid");
    assert_eq!(again, imported, "names are stable across loads");
    let gcra = imported
        .limits(Algorithm::Gcra, OnStoreError::Deny)
        .expect("limits");
    assert_eq!(
        (gcra[0].algorithm(), gcra[0].policy()),
        (Algorithm::Gcra, OnStoreError::Deny)
    );
}

/// A domain's limit names depend on its own file alone: adding domain `a:b` (and `a`, whose
/// key `b.c` reads like domain `a.b`'s) beside `a_b` and `a.b` renames none of theirs, and no
/// two limits share a name. Before, names were settled first-come across files: `a:b` took
/// `a_b.user`, and with it `a_b`'s live counters.
#[test]
fn adding_a_domain_renames_no_other() {
    let dir = tempfile::tempdir().expect("temp dir");
    let write = |file: &str, domain: &str, key: &str| {
        std::fs::write(
            dir.path().join(file),
            format!(
                "domain: \"{domain}\"\ndescriptors:\n  - {{ key: \"{key}\", rate_limit: {{ unit: hour, requests_per_unit: 3 }} }}\n"
            ),
        )
        .expect("write");
    };
    let names = || -> Vec<(String, String)> {
        let imported = load_dir(dir.path()).expect("valid");
        imported
            .limits(Algorithm::FixedWindow, OnStoreError::Allow)
            .expect("the limits build: no two share a name");
        let mut names: Vec<(String, String)> = imported
            .domains
            .iter()
            .map(|d| {
                let rl = d.descriptors[0].rate_limit.as_ref().expect("counted");
                (d.name.clone(), rl.limit.clone().expect("named"))
            })
            .collect();
        names.sort();
        names
    };
    write("z.yaml", "a_b", "user");
    write("y.yaml", "a.b", "c");
    let before = names();
    assert_eq!(before[1], ("a_b".to_owned(), "a_b.user".to_owned()));
    write("a.yaml", "a:b", "user");
    write("b.yaml", "a", "b.c");
    let after = names();
    for pair in &before {
        assert!(after.contains(pair), "{pair:?} renamed: {after:?}");
    }
    let mut unique: Vec<&String> = after.iter().map(|(_, n)| n).collect();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), after.len(), "{after:?}");
}

/// A careless large file in the directory is refused unread, naming it and its size; the
/// directory's watcher does not read it either.
#[test]
fn an_oversized_file_is_refused_unread() {
    let dir = tempfile::tempdir().expect("tempdir");
    let big = dir.path().join("dump.yaml");
    let file = std::fs::File::create(&big).expect("create");
    // Sparse: the size is what counts, nothing is written.
    file.set_len(100 * 1024 * 1024).expect("set_len");
    let err = tollgate_envoy::load_dir(dir.path()).expect_err("refused");
    let text = err.to_string();
    assert!(
        text.contains("dump.yaml") && text.contains("104857600 bytes"),
        "{text}"
    );
    assert!(text.contains("larger than the 2048 KiB"), "{text}");
    let seen = tollgate_envoy::dir_contents(dir.path());
    assert!(seen.len() < 1024, "the watcher read {} bytes", seen.len());
    assert!(seen.contains("too large: 104857600 bytes"), "{seen}");
}

/// Nesting past the bound is refused by a linear scan, naming the line, before the parser
/// sees it; brackets inside quoted strings and comments do not count.
#[test]
fn deep_nesting_is_refused_before_parsing() {
    let file = std::path::Path::new("deep.yaml");
    for text in [
        format!("domain: d\ndescriptors: {}", "[".repeat(100_000)),
        format!("domain: d\ndescriptors:\n  {}key: k\n", "- ".repeat(1_000)),
    ] {
        let err = tollgate_envoy::parse_file(&text, file).expect_err("refused");
        assert!(
            err.to_string().contains("nested deeper than 64 levels"),
            "{err}"
        );
    }
    let quoted = format!(
        "domain: d # {{{{{{{{\ndescriptors:\n  - key: \"{}\"\n    value: '{}'\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n",
        "[".repeat(200),
        "{".repeat(200)
    );
    tollgate_envoy::parse_file(&quoted, file).expect("brackets in strings and comments are text");
}

/// Scalars the reference reads as strings keep their text as written, as its YAML library
/// gives them to a string field: `0x1F`, `1.10`, `True`, `1e3`, `+5` and `007` (they read as
/// 31, 1.1, true, 1000.0, 5 and 7, and a descriptor `hex: 0x1F` matched only `hex=31`). So
/// `1.10` and `1.1` are two values, not a duplicate. Merge keys (`<<: *base`) apply, as there.
#[test]
fn scalars_keep_their_text_and_merge_keys_apply() {
    let text = r"domain: 0x10
descriptors:
  - key: hex
    value: 0x1F
    rate_limit: &base
      unit: second
      requests_per_unit: 1
      name: 1e3
  - key: ver
    value: 1.10
    rate_limit: *base
  - key: ver
    value: 1.1
    rate_limit:
      <<: *base
      requests_per_unit: 2
      name: True
  - key: 007
    value: +5
    rate_limit:
      unit: minute
      requests_per_unit: 3
      replaces:
        - name: 1e3
";
    let domain = parse(text).expect("valid");
    assert_eq!(domain.name, "0x10");
    let seen: Vec<(&str, Option<&str>, Option<&str>)> = domain
        .descriptors
        .iter()
        .map(|d| {
            let rate = d.rate_limit.as_ref().expect("a rate limit");
            (d.key.as_str(), d.value.as_deref(), rate.name.as_deref())
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("hex", Some("0x1F"), Some("1e3")),
            ("ver", Some("1.10"), Some("1e3")),
            ("ver", Some("1.1"), Some("True")),
            ("007", Some("+5"), None),
        ]
    );
    let merged = domain.descriptors[2].rate_limit.as_ref().expect("merged");
    assert_eq!(
        (merged.unit, merged.requests_per_unit),
        (Some(Unit::Second), 2),
        "the merge key's unit, the entry's own count"
    );
    let replaces = &domain.descriptors[3]
        .rate_limit
        .as_ref()
        .expect("rl")
        .replaces;
    assert_eq!(replaces, &["1e3"]);

    // Scalars a merge key brings keep their text too: a merged `value` and `name`, one map
    // or a list of them (the first holding a field wins, the map's own field before both).
    let merged = parse(
        r"domain: d
descriptors:
  - &one {key: hex, value: 0x1F, rate_limit: &rl {unit: second, requests_per_unit: 1, name: 1e3}}
  - <<: *one
    key: other
  - key: k3
    <<: [{value: 0x10}, {value: 1.10, key: ignored}]
  - key: k4
    rate_limit:
      <<: *rl
      name: 0x2
      replaces: [{name: 1e3}]
",
    )
    .expect("valid");
    let seen: Vec<(&str, Option<&str>, Option<&str>)> = merged
        .descriptors
        .iter()
        .map(|d| {
            let name = d.rate_limit.as_ref().and_then(|r| r.name.as_deref());
            (d.key.as_str(), d.value.as_deref(), name)
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("hex", Some("0x1F"), Some("1e3")),
            ("other", Some("0x1F"), Some("1e3")),
            ("k3", Some("0x10"), None),
            ("k4", None, Some("0x2")),
        ]
    );
    let k4 = merged.descriptors[3].rate_limit.as_ref().expect("merged");
    assert_eq!(
        (k4.unit, k4.requests_per_unit, k4.replaces.as_slice()),
        (Some(Unit::Second), 1, &["1e3".to_owned()][..])
    );
}

/// Writes `dir/a.yaml`: domain `d`, one descriptor `k` of `count` requests per `unit`.
fn write_one_count(dir: &std::path::Path, unit: &str, count: u64) {
    std::fs::write(
        dir.join("a.yaml"),
        format!(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: {unit}\n      requests_per_unit: {count}\n"
        ),
    )
    .expect("write");
}

/// A count the reference takes (any 32-bit one) beyond what the core counts (10⁹ per unit,
/// one per microsecond) is refused naming `requests_per_unit`, with what to write instead.
#[test]
fn a_count_past_the_cores_is_refused_naming_the_field() {
    for (unit, count, says) in [
        ("day", 4_294_967_295_u64, "limit must be at most 1000000000"),
        ("second", 1_000_001, "one unit per microsecond"),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        write_one_count(dir.path(), unit, count);
        let err = load_dir(dir.path())
            .expect("parsed")
            .limits(Algorithm::FixedWindow, OnStoreError::Allow)
            .expect_err("refused");
        assert_eq!(
            err.path(),
            Some("descriptors[0].rate_limit.requests_per_unit"),
            "{err}"
        );
        let text = err.to_string();
        assert!(
            text.contains(says) && text.contains("or unlimited: true for no limit"),
            "{text}"
        );
    }
}

/// Under `envoy.algorithm = "sliding_log"`, a count above the sliding log's 10 000 units is
/// refused naming `requests_per_unit`, the algorithm at fault (set in tollgate.toml, not in
/// the YAML) and the one that takes the count; 10 000 loads.
#[test]
fn a_count_past_the_sliding_logs_names_the_algorithm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |count| write_one_count(dir.path(), "hour", count);
    write(10_000);
    load_dir(dir.path())
        .expect("parsed")
        .limits(Algorithm::SlidingLog, OnStoreError::Allow)
        .expect("at the cap");
    write(10_001);
    let imported = load_dir(dir.path()).expect("parsed");
    imported
        .limits(Algorithm::sliding_window(), OnStoreError::Allow)
        .expect("a sliding window takes it");
    let err = imported
        .limits(Algorithm::SlidingLog, OnStoreError::Allow)
        .expect_err("refused");
    assert_eq!(
        err.path(),
        Some("descriptors[0].rate_limit.requests_per_unit"),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains("10000 for sliding_log")
            && text.contains("with envoy.algorithm = \"sliding_log\"")
            && text.contains("envoy.algorithm = \"sliding_window\" takes it"),
        "{text}"
    );
}

/// A directory holding more than [`tollgate_envoy::MAX_DIR_BYTES`] of YAML, each file under
/// the file cap, is refused naming it and its size, before a file is parsed; the watcher's
/// view of it reads no more than that per poll.
#[test]
fn a_directory_past_its_cap_is_refused_unread() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = tollgate_envoy::MAX_DIR_BYTES / tollgate_envoy::MAX_FILE_BYTES + 1;
    for i in 0..files {
        // Sparse: their size is what counts, and nothing of them is read.
        std::fs::File::create(dir.path().join(format!("f{i:02}.yaml")))
            .and_then(|f| f.set_len(tollgate_envoy::MAX_FILE_BYTES))
            .expect("create");
    }
    let err = load_dir(dir.path()).expect_err("refused");
    assert_eq!(err.file(), dir.path());
    assert!(
        err.to_string().ends_with(&format!(
            "{} bytes of YAML in {files} files, more than the 32 MiB a config directory may hold",
            files * tollgate_envoy::MAX_FILE_BYTES
        )),
        "{err}"
    );
    let seen = tollgate_envoy::dir_contents(dir.path());
    assert!(
        seen.len() as u64 <= tollgate_envoy::MAX_DIR_BYTES + 10_000,
        "{} bytes read for the watcher",
        seen.len()
    );
}

/// A directory holding more than [`tollgate_envoy::MAX_DIR_FILES`] YAML files, each of them
/// a valid domain of a few bytes, is refused naming it before a file is read; one file fewer
/// loads. Other files (not YAML) do not count.
#[test]
fn a_directory_of_too_many_files_is_refused_unread() {
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |i: usize| {
        std::fs::write(
            dir.path().join(format!("d{i:05}.yaml")),
            format!("domain: d{i}\n"),
        )
        .expect("write");
    };
    for i in 0..tollgate_envoy::MAX_DIR_FILES {
        write(i);
    }
    std::fs::write(dir.path().join("notes.txt"), "not yaml").expect("write");
    let imported = load_dir(dir.path()).expect("at the cap: loads");
    assert_eq!(imported.domains.len(), tollgate_envoy::MAX_DIR_FILES);
    write(tollgate_envoy::MAX_DIR_FILES);
    let err = load_dir(dir.path()).expect_err("refused");
    assert_eq!(err.file(), dir.path());
    assert!(
        err.to_string()
            .ends_with("more than 10000 YAML files, more than a config directory may hold"),
        "{err}"
    );
    assert!(
        tollgate_envoy::dir_contents(dir.path()).len() < 1_000,
        "the watcher's view reads no file"
    );
}

/// A load's digest is that of what the directory's watcher shows of it
/// (`contents_digest(dir_contents)`), and changes with any file's text: so the reloader can
/// tell that a load read what its snapshot of the directory holds, or a file written since.
#[test]
fn a_load_tells_what_it_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |name: &str, count: u32| {
        std::fs::write(
            dir.path().join(name),
            format!("domain: {name}\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: {count}\n"),
        )
        .expect("write");
    };
    write("a.yaml", 1);
    write("b.yaml", 2);
    let seen = tollgate_envoy::dir_contents(dir.path());
    let loaded = load_dir(dir.path()).expect("valid");
    assert_eq!(loaded.read_digest, tollgate_envoy::contents_digest(&seen));
    // A comment changes the digest, not the rules: the loads are equal (a reload of it
    // changes nothing).
    std::fs::write(
        dir.path().join("a.yaml"),
        format!(
            "# edited\n{}",
            std::fs::read_to_string(dir.path().join("a.yaml")).expect("read")
        ),
    )
    .expect("write");
    let commented = load_dir(dir.path()).expect("valid");
    assert_ne!(commented.read_digest, loaded.read_digest);
    assert_eq!(commented, loaded);
    write("b.yaml", 3);
    let again = load_dir(dir.path()).expect("valid");
    assert_ne!(again.read_digest, loaded.read_digest);
    assert_ne!(again, loaded);
    assert_eq!(
        again.read_digest,
        tollgate_envoy::contents_digest(&tollgate_envoy::dir_contents(dir.path()))
    );
}

/// An alias bomb (a 50 KB file whose 10 000 aliases each stand for a list of 10 000: 10⁸
/// values) is refused, naming the file, before a value is built; anchors and aliases within
/// reason load, as in the reference (a `rate_limit` written once, used twice).
#[test]
fn an_alias_bomb_is_refused_unbuilt() {
    let file = std::path::Path::new("bomb.yaml");
    let bomb = format!(
        "domain: bomb\nx: &a [{}]\ny: [{}]\ndescriptors: []\n",
        vec!["0"; 10_000].join(","),
        vec!["*a"; 10_000].join(",")
    );
    let err = tollgate_envoy::parse_file(&bomb, file).expect_err("refused");
    assert_eq!(
        err.to_string(),
        format!(
            "bomb.yaml: more than {} YAML nodes once its aliases are expanded (each alias \
             stands for the whole node its anchor names)",
            tollgate_envoy::MAX_NODES
        )
    );
    let shared = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: &r\n      unit: second\n      requests_per_unit: 5\n  - key: b\n    rate_limit: *r\n";
    let domain = tollgate_envoy::parse_file(shared, file).expect("an alias loads");
    assert_eq!(domain.descriptors.len(), 2);
    for d in &domain.descriptors {
        let rate = d.rate_limit.as_ref().expect("a rate limit");
        assert_eq!(
            (rate.requests_per_unit, rate.unit),
            (5, Some(Unit::Second)),
            "{d:?}"
        );
    }
}

/// A symbolic link out of the directory is refused, naming it; one inside it (a Kubernetes
/// ConfigMap's `..data` layout) is followed.
#[cfg(unix)]
#[test]
fn links_out_of_the_directory_are_not_followed() {
    let outside = tempfile::tempdir().expect("tempdir");
    let dir = tempfile::tempdir().expect("tempdir");
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n";
    std::fs::write(outside.path().join("secret.yaml"), yaml).expect("write");
    std::os::unix::fs::symlink(
        outside.path().join("secret.yaml"),
        dir.path().join("a.yaml"),
    )
    .expect("symlink");
    let err = tollgate_envoy::load_dir(dir.path()).expect_err("refused");
    let text = err.to_string();
    assert!(
        text.contains("a.yaml") && text.contains("outside envoy.config_dir"),
        "{text}"
    );

    let inside = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(inside.path().join("..data")).expect("mkdir");
    std::fs::write(inside.path().join("..data").join("d.yaml"), yaml).expect("write");
    std::os::unix::fs::symlink("..data/d.yaml", inside.path().join("d.yaml")).expect("symlink");
    let imported = tollgate_envoy::load_dir(inside.path()).expect("a link inside is followed");
    assert_eq!(imported.domains.len(), 1);
}

/// A level of 30 000 descriptors (under the size cap) loads, its duplicates still found: the
/// per-level duplicate check is linear (pairwise, 40 000 took seconds).
#[test]
fn a_wide_level_loads_and_its_duplicates_are_found() {
    let mut text = String::from("domain: wide\ndescriptors:\n");
    for i in 0..30_000 {
        text.push_str(&format!(
            "  - {{key: k{i}, rate_limit: {{unit: second, requests_per_unit: 1}}}}\n"
        ));
    }
    assert!((text.len() as u64) < tollgate_envoy::MAX_FILE_BYTES);
    let domain = parse(&text).expect("valid");
    assert_eq!(domain.descriptors.len(), 30_000);
    text.push_str("  - {key: k17, rate_limit: {unit: second, requests_per_unit: 1}}\n");
    let (path, reason) = refusal(&text);
    assert_eq!(path, "descriptors[30000]");
    assert!(
        reason.contains("duplicate key \"k17\" (already at descriptors[17])"),
        "{reason}"
    );
}
