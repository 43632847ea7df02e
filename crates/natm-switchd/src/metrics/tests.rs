use super::*;
use crate::{Config, SwitchDaemon};

fn switch(extra: &str) -> SwitchDaemon {
    let cfg = Config::from_toml(&format!(
        r#"
{extra}
[[port]]
name = "a"
bind = "127.0.0.1:0"
peer = "127.0.0.1:9"
mode = "cell"
[[port]]
name = "b"
bind = "127.0.0.1:0"
peer = "127.0.0.1:9"
mode = "frame"
[[pvc]]
from = "a:0.32"
to = "b:0.40"
"#
    ))
    .unwrap();
    SwitchDaemon::bind(cfg).unwrap()
}

#[test]
fn every_port_has_each_counter() {
    let text = render(&switch("").snapshot());
    for (name, _, _) in PORT_COUNTERS {
        assert!(
            text.contains(&format!("\n# TYPE natm_switch_{name}_total counter\n")),
            "{name}:\n{text}"
        );
        for port in ["a", "b"] {
            assert!(
                text.lines()
                    .any(|l| l == format!("natm_switch_{name}_total{{port=\"{port}\"}} 0")),
                "{name} {port}:\n{text}"
            );
        }
    }
    for (name, _, _) in ABR_GAUGES {
        for port in ["a", "b"] {
            let line = format!("natm_switch_{name}{{port=\"{port}\"}} 0");
            assert!(text.lines().any(|l| l == line), "{line}:\n{text}");
        }
    }
    let causes = serde_json::to_value(natm_switch::stats::Drops::default()).unwrap();
    for cause in causes.as_object().unwrap().keys() {
        let line =
            format!("natm_switch_port_cells_dropped_total{{port=\"a\",cause=\"{cause}\"}} 0");
        assert!(text.lines().any(|l| l == line), "{line}:\n{text}");
    }
    assert!(text.lines().any(|l| l == "natm_switch_vcs 1"), "{text}");
    assert!(
        text.lines()
            .any(|l| l == "natm_switch_calls_refused_total 0"),
        "{text}"
    );
    assert!(
        !text.contains("atmtcp"),
        "no atmtcp port, no atmtcp family:\n{text}"
    );
}

#[test]
fn metrics_need_an_explicit_host() {
    let e = Config::from_toml("metrics = \":9464\"\n[[port]]\nname = \"a\"\nbind = \"127.0.0.1:0\"\npeer = \"127.0.0.1:9\"\nmode = \"cell\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("give the host explicitly"), "{e}");
    let d = switch("metrics = \"127.0.0.1:0\"");
    assert!(d.metrics_addr().unwrap().ip().is_loopback());
}

#[test]
fn the_example_files_key_parses() {
    let example = include_str!("../../../../docs/switch.example.toml");
    assert!(example.contains("\n# metrics = \"127.0.0.1:9465\"\n"));
    let c = Config::from_toml(&example.replace("\n# metrics = ", "\nmetrics = ")).unwrap();
    assert_eq!(c.metrics.as_deref(), Some("127.0.0.1:9465"));
    assert_eq!(
        Config::from_toml(example).unwrap().metrics,
        None,
        "off unless asked for"
    );
}
