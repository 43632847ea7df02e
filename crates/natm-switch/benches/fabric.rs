//! Forwarding through one switch port, in the data plane alone (no I/O): cells/s in
//! cell mode and frames/s in frame mode, for each scheduler.
//!
//! `cargo bench -p natm-switch -- --warm-up-time 1 --measurement-time 2`

use std::hint::black_box;
use std::time::Duration;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use natm_proto::time::Instant;
use natm_proto::wire::cell::{HeaderRepr, Pti, CELL_LEN};
use natm_proto::wire::vcframe;
use natm_switch::{Contract, CrossConnect, PortConfig, PortId, SchedulerKind, Switch, VcAddr};

const BATCH: u64 = 1024;
/// A fast line (10 Gbit/s), so that the port never holds the benchmark back: each
/// batch advances the clock by its line time.
const LINE: u64 = 10_000_000_000;

fn switch(kind: SchedulerKind, vcs: u16) -> (Switch, PortId, PortId) {
    let mut sw = Switch::new();
    let a = sw.add_port(PortConfig::new(LINE)).unwrap();
    let b = sw
        .add_port(PortConfig::new(LINE).scheduler(kind).buffer(1 << 16))
        .unwrap();
    for i in 0..vcs {
        sw.connect(
            CrossConnect::vc(VcAddr::new(a, 1, 32 + i), VcAddr::new(b, 2, 100 + i)),
            Contract::cbr(1_000_000_000)
                .with_cdvt(Duration::from_millis(1))
                .with_buffer(1 << 16),
        )
        .unwrap();
    }
    (sw, a, b)
}

fn bench_cells(c: &mut Criterion) {
    let mut g = c.benchmark_group("switch_cells");
    g.throughput(Throughput::Elements(BATCH));
    for kind in [
        SchedulerKind::Fifo,
        SchedulerKind::RoundRobin,
        SchedulerKind::WeightedRoundRobin,
    ] {
        for vcs in [1u16, 64] {
            let (mut sw, a, b) = switch(kind, vcs);
            let cells: Vec<[u8; CELL_LEN]> = (0..BATCH)
                .map(|k| {
                    let mut c = [k as u8; CELL_LEN];
                    let vci = 32 + (k % u64::from(vcs)) as u16;
                    c[..5].copy_from_slice(&HeaderRepr::uni(1, vci, Pti::UserDataEnd).to_bytes());
                    c
                })
                .collect();
            // cell_time() is rounded down to the nanosecond: step a little more.
            let step = PortConfig::new(LINE).cell_time() + Duration::from_nanos(1);
            let mut now = Instant::ZERO;
            g.bench_function(BenchmarkId::new(kind.name(), format!("{vcs}vc")), |bench| {
                bench.iter(|| {
                    // Queue a batch, then drain it at line rate.
                    for cell in &cells {
                        black_box(sw.handle_cell(now, a, *cell).unwrap());
                    }
                    for _ in 0..BATCH {
                        now += step;
                        black_box(sw.poll_transmit(now, b).unwrap());
                    }
                })
            });
        }
    }
    g.finish();
}

fn bench_frames(c: &mut Criterion) {
    let mut g = c.benchmark_group("switch_frames");
    const FRAMES: u64 = 64;
    g.throughput(Throughput::Elements(FRAMES));
    for len in [64usize, 4096] {
        let (mut sw, a, b) = switch(SchedulerKind::RoundRobin, 4);
        let sdu = Bytes::from(vec![0x5Au8; len]);
        let step =
            (PortConfig::new(LINE).cell_time() + Duration::from_nanos(1)) * (len as u32 / 48 + 2);
        let mut now = Instant::ZERO;
        g.bench_function(BenchmarkId::new("rr", len), |bench| {
            bench.iter(|| {
                for k in 0..FRAMES {
                    let h = vcframe::Repr::data(1, 32 + (k % 4) as u16);
                    black_box(sw.handle_frame(now, a, h, sdu.clone()).unwrap());
                }
                for _ in 0..FRAMES {
                    now += step;
                    black_box(sw.poll_transmit(now, b).unwrap());
                }
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_cells, bench_frames);
criterion_main!(benches);
