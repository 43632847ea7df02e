//! Defaults the docs state, checked against the code a user runs.

#[test]
fn architecture_states_the_rto_floor_applications_get() {
    let doc = include_str!("../docs/ARCHITECTURE.md");
    let line = doc
        .lines()
        .skip_while(|l| !l.contains("**RTO floor**"))
        .take(2)
        .collect::<String>();
    let floor = natm::ulib::HostConfig::default().min_rto.as_millis();
    assert!(
        line.contains(&format!("**RTO floor** is {floor} ms")),
        "ARCHITECTURE.md says {line:?}, ulib uses {floor} ms"
    );
}

#[test]
fn tools_states_the_defaults_natm_ip_runs_with() {
    use natm_proto::ip::node::NodeConfig;
    let doc = include_str!("../docs/tools.md");
    let cfg = NodeConfig::new("+4420001".parse().expect("address"));
    for (what, stated) in [
        ("idle", format!("(default {}s)", cfg.idle.as_secs())),
        ("wait", format!("(default {}s)", cfg.wait.as_secs())),
        (
            "arp_age",
            format!("(default {}m, RFC 2225 §8.5)", cfg.arp_age.as_secs() / 60),
        ),
        (
            "queue",
            format!(
                "at most {} packets per destination and class, {} MiB in all",
                cfg.queue_packets,
                cfg.queue_bytes >> 20
            ),
        ),
    ] {
        assert!(
            doc.contains(&stated),
            "docs/tools.md should say {stated:?} for {what}"
        );
    }
}
