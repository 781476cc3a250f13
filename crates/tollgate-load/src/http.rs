//! The HTTP mode: `POST /v1/check` over keep-alive HTTP/1.1 connections, on the limit picked
//! from `GET /v1/limits`.

use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::drive::{first_key, load};
use crate::tally::{Outcome, Tally};
use crate::{BenchOptions, LoadError, Report};

/// Runs the HTTP benchmark (`POST /v1/check`) and prints a summary.
///
/// # Errors
/// [`LoadError`] when the service cannot be reached or lists no limit.
pub async fn run(options: BenchOptions) -> Result<Report, LoadError> {
    let uri: hyper::Uri = options.url.parse()?;
    let authority = uri.authority().ok_or_else(|| LoadError::NoHost {
        url: options.url.clone(),
    })?;
    let addr = format!(
        "{}:{}",
        authority.host(),
        authority.port_u16().unwrap_or(80)
    );
    let (limit, parts) = pick_limit(&addr, options.limit.as_deref())
        .await
        .map_err(|e| LoadError::ListLimits {
            url: options.url.clone(),
            source: Box::new(e),
        })?;
    let host = authority.to_string();
    let keys = options.keys.max(1);
    let what = format!("checks of {limit:?}");
    let over = format!("{} connections", options.concurrency);
    load(&options, &what, &over, move |worker, deadline| {
        let (addr, host, limit, parts) = (addr.clone(), host.clone(), limit.clone(), parts.clone());
        async move { drive(&addr, &host, &limit, &parts, keys, worker, deadline).await }
    })
    .await
}

/// One HTTP connection sending checks until `deadline`.
async fn drive(
    addr: &str,
    host: &str,
    limit: &str,
    parts: &[String],
    keys: u64,
    worker: u64,
    deadline: Instant,
) -> Result<Tally, LoadError> {
    let mut sender = connect(addr).await?;
    let mut tally = Tally::new()?;
    let mut n = first_key(worker);
    while Instant::now() < deadline {
        n = n.wrapping_add(1);
        let value = (n % keys).to_string();
        let key: serde_json::Map<String, serde_json::Value> = parts
            .iter()
            .map(|p| (p.clone(), serde_json::Value::from(value.as_str())))
            .collect();
        let body = serde_json::json!({ "limit": limit, "key": key }).to_string();
        let request = Request::post("/v1/check")
            .header("host", host)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))?;
        let sent = Instant::now();
        let answer = match sender.send_request(request).await {
            Ok(response) => read(response).await,
            Err(e) => Err(e),
        };
        match answer {
            Ok(200) => tally.answered(sent, Outcome::Allowed),
            Ok(429) => tally.answered(sent, Outcome::Denied),
            Ok(_) => tally.answered(sent, Outcome::Other),
            Err(_) => {
                tally.failed();
                sender = connect(addr).await?;
            }
        }
    }
    Ok(tally)
}

/// The status, once the whole body has been read.
async fn read(response: hyper::Response<Incoming>) -> Result<u16, hyper::Error> {
    let status = response.status().as_u16();
    response.into_body().collect().await?;
    Ok(status)
}

async fn connect(addr: &str) -> Result<http1::SendRequest<Full<Bytes>>, LoadError> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    Ok(sender)
}

/// The limit to drive and its key part names, from `GET /v1/limits`.
async fn pick_limit(addr: &str, wanted: Option<&str>) -> Result<(String, Vec<String>), LoadError> {
    let mut sender = connect(addr).await?;
    let request = Request::get("/v1/limits")
        .header("host", addr)
        .body(Full::new(Bytes::new()))?;
    let response = sender.send_request(request).await?;
    let body = response.into_body().collect().await?.to_bytes();
    choose(&serde_json::from_slice(&body)?, wanted)
}

/// The `wanted` limit (or the first) of a `GET /v1/limits` listing, and its key part names.
fn choose(
    listing: &serde_json::Value,
    wanted: Option<&str>,
) -> Result<(String, Vec<String>), LoadError> {
    let limits = listing["limits"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let found = limits
        .iter()
        .find(|l| wanted.is_none_or(|w| l["name"] == w))
        .ok_or_else(|| match wanted {
            Some(w) => LoadError::UnknownLimit(w.to_owned()),
            None => LoadError::NoLimits,
        })?;
    let name = found["name"].as_str().unwrap_or_default().to_owned();
    let parts = found["key"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|p| p.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    Ok((name, parts))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The named limit is picked with its key parts, the first one without a name; an
    /// unknown name or an empty listing is an error naming what is missing.
    #[test]
    fn choose_picks_the_limit_and_its_key_parts() {
        let listing = serde_json::json!({"limits": [
            {"name": "global", "key": []},
            {"name": "per_user", "key": ["user", "route"]},
        ]});
        let (name, parts) = choose(&listing, Some("per_user")).expect("listed");
        assert_eq!(
            (name.as_str(), parts),
            ("per_user", vec!["user".to_owned(), "route".to_owned()])
        );
        let (name, parts) = choose(&listing, None).expect("first");
        assert_eq!((name.as_str(), parts.len()), ("global", 0));

        let err = choose(&listing, Some("nope")).expect_err("unknown");
        assert_eq!(err.to_string(), r#"the service has no limit named "nope""#);
        let err = choose(&serde_json::json!({"limits": []}), None).expect_err("empty");
        assert_eq!(err.to_string(), "the service has no limits");
    }
}
