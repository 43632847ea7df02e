//! One scrape's exposition: counters and gauges read from a daemon's state at the
//! moment of the scrape, encoded in the Prometheus text format (0.0.4) by the
//! official client, `prometheus-client`. Built afresh for each scrape from the
//! daemon's own counters: nothing is counted here, and families come out in the
//! order they were added.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    prometheus_text, DescriptorEncoder, EncodeMetric, MetricEncoder,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

/// Labels of one sample, e.g. `[("port", "h1")]`.
pub type Labels = Vec<(String, String)>;

/// One label.
pub fn label(name: &str, value: impl ToString) -> Labels {
    vec![(name.to_owned(), value.to_string())]
}

#[derive(Debug)]
struct Family {
    name: String,
    help: String,
    counter: bool,
    /// `None`: one sample without labels.
    rows: Vec<(Option<Labels>, u64)>,
}

/// The families of one scrape.
#[derive(Debug, Default)]
struct Families(Vec<Family>);

impl Collector for Families {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for f in &self.0 {
            let kind = if f.counter {
                MetricType::Counter
            } else {
                MetricType::Gauge
            };
            let mut metric = encoder.encode_descriptor(&f.name, &f.help, None, kind)?;
            match f.rows.as_slice() {
                [(None, v)] => sample(f.counter, *v, metric)?,
                rows => {
                    for (labels, v) in rows {
                        let labels = labels.as_deref().unwrap_or_default();
                        sample(f.counter, *v, metric.encode_family(&labels)?)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// One sample of a counter or a gauge.
fn sample(counter: bool, v: u64, m: MetricEncoder<'_>) -> Result<(), std::fmt::Error> {
    if counter {
        ConstCounter::new(v).encode(m)
    } else {
        ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX)).encode(m)
    }
}

/// The metrics of one scrape, named `<prefix>_<name>`; a counter's name gets
/// `_total` from the encoder.
#[derive(Debug)]
pub struct Exposition {
    prefix: String,
    families: Families,
}

impl Exposition {
    /// An empty exposition whose names start with `prefix` (`natm_sigd`).
    pub fn new(prefix: &str) -> Exposition {
        Exposition {
            prefix: prefix.to_owned(),
            families: Families::default(),
        }
    }

    fn add(&mut self, name: &str, help: &str, counter: bool, rows: Vec<(Option<Labels>, u64)>) {
        self.families.0.push(Family {
            name: name.to_owned(),
            help: help.to_owned(),
            counter,
            rows,
        });
    }

    /// A counter without labels.
    pub fn counter(&mut self, name: &str, help: &str, value: u64) {
        self.add(name, help, true, vec![(None, value)]);
    }

    /// A gauge without labels.
    pub fn gauge(&mut self, name: &str, help: &str, value: u64) {
        self.add(name, help, false, vec![(None, value)]);
    }

    /// A counter with one sample per label set (no family if `rows` is empty).
    pub fn counters(
        &mut self,
        name: &str,
        help: &str,
        rows: impl IntoIterator<Item = (Labels, u64)>,
    ) {
        let rows: Vec<_> = rows.into_iter().map(|(l, v)| (Some(l), v)).collect();
        if !rows.is_empty() {
            self.add(name, help, true, rows);
        }
    }

    /// A gauge with one sample per label set (no family if `rows` is empty).
    pub fn gauges(
        &mut self,
        name: &str,
        help: &str,
        rows: impl IntoIterator<Item = (Labels, u64)>,
    ) {
        let rows: Vec<_> = rows.into_iter().map(|(l, v)| (Some(l), v)).collect();
        if !rows.is_empty() {
            self.add(name, help, false, rows);
        }
    }

    /// The text format, version 0.0.4.
    pub fn render(self) -> String {
        let mut registry = Registry::with_prefix(self.prefix);
        registry.register_collector(Box::new(self.families));
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_text::encode(&mut out, &registry);
        out
    }
}
