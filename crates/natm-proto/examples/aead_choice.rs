//! How fast `ring` seals a TPDU-sized buffer with each AEAD natm could use (issue
//! 16's choice, docs/PERFORMANCE.md "TPDU encryption"): ~2 GB per size and
//! algorithm, three runs, Gbit/s of payload sealed on one core.
//!
//! `cargo run --release -p natm-proto --example aead_choice`

use ring::aead::{Aad, Algorithm, LessSafeKey, Nonce, UnboundKey};
use ring::aead::{AES_128_GCM, AES_256_GCM, CHACHA20_POLY1305};
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

fn main() {
    for size in [1024, 8192, 65_000] {
        bench(&AES_128_GCM, "aes-128-gcm", size);
        bench(&AES_256_GCM, "aes-256-gcm", size);
        bench(&CHACHA20_POLY1305, "chacha20-poly1305", size);
    }
}
