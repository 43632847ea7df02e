//! ABR through `natm switch` as a process (docs/switch.md "ABR"): RM frames from a
//! frame port leave a slow cell port as PTI 110 cells with ERICA's explicit rate, and
//! the port's ABR state is in the stat file, in `natm stat --switch` and in the
//! metrics.

use std::net::UdpSocket;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::switch_support::{free_addr, SwitchProc, DEADLINE};
use natm_proto::wire::cell::{Pti, CELL_LEN};
use natm_proto::wire::rm::{Direction, Rate, RmCell};
use natm_proto::wire::vcframe::{self, FrameKind};

fn host() -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    s
}

#[test]
fn rm_frames_leave_a_cell_port_marked_and_the_port_shows_its_abr_state() {
    let (a, b) = (host(), host());
    // Port b: 4.24 Mbit/s, 10,000 cells/s, an ERICA target of 9,000 and a 50 ms
    // interval; the source offers 20,000 cells/s.
    let toml = format!(
        "[[port]]\nname = \"a\"\nbind = \"{}\"\npeer = \"{}\"\nmode = \"frame\"\n\
         [[port]]\nname = \"b\"\nbind = \"{}\"\npeer = \"{}\"\nmode = \"cell\"\nline_rate = 4240000\n\
         [[pvc]]\nfrom = \"a:0.40\"\nto = \"b:0.50\"\n",
        free_addr(),
        a.local_addr().unwrap(),
        free_addr(),
        b.local_addr().unwrap(),
    );
    let mut sw = SwitchProc::start("abr", &toml);
    let to = sw.ports["a"];
    let pcr = 100_000.0;
    let fwd = RmCell::forward(
        Rate::from_cells(pcr),
        Rate::from_cells(20_000.0),
        Rate::ZERO,
    );
    let mut rm = vcframe::Repr::new(FrameKind::Rm, 0, 40).to_bytes().to_vec();
    rm.extend_from_slice(&fwd.to_bytes());
    // 10 frames of 200 octets (5 cells each) and one RM frame every 2.5 ms: 20,400
    // cells/s, for 400 ms.
    let mut data = vcframe::Repr::data(0, 40).to_bytes().to_vec();
    data.extend_from_slice(&[7u8; 200]);
    let rx = std::thread::spawn(move || {
        let mut rms = Vec::new();
        let mut buf = [0u8; 65_536];
        let end = Instant::now() + DEADLINE;
        let mut quiet = 0;
        while Instant::now() < end && quiet < 20 {
            let Ok(n) = b.recv(&mut buf) else {
                quiet += 1;
                continue;
            };
            quiet = 0;
            for c in buf[1..n].chunks_exact(CELL_LEN) {
                if Pti::from_bits(c[3] >> 1) == Pti::ResourceManagement {
                    rms.push(RmCell::parse(&c[5..]).expect("an RM cell, CRC-10 right"));
                }
            }
        }
        rms
    });
    let start = Instant::now();
    for k in 0..160u64 {
        let due = start + Duration::from_micros(2_500 * k);
        if let Some(d) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        }
        a.send_to(&rm, to).unwrap();
        for _ in 0..10 {
            a.send_to(&data, to).unwrap();
        }
    }
    let rms = rx.join().unwrap();
    assert!(!rms.is_empty(), "RM frames leave the cell port as RM cells");
    assert!(rms
        .iter()
        .all(|r| r.dir == Direction::Forward && r.ccr == fwd.ccr));
    assert!(
        rms.iter().all(|r| r.er.cells() <= fwd.er.cells()),
        "ER never raised"
    );
    // Untouched during the first interval; once measured, the lone VC is held to
    // the target (9,000 cells/s, 8,992 in the rate format).
    let marked: Vec<f64> = rms
        .iter()
        .map(|r| r.er.cells())
        .filter(|er| *er < fwd.er.cells())
        .collect();
    assert!(!marked.is_empty(), "some RM cells were marked");
    assert!(
        marked.iter().all(|er| *er <= 9_000.0 && *er > 8_000.0),
        "{marked:?}"
    );
    let v = sw.stat_until(|v| v["ports"][1]["stats"]["abr"]["rm_marked"].as_u64() > Some(0));
    let abr = &v["ports"][1]["stats"]["abr"];
    assert!(abr["interval"]["active_vcs"].as_u64() == Some(1), "{abr}");
    assert!(
        abr["rm_forward"].as_u64() >= Some(rms.len() as u64),
        "{abr}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_natm"))
        .args(["stat", "--switch"])
        .arg(&sw.stat)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("abr in c/s") && text.contains("er marked"),
        "{text}"
    );
    let row = text
        .lines()
        .skip_while(|l| !l.contains("abr in c/s"))
        .find(|l| l.trim_start().starts_with("b "))
        .unwrap_or_else(|| panic!("port b's ABR row:\n{text}"));
    assert!(row.contains("9000"), "target 9000 cells/s: {row}");
    sw.terminate();
}
