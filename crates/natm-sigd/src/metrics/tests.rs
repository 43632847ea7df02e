use super::*;
use crate::core::PeerRow;

fn stat() -> Stat {
    Stat {
        addresses: vec!["+4420001".into()],
        signalling: "127.0.0.1:2905".into(),
        capacity_bps: 1_000_000_000,
        free_out_bps: 900,
        free_in_bps: 800,
        tpdu_cost_ns: 1,
        cpu_budget_ns_per_s: 1,
        cpu_free_ns_per_s: 1,
        applications: 2,
        vcis_in_use: 3,
        calls: Vec::new(),
        listeners: Vec::new(),
        counters: Counters {
            calls_setup: 7,
            access_refusals: 5,
            ..Counters::default()
        },
        peers: vec![PeerRow {
            peer: "127.0.0.1:2906".into(),
            up: true,
            calls: 1,
            malformed: 4,
            auth: "noise".into(),
            peer_key: None,
            ilmi: None,
        }],
        next: None,
    }
}

#[test]
fn every_counter_of_natm_stat_is_a_metric() {
    let text = render(&stat(), &[], 0);
    let json = serde_json::to_value(Counters::default()).unwrap();
    let keys = json.as_object().unwrap();
    assert_eq!(
        keys.len(),
        COUNTERS.len(),
        "a counter of natm stat has no metric"
    );
    for k in keys.keys() {
        assert!(
            text.contains(&format!("\n# TYPE natm_sigd_{k}_total counter\n")),
            "{k} missing:\n{text}"
        );
    }
}

#[test]
fn values_come_from_the_document() {
    let text = render(
        &stat(),
        &[(CallState::Active, 2), (CallState::Calling, 1)],
        6,
    );
    for line in [
        "# HELP natm_sigd_calls_setup_total Calls that reached the active state",
        "natm_sigd_calls_setup_total 7",
        "natm_sigd_access_refusals_total 5",
        "natm_sigd_calls_released_total 0",
        "# TYPE natm_sigd_calls gauge",
        "natm_sigd_calls{state=\"active\"} 2",
        "natm_sigd_calls{state=\"calling\"} 1",
        "natm_sigd_calls{state=\"offered\"} 0",
        "natm_sigd_listeners 6",
        "natm_sigd_applications 2",
        "natm_sigd_free_bps{direction=\"out\"} 900",
        "natm_sigd_peer_up{peer=\"127.0.0.1:2906\"} 1",
        "natm_sigd_peer_malformed_total{peer=\"127.0.0.1:2906\"} 4",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "no line {line:?} in:\n{text}"
        );
    }
}

#[test]
fn no_peer_no_peer_family() {
    let mut s = stat();
    s.peers.clear();
    let text = render(&s, &[], 0);
    assert!(!text.contains("natm_sigd_peer_up"), "{text}");
}

#[test]
fn the_example_files_key_parses_and_a_bare_port_is_refused() {
    let example = include_str!("../../../../docs/sigd.example.toml");
    assert!(example.contains("\n# metrics = \"127.0.0.1:9464\"\n"));
    let text = example.replace("\n# metrics = ", "\nmetrics = ");
    let file: crate::ConfigFile = toml::from_str(&text).unwrap();
    assert_eq!(
        file.check().unwrap().metrics,
        Some("127.0.0.1:9464".parse().unwrap())
    );
    let bare: crate::ConfigFile = toml::from_str("metrics = \":9464\"").unwrap();
    let e = bare.check().unwrap_err().to_string();
    assert!(e.contains("give the host explicitly"), "{e}");
    let off: crate::ConfigFile = toml::from_str("").unwrap();
    assert_eq!(off.check().unwrap().metrics, None, "off unless asked for");
}

#[test]
fn label_values_are_escaped() {
    let mut e = Exposition::new("natm_test");
    e.counters(
        "odd",
        "A port named badly",
        [(label("port", "a\"b\\c\nd"), 1)],
    );
    let text = e.render();
    assert!(
        text.lines()
            .any(|l| l == r#"natm_test_odd_total{port="a\"b\\c\nd"} 1"#),
        "{text}"
    );
}
