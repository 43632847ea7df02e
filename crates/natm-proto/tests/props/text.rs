//! Property tests for the text formats of `wire::qos` and `wire::addr`: every value
//! round-trips through its text form, printing is a fixed point, and no input — random,
//! or built from the grammar's own tokens — makes a parser panic or misreport where its
//! error is.

use natm_proto::wire::addr::{Aesa, AtmAddr, HostsFile, Pvc, PvcPart, E164};
use natm_proto::wire::qos::{Qos, QosParseError, Rate};
use proptest::option;
use proptest::prelude::*;

use crate::strategies::any_qos;

/// 1024 cases, or `PROPTEST_CASES` for a longer soak.
fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    ProptestConfig::with_cases(cases)
}

/// A `key=value` parameter, its value mostly of the kind the key takes.
fn qos_param() -> impl Strategy<Value = String> {
    let rate = "max|[0-9]{1,5}(\\.[0-9]{1,2})?([kKmMgG]?(bps|cps))?";
    let count = "[0-9]{1,5}";
    let bytes = "[0-9]{1,5}([kKmMgG]i?)?B?";
    let typed = prop_oneof![
        (
            prop::sample::select(vec!["max_pcr", "pcr", "min_pcr", "scr"]),
            rate
        ),
        (
            prop::sample::select(vec!["mbs", "window", "outstanding", "prio"]),
            count
        ),
        (Just("max_cdv"), "[0-9]{1,4}(us|ms|s)?"),
        (
            prop::sample::select(vec!["max_sdu", "sdu", "tpdu", "msg", "bucket"]),
            bytes
        ),
        (Just("flow"), "none|leaky-bucket|packet-pair|window"),
        (Just("ec"), "on|off"),
        (Just("mode"), "message|stream"),
        (Just("transport"), "natm|none"),
    ]
    .prop_map(|(k, v)| format!("{k}={v}"));
    let junk = (
        "[a-z_]{1,8}",
        prop::sample::select(vec!["=", "", ":"]),
        "[ -~]{0,6}",
    )
        .prop_map(|(k, eq, v)| format!("{k}{eq}{v}"));
    prop_oneof![9 => typed, 1 => junk]
}

/// Text built from the grammar's own tokens, mostly well-formed, sometimes not.
fn qos_like_text() -> impl Strategy<Value = String> {
    let class = prop::sample::select(vec![
        "ubr",
        "cbr",
        "vbr",
        "abr",
        "any",
        "guaranteed",
        "reliable",
        "best-effort",
        "UBR",
    ]);
    let head = prop_oneof![
        6 => class.clone().prop_map(str::to_string),
        1 => class.clone().prop_map(|c| format!("{c},aal0")),
        1 => class.prop_map(|c| format!("aal5,{c}")),
        1 => "[a-z0-9,+]{0,6}",
    ];
    let item = prop_oneof![
        8 => qos_param(),
        1 => Just("tx:none".to_string()),
        1 => Just("rx:none".to_string()),
        1 => Just("tx:".to_string()),
        1 => Just("rx:".to_string()),
    ];
    (
        head,
        prop::collection::vec(item, 0..6),
        prop::sample::select(vec!["", "", "", ",", ":", " "]),
    )
        .prop_map(|(head, items, junk)| {
            let mut s = head;
            if !items.is_empty() {
                s.push(':');
                // Join, gluing a group prefix to the item after it as the grammar does.
                for (i, item) in items.iter().enumerate() {
                    if i > 0 && !s.ends_with(':') {
                        s.push(',');
                    }
                    s.push_str(item);
                }
            }
            s.push_str(junk);
            s
        })
}

fn check_qos_error(s: &str, e: &QosParseError) {
    assert_eq!(
        s.get(e.pos..e.pos + e.token.len()),
        Some(e.token.as_str()),
        "{s:?}: the token must sit at the position: {e:?}"
    );
    assert_eq!(e.column, s[..e.pos].chars().count() + 1);
    let _ = (e.to_string(), e.render(s), e.caret_line(s));
}

/// Whatever `s` is: no panic, a well-placed error, or a value that round-trips.
fn check_qos_text(s: &str) {
    match s.parse::<Qos>() {
        Err(e) => check_qos_error(s, &e),
        Ok(q) => {
            let printed = q.to_string();
            let again: Qos = printed
                .parse()
                .unwrap_or_else(|e: QosParseError| panic!("{s:?} -> {printed:?}: {e}"));
            assert_eq!(again, q, "{s:?} -> {printed:?}");
            assert_eq!(again.to_string(), printed, "printing is a fixed point");
            let _ = (
                q.service(),
                q.resolved_transport(true),
                q.resolved_transport(false),
            );
        }
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn qos_round_trips(q in any_qos()) {
        let printed = q.to_string();
        let parsed: Qos = printed.parse().map_err(|e: QosParseError| {
            TestCaseError::fail(format!("{printed:?}: {}", e.render(&printed)))
        })?;
        prop_assert_eq!(parsed, q, "{}", printed);
        prop_assert_eq!(parsed.to_string(), printed);
    }

    #[test]
    fn qos_grammar_soup(s in qos_like_text()) {
        check_qos_text(&s);
    }

    #[test]
    fn qos_random_text_never_panics(s in "\\PC{0,40}") {
        check_qos_text(&s);
    }

    #[test]
    fn qos_random_ascii_never_panics(s in "[ -~]{0,40}") {
        check_qos_text(&s);
    }
}

#[test]
fn qos_grammar_soup_reaches_valid_text() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    // The soup is only useful if a fair share of it parses.
    let mut runner = TestRunner::deterministic();
    let valid = (0..1000)
        .filter(|_| {
            let s = qos_like_text().new_tree(&mut runner).unwrap().current();
            s.parse::<Qos>().is_ok()
        })
        .count();
    assert!(valid >= 100, "only {valid} of 1000 generated specs parse");
}

#[test]
fn qos_rate_cells_round_up() {
    for bps in [0u64, 1, 383, 384, 385, 10_000_000, u64::MAX] {
        let cells = Rate::Bps(bps).cells_per_sec().unwrap();
        assert!(u128::from(cells) * 384 >= u128::from(bps));
        assert!(cells == 0 || u128::from(cells - 1) * 384 < u128::from(bps));
    }
}

// ---- addresses ----

fn any_pvc() -> impl Strategy<Value = Pvc> {
    let itf = prop_oneof![4 => (0..=Pvc::MAX_ITF).prop_map(PvcPart::Num), 1 => Just(PvcPart::Any)];
    let wild = || prop_oneof![Just(PvcPart::Any), Just(PvcPart::Unspec)];
    let vpi = prop_oneof![4 => (0..=Pvc::MAX_VPI).prop_map(PvcPart::Num), 1 => wild()];
    let vci = prop_oneof![4 => any::<u16>().prop_map(PvcPart::Num), 1 => wild()];
    (itf, vpi, vci).prop_filter_map("in range", |(i, p, c)| Pvc::new(i, p, c))
}

fn any_aesa() -> impl Strategy<Value = Aesa> {
    let afi = prop_oneof![
        prop::sample::select(vec![0x39u8, 0x47, 0x45, 0x49, 0xBD, 0xC5, 0xC3, 0xC7]),
        1u8..=255,
    ];
    // E.164-format addresses whose number part is BCD with the F filler, to reach the
    // `number:` printing form.
    let e164_form = ("[0-9]{15}", any::<[u8; 11]>()).prop_map(|(digits, rest)| {
        let mut bytes = [0u8; 20];
        bytes[0] = 0x45;
        for (i, d) in digits.bytes().enumerate() {
            let nibble = 2 + i;
            bytes[nibble / 2] |= (d - b'0') << (4 * (1 - nibble % 2));
        }
        bytes[8] |= 0x0F;
        bytes[9..].copy_from_slice(&rest);
        bytes
    });
    let plain = (afi, any::<[u8; 19]>()).prop_map(|(afi, rest)| {
        let mut bytes = [afi; 20];
        bytes[1..].copy_from_slice(&rest);
        bytes
    });
    prop_oneof![plain, e164_form].prop_filter_map("AFI 00", Aesa::new)
}

fn any_addr() -> impl Strategy<Value = AtmAddr> {
    let e164 =
        ("[0-9]{1,15}", option::of(any_aesa())).prop_map(|(digits, subaddress)| AtmAddr::E164 {
            number: E164::new(&digits).expect("1 to 15 digits"),
            subaddress,
        });
    prop_oneof![
        any_pvc().prop_map(AtmAddr::Pvc),
        any_aesa().prop_map(AtmAddr::Aesa),
        e164,
    ]
}

/// Address-like text: the characters of every form, in address-like shapes.
fn addr_like_text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9*?]{1,6}(\\.[0-9*?]{0,6}){0,4}",
        "[0-9A-Fa-f.]{0,50}",
        "\\+[0-9.]{0,20}(\\+[0-9A-F.:]{0,44})?",
        "[0-9]{0,17}:[0-9A-F.]{0,26}",
        "[a-z0-9.-]{1,12}",
        "[ -~]{0,50}",
    ]
}

fn check_addr_text(s: &str, hosts: Option<&HostsFile>) {
    let result = match hosts {
        Some(h) => AtmAddr::parse_with_hosts(s, h),
        None => s.parse::<AtmAddr>(),
    };
    match result {
        Err(e) => {
            assert_eq!(
                s.get(e.pos..e.pos + e.token.len()),
                Some(e.token.as_str()),
                "{s:?}: the token must sit at the position: {e:?}"
            );
            assert_eq!(e.column, s[..e.pos].chars().count() + 1);
            let _ = (e.to_string(), e.render(s), e.caret_line(s));
        }
        Ok(a) => {
            let printed = a.to_string();
            let again: AtmAddr = printed
                .parse()
                .unwrap_or_else(|e| panic!("{s:?} -> {printed:?}: {e}"));
            assert_eq!(again, a, "{s:?} -> {printed:?}");
            assert_eq!(again.to_string(), printed, "printing is a fixed point");
        }
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn addr_round_trips(a in any_addr()) {
        let printed = a.to_string();
        let parsed: AtmAddr = printed
            .parse()
            .map_err(|e| TestCaseError::fail(format!("{printed:?}: {e}")))?;
        prop_assert_eq!(parsed, a, "{}", printed);
        prop_assert_eq!(parsed.to_string(), printed);
    }

    #[test]
    fn addr_like_text_is_handled(s in addr_like_text()) {
        check_addr_text(&s, None);
    }

    #[test]
    fn addr_random_text_never_panics(s in "\\PC{0,60}") {
        check_addr_text(&s, None);
    }

    #[test]
    fn names_resolve_through_any_hosts_file(
        entries in prop::collection::vec((any_addr(), "[a-z][a-z0-9-]{0,10}"), 0..6),
        probe in "[a-zA-Z][a-z0-9-]{0,10}",
    ) {
        let text: String = entries
            .iter()
            .map(|(a, name)| format!("{a}\t{name}  # comment\n"))
            .collect();
        let hosts: HostsFile = text.parse().map_err(|e| TestCaseError::fail(format!("{e}")))?;
        for (a, name) in &entries {
            let first = entries.iter().find(|(_, n)| n == name).map(|(a, _)| a);
            let found = AtmAddr::parse_with_hosts(name, &hosts).ok();
            prop_assert_eq!(found.as_ref(), first);
            prop_assert!(hosts.name_of(a).is_some());
        }
        check_addr_text(&probe, Some(&hosts));
    }

    #[test]
    fn hosts_files_never_panic(text in "([ -~]{0,30}\n){0,5}") {
        if let Err(e) = text.parse::<HostsFile>() {
            let _ = e.to_string();
        }
    }
}

/// Replays the committed fuzz seeds (`fuzz/corpus/<target>/`) through the checks the
/// fuzz targets make, so that `cargo test` covers them without cargo-fuzz.
#[test]
fn fuzz_corpus_replays() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    type Check = fn(&str);
    let checks: [(&str, Check); 2] = [
        ("qos_text", check_qos_text),
        ("atm_addr_text", |text| {
            let line = text.lines().next().unwrap_or("");
            let hosts = text.parse::<HostsFile>().unwrap_or_default();
            check_addr_text(line, None);
            check_addr_text(line, Some(&hosts));
        }),
    ];
    for (target, check) in checks {
        let dir = root.join(target);
        let mut replayed = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            if let Ok(text) = std::str::from_utf8(&bytes) {
                check(text);
            }
            replayed += 1;
        }
        assert!(replayed > 0, "no seeds in {}", dir.display());
    }
}
