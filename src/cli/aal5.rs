//! `natm aal5`: segmentation of a payload into AAL5 cells and reassembly with the
//! CRC-32, length and size checks of I.363.5.

use std::io::{BufRead, Read, Write};

use clap::Subcommand;

use super::cell::{hex_spaced, parse_hex};
use super::CliResult;
use natm::wire::aal5::{segment, Reassembler, MAX_SDU_LEN};
use natm::wire::cell::CELL_LEN;

#[derive(Debug, Subcommand)]
pub(crate) enum Aal5Cmd {
    /// Read a payload on stdin; print its cells, one per line, 53 bytes in hex.
    Encode {
        /// Virtual path identifier.
        #[arg(long, default_value_t = 0)]
        vpi: u8,
        /// Virtual channel identifier.
        #[arg(long, default_value_t = 32)]
        vci: u16,
        /// The payload on stdin is hex text rather than raw bytes.
        #[arg(long)]
        hex: bool,
    },
    /// Read cells on stdin (one per line, hex); print the reassembled payload, or the
    /// exact check that failed.
    Decode {
        /// Print the payload as hex rather than raw bytes.
        #[arg(long)]
        hex: bool,
        /// Largest SDU accepted.
        #[arg(long, default_value_t = MAX_SDU_LEN)]
        max_sdu: usize,
    },
}

pub(crate) fn run(cmd: Aal5Cmd) -> CliResult {
    match cmd {
        Aal5Cmd::Encode { vpi, vci, hex } => {
            let mut input = Vec::new();
            std::io::stdin().read_to_end(&mut input)?;
            let sdu = if hex {
                let text = String::from_utf8_lossy(&input).to_string();
                parse_hex(&[text])?
            } else {
                input
            };
            let cells = segment(&sdu, vpi, vci)?;
            let mut out = std::io::stdout().lock();
            for c in &cells {
                writeln!(out, "{}", hex_spaced(c))?;
            }
            Ok(())
        }
        Aal5Cmd::Decode { hex, max_sdu } => {
            let max_sdu = max_sdu.clamp(1, MAX_SDU_LEN);
            let mut r = Reassembler::with_max_sdu(max_sdu);
            let mut frames = 0;
            let mut out = std::io::stdout().lock();
            for (n, line) in std::io::stdin().lock().lines().enumerate() {
                let line = line?;
                if line.trim().is_empty() {
                    continue;
                }
                let bytes = parse_hex(&[line])?;
                let cell: [u8; CELL_LEN] = bytes.as_slice().try_into().map_err(|_| {
                    anyhow::anyhow!(
                        "line {}: a cell is {CELL_LEN} bytes; got {}",
                        n + 1,
                        bytes.len()
                    )
                })?;
                match r.push_cell(&cell) {
                    Ok(Some(sdu)) => {
                        frames += 1;
                        if hex {
                            writeln!(out, "{}", hex_spaced(sdu))?;
                        } else {
                            out.write_all(sdu)?;
                        }
                    }
                    Ok(None) => {}
                    Err(e) => return Err(anyhow::anyhow!("cell {} (line {}): {e}", n + 1, n + 1)),
                }
            }
            if r.buffered_cells() > 0 {
                return Err(anyhow::anyhow!(
                    "input ended inside a frame: {} cells without the last (AUU=1) cell",
                    r.buffered_cells()
                ));
            }
            if frames == 0 {
                anyhow::bail!("no complete AAL5 frame in the input");
            }
            Ok(())
        }
    }
}
