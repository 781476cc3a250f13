//! [`read`]: the bytes of a file the service reads (the config file, a certificate, key or CA
//! file, a password file), which must be a regular file of at most [`MAX_FILE_BYTES`].
//!
//! A path naming a device or a FIFO (`/dev/zero`, a named pipe left where the file should be)
//! would otherwise hang `check-config`, start-up and the reloaders (opening a FIFO waits for a
//! writer; reading one waits for data) or fill memory (`/dev/zero` never ends).
//! Symbolic links are followed (a Kubernetes secret's files are links); what they lead to is
//! what must be a regular file.

use std::io::{self, Read as _};
use std::path::Path;

use rustix::fs::{Mode, OFlags};

/// The largest file read: a config file's cap, 2 MiB (a CA bundle is a few hundred KiB), as
/// for the Envoy YAML files.
pub(crate) const MAX_FILE_BYTES: u64 = tollgate_envoy::MAX_FILE_BYTES;

/// The text of the regular file at `path`, as [`read`] reads it.
///
/// # Errors
/// As [`read`]; `InvalidData` for text that is not UTF-8.
pub(crate) fn read_text(path: &Path) -> io::Result<String> {
    String::from_utf8(read(path)?).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// The bytes of the regular file at `path` (symbolic links followed).
///
/// # Errors
/// The I/O error; `InvalidInput` for anything but a regular file or for a file over
/// [`MAX_FILE_BYTES`], in words.
pub(crate) fn read(path: &Path) -> io::Result<Vec<u8>> {
    // Checked before opening (opening a FIFO waits for a writer), and opened without waiting
    // (`O_NONBLOCK`) in case the path was replaced in between, then checked again on what was
    // opened.
    regular(&std::fs::metadata(path)?)?;
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let file = std::fs::File::from(fd);
    let meta = file.metadata()?;
    regular(&meta)?;
    if meta.len() > MAX_FILE_BYTES {
        return Err(too_large(meta.len()));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    // The cap holds even for a file that grows while it is read.
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes)?;
    let len = bytes.len() as u64;
    if len > MAX_FILE_BYTES {
        return Err(too_large(len));
    }
    Ok(bytes)
}

/// An error unless `meta` is a regular file's, naming what it is instead.
fn regular(meta: &std::fs::Metadata) -> io::Result<()> {
    use std::os::unix::fs::FileTypeExt as _;

    let kind = meta.file_type();
    if kind.is_file() {
        return Ok(());
    }
    let what = if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO (named pipe)"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a file"
    };
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("not a regular file: {what}"),
    ))
}

pub(crate) fn too_large(len: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "larger than the {} KiB a file tollgate reads may be ({len} bytes or more)",
            MAX_FILE_BYTES / 1024
        ),
    )
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    /// A device, a FIFO without a writer, a directory and a file over the cap are refused at
    /// once, saying what they are; a regular file (through a symbolic link) is read.
    #[test]
    fn only_regular_files_within_the_cap_are_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("fifo.pem");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("run mkfifo");
        assert!(made.success());
        let big = dir.path().join("big.pem");
        std::fs::write(&big, vec![b'a'; 2 * 1024 * 1024 + 1]).expect("write");
        let started = Instant::now();
        for (path, says) in [
            (Path::new("/dev/zero"), "a character device"),
            (fifo.as_path(), "a FIFO"),
            (dir.path(), "a directory"),
            (big.as_path(), "larger than the 2048 KiB"),
        ] {
            let e = read(path).expect_err("refused");
            assert!(e.to_string().contains(says), "{}: {e}", path.display());
        }
        assert!(started.elapsed() < Duration::from_secs(2));

        let file = dir.path().join("ok.pem");
        std::fs::write(&file, b"pem").expect("write");
        let link = dir.path().join("link.pem");
        std::os::unix::fs::symlink(&file, &link).expect("symlink");
        assert_eq!(read(&link).expect("read"), b"pem");
    }
}
