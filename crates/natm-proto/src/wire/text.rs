//! Helpers shared by the text formats ([`super::qos`], [`super::addr`]): where an error
//! is, and how to point at it.
//!
//! Every text parser reports the byte offset of the offending token; these helpers turn
//! that into a 1-based character column and a caret line, and never panic whatever
//! offset or input they are given (the input a caller passes back may not be the one
//! that was parsed).

use std::fmt::Write as _;

/// The 1-based column (in characters) of byte offset `pos` in `input`.
pub(crate) fn column(input: &str, pos: usize) -> usize {
    input.char_indices().take_while(|&(i, _)| i < pos).count() + 1
}

/// `input` made safe to echo on one terminal line: control characters (tabs, newlines)
/// become a single space so that the caret line below stays aligned.
pub(crate) fn echo_line(input: &str) -> String {
    input
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// A line of spaces and carets that underlines `token` at byte offset `pos` of `input`
/// (one caret at least, so that an error at the end of the text is still visible).
pub(crate) fn caret_line(input: &str, pos: usize, token: &str) -> String {
    let indent = column(input, pos) - 1;
    let width = token.chars().count().max(1);
    let mut line = String::with_capacity(indent + width);
    line.extend(std::iter::repeat_n(' ', indent));
    line.extend(std::iter::repeat_n('^', width));
    line
}

/// How an error names its token: `"tok" at column 7`, or `at end of text (column 7)`.
pub(crate) fn describe_token(token: &str, column: usize) -> String {
    let mut out = String::new();
    if token.is_empty() {
        let _ = write!(out, "at end of text (column {column})");
    } else {
        let _ = write!(out, "{token:?} at column {column}");
    }
    out
}

/// The input echoed, with a caret line under the token: the block a command-line tool
/// prints below the error message.
pub(crate) fn render(input: &str, pos: usize, token: &str) -> String {
    format!(
        "  {}\n  {}",
        echo_line(input),
        caret_line(input, pos, token)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_count_characters_not_bytes() {
        assert_eq!(column("cbrr", 0), 1);
        assert_eq!(column("cbr:pcr", 4), 5);
        assert_eq!(column("é:x", 3), 3);
        assert_eq!(column("abc", 99), 4);
    }

    #[test]
    fn caret_line_underlines_the_token() {
        assert_eq!(caret_line("cbr:pcr=1x", 8, "1x"), "        ^^");
        assert_eq!(caret_line("ubr:", 4, ""), "    ^");
        // An offset inside a multi-byte character must not panic.
        assert_eq!(caret_line("é", 1, "é"), " ^");
    }

    #[test]
    fn echo_replaces_control_characters() {
        assert_eq!(echo_line("a\tb\nc"), "a b c");
    }

    #[test]
    fn token_descriptions() {
        assert_eq!(describe_token("cbrr", 1), "\"cbrr\" at column 1");
        assert_eq!(describe_token("", 5), "at end of text (column 5)");
    }
}
