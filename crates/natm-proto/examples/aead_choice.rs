//! How fast AWS-LC (`aws-lc-rs`) seals a TPDU-sized buffer with each AEAD natm could
//! use (issue 16's choice): ~2 GB per size and
//! algorithm, three runs, Gbit/s of payload sealed on one core. Then AES-256-GCM as a
//! sender meets it (docs/decisions/0030-aws-lc-aead.md): the payload copied into the
//! frame and sealed there, against sealed from where it lies into the frame.
//!
//! `cargo run --release -p natm-proto --example aead_choice`

use aws_lc_rs::aead::{Aad, Algorithm, LessSafeKey, Nonce, UnboundKey};
use aws_lc_rs::aead::{AES_128_GCM, AES_256_GCM, CHACHA20_POLY1305};
use std::time::Instant;

fn bench(alg: &'static Algorithm, name: &str, size: usize) {
    let key = LessSafeKey::new(UnboundKey::new(alg, &vec![7u8; alg.key_len()]).unwrap());
    let mut buf = vec![0u8; size];
    let aad = [0u8; 32];
    let n = (2_000_000_000 / size).max(1000);
    let mut runs = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        for i in 0..n as u64 {
            let mut nb = [0u8; 12];
            nb[4..].copy_from_slice(&i.to_be_bytes());
            let tag = key
                .seal_in_place_separate_tag(
                    Nonce::assume_unique_for_key(nb),
                    Aad::from(&aad[..]),
                    &mut buf,
                )
                .unwrap();
            std::hint::black_box(tag.as_ref());
        }
        runs.push((n * size) as f64 * 8.0 / t.elapsed().as_secs_f64() / 1e9);
    }
    println!("{name:18} {size:6} B: {runs:.2?} Gbit/s");
}

/// Gbit/s of 64 KiB payloads put sealed into a frame: copied then sealed in place
/// (`out_of_place` false) or encrypted from the source into the frame in one pass.
fn into_frame(out_of_place: bool) -> f64 {
    let key = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &[7u8; 32]).unwrap());
    let size = 65_536;
    let (src, mut frame, mut tag) = (vec![1u8; size], vec![0u8; size], [0u8; 16]);
    let n = 2_000_000_000 / size;
    let t = Instant::now();
    for i in 0..n as u64 {
        let mut nb = [0u8; 12];
        nb[4..].copy_from_slice(&i.to_be_bytes());
        let (nonce, aad) = (Nonce::assume_unique_for_key(nb), Aad::from(&[0u8; 32]));
        if out_of_place {
            key.seal_out_of_place_scatter(nonce, aad, &src, &mut frame, &[], &mut tag)
                .unwrap();
        } else {
            frame.copy_from_slice(&src);
            let t = key
                .seal_in_place_separate_tag(nonce, aad, &mut frame)
                .unwrap();
            tag.copy_from_slice(t.as_ref());
        }
        std::hint::black_box(&tag);
    }
    (n * size) as f64 * 8.0 / t.elapsed().as_secs_f64() / 1e9
}

fn main() {
    for size in [1024, 8192, 65_000] {
        bench(&AES_128_GCM, "aes-128-gcm", size);
        bench(&AES_256_GCM, "aes-256-gcm", size);
        bench(&CHACHA20_POLY1305, "chacha20-poly1305", size);
    }
    for (what, oop) in [("copy, seal in place", false), ("seal out of place", true)] {
        let runs: Vec<f64> = (0..3).map(|_| into_frame(oop)).collect();
        println!("aes-256-gcm 65536 B, {what}: {runs:.2?} Gbit/s");
    }
}
