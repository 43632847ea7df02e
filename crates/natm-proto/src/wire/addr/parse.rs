//! The address parser (grammar in the module docs of [`super`]).
//!
//! The form is chosen from the characters used, as Linux's order of attempts would, but
//! once the form is clear a mistake is reported as that form's error rather than
//! falling through to the next form: `+…` is E.164; text with a `:` is an E.164-format
//! AESA; digits, dots and wildcards are a PVC (or, with 20 digits or more, an AESA); hex
//! digits and dots, or text of 30 hex digits or more, are an AESA; anything else is a
//! name. A numeric form that fails can still be a name in the hosts file.

use std::fmt;

use super::{Aesa, AtmAddr, HostsFile, Pvc, PvcPart, E164};
use crate::wire::text;

const FORMS: &str = "vpi.vci, itf.vpi.vci, an AESA of 40 hex digits, or + and an E.164 number";

/// What is wrong with an address text; see [`AddrParseError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AddrErrorKind {
    /// Nothing but white space.
    Empty,
    /// A PVC with the wrong number of parts, or `?` as its interface.
    BadPvc,
    /// A PVC part that is not a number or wildcard, or has a leading zero.
    BadNumber,
    /// An interface, VPI or VCI above its maximum.
    OutOfRange,
    /// A character the form does not allow (a non-hex digit in an AESA).
    BadChar,
    /// A dot at the start or end, or two in a row.
    BadDot,
    /// An AESA without exactly 40 hex digits, or an E.164 number of 0 or over 15 digits.
    BadLength,
    /// An AESA whose AFI (first byte) is 00.
    BadAfi,
    /// Not an address, and not a name in the hosts file (or there is none).
    UnknownName,
}

/// An address text that does not parse: where (`pos`, a byte offset, and `column`,
/// 1-based in characters), which token, and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddrParseError {
    /// Byte offset of the offending token in the input.
    pub pos: usize,
    /// 1-based column (in characters) of the offending token.
    pub column: usize,
    /// The offending token (empty at the end of the text).
    pub token: String,
    /// What is wrong.
    pub kind: AddrErrorKind,
    detail: String,
}

impl AddrParseError {
    fn new(src: &str, pos: usize, token: &str, kind: AddrErrorKind, detail: String) -> Self {
        AddrParseError {
            pos,
            column: text::column(src, pos),
            token: token.to_string(),
            kind,
            detail,
        }
    }

    /// What is accepted at that point.
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// A line of carets under the offending token of `input` (the text that was parsed).
    pub fn caret_line(&self, input: &str) -> String {
        text::caret_line(input, self.pos, &self.token)
    }

    /// The message, then `input` with a caret line under the offending token.
    pub fn render(&self, input: &str) -> String {
        format!("{self}\n{}", text::render(input, self.pos, &self.token))
    }
}

impl fmt::Display for AddrParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headline = match self.kind {
            AddrErrorKind::Empty => return write!(f, "empty ATM address: {}", self.detail),
            AddrErrorKind::BadPvc => "bad PVC address",
            AddrErrorKind::BadNumber => "bad number",
            AddrErrorKind::OutOfRange => "number out of range",
            AddrErrorKind::BadChar => "unexpected character",
            AddrErrorKind::BadDot => "misplaced dot",
            AddrErrorKind::BadLength => "wrong length",
            AddrErrorKind::BadAfi => "bad AFI",
            AddrErrorKind::UnknownName => "unknown address",
        };
        let token = text::describe_token(&self.token, self.column);
        write!(f, "{headline} {token}: {}", self.detail)
    }
}

impl std::error::Error for AddrParseError {}

/// Parses `src[start..end]` (trimmed), reporting positions within `src`.
pub(super) fn parse(
    src: &str,
    start: usize,
    end: usize,
    hosts: Option<&HostsFile>,
) -> Result<AtmAddr, AddrParseError> {
    let whole = src.get(start..end).unwrap_or("");
    let trimmed = whole.trim();
    let start = start + (whole.len() - whole.trim_start().len());
    let p = Parser { src };
    if trimmed.is_empty() {
        return Err(p.err(start, "", AddrErrorKind::Empty, format!("expected {FORMS}")));
    }
    let numeric = p.numeric(trimmed, start);
    let found = hosts.and_then(|h| h.lookup(trimmed));
    match (numeric, found) {
        (Some(Ok(addr)), _) => Ok(addr),
        (_, Some(addr)) => Ok(*addr),
        (Some(Err(e)), None) if looks_numeric(trimmed) => Err(e),
        _ => {
            let why = if hosts.is_some() {
                "and not a name in the hosts file"
            } else {
                "and names need a hosts file (AtmAddr::parse_with_hosts)"
            };
            Err(p.err(
                start,
                trimmed,
                AddrErrorKind::UnknownName,
                format!("not an ATM address ({FORMS}), {why}"),
            ))
        }
    }
}

/// Whether a failed numeric parse should be reported as such rather than as an
/// unknown name: the text starts the way only addresses do.
fn looks_numeric(t: &str) -> bool {
    t.starts_with(|c: char| c.is_ascii_digit() || matches!(c, '+' | '*' | '?' | '.'))
        || t.contains(':')
}

struct Parser<'a> {
    src: &'a str,
}

impl Parser<'_> {
    fn err(&self, pos: usize, token: &str, kind: AddrErrorKind, detail: String) -> AddrParseError {
        AddrParseError::new(self.src, pos, token, kind, detail)
    }

    /// The address `t` (at `at` in the source) if it is written in a numeric form, or
    /// `None` if it can only be a name.
    fn numeric(&self, t: &str, at: usize) -> Option<Result<AtmAddr, AddrParseError>> {
        if let Some(rest) = t.strip_prefix('+') {
            return Some(self.e164(rest, at + 1));
        }
        if t.contains(':') {
            return Some(self.aesa(t, at).map(AtmAddr::Aesa));
        }
        let pvc_chars = t
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | '*' | '?'));
        let digits = t.chars().filter(char::is_ascii_digit).count();
        if pvc_chars && (digits < 20 || t.contains(['*', '?'])) {
            return Some(self.pvc(t, at));
        }
        // Mostly hex digits: an AESA, even with a typo in it.
        let hex = t.chars().filter(char::is_ascii_hexdigit).count();
        if t.chars().all(|c| c.is_ascii_hexdigit() || c == '.') || hex >= 30 {
            return Some(self.aesa(t, at).map(AtmAddr::Aesa));
        }
        None
    }

    /// `[itf.]vpi.vci`.
    fn pvc(&self, t: &str, at: usize) -> Result<AtmAddr, AddrParseError> {
        let form = "a PVC address is vpi.vci or itf.vpi.vci; an E.164 number starts with +";
        let parts: Vec<(usize, &str)> = t
            .split('.')
            .scan(at, |pos, part| {
                let start = *pos;
                *pos += part.len() + 1;
                Some((start, part))
            })
            .collect();
        if let Some(i) = parts.iter().position(|(_, p)| p.is_empty()) {
            // The dot that is wrong: a leading one, the one ending the text, or the
            // second of two in a row (which starts the empty part).
            let pos = parts[i].0;
            let dot = if i > 0 && i + 1 == parts.len() {
                pos - 1
            } else {
                pos
            };
            return Err(self.err(
                dot,
                ".",
                AddrErrorKind::BadDot,
                format!("a dot goes between two parts: {form}"),
            ));
        }
        if parts.len() < 2 || parts.len() > 3 {
            return Err(self.err(at, t, AddrErrorKind::BadPvc, form.to_string()));
        }
        let names: &[(&str, u16)] = if parts.len() == 3 {
            &[
                ("itf", Pvc::MAX_ITF),
                ("vpi", Pvc::MAX_VPI),
                ("vci", Pvc::MAX_VCI),
            ]
        } else {
            &[("vpi", Pvc::MAX_VPI), ("vci", Pvc::MAX_VCI)]
        };
        let mut values = [PvcPart::Num(0); 3];
        let offset = 3 - parts.len();
        for (i, (&(pos, part), &(name, max))) in parts.iter().zip(names).enumerate() {
            values[offset + i] = self.pvc_part(part, pos, name, max)?;
        }
        let [itf, vpi, vci] = values;
        if itf == PvcPart::Unspec {
            return Err(self.err(
                at,
                "?",
                AddrErrorKind::BadPvc,
                "the interface cannot be ? (unspecified); use * for any interface".into(),
            ));
        }
        Pvc::new(itf, vpi, vci)
            .map(AtmAddr::Pvc)
            .ok_or_else(|| self.err(at, t, AddrErrorKind::BadPvc, form.to_string()))
    }

    fn pvc_part(
        &self,
        part: &str,
        pos: usize,
        name: &str,
        max: u16,
    ) -> Result<PvcPart, AddrParseError> {
        match part {
            "*" => return Ok(PvcPart::Any),
            "?" => return Ok(PvcPart::Unspec),
            _ => {}
        }
        if !part.bytes().all(|b| b.is_ascii_digit()) {
            return Err(self.err(
                pos,
                part,
                AddrErrorKind::BadNumber,
                format!("the {name} is a number, * (any) or ? (unspecified)"),
            ));
        }
        if part.len() > 1 && part.starts_with('0') {
            return Err(self.err(
                pos,
                part,
                AddrErrorKind::BadNumber,
                format!("the {name} has a leading zero; write it without"),
            ));
        }
        part.parse::<u16>()
            .ok()
            .filter(|&n| n <= max)
            .map(PvcPart::Num)
            .ok_or_else(|| {
                self.err(
                    pos,
                    part,
                    AddrErrorKind::OutOfRange,
                    format!("the {name} is at most {max}"),
                )
            })
    }

    /// Digits with single dots between them, as in an E.164 number; `what` names the
    /// part for messages.
    fn digits(&self, t: &str, at: usize, what: &str) -> Result<String, AddrParseError> {
        let mut digits = String::new();
        for (i, c) in t.char_indices() {
            let pos = at + i;
            match c {
                '0'..='9' => digits.push(c),
                '.' if i > 0 && i + 1 < t.len() && !t[..i].ends_with('.') => {}
                '.' => {
                    return Err(self.err(
                        pos,
                        ".",
                        AddrErrorKind::BadDot,
                        format!("a dot in {what} goes between two digits"),
                    ))
                }
                _ => {
                    return Err(self.err(
                        pos,
                        &c.to_string(),
                        AddrErrorKind::BadChar,
                        format!("{what} has only decimal digits"),
                    ))
                }
            }
        }
        if digits.is_empty() || digits.len() > E164::MAX_DIGITS {
            // With nothing to point at, point at what follows.
            let token = match t {
                "" => self.src.get(at..).and_then(|r| r.get(..1)).unwrap_or(""),
                _ => t,
            };
            return Err(self.err(
                at,
                token,
                AddrErrorKind::BadLength,
                format!(
                    "{what} has 1 to {} digits, not {}",
                    E164::MAX_DIGITS,
                    digits.len()
                ),
            ));
        }
        Ok(digits)
    }

    /// An E.164 number after its `+` (`t` starts at `at`), with an optional subaddress.
    fn e164(&self, t: &str, at: usize) -> Result<AtmAddr, AddrParseError> {
        let (text, sub) = match t.split_once('+') {
            Some((text, sub)) => (text, Some(sub)),
            None => (t, None),
        };
        let digits = self.digits(text, at, "an E.164 number")?;
        let number = E164::new(&digits).ok_or_else(|| {
            self.err(
                at,
                text,
                AddrErrorKind::BadLength,
                "bad E.164 number".into(),
            )
        })?;
        let subaddress = match sub {
            None => None,
            Some(sub) => Some(self.aesa(sub, at + text.len() + 1)?),
        };
        Ok(AtmAddr::E164 { number, subaddress })
    }

    /// An AESA: 40 hex digits, or `e164-digits:` and 22 hex digits.
    fn aesa(&self, t: &str, at: usize) -> Result<Aesa, AddrParseError> {
        let mut bytes = [0u8; Aesa::LEN];
        let Some((number, rest)) = t.split_once(':') else {
            let nibbles = self.hex(t, at, Aesa::LEN * 2, "an AESA")?;
            pack(&nibbles, &mut bytes);
            if bytes[0] == 0 {
                return Err(self.err(
                    at,
                    t.get(..2).unwrap_or(t),
                    AddrErrorKind::BadAfi,
                    "AFI 00 is not an address format (39 DCC, 45 E.164, 47 ICD, 49 local)".into(),
                ));
            }
            return Ok(Aesa(bytes));
        };
        let what = "the E.164 number of an AESA";
        if let Some(bad) = number.find(|c: char| !c.is_ascii_digit()) {
            let c = number[bad..].chars().next().unwrap_or('.');
            return Err(self.err(
                at + bad,
                &c.to_string(),
                AddrErrorKind::BadChar,
                format!("{what} has only decimal digits, without dots"),
            ));
        }
        let digits = self.digits(number, at, what)?;
        if digits.starts_with('0') {
            return Err(self.err(
                at,
                number,
                AddrErrorKind::BadNumber,
                format!("{what} cannot start with 0"),
            ));
        }
        // AFI 45, then the number right-aligned in 15 BCD digits and a filler 0xF.
        let mut nibbles = vec![0x4, 0x5];
        nibbles.resize(17 - digits.len(), 0);
        nibbles.extend(digits.bytes().map(|d| d - b'0'));
        nibbles.push(0xF);
        let colon = at + number.len();
        nibbles.extend(self.hex(rest, colon + 1, 22, "the rest of an E.164-format AESA")?);
        pack(&nibbles, &mut bytes);
        Ok(Aesa(bytes))
    }

    /// Exactly `count` hex digits with single dots between them.
    fn hex(&self, t: &str, at: usize, count: usize, what: &str) -> Result<Vec<u8>, AddrParseError> {
        let mut nibbles = Vec::with_capacity(count);
        for (i, c) in t.char_indices() {
            let pos = at + i;
            match c.to_digit(16) {
                Some(d) => nibbles.push(u8::try_from(d).unwrap_or(0)),
                None if c == '.' && i > 0 && i + 1 < t.len() && !t[..i].ends_with('.') => {}
                None if c == '.' => {
                    return Err(self.err(
                        pos,
                        ".",
                        AddrErrorKind::BadDot,
                        format!("a dot in {what} goes between two hex digits"),
                    ))
                }
                None => {
                    return Err(self.err(
                        pos,
                        &c.to_string(),
                        AddrErrorKind::BadChar,
                        format!("{what} has hex digits (0-9, A-F) and dots"),
                    ))
                }
            }
        }
        if nibbles.len() != count {
            return Err(self.err(
                at,
                t,
                AddrErrorKind::BadLength,
                format!("{what} has {count} hex digits, not {}", nibbles.len()),
            ));
        }
        Ok(nibbles)
    }
}

/// Packs nibbles, high first, into `bytes` (extra nibbles are ignored).
fn pack(nibbles: &[u8], bytes: &mut [u8; Aesa::LEN]) {
    for (byte, pair) in bytes.iter_mut().zip(nibbles.chunks(2)) {
        let low = pair.get(1).copied().unwrap_or(0);
        *byte = (pair[0] << 4) | low;
    }
}
