//! `redis-benchmark` against a spawned server: the baseline the benchmarks compare the store
//! with, in the same run (Redis's own client, one thread, running the same script).

use std::process::Command;

use crate::RedisServer;

/// How `redis-benchmark` loads the server: `-P pipeline -c clients -n requests`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedisBenchmark {
    /// Calls in flight per connection (`-P`).
    pub pipeline: u32,
    /// Connections (`-c`).
    pub clients: u32,
    /// Calls in all (`-n`).
    pub requests: u64,
}

impl Default for RedisBenchmark {
    /// `-P 16 -c 50 -n 400000`: enough calls in flight to keep Redis's one thread busy.
    fn default() -> RedisBenchmark {
        RedisBenchmark {
            pipeline: 16,
            clients: 50,
            requests: 400_000,
        }
    }
}

impl RedisBenchmark {
    /// The arguments of one `EVALSHA` of `source` on `key`: the script loaded into `server`
    /// first, its SHA checked against `sha` (what the client computes), then `argv`.
    ///
    /// # Panics
    /// When Redis answers another SHA (the text loaded differs from the one the client runs).
    pub fn evalsha(
        server: &RedisServer,
        source: &str,
        sha: &str,
        key: &str,
        argv: impl IntoIterator<Item = String>,
    ) -> Vec<String> {
        let loaded = server.cmd(&["SCRIPT", "LOAD", source]);
        assert!(
            loaded.contains(sha),
            "SCRIPT LOAD gave {loaded:?}, not {sha}"
        );
        let mut args = vec![
            "EVALSHA".to_owned(),
            sha.to_owned(),
            "1".to_owned(),
            key.to_owned(),
        ];
        args.extend(argv);
        args
    }

    /// Runs `args` (say `EVALSHA <sha> 1 key:{__rand_int__} ...`, `__rand_int__` drawn below
    /// `keys`) and returns the calls per second `redis-benchmark` reports and Redis's CPU time
    /// per call in µs (from `/proc`). Fails when Redis sent an error reply during the run
    /// (`redis-benchmark` counts those as successes) or the output has no figure.
    ///
    /// # Errors
    /// `redis-benchmark` missing, an error reply, or output that cannot be read.
    pub fn run(
        &self,
        server: &RedisServer,
        args: &[String],
        keys: u64,
    ) -> Result<(f64, f64), String> {
        let errors_before = server.error_replies();
        let cpu_before = server.cpu_time();
        let out = Command::new("redis-benchmark")
            .arg("-p")
            .arg(server.port().to_string())
            .arg("-P")
            .arg(self.pipeline.to_string())
            .arg("-c")
            .arg(self.clients.to_string())
            .args(["-q", "-r"])
            .arg(keys.to_string())
            .arg("-n")
            .arg(self.requests.to_string())
            .args(args)
            .output()
            .map_err(|e| {
                format!("cannot run redis-benchmark ({e}): apt-get install redis-tools")
            })?;
        let cpu = (server.cpu_time() - cpu_before).as_secs_f64() * 1e6 / self.requests as f64;
        let text = String::from_utf8_lossy(&out.stdout);
        let errors = server.error_replies() - errors_before;
        if errors > 0 {
            return Err(format!(
                "{errors} error replies during redis-benchmark: {text}"
            ));
        }
        let line = text
            .split(['\r', '\n'])
            .rfind(|l| l.contains("requests per second"))
            .ok_or_else(|| format!("no figure in redis-benchmark output: {text}"))?;
        let figure = line
            .split("requests per second")
            .next()
            .and_then(|s| s.rsplit([' ', ':']).find(|w| !w.is_empty()))
            .and_then(|w| w.parse::<f64>().ok())
            .ok_or_else(|| format!("cannot read {line:?}"))?;
        Ok((figure, cpu))
    }
}
