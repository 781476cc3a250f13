//! [`Printable`]: text that came from a log (or names one), made safe and short to print.
//!
//! A log holds what clients sent, and the replay's summary and errors go to a terminal. An
//! escape sequence there can clear the screen, retitle the window or hide what follows; a CR
//! returns to the start of the line and a newline (or NEL, U+2028, U+2029) starts another,
//! either of which forges a line of the report; bidirectional controls reorder what is shown.
//! Every such character is written escaped, as Rust escapes it (`\u{1b}`, `\r`, `\n`,
//! `\u{202e}`). A backslash is left as it is: escaping it would double every backslash of a
//! key (a Windows path, a regex) and make escaping twice differ from escaping once, which it
//! must not (a malformed line's reason is escaped when made and again when printed); a literal
//! `\n` in a log then reads like an escaped newline, which puts no control byte on the screen.
//!
//! Nor may a message grow with the log (a line of 100 MB without a newline): at most `max`
//! bytes of the escaped text are written, then ` … [cut: N bytes in all]`, so the reader sees
//! that the value was longer and how long.

use std::fmt::{self, Write as _};

/// The most bytes of one value shown by default (a key, a time that does not parse).
pub const MAX_VALUE: usize = 200;

/// The most bytes of one message shown (a malformed line's reason, a note, an error).
pub const MAX_MESSAGE: usize = 1_024;

/// `text`, displayed escaped and cut at `max` bytes (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct Printable<'a> {
    text: &'a str,
    max: usize,
}

impl<'a> Printable<'a> {
    /// `text`, cut at [`MAX_VALUE`] bytes.
    pub fn new(text: &'a str) -> Printable<'a> {
        Printable {
            text,
            max: MAX_VALUE,
        }
    }

    /// `text`, cut at [`MAX_MESSAGE`] bytes.
    pub fn message(text: &'a str) -> Printable<'a> {
        Printable {
            text,
            max: MAX_MESSAGE,
        }
    }

    /// The same text, cut at `max` bytes of escaped text instead.
    #[must_use]
    pub fn max(self, max: usize) -> Printable<'a> {
        Printable { max, ..self }
    }
}

/// Whether `c` is written escaped: a control character (C0, DEL, C1: escape sequences, CR,
/// newline, NEL), a line or paragraph separator, or a bidirectional control.
fn escaped(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
        )
}

impl fmt::Display for Printable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut written = 0;
        for c in self.text.chars() {
            let len = if escaped(c) {
                c.escape_default().len()
            } else {
                c.len_utf8()
            };
            if written + len > self.max {
                return write!(f, " … [cut: {} bytes in all]", self.text.len());
            }
            written += len;
            if escaped(c) {
                write!(f, "{}", c.escape_default())?;
            } else {
                f.write_char(c)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_escaped_once() {
        let text = "a\u{1b}[2J\r\nb\u{85}\u{2028}\u{202e}c\\n é";
        let once = Printable::new(text).to_string();
        assert_eq!(once, r"a\u{1b}[2J\r\nb\u{85}\u{2028}\u{202e}c\n é");
        assert_eq!(
            Printable::new(&once).to_string(),
            once,
            "escaping is idempotent"
        );
    }

    #[test]
    fn long_text_is_cut_and_says_so() {
        let text = "é".repeat(1_000);
        let shown = Printable::new(&text).max(11).to_string();
        assert_eq!(shown, "ééééé … [cut: 2000 bytes in all]");
        assert_eq!(Printable::new("short").max(5).to_string(), "short");
    }
}
