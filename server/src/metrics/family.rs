//! Building Prometheus metric families by hand from counters summed at scrape time (the
//! `prometheus` crate's own metric types are atomics every writer would share).

use prometheus::proto::{Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType};

/// One family being built: a name, its help text and type, and its samples.
pub struct Family(MetricFamily);

impl Family {
    pub fn counter(name: &str, help: &str) -> Self {
        Self::new(name, help, MetricType::COUNTER)
    }

    pub fn gauge(name: &str, help: &str) -> Self {
        Self::new(name, help, MetricType::GAUGE)
    }

    pub fn histogram(name: &str, help: &str) -> Self {
        Self::new(name, help, MetricType::HISTOGRAM)
    }

    fn new(name: &str, help: &str, kind: MetricType) -> Self {
        let mut family = MetricFamily::default();
        family.set_name(name.to_string());
        family.set_help(help.to_string());
        family.set_field_type(kind);
        Self(family)
    }

    fn push(&mut self, labels: &[(&str, &str)], fill: impl FnOnce(&mut Metric)) -> &mut Self {
        let mut metric = Metric::default();
        metric.set_label(
            labels
                .iter()
                .map(|(name, value)| {
                    let mut pair = LabelPair::default();
                    pair.set_name((*name).to_string());
                    pair.set_value((*value).to_string());
                    pair
                })
                .collect(),
        );
        fill(&mut metric);
        self.0.mut_metric().push(metric);
        self
    }

    pub fn value(&mut self, labels: &[(&str, &str)], value: f64) -> &mut Self {
        let counter = self.0.get_field_type() == MetricType::COUNTER;
        self.push(labels, |metric| {
            if counter {
                let mut c = Counter::default();
                c.set_value(value);
                metric.set_counter(c);
            } else {
                let mut g = Gauge::default();
                g.set_value(value);
                metric.set_gauge(g);
            }
        })
    }

    /// A histogram from per-bucket counts (not cumulative; the last above every bound).
    pub fn buckets(
        &mut self,
        labels: &[(&str, &str)],
        bounds: &[f64],
        counts: &[u64],
        sum: f64,
    ) -> &mut Self {
        self.push(labels, |metric| {
            let mut histogram = Histogram::default();
            let mut cumulative = 0u64;
            let mut buckets = Vec::with_capacity(bounds.len());
            for (bound, count) in bounds.iter().zip(counts) {
                cumulative += count;
                let mut bucket = Bucket::default();
                bucket.set_upper_bound(*bound);
                bucket.set_cumulative_count(cumulative);
                buckets.push(bucket);
            }
            let total: u64 = counts.iter().sum();
            histogram.set_bucket(buckets);
            histogram.set_sample_count(total);
            histogram.set_sample_sum(sum);
            metric.set_histogram(histogram);
        })
    }

    pub fn done(self) -> MetricFamily {
        self.0
    }
}
