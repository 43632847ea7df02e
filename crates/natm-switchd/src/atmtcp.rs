//! The atmtcp link format, sans-IO: how Linux's `atmtcp` driver and daemon
//! (linux-atm `src/maint/atmtcp.c`, `include/uapi/linux/atm_tcp.h`) carry the AAL5
//! SDUs of a virtual ATM interface over a TCP stream. `docs/wire.md` ("atmtcp link")
//! describes it as natm implements it.
//!
//! ```text
//!  0               1               2               3
//! +-------------------------------+-------------------------------+
//! |              VPI              |              VCI              |  0
//! +-------------------------------+-------------------------------+
//! |                            length                             |  4
//! +---------------------------------------------------------------+
//! |   `length` octets: one AAL5 SDU, or ASCII control on VC 0/0   |  8
//! ```
//! All fields are in network order. VC 0/0 carries the daemons' informational
//! control text (`O <vpi>.<vci> <itf>.<vpi>.<vci> <qos>` when a VC opens, `C
//! <vpi>.<vci>` when it closes), never data; no reply is expected. Every other VC
//! carries one AAL5 CPCS-SDU per message: payload only, no cells, trailer or CRC.
//! The kernel's own control structure (length 0xFFFFFFFF) stays between the kernel
//! and its daemon and is never on the TCP stream, so here it is a framing error.
//!
//! The [`Decoder`] holds at most one message (header and at most 65,535 octets), so a
//! peer cannot make it buffer more; a header it cannot accept is a typed
//! [`AtmtcpError`] after which the stream has no frame boundaries left and the
//! connection must close.

use bytes::Bytes;
use thiserror::Error;

/// Length of the header in octets.
pub const HEADER_LEN: usize = 8;
/// Largest message body: ATM_MAX_AAL5_PDU, the largest AAL5 SDU (I.363.5).
pub const MAX_LEN: usize = 65_535;
/// Largest VPI: an atmtcp interface has 8 VPI bits (the UNI cell header's), which
/// is also what the switch's frame ports carry.
pub const MAX_VPI: u16 = 255;
/// The TCP port `atmtcp virtual listen` and `connect` use unless told otherwise.
pub const DEFAULT_PORT: u16 = 2812;

/// Why a stream is not atmtcp (the connection cannot continue after any of these).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum AtmtcpError {
    /// A body longer than one AAL5 SDU (this includes the kernel's 0xFFFFFFFF control
    /// marker, which has no business on the wire).
    #[error("atmtcp message of {0} octets exceeds the {MAX_LEN}-octet AAL5 SDU")]
    TooLong(u32),
    /// A VPI beyond the 8 bits an atmtcp interface has.
    #[error("atmtcp VPI {0} exceeds {MAX_VPI}")]
    Vpi(u16),
    /// Data for VC 0/0, which carries only control text (on the sending side).
    #[error("VC 0/0 carries atmtcp control text, not data")]
    DataOnControlVc,
}

/// The 8-octet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Virtual path identifier (at most [`MAX_VPI`] once parsed).
    pub vpi: u16,
    /// Virtual channel identifier.
    pub vci: u16,
    /// Octets of body that follow.
    pub length: u32,
}

impl Header {
    /// Parses and checks a header.
    pub fn parse(b: &[u8; HEADER_LEN]) -> Result<Header, AtmtcpError> {
        let h = Header {
            vpi: u16::from_be_bytes([b[0], b[1]]),
            vci: u16::from_be_bytes([b[2], b[3]]),
            length: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
        };
        if h.length as usize > MAX_LEN {
            return Err(AtmtcpError::TooLong(h.length));
        }
        if h.vpi > MAX_VPI {
            return Err(AtmtcpError::Vpi(h.vpi));
        }
        Ok(h)
    }

    /// The header's octets.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..2].copy_from_slice(&self.vpi.to_be_bytes());
        b[2..4].copy_from_slice(&self.vci.to_be_bytes());
        b[4..8].copy_from_slice(&self.length.to_be_bytes());
        b
    }

    /// Whether this header starts control text (VC 0/0).
    pub fn is_control(&self) -> bool {
        self.vpi == 0 && self.vci == 0
    }
}

/// The header of a data message carrying `sdu` on `vpi`/`vci`, checked.
pub fn data_header(vpi: u16, vci: u16, sdu: &[u8]) -> Result<Header, AtmtcpError> {
    if vpi == 0 && vci == 0 {
        return Err(AtmtcpError::DataOnControlVc);
    }
    if vpi > MAX_VPI {
        return Err(AtmtcpError::Vpi(vpi));
    }
    let length = u32::try_from(sdu.len())
        .ok()
        .filter(|&l| l as usize <= MAX_LEN)
        .ok_or(AtmtcpError::TooLong(
            u32::try_from(sdu.len()).unwrap_or(u32::MAX),
        ))?;
    Ok(Header { vpi, vci, length })
}

/// Appends a data message (header and SDU) to `out`.
pub fn emit_data(vpi: u16, vci: u16, sdu: &[u8], out: &mut Vec<u8>) -> Result<(), AtmtcpError> {
    let h = data_header(vpi, vci, sdu)?;
    out.extend_from_slice(&h.to_bytes());
    out.extend_from_slice(sdu);
    Ok(())
}

/// Appends a control message (`O …`/`C …` text on VC 0/0) to `out`.
pub fn emit_control(text: &str, out: &mut Vec<u8>) -> Result<(), AtmtcpError> {
    let length = u32::try_from(text.len())
        .ok()
        .filter(|&l| l as usize <= MAX_LEN)
        .ok_or(AtmtcpError::TooLong(u32::MAX))?;
    out.extend_from_slice(
        &Header {
            vpi: 0,
            vci: 0,
            length,
        }
        .to_bytes(),
    );
    out.extend_from_slice(text.as_bytes());
    Ok(())
}

/// A control message on VC 0/0, as the linux-atm daemon writes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// `O <vpi>.<vci> <itf>.<vpi>.<vci> <qos>`: the peer opened a VC.
    Open {
        /// VPI of the VC.
        vpi: u16,
        /// VCI of the VC.
        vci: u16,
        /// The rest: the peer's interface address and the VC's QoS as text.
        detail: String,
    },
    /// `C <vpi>.<vci>`: the peer closed a VC.
    Close {
        /// VPI of the VC.
        vpi: u16,
        /// VCI of the VC.
        vci: u16,
    },
    /// Anything else (the text with non-UTF-8 octets replaced): informational only.
    Other(String),
}

impl Control {
    /// Reads control text; never fails, since control is informational.
    pub fn parse(body: &[u8]) -> Control {
        let text = String::from_utf8_lossy(body);
        let vc = |s: &str| {
            let (p, c) = s.split_once('.')?;
            Some((p.parse::<u16>().ok()?, c.parse::<u16>().ok()?))
        };
        let mut words = text.splitn(3, ' ');
        match (words.next(), words.next().and_then(vc)) {
            (Some("O"), Some((vpi, vci))) => Control::Open {
                vpi,
                vci,
                detail: words.next().unwrap_or("").to_string(),
            },
            (Some("C"), Some((vpi, vci))) if words.next().is_none() => Control::Close { vpi, vci },
            _ => Control::Other(text.into_owned()),
        }
    }
}

/// One message off the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// An AAL5 SDU on a VC other than 0/0.
    Data {
        /// VPI (at most [`MAX_VPI`]).
        vpi: u8,
        /// VCI.
        vci: u16,
        /// The SDU.
        sdu: Bytes,
    },
    /// Control text on VC 0/0.
    Control(Control),
}

/// Splits a TCP byte stream into messages, holding at most one partial message.
#[derive(Debug, Default)]
pub struct Decoder {
    header: [u8; HEADER_LEN],
    have_header: usize,
    current: Option<Header>,
    body: Vec<u8>,
    failed: Option<AtmtcpError>,
}

impl Decoder {
    /// An empty decoder, at a message boundary.
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// Octets buffered of a message not yet complete.
    pub fn buffered(&self) -> usize {
        self.have_header + self.body.len()
    }

    /// Reads from the front of `input`: returns how many octets were used and the
    /// message they completed, if one. Call again with the rest until it is empty.
    /// After an error, every call returns that error.
    pub fn handle(&mut self, input: &[u8]) -> Result<(usize, Option<Message>), AtmtcpError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        let mut used = 0;
        let h = match self.current {
            Some(h) => h,
            None => {
                let take = (HEADER_LEN - self.have_header).min(input.len());
                self.header[self.have_header..self.have_header + take]
                    .copy_from_slice(&input[..take]);
                self.have_header += take;
                used += take;
                if self.have_header < HEADER_LEN {
                    return Ok((used, None));
                }
                let h = Header::parse(&self.header).inspect_err(|&e| self.failed = Some(e))?;
                self.current = Some(h);
                self.body.clear();
                self.body.reserve(h.length as usize);
                h
            }
        };
        let need = h.length as usize - self.body.len();
        let rest = &input[used..];
        let take = need.min(rest.len());
        // A whole body already in the input is taken without staging it.
        let body = if self.body.is_empty() && take == need {
            Bytes::copy_from_slice(&rest[..take])
        } else {
            self.body.extend_from_slice(&rest[..take]);
            if self.body.len() < h.length as usize {
                return Ok((used + take, None));
            }
            Bytes::from(std::mem::take(&mut self.body))
        };
        used += take;
        self.current = None;
        self.have_header = 0;
        let msg = if h.is_control() {
            Message::Control(Control::parse(&body))
        } else {
            Message::Data {
                vpi: u8::try_from(h.vpi).expect("Header::parse bounds the VPI to 8 bits"),
                vci: h.vci,
                sdu: body,
            }
        };
        Ok((used, Some(msg)))
    }

    /// Every message in `input`, in order (for tests and the fuzz target; the link
    /// calls [`Decoder::handle`] to stop at the first error with what came before).
    pub fn handle_all(&mut self, mut input: &[u8]) -> Result<Vec<Message>, AtmtcpError> {
        let mut out = Vec::new();
        while !input.is_empty() {
            let (n, m) = self.handle(input)?;
            out.extend(m);
            input = &input[n..];
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the guest's daemon sent when `awrite 0.0.100` ran (captured from Linux
    /// 6.1 with atm-tools 2.5.1): the open, the SDU, the close.
    fn captured() -> Vec<u8> {
        let mut v = Vec::new();
        emit_control("O 0.100 0.0.100 ubr,aal5:tx:max_sdu=29,rx:none", &mut v).unwrap();
        v.extend_from_slice(&[0, 0, 0, 0x64, 0, 0, 0, 0x1d]);
        v.extend_from_slice(b"hello host, from guest awrite");
        v.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 7]);
        v.extend_from_slice(b"C 0.100");
        v
    }

    #[test]
    fn decodes_what_linux_sends_in_any_split() {
        let bytes = captured();
        let want = vec![
            Message::Control(Control::Open {
                vpi: 0,
                vci: 100,
                detail: "0.0.100 ubr,aal5:tx:max_sdu=29,rx:none".into(),
            }),
            Message::Data {
                vpi: 0,
                vci: 100,
                sdu: Bytes::from_static(b"hello host, from guest awrite"),
            },
            Message::Control(Control::Close { vpi: 0, vci: 100 }),
        ];
        assert_eq!(Decoder::new().handle_all(&bytes).unwrap(), want);
        // TCP may cut the stream anywhere: every split point gives the same messages.
        for cut in 0..bytes.len() {
            let mut d = Decoder::new();
            let mut got = d.handle_all(&bytes[..cut]).unwrap();
            assert!(d.buffered() <= HEADER_LEN + MAX_LEN);
            got.extend(d.handle_all(&bytes[cut..]).unwrap());
            assert_eq!(got, want, "cut at {cut}");
            assert_eq!(d.buffered(), 0);
        }
        // One octet at a time.
        let mut d = Decoder::new();
        let got: Vec<_> = bytes
            .chunks(1)
            .flat_map(|c| d.handle_all(c).unwrap())
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn emits_the_bytes_linux_reads() {
        let mut v = Vec::new();
        emit_data(0, 200, b"hello from host on 0.200", &mut v).unwrap();
        assert_eq!(&v[..8], &[0, 0, 0, 200, 0, 0, 0, 24]);
        assert_eq!(&v[8..], b"hello from host on 0.200");
        // An empty SDU is a header alone; the largest fits exactly.
        v.clear();
        emit_data(1, 5, &[], &mut v).unwrap();
        assert_eq!(v, [0, 1, 0, 5, 0, 0, 0, 0]);
        let big = vec![0xA5; MAX_LEN];
        v.clear();
        emit_data(255, 65535, &big, &mut v).unwrap();
        let got = Decoder::new().handle_all(&v).unwrap();
        assert_eq!(
            got,
            vec![Message::Data {
                vpi: 255,
                vci: 65535,
                sdu: Bytes::from(big)
            }]
        );
    }

    #[test]
    fn refuses_what_it_cannot_send() {
        let mut v = Vec::new();
        assert_eq!(
            emit_data(0, 0, b"x", &mut v),
            Err(AtmtcpError::DataOnControlVc)
        );
        assert_eq!(emit_data(256, 32, b"x", &mut v), Err(AtmtcpError::Vpi(256)));
        assert_eq!(
            emit_data(0, 32, &vec![0; MAX_LEN + 1], &mut v),
            Err(AtmtcpError::TooLong(65_536))
        );
        assert!(v.is_empty(), "nothing half-written");
    }

    #[test]
    fn a_bad_header_is_a_typed_error_that_sticks() {
        // The kernel's control marker must never reach the wire.
        let mut d = Decoder::new();
        let e = d
            .handle_all(&[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 1, 2, 3])
            .unwrap_err();
        assert_eq!(e, AtmtcpError::TooLong(u32::MAX));
        assert_eq!(
            d.handle(&[0; 8]),
            Err(e),
            "no frame boundary after an error"
        );
        let mut d = Decoder::new();
        assert_eq!(
            d.handle_all(&[0, 0, 0, 0, 0, 1, 0, 0]),
            Err(AtmtcpError::TooLong(65_536))
        );
        let mut d = Decoder::new();
        assert_eq!(
            d.handle_all(&[1, 0, 0, 32, 0, 0, 0, 1, 9]),
            Err(AtmtcpError::Vpi(256))
        );
        // A message before the bad header still comes out of `handle`.
        let mut s = Vec::new();
        emit_data(0, 32, b"ok", &mut s).unwrap();
        s.extend_from_slice(&[0, 0, 0, 32, 0, 1, 0, 0]);
        let mut d = Decoder::new();
        let (n, m) = d.handle(&s).unwrap();
        assert_eq!(n, 10);
        assert!(matches!(m, Some(Message::Data { vci: 32, .. })));
        assert!(d.handle(&s[n..]).is_err());
    }

    /// The fuzz target's invariants (fuzz/fuzz_targets/atmtcp_stream.rs): the first
    /// octet is a cut point, the rest a stream.
    fn fuzz_invariants(data: &[u8]) {
        let Some((&cut, stream)) = data.split_first() else {
            return;
        };
        let whole = Decoder::new().handle_all(stream);
        let cut = usize::from(cut).min(stream.len());
        let mut d = Decoder::new();
        let split = d.handle_all(&stream[..cut]).and_then(|mut first| {
            first.extend(d.handle_all(&stream[cut..])?);
            Ok(first)
        });
        assert_eq!(whole, split);
        assert!(d.buffered() <= HEADER_LEN + MAX_LEN);
    }

    #[test]
    fn the_fuzz_corpus_replays() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fuzz/corpus/atmtcp_stream");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).expect("the corpus is in the repository") {
            let data = std::fs::read(e.unwrap().path()).unwrap();
            fuzz_invariants(&data);
            n += 1;
        }
        assert!(n >= 2, "seeds in {}", dir.display());
        // The Linux seed decodes to its three messages.
        let linux = std::fs::read(dir.join("seed-awrite-linux61")).unwrap();
        assert_eq!(Decoder::new().handle_all(&linux[1..]).unwrap().len(), 3);
    }

    #[test]
    fn control_text_is_informational() {
        assert_eq!(
            Control::parse(b"O 0.5 0.0.5 ubr,aal5:max_sdu=1000"),
            Control::Open {
                vpi: 0,
                vci: 5,
                detail: "0.0.5 ubr,aal5:max_sdu=1000".into()
            }
        );
        assert_eq!(
            Control::parse(b"C 1.40"),
            Control::Close { vpi: 1, vci: 40 }
        );
        assert_eq!(
            Control::parse(b"C 1.40 extra"),
            Control::Other("C 1.40 extra".into())
        );
        assert_eq!(Control::parse(b"O x.y"), Control::Other("O x.y".into()));
        assert_eq!(
            Control::parse(&[0xff, b'O']),
            Control::Other("\u{fffd}O".into())
        );
        assert_eq!(Control::parse(b""), Control::Other(String::new()));
    }
}
