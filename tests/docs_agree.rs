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
