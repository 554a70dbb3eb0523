//! What the metrics' counters cost one operation: everything a worker records for a base
//! lookup (initiated, completed with its three latency histograms, the search's scope,
//! PDUs and bytes in and out, the entry returned), on the worker's own counters.
//!
//! `cargo bench -p ferrodir-router --bench stats` (add `-- --quick` for a rough pass). The
//! result, set against a lookup's whole CPU cost, is the metrics' share of a read
//! (docs/BENCHMARKS.md, "What the metrics cost").

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use ferrodir_proto::result_code::ResultCode;
use ferrodir_router::stats::{bump, OpKind, WorkerStats};

/// One base lookup's counting, as session.rs and connection.rs do it.
fn one_lookup(stats: &WorkerStats, queue: Duration, execution: Duration) {
    bump(&stats.pdus_in, 1);
    bump(&stats.bytes_in, 60);
    stats.initiated(OpKind::Search);
    stats.search_scope(0);
    stats.completed(OpKind::Search, ResultCode::SUCCESS, queue, execution);
    bump(&stats.pdus_out, 2);
    bump(&stats.bytes_out, 420);
    bump(&stats.entries_returned, 1);
}

fn counters(c: &mut Criterion) {
    let stats = WorkerStats::default();
    let (queue, execution) = (Duration::from_micros(3), Duration::from_micros(21));
    c.bench_function("metrics counters of one base lookup", |b| {
        b.iter(|| one_lookup(black_box(&stats), black_box(queue), black_box(execution)))
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = counters
}
criterion_main!(benches);
