//! A lease-mode limit answers like the fixed window it is: `reset_after_ms` is the time to
//! the end of the window (when the count starts again), not how long this instance holds its
//! lease, which is an implementation detail that a client would wrongly read as "the quota
//! is back in a second".

use std::time::Duration;

use crate::support::TestServer;

/// 100 an hour in lease mode, leases held a second (windows are aligned to the epoch, and
/// the test's clock starts on a whole hour).
const CONFIG: &str = r#"
[[limits]]
name = "leased"
algorithm = "fixed_window"
limit = 100
period = "1h"
on_store_error = "deny"
mode = "lease"
lease = 10
lease_ttl = "1s"
"#;

/// Ten minutes into the hour: the check that takes the lease and one served from it both
/// report the 50 minutes left of the window; so does the refusal once the window is spent.
#[tokio::test]
async fn reset_after_is_the_windows_end() {
    let server = TestServer::start(CONFIG).await;
    server.clock.advance(Duration::from_secs(600));
    let left_ms = 50 * 60 * 1000;
    for which in ["the take", "from the lease"] {
        let reply = server.post("/v1/check", r#"{"limit": "leased"}"#).await;
        assert_eq!(reply.status, 200, "{reply:?}");
        assert_eq!(reply.json["reset_after_ms"], left_ms, "{which}: {reply:?}");
    }
    server.clock.advance(Duration::from_millis(500));
    let reply = server.post("/v1/check", r#"{"limit": "leased"}"#).await;
    assert_eq!(reply.json["reset_after_ms"], left_ms - 500, "{reply:?}");
    // Spend the window, then the refusal.
    let mut refused = None;
    for _ in 0..200 {
        let reply = server.post("/v1/check", r#"{"limit": "leased"}"#).await;
        if reply.status == 429 {
            refused = Some(reply);
            break;
        }
    }
    let refused = refused.expect("the window is spent within 200 checks");
    assert_eq!(refused.json["reset_after_ms"], left_ms - 500, "{refused:?}");
}
