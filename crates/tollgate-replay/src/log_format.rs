//! The access-log formats `tollgate replay` reads, and the fields each one offers to key on.
//!
//! Four shapes cover what servers write: nginx's and Apache's combined (and common) format,
//! JSON lines (one object per line, as structured loggers write), CSV with a header row, and
//! Envoy's default access-log format.
//! The combined format's fields are fixed, so a `--key` naming a field it does not have is
//! refused before the first line is read; JSON and CSV name their own fields (the first
//! object's keys, the header row).

use std::fmt;
use std::str::FromStr;

/// An access log's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// nginx's and Apache's combined log format (or common: without referer and user agent):
    /// `$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent
    /// "$http_referer" "$http_user_agent"`.
    Combined,
    /// One JSON object per line, its time in a field (`--time-field`, default `time`).
    JsonLines,
    /// Comma-separated values with a header row, its time in a column (`--time-field`).
    Csv,
    /// Envoy's default access-log format: `[%START_TIME%] "%REQ(:METHOD)%
    /// %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%" %RESPONSE_CODE% %RESPONSE_FLAGS%
    /// %BYTES_RECEIVED% %BYTES_SENT% %DURATION% %RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)%
    /// "%REQ(X-FORWARDED-FOR)%" "%REQ(USER-AGENT)%" "%REQ(X-REQUEST-ID)%" "%REQ(:AUTHORITY)%"
    /// "%UPSTREAM_HOST%"`, so that an Envoy user replays the gateway's own log.
    Envoy,
}

/// The fields of an Envoy default-format line, by Envoy's command operators in lower case,
/// plus `path` (without the query string) and `client`: the first address of
/// `x_forwarded_for`, the client as the first proxy saw it (the default format has no
/// downstream address).
pub const ENVOY_FIELDS: &[&str] = &[
    "start_time",
    "method",
    "path",
    "protocol",
    "response_code",
    "response_flags",
    "bytes_received",
    "bytes_sent",
    "duration",
    "upstream_service_time",
    "x_forwarded_for",
    "user_agent",
    "request_id",
    "authority",
    "upstream_host",
    "client",
];

/// The fields of a combined-format line, by the names nginx gives them (`$remote_addr` …),
/// plus `method`, `path` (without the query string) and `protocol`, split out of `request`.
pub const COMBINED_FIELDS: &[&str] = &[
    "remote_addr",
    "remote_user",
    "time_local",
    "request",
    "method",
    "path",
    "protocol",
    "status",
    "body_bytes_sent",
    "http_referer",
    "http_user_agent",
];

impl LogFormat {
    /// The format a log's first line looks like: `{` opens JSON, `[` then `] "` Envoy's
    /// default, a `[` after the first fields a combined line; anything else is taken for CSV.
    pub fn detect(first_line: &str) -> LogFormat {
        let line = first_line.trim_start();
        if line.starts_with('{') {
            LogFormat::JsonLines
        } else if line.starts_with('[') && line.contains("] \"") {
            LogFormat::Envoy
        } else if line.contains(" [") && line.contains("] \"") {
            LogFormat::Combined
        } else {
            LogFormat::Csv
        }
    }

    /// Its name, as `--format` takes it.
    pub fn name(self) -> &'static str {
        match self {
            LogFormat::Combined => "combined",
            LogFormat::JsonLines => "json",
            LogFormat::Csv => "csv",
            LogFormat::Envoy => "envoy",
        }
    }
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "combined" | "common" | "clf" => Ok(LogFormat::Combined),
            "json" | "jsonl" | "json-lines" => Ok(LogFormat::JsonLines),
            "csv" => Ok(LogFormat::Csv),
            "envoy" => Ok(LogFormat::Envoy),
            other => Err(format!(
                "unknown log format {other:?}: expected combined, json, csv or envoy"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_told_apart_by_their_first_line() {
        let combined =
            r#"10.0.0.1 - alice [10/Oct/2026:13:55:36 +0000] "GET /a HTTP/1.1" 200 5 "-" "curl""#;
        assert_eq!(LogFormat::detect(combined), LogFormat::Combined);
        assert_eq!(
            LogFormat::detect(r#"{"time": 1, "user": "a"}"#),
            LogFormat::JsonLines
        );
        assert_eq!(LogFormat::detect("time,user,path"), LogFormat::Csv);
        let envoy = r#"[2026-10-10T13:55:36.310Z] "GET /a HTTP/1.1" 200 - 0 5 3 2 "10.0.0.1" "curl" "id" "host" "10.1.0.1:80""#;
        assert_eq!(LogFormat::detect(envoy), LogFormat::Envoy);
        assert_eq!("envoy".parse(), Ok(LogFormat::Envoy));
        assert_eq!("jsonl".parse(), Ok(LogFormat::JsonLines));
        assert!("xml".parse::<LogFormat>().is_err());
    }
}
