//! The `sh` supervisor every spawned Redis process (server, sentinel) runs under, so that none
//! outlives the test that started it.
//!
//! A shell starts the process and then blocks reading its stdin; when that read returns, it
//! SIGKILLs the process and reaps it. The read returns when the handle drops the pipe, and
//! also when the test process dies or exits without running destructors (a server kept in a
//! `static`, a test binary killed by a timeout): the kernel closes the pipe either way.
//!
//! The shell also keeps what the process prints (a bad argument is reported on stderr, before
//! the log file opens) and its pid, so that a process that exits at start fails the test at
//! once, with what it said, rather than after the readiness timeout.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Spawns `bin args…` under the supervisor shell, in `dir`: the process's stdout and stderr
/// go to [`output`]`(dir)` (where Redis writes a config error, before it opens its log file),
/// its pid to `dir/process.pid` (for [`exited`]).
///
/// # Panics
/// When `sh` cannot be started.
pub(crate) fn spawn<I, S>(bin: &str, args: I, dir: &Path) -> Child
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let _ = std::fs::remove_file(pid_path(dir));
    Command::new("sh")
        .arg("-c")
        .arg(concat!(
            r#"out=$1; pidfile=$2; bin=$3; shift 3; "$bin" "$@" >>"$out" 2>&1 & pid=$!; "#,
            r#"echo $pid >"$pidfile"; read _ignored; kill -9 $pid 2>/dev/null; "#,
            r#"wait $pid 2>/dev/null; exit 0"#
        ))
        .arg("tollgate-redis-supervisor")
        .arg(output(dir))
        .arg(pid_path(dir))
        .arg(bin)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {bin} under sh: {e}"))
}

/// Kills the supervised process (SIGKILL) and waits until it is gone.
pub(crate) fn stop(mut child: Child) {
    // Closing stdin makes the supervisor SIGKILL the process and wait for it.
    drop(child.stdin.take());
    let _ = child.wait();
}

/// Whether the process spawned in `dir` has exited by itself (the supervisor, blocked on its
/// stdin, has not reaped it: it is a zombie), so that a start can fail at once instead of
/// waiting out its timeout.
pub(crate) fn exited(dir: &Path) -> bool {
    let Some(pid) = std::fs::read_to_string(pid_path(dir))
        .ok()
        .and_then(|p| p.trim().parse::<u32>().ok())
    else {
        return false;
    };
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

/// Where the process spawned in `dir` writes its stdout and stderr.
pub(crate) fn output(dir: &Path) -> PathBuf {
    dir.join("output.log")
}

/// What the process spawned in `dir` printed, headed for a failure message, or nothing.
pub(crate) fn printed(dir: &Path) -> String {
    match std::fs::read_to_string(output(dir)) {
        Ok(text) if !text.trim().is_empty() => format!("--- stdout and stderr ---\n{text}"),
        _ => String::new(),
    }
}

fn pid_path(dir: &Path) -> PathBuf {
    dir.join("process.pid")
}

/// Whether `bin` names an executable file (a path, or a name found on `$PATH`).
pub(crate) fn on_path(bin: &str) -> bool {
    if bin.contains('/') {
        return Path::new(bin).is_file();
    }
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(bin).is_file()))
}
