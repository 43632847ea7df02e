//! Properties of sealed TPDUs (issue 16, `wire::seal`): what is sealed opens to the
//! same bytes exactly once, in any order within the replay window; any change to a
//! sealed frame — one bit anywhere, the header included — is refused; another key
//! opens nothing; and packet numbers never repeat.

use proptest::prelude::*;

use natm_proto::wire::seal::{OpenError, Opener, Sealer, OVERHEAD, REPLAY_WINDOW, SEALED};
use natm_proto::wire::tpdu::HEADER_LEN;

fn tpdu() -> impl Strategy<Value = Vec<u8>> {
    (
        proptest::collection::vec(any::<u8>(), HEADER_LEN),
        proptest::collection::vec(any::<u8>(), 0..2048),
    )
        .prop_map(|(mut h, p)| {
            h[1] &= !SEALED;
            h.extend_from_slice(&p);
            h
        })
}

fn sealed(s: &Sealer, clear: &[u8]) -> Vec<u8> {
    let mut f = clear.to_vec();
    f.extend_from_slice(&[0; OVERHEAD]);
    s.seal(&mut f).unwrap();
    f
}

proptest! {
    #[test]
    fn sealed_opens_to_the_same_bytes_once(clear in tpdu(), key in any::<[u8; 32]>()) {
        let s = Sealer::new(&key);
        let mut o = Opener::new(&key);
        let f = sealed(&s, &clear);
        prop_assert_eq!(f.len(), clear.len() + OVERHEAD);
        let (head, payload) = o.open_detached(&f).unwrap();
        prop_assert_eq!(&head[..], &clear[..HEADER_LEN]);
        prop_assert_eq!(&payload[..], &clear[HEADER_LEN..]);
        prop_assert_eq!(o.open_detached(&f).unwrap_err(), OpenError::Replayed(0));
        // In place, the same.
        let mut o2 = Opener::new(&key);
        let mut g = f.clone();
        prop_assert_eq!(&o2.open(&mut g).unwrap()[..], &clear[..]);
    }

    #[test]
    fn any_flipped_bit_is_refused(clear in tpdu(), key in any::<[u8; 32]>(), bit in any::<usize>()) {
        let s = Sealer::new(&key);
        let f = sealed(&s, &clear);
        let mut bent = f.clone();
        let bit = bit % (bent.len() * 8);
        bent[bit / 8] ^= 1 << (bit % 8);
        let mut o = Opener::new(&key);
        prop_assert!(o.open_detached(&bent).is_err());
        // The failed attempt left the window alone: the genuine frame still opens.
        prop_assert!(o.open_detached(&f).is_ok());
    }

    #[test]
    fn another_key_opens_nothing(clear in tpdu(), k1 in any::<[u8; 32]>(), k2 in any::<[u8; 32]>()) {
        prop_assume!(k1 != k2);
        let f = sealed(&Sealer::new(&k1), &clear);
        prop_assert_eq!(Opener::new(&k2).open_detached(&f).unwrap_err(), OpenError::BadTag);
    }

    #[test]
    fn reordered_frames_open_once_each_within_the_window(
        order in Just((0..64u64).collect::<Vec<_>>()).prop_shuffle(),
        dups in proptest::collection::vec(0..64usize, 0..32),
    ) {
        let key = [9u8; 32];
        let s = Sealer::new(&key);
        let frames: Vec<Vec<u8>> = (0..64u8).map(|i| sealed(&s, &[i; HEADER_LEN + 3])).collect();
        let mut o = Opener::new(&key);
        let mut opened = vec![0u32; 64];
        let seq = order.iter().map(|&i| i as usize).chain(dups.iter().copied());
        for i in seq {
            if let Ok((_, p)) = o.open_detached(&frames[i]) {
                prop_assert_eq!(p[0] as usize, i);
                opened[i] += 1;
            }
        }
        prop_assert!(opened.iter().all(|&n| n == 1), "{:?}", opened);
    }
}

#[test]
fn packet_numbers_never_repeat_across_threads() {
    let s = std::sync::Arc::new(Sealer::new(&[1; 32]));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let s = s.clone();
            std::thread::spawn(move || {
                (0..2000)
                    .map(|_| {
                        let mut f = vec![0x10; HEADER_LEN + OVERHEAD];
                        s.seal(&mut f).unwrap()
                    })
                    .collect::<Vec<u64>>()
            })
        })
        .collect();
    let mut all: Vec<u64> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 8000);
    assert_eq!(s.next_pn(), 8000);
}

#[test]
fn frames_older_than_the_window_are_refused_unopened() {
    let key = [5u8; 32];
    let s = Sealer::new(&key);
    let old = sealed(&s, &[0x10; HEADER_LEN]);
    let mut o = Opener::new(&key);
    let mut last = Vec::new();
    for _ in 0..=REPLAY_WINDOW {
        last = sealed(&s, &[0x10; HEADER_LEN]);
    }
    o.open_detached(&last).unwrap();
    assert_eq!(o.open_detached(&old).unwrap_err(), OpenError::Replayed(0));
}
