//! Dynamic metadata under shadow modes, over the reference's `metadata.yaml` (unchanged): an
//! entry in shadow mode of its own passes (its status is OK, as the reference's), one that
//! only global shadow mode answered OK did not (the reference keeps its OVER_LIMIT status).

use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_envoy::envoy_types::pb::google::protobuf::UInt64Value;

use crate::support::{Rls, request};

const METADATA: &str = include_str!("../reference/metadata.yaml");

/// `metadata` of an answer's dynamic metadata, as JSON (`Null` when absent).
fn merged(
    r: &tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse,
) -> serde_json::Value {
    tollgate_envoy::response_json(r)["dynamicMetadata"]["metadata"].clone()
}

#[tokio::test]
async fn global_shadow_refusals_do_not_pass_own_shadow_ones_do() {
    let mut rls = Rls::start_imported(
        &[("metadata.yaml", METADATA)],
        "[envoy]\nshadow = true\nresponse_dynamic_metadata = true\n",
    )
    .await;
    // Descriptor 0 asks 6 hits of 5 per second: refused; global shadow mode answers the call OK.
    let mut call = request(
        "test-domain",
        &[&[("key1", "value1"), ("subkey1", "x")], &[("key2", "y")]],
        0,
    );
    call.descriptors[0].hits_addend = Some(UInt64Value { value: 6 });
    let r = rls.call(call).await;
    assert_eq!(r.overall_code, Code::Ok as i32, "{r:?}");
    // As the reference: the refused descriptor keeps its status; only the overall code is OK.
    let codes: Vec<i32> = r.statuses.iter().map(|s| s.code).collect();
    assert_eq!(codes, [Code::OverLimit as i32, Code::Ok as i32], "{r:?}");
    assert_eq!(
        merged(&r),
        serde_json::json!({"service_with_quota": {"name": "service_2"}}),
        "{r:?}"
    );
    // Both admitted: both pass.
    let r = rls
        .call(request(
            "test-domain",
            &[&[("key1", "value1"), ("subkey1", "x")], &[("key2", "y")]],
            0,
        ))
        .await;
    assert_eq!(
        merged(&r),
        serde_json::json!({"name": "service_1", "service_with_quota": {"name": "service_2"}}),
        "{r:?}"
    );
    rls.stop().await;

    // The same file with its own shadow mode on the refused entry: it passes.
    let own = METADATA.replace(
        "        metadata:\n          name: service_1",
        "        shadow_mode: true\n        metadata:\n          name: service_1",
    );
    assert_ne!(own, METADATA, "the edit applies");
    let mut rls = Rls::start_imported(
        &[("metadata.yaml", &own)],
        "[envoy]\nresponse_dynamic_metadata = true\n",
    )
    .await;
    let mut call = request("test-domain", &[&[("key1", "value1"), ("subkey1", "x")]], 0);
    call.descriptors[0].hits_addend = Some(UInt64Value { value: 6 });
    let r = rls.call(call).await;
    assert_eq!(r.statuses[0].code, Code::Ok as i32, "{r:?}");
    assert_eq!(
        merged(&r),
        serde_json::json!({"name": "service_1"}),
        "{r:?}"
    );
    rls.stop().await;
}
