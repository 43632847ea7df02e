//! Cell-layer benchmarks: the CRC-32 engines, the cell header, AAL5 SAR.
//!
//! `cargo bench --bench wire -- --warm-up-time 1 --measurement-time 2`; the figures
//! and the choices made from them are in `docs/PERFORMANCE.md`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use natm_proto::wire::aal5::{cell_count, Reassembler, Segmenter};
use natm_proto::wire::cell::{HeaderFormat, HeaderRepr, HecReceiver, Pti, CELL_LEN};
use natm_proto::wire::crc::{crc32_aal5, Crc32Aal5};
use std::hint::black_box;

/// The candidates that lost to `crc32_aal5`'s dispatch, kept here to re-measure.
static CRC_TABLE1: crc::Crc<u32, crc::Table<1>> =
    crc::Crc::<u32, crc::Table<1>>::new(&crc::CRC_32_BZIP2);
static CRC_TABLE16: crc::Crc<u32, crc::Table<16>> =
    crc::Crc::<u32, crc::Table<16>>::new(&crc::CRC_32_BZIP2);

fn data(len: usize) -> Vec<u8> {
    (0..len as u32)
        .map(|i| i.wrapping_mul(2_654_435_761).to_be_bytes()[0])
        .collect()
}

fn bench_crc32(c: &mut Criterion) {
    let buf = data(65_536);
    for len in [48usize, 1024, 9 * 1024, 64 * 1024] {
        let d = &buf[..len];
        let mut g = c.benchmark_group(format!("crc32/{len}"));
        g.throughput(Throughput::BytesDecimal(len as u64));
        g.bench_function("crc::Table<1>", |b| {
            b.iter(|| CRC_TABLE1.checksum(black_box(d)))
        });
        g.bench_function("crc::Table<16>", |b| {
            b.iter(|| CRC_TABLE16.checksum(black_box(d)))
        });
        g.bench_function("crc_fast::checksum", |b| {
            b.iter(|| crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Bzip2, black_box(d)))
        });
        g.bench_function("crc_fast::Digest", |b| {
            b.iter(|| {
                let mut x = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Bzip2);
                x.update(black_box(d));
                x.finalize()
            })
        });
        g.bench_function("natm_proto::crc32_aal5", |b| {
            b.iter(|| crc32_aal5(black_box(d)))
        });
        g.bench_function("natm_proto::Crc32Aal5 per cell", |b| {
            b.iter(|| {
                let mut x = Crc32Aal5::new();
                for cell in black_box(d).chunks(48) {
                    x.update(cell);
                }
                x.finalize()
            })
        });
        g.finish();
    }
}

fn bench_header(c: &mut Criterion) {
    let mut g = c.benchmark_group("cell_header");
    g.throughput(Throughput::Elements(1));
    let repr = HeaderRepr::uni(1, 32, Pti::UserDataEnd);
    let good = repr.to_bytes();
    let mut bad = good;
    bad[2] ^= 0x04; // bit 21, the specs.md §1.3 example
    g.bench_function("encode (to_bytes, HEC)", |b| {
        b.iter(|| black_box(black_box(repr).to_bytes()))
    });
    g.bench_function("decode (parse_header, HEC check)", |b| {
        b.iter(|| HeaderRepr::parse_header(black_box(&good), HeaderFormat::Uni))
    });
    g.bench_function("HecReceiver::check valid", |b| {
        let mut rx = HecReceiver::new();
        b.iter(|| {
            let mut h = *black_box(&good);
            rx.check(&mut h)
        })
    });
    g.bench_function("HecReceiver::check corrected", |b| {
        b.iter(|| {
            let mut rx = HecReceiver::new();
            let mut h = *black_box(&bad);
            rx.check(&mut h)
        })
    });
    g.finish();
}

const SDU_SIZES: [usize; 4] = [64, 1500, 9180, 65_535];

fn bench_sar(c: &mut Criterion) {
    let header = HeaderRepr::uni(1, 32, Pti::UserData);
    let mut g = c.benchmark_group("aal5_segment");
    for len in SDU_SIZES {
        let sdu = data(len);
        g.throughput(Throughput::BytesDecimal(len as u64));
        g.bench_with_input(
            BenchmarkId::from_parameter(format!("{len}B/{}cells", cell_count(len))),
            &sdu,
            |b, sdu| {
                let mut cell = [0u8; CELL_LEN];
                b.iter(|| {
                    let mut seg = Segmenter::new(black_box(sdu), header).unwrap();
                    while seg.next_cell(&mut cell) {
                        black_box(&cell);
                    }
                })
            },
        );
    }
    g.finish();

    let mut g = c.benchmark_group("aal5_reassemble");
    for len in SDU_SIZES {
        let cells: Vec<[u8; CELL_LEN]> = Segmenter::new(&data(len), header).unwrap().collect();
        g.throughput(Throughput::BytesDecimal(len as u64));
        g.bench_with_input(
            BenchmarkId::from_parameter(format!("{len}B/{}cells", cells.len())),
            &cells,
            |b, cells| {
                let mut rx = Reassembler::new();
                b.iter(|| {
                    let mut n = 0;
                    for cell in black_box(cells) {
                        if let Ok(Some(sdu)) = rx.push_cell(cell) {
                            n = sdu.len();
                        }
                    }
                    assert_eq!(n, len);
                })
            },
        );
    }
    g.finish();
}

criterion_group!(benches, bench_crc32, bench_header, bench_sar);
criterion_main!(benches);
