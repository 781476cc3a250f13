-- wrk's check for the service benchmarks (service.sh, instructions.sh): one hot key of the
-- example config's `sms` limit, so nearly every check is refused.
wrk.method = "POST"
wrk.body = '{"limit": "sms", "key": {"user": "42"}}'
wrk.headers["Content-Type"] = "application/json"
