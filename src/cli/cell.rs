//! `natm cell`: the 5-byte UNI cell header, with HEC generation, checking and the
//! single-bit correction of ITU-T I.432.1.

use anyhow::Context as _;
use clap::Subcommand;

use super::{outln, CliResult};
use natm::wire::cell::{HeaderFormat, HeaderRepr, HecReceiver, HecVerdict, Pti, HEADER_LEN};

#[derive(Debug, Subcommand)]
pub(crate) enum CellCmd {
    /// Print the 5 header bytes (with HEC) in hex.
    Encode {
        /// Virtual path identifier (0..=255).
        #[arg(long)]
        vpi: u8,
        /// Virtual channel identifier (0..=65535; user VCs start at 32).
        #[arg(long)]
        vci: u16,
        /// Payload type (0..=7; 1 = last cell of an AAL5 frame).
        #[arg(long, default_value_t = 0)]
        pti: u8,
        /// Cell loss priority (0 or 1).
        #[arg(long, default_value_t = 0)]
        clp: u8,
        /// Generic flow control (0..=15).
        #[arg(long, default_value_t = 0)]
        gfc: u8,
    },
    /// Decode a header (5 bytes in hex, spaces allowed): fields and whether the HEC
    /// is good, corrected (single-bit error), or bad.
    Decode {
        /// The header bytes, e.g. "00 10 02 02 D3".
        hex: Vec<String>,
    },
}

pub(crate) fn parse_hex(words: &[String]) -> anyhow::Result<Vec<u8>> {
    let s: String = words
        .concat()
        .chars()
        .filter(|c| !c.is_whitespace() && *c != ':')
        .collect();
    hex::decode(&s).with_context(|| format!("\"{s}\" is not hex bytes"))
}

pub(crate) fn run(cmd: CellCmd) -> CliResult {
    match cmd {
        CellCmd::Encode {
            vpi,
            vci,
            pti,
            clp,
            gfc,
        } => {
            if pti > 7 {
                return Err(anyhow::anyhow!(
                    "--pti {pti} is out of range: a PTI is 3 bits (0..=7)"
                ));
            }
            if clp > 1 {
                return Err(anyhow::anyhow!("--clp {clp} is out of range: use 0 or 1"));
            }
            let mut h = HeaderRepr::uni(vpi, vci, Pti::from_bits(pti));
            h.gfc = gfc;
            h.clp = clp == 1;
            h.validate()?;
            let b = h.to_bytes();
            outln!("{}", hex_spaced(&b));
            Ok(())
        }
        CellCmd::Decode { hex } => {
            let bytes = parse_hex(&hex)?;
            let mut header: [u8; HEADER_LEN] = bytes
                .get(..HEADER_LEN)
                .and_then(|b| b.try_into().ok())
                .with_context(|| format!("a cell header is 5 bytes; got {}", bytes.len()))?;
            let received = header;
            let verdict = HecReceiver::new().check(&mut header);
            let hec = match verdict {
                HecVerdict::Valid => "good".to_string(),
                HecVerdict::Corrected { bit } => format!(
                    "corrected (single-bit error in bit {bit}; received {})",
                    hex_spaced(&received)
                ),
                HecVerdict::Discarded => "bad (uncorrectable: the cell would be discarded)".into(),
            };
            let h = HeaderRepr::parse_header(&header, HeaderFormat::Uni);
            let (gfc, vpi, vci, pti, clp) = match h {
                Ok(h) => (h.gfc, h.vpi, h.vci, h.pti, h.clp),
                Err(_) => {
                    // Show the fields as received even when the HEC is bad.
                    let w = u32::from_be_bytes([header[0], header[1], header[2], header[3]]);
                    (
                        (w >> 28) as u8,
                        ((w >> 20) & 0xff) as u16,
                        ((w >> 4) & 0xffff) as u16,
                        Pti::from_bits((w >> 1) as u8),
                        w & 1 == 1,
                    )
                }
            };
            outln!("header {}", hex_spaced(&header));
            outln!("gfc {gfc}");
            outln!("vpi {vpi}");
            outln!("vci {vci}{}", vci_note(vci));
            outln!("pti {} ({pti})", pti.bits());
            outln!("clp {}", u8::from(clp));
            outln!("hec {:#04x} {hec}", header[4]);
            if matches!(verdict, HecVerdict::Discarded) {
                anyhow::bail!("HEC check failed");
            }
            Ok(())
        }
    }
}

fn vci_note(vci: u16) -> &'static str {
    match vci {
        0 => " (unassigned/idle)",
        5 => " (signalling)",
        16 => " (ILMI)",
        1..=31 => " (reserved)",
        _ => "",
    }
}

pub(crate) fn hex_spaced(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02X}"))
        .collect::<Vec<_>>()
        .join(" ")
}
