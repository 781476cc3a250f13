//! Text from a log or a config as the page shows it: escaped for HTML, and a key labelled
//! (the empty key, a global limit's, has a name of its own).
//!
//! Shared by every section of the page, so that no section quotes the log unescaped.

use crate::printable::Printable;

/// `text` with the characters HTML gives a meaning escaped.
pub(super) fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A key as charts show it.
pub(super) fn key_label(k: &str) -> String {
    if k.is_empty() {
        "(no key)".to_owned()
    } else {
        Printable::new(k).to_string()
    }
}

/// Puts a chart on the page: given its file name (without `.svg`) and its SVG, keeps it as a
/// file and returns the page's `<figure>` for it.
pub(super) type Figure<'a> = dyn FnMut(String, String) -> String + 'a;
