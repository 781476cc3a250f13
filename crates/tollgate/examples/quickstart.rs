//! A limiter admitting and refusing: 3 requests per 10 seconds per user, GCRA, in memory.
//!
//! `cargo run -p tollgate --example quickstart`

use std::time::Duration;

use tollgate::{Algorithm, FakeClock, Limit, Limiter, MemoryStore, OnStoreError, Quota, Timestamp};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A fake clock so the example shows time passing without waiting for it.
    let clock = FakeClock::new(Timestamp::from_millis(1_900_000_000_000));
    let limiter = Limiter::builder(MemoryStore::builder().clock(clock.clone()).build())
        .clock(clock.clone())
        .limit(
            Limit::new(
                "api",
                Algorithm::Gcra,
                Quota::new(3, Duration::from_secs(10))?,
            )?
            .keyed_by(["user"])?
            .on_store_error(OnStoreError::Local),
        )
        .build()?;

    for (at_ms, user) in [
        (0, "alice"),
        (0, "alice"),
        (0, "alice"),
        (0, "alice"),
        (0, "bob"),
        (3_400, "alice"),
        (0, "alice"),
    ] {
        if at_ms > 0 {
            clock.advance(Duration::from_millis(at_ms));
            println!("       ... {at_ms} ms later");
        }
        let verdict = limiter.check("api", &[("user", user)]).await?;
        let d = verdict.decision();
        match d.retry_after() {
            None => println!(
                "{user:>5}: allowed  (remaining {}, full again in {:?})",
                d.remaining, d.reset_after
            ),
            Some(wait) => println!("{user:>5}: refused (retry in {wait:?})"),
        }
    }
    Ok(())
}
