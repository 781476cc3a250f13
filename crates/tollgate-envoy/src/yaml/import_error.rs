//! Why a directory of the reference service's YAML files cannot be imported.
//!
//! Every error names the file and the path inside it (`descriptors[1].rate_limit.unit`), the
//! way the reference names the file, so that a refused start or reload says what to fix.

use std::path::PathBuf;

/// An invalid YAML file, or a directory that cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// The directory or a file in it cannot be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The directory or file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A file is not YAML.
    #[error("{}: {source}", file.display())]
    Syntax {
        /// The file.
        file: PathBuf,
        /// The parser's error (with its line).
        #[source]
        source: serde_yaml_ng::Error,
    },
    /// A file is YAML but not a valid descriptor tree.
    #[error("{}: {}{reason}", file.display(), if path.is_empty() { String::new() } else { format!("{path}: ") })]
    Invalid {
        /// The file.
        file: PathBuf,
        /// Where in the file, e.g. `descriptors[0].descriptors[2].rate_limit.unit`.
        path: String,
        /// What is wrong.
        reason: String,
    },
}

impl ImportError {
    /// The file at fault, if the error is about one file.
    pub fn file(&self) -> &std::path::Path {
        match self {
            ImportError::Read { path, .. } => path,
            ImportError::Syntax { file, .. } | ImportError::Invalid { file, .. } => file,
        }
    }

    /// The path inside the file, if known.
    pub fn path(&self) -> Option<&str> {
        match self {
            ImportError::Invalid { path, .. } => Some(path),
            _ => None,
        }
    }
}
