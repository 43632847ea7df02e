//! The QoS text parser (grammar in the module docs of [`super`]).
//!
//! A hand-written scanner over the input that keeps byte offsets, so every error names
//! the token at fault. Values are checked as they are read (numbers, units, ranges);
//! the rules that tie several settings together are [`Qos::new`]'s, and a broken one
//! is reported at the setting written last among those involved.

use std::fmt;
use std::str::FromStr;

use super::{
    Aal, Direction, FlowKind, Qos, QosConflict, QosKey, Rate, Semantics, Service, Smoothing,
    TrafficClass, TrafficParams, TransportKind, TransportParams, BITS_PER_CELL,
};
use crate::wire::text;

const CLASSES: &str = "ubr, cbr, vbr, abr, any, guaranteed, reliable or best-effort";
const TRAFFIC_KEYS: &str = "max_pcr, pcr, min_pcr, scr, mbs, max_cdv or max_sdu (alias sdu)";
const ALL_KEYS: &str = "max_pcr, pcr, min_pcr, scr, mbs, max_cdv, max_sdu (alias sdu), \
     transport, flow, ec, mode, tpdu, window, msg, outstanding, prio, bucket, delay, or a tx:/rx: group";
const RATE_FORM: &str = "a rate is max or a number with an optional unit: 10Mbps (bits/s), \
     3000cps or a bare 3000 (cells/s)";

/// What is wrong with a QoS text; see [`QosParseError`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QosErrorKind {
    /// Nothing but white space.
    Empty,
    /// A separator or token where another was expected (`ubr:`, `pcr 1`, `cbr:,`).
    Syntax,
    /// Not a traffic class, service or AAL.
    UnknownClass,
    /// Not a parameter name.
    UnknownParam,
    /// Not one of the words a parameter takes (`flow=fast`).
    UnknownValue,
    /// Not a number, or a number that does not come out whole.
    BadNumber,
    /// A unit or multiplier that is not accepted (`10kb`, `10k`, `10MBps`).
    BadUnit,
    /// A number outside the parameter's range.
    OutOfRange,
    /// The same class, AAL, parameter or group given twice in one list.
    DuplicateParam,
    /// A parameter where it cannot go (a transport parameter inside `tx:`).
    Misplaced,
    /// Settings that contradict each other.
    Conflict(QosConflict),
}

/// A QoS text that does not parse: where (`pos`, a byte offset, and `column`, 1-based in
/// characters), which token, and what is wrong. `Display` says what is accepted there;
/// [`QosParseError::render`] draws a caret under the token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QosParseError {
    /// Byte offset of the offending token in the input.
    pub pos: usize,
    /// 1-based column (in characters) of the offending token.
    pub column: usize,
    /// The offending token (empty at the end of the text).
    pub token: String,
    /// What is wrong.
    pub kind: QosErrorKind,
    detail: String,
}

impl QosParseError {
    fn new(src: &str, pos: usize, token: &str, kind: QosErrorKind, detail: String) -> Self {
        QosParseError {
            pos,
            column: text::column(src, pos),
            token: token.to_string(),
            kind,
            detail,
        }
    }

    /// What is accepted at that point, or why the settings conflict.
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

impl fmt::Display for QosParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headline = match self.kind {
            QosErrorKind::Empty => return write!(f, "empty QoS specification: {}", self.detail),
            QosErrorKind::Syntax => "syntax error",
            QosErrorKind::UnknownClass => "unknown traffic class",
            QosErrorKind::UnknownParam => "unknown parameter",
            QosErrorKind::UnknownValue => "unknown value",
            QosErrorKind::BadNumber => "bad number",
            QosErrorKind::BadUnit => "bad unit",
            QosErrorKind::OutOfRange => "value out of range",
            QosErrorKind::DuplicateParam => "given twice",
            QosErrorKind::Misplaced => "misplaced parameter",
            QosErrorKind::Conflict(_) => "conflicting setting",
        };
        let token = text::describe_token(&self.token, self.column);
        write!(f, "{headline} {token}: {}", self.detail)
    }
}

impl std::error::Error for QosParseError {}

impl FromStr for Qos {
    type Err = QosParseError;

    fn from_str(s: &str) -> Result<Qos, QosParseError> {
        Parser::new(s).parse()
    }
}

/// Which list a setting was written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scope {
    Shared,
    Group(Direction),
}

/// Where a setting was written, to point at it when it conflicts with another.
#[derive(Clone, Copy, Debug)]
struct Setting {
    scope: Scope,
    key: QosKey,
    start: usize,
    end: usize,
}

/// Where the head items and `none` markers were written.
#[derive(Default)]
struct Marks {
    class: (usize, usize),
    aal: Option<(usize, usize)>,
    none: Vec<(usize, usize)>,
}

struct Parser<'a> {
    src: &'a str,
    pos: usize,
    end: usize,
    settings: Vec<Setting>,
    marks: Marks,
}

fn dir_index(dir: Direction) -> usize {
    match dir {
        Direction::Tx => 0,
        Direction::Rx => 1,
    }
}

/// What a word of the head names.
enum Head {
    Class(TrafficClass, Option<Service>),
    Aal(Aal),
}

fn head_keyword(word: &str) -> Option<Head> {
    let w = word.to_ascii_lowercase();
    Some(match w.as_str() {
        "ubr" => Head::Class(TrafficClass::Ubr, None),
        "cbr" => Head::Class(TrafficClass::Cbr, None),
        "vbr" => Head::Class(TrafficClass::Vbr, None),
        "abr" => Head::Class(TrafficClass::Abr, None),
        "any" => Head::Class(TrafficClass::Any, None),
        "guaranteed" => Head::Class(TrafficClass::Cbr, Some(Service::Guaranteed)),
        "reliable" => Head::Class(TrafficClass::Ubr, Some(Service::Reliable)),
        "best-effort" | "best_effort" => Head::Class(TrafficClass::Ubr, Some(Service::BestEffort)),
        "aal0" => Head::Aal(Aal::Aal0),
        "aal5" => Head::Aal(Aal::Aal5),
        _ => return None,
    })
}

fn param_keyword(word: &str) -> Option<QosKey> {
    let w = word.to_ascii_lowercase();
    if w == "sdu" {
        return Some(QosKey::MaxSdu);
    }
    QosKey::TRAFFIC
        .into_iter()
        .chain(QosKey::TRANSPORT)
        .find(|k| k.name() == w)
}

impl<'a> Parser<'a> {
    fn new(src: &'a str) -> Self {
        let start = src.len() - src.trim_start().len();
        let end = src.trim_end().len().max(start);
        Parser {
            src,
            pos: start,
            end,
            settings: Vec::new(),
            marks: Marks::default(),
        }
    }

    fn err(&self, pos: usize, token: &str, kind: QosErrorKind, detail: String) -> QosParseError {
        QosParseError::new(self.src, pos, token, kind, detail)
    }

    fn peek(&self) -> Option<char> {
        self.src.get(self.pos..self.end)?.chars().next()
    }

    /// The next word: the longest run of characters that are not separators or spaces.
    fn word(&mut self) -> (usize, &'a str) {
        let start = self.pos;
        let rest = self.src.get(start..self.end).unwrap_or("");
        let len = rest
            .find(|c: char| matches!(c, ',' | ':' | '=') || c.is_whitespace())
            .unwrap_or(rest.len());
        self.pos = start + len;
        (start, &rest[..len])
    }

    /// An error for a missing word: names the character found instead, or the end.
    fn expected(&self, what: &str) -> QosParseError {
        match self.peek() {
            Some(c) if c.is_whitespace() => self.err(
                self.pos,
                &c.to_string(),
                QosErrorKind::Syntax,
                format!("expected {what}; spaces are not allowed inside a QoS specification"),
            ),
            Some(c) => self.err(
                self.pos,
                &c.to_string(),
                QosErrorKind::Syntax,
                format!("expected {what}"),
            ),
            None => self.err(
                self.pos,
                "",
                QosErrorKind::Syntax,
                format!("expected {what}"),
            ),
        }
    }

    fn parse(mut self) -> Result<Qos, QosParseError> {
        if self.pos >= self.end {
            return Err(self.err(
                self.pos,
                "",
                QosErrorKind::Empty,
                format!("expected a traffic class ({CLASSES}), e.g. ubr or cbr:pcr=10Mbps"),
            ));
        }
        let (class, service, aal, has_body) = self.head()?;
        let mut transport = TransportParams {
            service,
            ..TransportParams::default()
        };
        let mut lists = [TrafficParams::new(class); 3]; // shared, tx group, rx group
        let mut unused = [false; 2];
        if has_body {
            self.body(&mut lists, &mut transport, &mut unused)?;
        }
        let [shared, tx_group, rx_group] = lists;
        let direction = |group: TrafficParams, unused: bool| {
            if unused {
                TrafficParams::UNUSED
            } else {
                overlay(shared, group)
            }
        };
        let tx = direction(tx_group, unused[0]);
        let rx = direction(rx_group, unused[1]);
        Qos::new(aal, tx, rx, transport).map_err(|c| self.conflict(c))
    }

    /// `class [, aal]` or `aal, class`, up to and including the `:` if there is one.
    fn head(&mut self) -> Result<(TrafficClass, Option<Service>, Aal, bool), QosParseError> {
        let mut class = None;
        let mut aal = None;
        let has_body = loop {
            let (at, w) = self.word();
            if w.is_empty() {
                return Err(self.expected(&format!("a traffic class ({CLASSES})")));
            }
            let span = (at, at + w.len());
            match head_keyword(w) {
                Some(Head::Class(c, s)) if class.is_none() => {
                    class = Some((c, s));
                    self.marks.class = span;
                }
                Some(Head::Aal(a)) if aal.is_none() => {
                    aal = Some(a);
                    self.marks.aal = Some(span);
                }
                Some(Head::Class(..)) => {
                    return Err(self.err(
                        at,
                        w,
                        QosErrorKind::DuplicateParam,
                        "a QoS specification has one traffic class".to_string(),
                    ))
                }
                Some(Head::Aal(_)) => {
                    return Err(self.err(
                        at,
                        w,
                        QosErrorKind::DuplicateParam,
                        "a QoS specification has one AAL".to_string(),
                    ))
                }
                None => {
                    let hint = if self.peek() == Some('=') {
                        "; parameters follow the class and a colon, e.g. cbr:pcr=10Mbps"
                    } else {
                        ""
                    };
                    return Err(self.err(
                        at,
                        w,
                        QosErrorKind::UnknownClass,
                        format!("expected {CLASSES} (optionally with aal0 or aal5){hint}"),
                    ));
                }
            }
            match self.peek() {
                None => break false,
                Some(':') => {
                    self.pos += 1;
                    break true;
                }
                Some(',') => self.pos += 1,
                Some(_) => return Err(self.expected("':' before the parameters")),
            }
        };
        let Some((class, service)) = class else {
            let (start, end) = self.marks.aal.unwrap_or((self.pos, self.pos));
            return Err(self.err(
                start,
                self.src.get(start..end).unwrap_or(""),
                QosErrorKind::Syntax,
                format!("a traffic class is required with the AAL: {CLASSES}, e.g. ubr,aal5"),
            ));
        };
        Ok((class, service, aal.unwrap_or_default(), has_body))
    }

    /// The parameter lists after the `:`.
    fn body(
        &mut self,
        lists: &mut [TrafficParams; 3],
        transport: &mut TransportParams,
        unused: &mut [bool; 2],
    ) -> Result<(), QosParseError> {
        let mut scope = Scope::Shared;
        let mut groups_seen = [false; 2];
        let mut after_none = false;
        loop {
            let (mut at, mut w) = self.word();
            if w.is_empty() {
                let what = match scope {
                    Scope::Shared => "a parameter",
                    Scope::Group(_) => "a traffic parameter",
                };
                return Err(self.expected(what));
            }
            let group = match w.to_ascii_lowercase().as_str() {
                "tx" => Some(Direction::Tx),
                "rx" => Some(Direction::Rx),
                _ => None,
            };
            if let (Some(dir), Some(':')) = (group, self.peek()) {
                if std::mem::replace(&mut groups_seen[dir_index(dir)], true) {
                    return Err(self.err(
                        at,
                        w,
                        QosErrorKind::DuplicateParam,
                        format!("the {dir}: group is already given"),
                    ));
                }
                self.pos += 1;
                scope = Scope::Group(dir);
                let save = self.pos;
                let (nat, nw) = self.word();
                if nw.eq_ignore_ascii_case("none") && matches!(self.peek(), None | Some(',')) {
                    unused[dir_index(dir)] = true;
                    self.marks.none.push((nat, nat + nw.len()));
                    after_none = true;
                    if !self.separator()? {
                        return Ok(());
                    }
                    continue;
                }
                self.pos = save;
                after_none = false;
                (at, w) = self.word();
                if w.is_empty() {
                    return Err(self.expected(&format!("none or a traffic parameter after {dir}:")));
                }
            } else if after_none {
                return Err(self.err(
                    at,
                    w,
                    QosErrorKind::Misplaced,
                    "after tx:none or rx:none only the other group may follow".to_string(),
                ));
            }
            self.param(at, w, scope, lists, transport)?;
            if !self.separator()? {
                return Ok(());
            }
        }
    }

    /// Consumes a `,` (true) or finds the end (false).
    fn separator(&mut self) -> Result<bool, QosParseError> {
        match self.peek() {
            None => Ok(false),
            Some(',') => {
                self.pos += 1;
                Ok(true)
            }
            Some(_) => Err(self.expected("',' or the end")),
        }
    }

    /// `key=value`, stored in the list of `scope`.
    fn param(
        &mut self,
        at: usize,
        w: &'a str,
        scope: Scope,
        lists: &mut [TrafficParams; 3],
        transport: &mut TransportParams,
    ) -> Result<(), QosParseError> {
        let Some(key) = param_keyword(w) else {
            let expected = match scope {
                Scope::Shared => ALL_KEYS,
                Scope::Group(_) => TRAFFIC_KEYS,
            };
            let hint = if head_keyword(w).is_some() {
                "; the class and AAL go before the colon"
            } else {
                ""
            };
            return Err(self.err(
                at,
                w,
                QosErrorKind::UnknownParam,
                format!("expected {expected}{hint}"),
            ));
        };
        if let (Scope::Group(dir), true) = (scope, key.is_transport()) {
            return Err(self.err(
                at,
                w,
                QosErrorKind::Misplaced,
                format!("{key} applies to the whole connection: put it before the {dir}: group"),
            ));
        }
        if self.peek() != Some('=') {
            return Err(self.expected(&format!("'=' and a value after {key}")));
        }
        self.pos += 1;
        let (vat, v) = self.word();
        if v.is_empty() {
            return Err(self.expected(&format!("a value for {key}")));
        }
        let end = vat + v.len();
        if let Some(prev) = self
            .settings
            .iter()
            .find(|s| s.scope == scope && s.key == key)
        {
            return Err(self.err(
                at,
                &self.src[at..end],
                QosErrorKind::DuplicateParam,
                format!(
                    "{key} is already set in this list, at column {}",
                    text::column(self.src, prev.start)
                ),
            ));
        }
        let slot = match scope {
            Scope::Shared => &mut lists[0],
            Scope::Group(Direction::Tx) => &mut lists[1],
            Scope::Group(Direction::Rx) => &mut lists[2],
        };
        self.value(key, vat, v, slot, transport)?;
        self.settings.push(Setting {
            scope,
            key,
            start: at,
            end,
        });
        Ok(())
    }

    /// Parses `v`, the value of `key` at `vat`, into its field.
    fn value(
        &self,
        key: QosKey,
        vat: usize,
        v: &str,
        tp: &mut TrafficParams,
        t: &mut TransportParams,
    ) -> Result<(), QosParseError> {
        let num = |n: ValueResult| {
            let n = n.map_err(|(kind, detail)| self.err(vat, v, kind, detail))?;
            key.check(None, Some(n)).map_err(|_| {
                self.err(
                    vat,
                    v,
                    QosErrorKind::OutOfRange,
                    format!("{key} takes {}", key.range_text()),
                )
            })?;
            Ok::<u64, QosParseError>(n)
        };
        let word = |choices: &[(&str, u8)], expected: &str| {
            let lower = v.to_ascii_lowercase().replace('_', "-");
            choices
                .iter()
                .find(|(name, _)| *name == lower)
                .map(|&(_, id)| id)
                .ok_or_else(|| {
                    self.err(
                        vat,
                        v,
                        QosErrorKind::UnknownValue,
                        format!("{key} takes {expected}"),
                    )
                })
        };
        let rate = || {
            let rate = parse_rate(v).map_err(|(kind, detail)| self.err(vat, v, kind, detail))?;
            key.check_rate(None, Some(rate)).map_err(|_| {
                self.err(
                    vat,
                    v,
                    QosErrorKind::OutOfRange,
                    format!("{key} takes {}", key.range_text()),
                )
            })?;
            Ok::<Rate, QosParseError>(rate)
        };
        // Every range below fits the field's type (QosKey::range), so the casts are exact.
        let small = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        match key {
            QosKey::MaxPcr => tp.max_pcr = Some(rate()?),
            QosKey::Pcr => tp.pcr = Some(rate()?),
            QosKey::MinPcr => tp.min_pcr = Some(rate()?),
            QosKey::Scr => tp.scr = Some(rate()?),
            QosKey::Mbs => tp.mbs = Some(small(num(parse_integer(v))?)),
            QosKey::MaxCdv => tp.max_cdv = Some(small(num(parse_micros(v))?)),
            QosKey::MaxSdu => tp.max_sdu = Some(small(num(parse_bytes(v))?)),
            QosKey::Flow => {
                let choices = [
                    ("none", 0),
                    ("leaky-bucket", 1),
                    ("packet-pair", 2),
                    ("window", 3),
                    ("abr", 4),
                ];
                t.flow = Some(
                    match word(&choices, "none, leaky-bucket, packet-pair, window or abr")? {
                        0 => FlowKind::None,
                        1 => FlowKind::LeakyBucket,
                        2 => FlowKind::PacketPair,
                        3 => FlowKind::Window,
                        _ => FlowKind::Abr,
                    },
                );
            }
            QosKey::Ec => t.error_control = Some(word(&[("on", 1), ("off", 0)], "on or off")? == 1),
            QosKey::Encrypt => t.encrypt = Some(word(&[("on", 1), ("off", 0)], "on or off")? == 1),
            QosKey::Mode => {
                let id = word(&[("message", 0), ("stream", 1)], "message or stream")?;
                t.semantics = Some(if id == 0 {
                    Semantics::Message
                } else {
                    Semantics::Stream
                });
            }
            QosKey::Tpdu if v.eq_ignore_ascii_case("auto") => {
                t.tpdu_size = None;
                t.tpdu_auto = true;
            }
            QosKey::Tpdu => {
                t.tpdu_size = Some(small(num(parse_bytes(v))?));
                t.tpdu_auto = false;
            }
            QosKey::Window => t.window = Some(small(num(parse_integer(v))?)),
            QosKey::Msg => t.max_msg = Some(num(parse_bytes(v))?),
            QosKey::Outstanding => t.outstanding = Some(small(num(parse_integer(v))?)),
            QosKey::Prio => t.priority = Some(u8::try_from(num(parse_integer(v))?).unwrap_or(0)),
            QosKey::Bucket => t.bucket = Some(small(num(parse_bytes(v))?)),
            QosKey::Delay => t.delay = Some(small(num(parse_micros(v))?)),
            QosKey::Smooth => {
                let id = word(&[("frame", 0), ("cell", 1)], "frame or cell")?;
                t.smoothing = Some(if id == 0 {
                    Smoothing::Frame
                } else {
                    Smoothing::Cell
                });
            }
            QosKey::Transport => {
                let id = word(
                    &[("natm", 0), ("none", 1)],
                    "natm (the default) or none (bare AAL5 SDUs)",
                )?;
                t.kind = if id == 0 {
                    TransportKind::Natm
                } else {
                    TransportKind::Bare
                };
            }
        }
        Ok(())
    }

    /// Turns a rule broken by the whole specification into an error at the setting that
    /// was written last among those involved.
    fn conflict(&self, conflict: QosConflict) -> QosParseError {
        let in_dir = |dir: Option<Direction>, keys: &[QosKey]| {
            self.settings
                .iter()
                .filter(|s| keys.contains(&s.key))
                .filter(|s| match (dir, s.scope) {
                    (Some(d), Scope::Group(g)) => d == g,
                    _ => true,
                })
                .map(|s| (s.start, s.end))
                .max()
        };
        let span = match &conflict {
            QosConflict::NoDirection => self.marks.none.iter().copied().max(),
            QosConflict::OutOfRange { dir, key, .. } => in_dir(*dir, &[*key]),
            QosConflict::MaxNotAllowed { dir, key } | QosConflict::VbrOnly { dir, key, .. } => {
                in_dir(Some(*dir), &[*key])
            }
            QosConflict::RateOrder { dir, low, high, .. } => in_dir(Some(*dir), &[*low, *high]),
            QosConflict::PresetOverride { key, .. } => in_dir(None, &[*key]),
            QosConflict::BucketWithoutLeakyBucket => in_dir(None, &[QosKey::Bucket]),
            QosConflict::DelayWithoutLeakyBucket => in_dir(None, &[QosKey::Delay]),
            QosConflict::SmoothingWithoutRate => in_dir(None, &[QosKey::Smooth]),
            QosConflict::BucketBelowTpdu { .. } => in_dir(None, &[QosKey::Bucket, QosKey::Tpdu]),
            QosConflict::TransportOnAal0 { key } => in_dir(None, &[*key]).max(self.marks.aal),
            QosConflict::TransportOnBare { key } => in_dir(None, &[*key, QosKey::Transport]),
            QosConflict::ServiceOnBare { .. } => in_dir(None, &[QosKey::Transport]),
            QosConflict::ClassMismatch { .. }
            | QosConflict::UnusedDirectionHasParams { .. }
            | QosConflict::GuaranteedWithoutRate { .. }
            | QosConflict::PresetClass { .. } => None,
        };
        let (start, end) = span.unwrap_or(self.marks.class);
        let token = self.src.get(start..end).unwrap_or("");
        let detail = conflict.to_string();
        self.err(start, token, QosErrorKind::Conflict(conflict), detail)
    }
}

/// `shared` with every field that `group` sets replaced by the group's value.
fn overlay(shared: TrafficParams, group: TrafficParams) -> TrafficParams {
    TrafficParams {
        class: shared.class,
        max_pcr: group.max_pcr.or(shared.max_pcr),
        pcr: group.pcr.or(shared.pcr),
        min_pcr: group.min_pcr.or(shared.min_pcr),
        scr: group.scr.or(shared.scr),
        mbs: group.mbs.or(shared.mbs),
        max_cdv: group.max_cdv.or(shared.max_cdv),
        max_sdu: group.max_sdu.or(shared.max_sdu),
    }
}

/// A value error before it has a position: its kind and what is accepted.
type ValueError = (QosErrorKind, String);
type ValueResult = Result<u64, ValueError>;

/// A decimal number: all its digits as one integer, and how many follow the point.
struct Decimal {
    mantissa: u128,
    scale: u32,
    len: usize,
}

/// The decimal number at the start of `v` (`len` is the bytes it takes), or `None` if
/// `v` does not start with a digit.
fn decimal(v: &str) -> Result<Option<Decimal>, ValueError> {
    let bytes = v.as_bytes();
    let int_len = bytes.iter().take_while(|b| b.is_ascii_digit()).count();
    if int_len == 0 {
        return Ok(None);
    }
    let mut len = int_len;
    let mut frac_len = 0;
    if bytes.get(len) == Some(&b'.') {
        frac_len = bytes[len + 1..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        if frac_len == 0 {
            return Err((QosErrorKind::BadNumber, "expected digits after '.'".into()));
        }
        len += 1 + frac_len;
    }
    let mut mantissa: u128 = 0;
    for b in bytes[..len].iter().filter(|b| b.is_ascii_digit()) {
        mantissa = mantissa
            .checked_mul(10)
            .and_then(|m| m.checked_add(u128::from(b - b'0')))
            .ok_or((
                QosErrorKind::OutOfRange,
                "the number is too large".to_string(),
            ))?;
    }
    let scale = u32::try_from(frac_len).unwrap_or(u32::MAX);
    Ok(Some(Decimal {
        mantissa,
        scale,
        len,
    }))
}

/// `mantissa / 10^scale * factor` if it is a whole number that fits a `u64`.
fn exact(d: &Decimal, factor: u64, what: &str) -> ValueResult {
    let (mantissa, scale) = (d.mantissa, d.scale);
    let too_large = || {
        (
            QosErrorKind::OutOfRange,
            "the number is too large".to_string(),
        )
    };
    let product = mantissa
        .checked_mul(u128::from(factor))
        .ok_or_else(too_large)?;
    let divisor = 10u128.checked_pow(scale).ok_or_else(too_large)?;
    if product % divisor != 0 {
        return Err((
            QosErrorKind::BadNumber,
            format!("the value is not a whole number of {what}"),
        ));
    }
    u64::try_from(product / divisor).map_err(|_| too_large())
}

/// `k`/`K`, `m`/`M`, `g`/`G` at the start of `rest`: (scale, bytes consumed).
fn multiplier(rest: &str) -> (u64, usize) {
    match rest.as_bytes().first() {
        Some(b'k' | b'K') => (1_000, 1),
        Some(b'm' | b'M') => (1_000_000, 1),
        Some(b'g' | b'G') => (1_000_000_000, 1),
        _ => (1, 0),
    }
}

/// A rate in payload bits per second (see the module docs for units).
fn parse_rate(v: &str) -> Result<Rate, ValueError> {
    if v.eq_ignore_ascii_case("max") {
        return Ok(Rate::Max);
    }
    let Some(d) = decimal(v)? else {
        return Err((QosErrorKind::BadNumber, RATE_FORM.to_string()));
    };
    let (mult, mlen) = multiplier(&v[d.len..]);
    let unit = match &v[d.len + mlen..] {
        "bps" => 1,
        "cps" => BITS_PER_CELL,
        "" if mlen == 0 => BITS_PER_CELL,
        "" => {
            return Err((
                QosErrorKind::BadUnit,
                "a multiplier needs a unit: write e.g. 10Mbps (bits/s) or 10kcps (cells/s)".into(),
            ))
        }
        _ => {
            return Err((
                QosErrorKind::BadUnit,
                "expected bps or cps, optionally after k, M or G (units are lower-case)".into(),
            ))
        }
    };
    exact(&d, mult * unit, "bits per second").map(Rate::Bps)
}

/// A byte count: `4096`, `64k` (×1000), `64Ki` (×1024), optionally followed by `B`.
fn parse_bytes(v: &str) -> ValueResult {
    let Some(d) = decimal(v)? else {
        return Err((
            QosErrorKind::BadNumber,
            "expected a byte count, e.g. 4096 or 1M".into(),
        ));
    };
    let (mut mult, mlen) = multiplier(&v[d.len..]);
    let mut rest = &v[d.len + mlen..];
    if mlen == 1 {
        if let Some(r) = rest.strip_prefix('i') {
            mult = match mult {
                1_000 => 1 << 10,
                1_000_000 => 1 << 20,
                _ => 1 << 30,
            };
            rest = r;
        }
    }
    if !matches!(rest, "" | "B") {
        return Err((
            QosErrorKind::BadUnit,
            "expected bytes with an optional k, M, G (×1000) or Ki, Mi, Gi (×1024), e.g. 1M".into(),
        ));
    }
    exact(&d, mult, "bytes")
}

/// A delay in microseconds: `500`, `500us`, `2ms`, `1s`.
fn parse_micros(v: &str) -> ValueResult {
    let Some(d) = decimal(v)? else {
        return Err((
            QosErrorKind::BadNumber,
            "expected a delay, e.g. 500us or 2ms".into(),
        ));
    };
    let factor = match &v[d.len..] {
        "" | "us" => 1,
        "ms" => 1_000,
        "s" => 1_000_000,
        _ => {
            return Err((
                QosErrorKind::BadUnit,
                "expected us, ms or s (a bare number is microseconds)".into(),
            ))
        }
    };
    exact(&d, factor, "microseconds")
}

/// A plain whole number.
fn parse_integer(v: &str) -> ValueResult {
    match decimal(v)? {
        Some(d) if d.scale == 0 && d.len == v.len() => exact(&d, 1, "units"),
        _ => Err((QosErrorKind::BadNumber, "expected a whole number".into())),
    }
}
