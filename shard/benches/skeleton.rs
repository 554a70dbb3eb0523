//! The cost of one structural change to the skeleton as the server makes it: the
//! coordinator builds the next version from its own copy (`with_container`: a container's
//! first child), keeps a copy, publishes it through the `SkeletonCell`, and every worker
//! reloads it (`Worker::tree`: `Arc::new((*cell.load()).clone())`).
//!
//! `cargo bench -p ferrodir-shard --bench skeleton` (add `-- --quick` for a rough pass).
//! Run it before and after a change to `skeleton.rs` to compare.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use ferrodir_shard::EntryId;
use ferrodir_shard::{Skeleton, SkeletonCell};

/// Workers that reload each published version (one per shard on a 16-core host).
const WORKERS: usize = 16;

/// A suffix with `containers - 1` organisational units under it.
fn skeleton(containers: u64) -> Skeleton {
    let suffix = EntryId::new(0, 1);
    let mut records =
        vec![(suffix, EntryId::ROOT, "dc=example,dc=com".to_string(), "dc=example,dc=com".to_string())];
    for i in 2..=containers {
        let id = EntryId::new((i % 16) as usize, i);
        records.push((id, suffix, format!("ou=Unit {i}"), format!("ou=unit {i}")));
    }
    Skeleton::build(1, records).0
}

fn structural_change(c: &mut Criterion) {
    let mut group = c.benchmark_group("skeleton_change");
    group.sample_size(20).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    for containers in [100u64, 10_000] {
        group.bench_with_input(BenchmarkId::from_parameter(containers), &containers, |b, &containers| {
            let cell = SkeletonCell::new(skeleton(containers));
            let mut coordinator = (*cell.load()).clone();
            let mut workers: Vec<Arc<Skeleton>> = (0..WORKERS).map(|_| cell.load()).collect();
            let mut next_id = containers + 1;
            let parent = EntryId::new(0, 1);
            b.iter(|| {
                let id = EntryId::new(0, next_id);
                next_id += 1;
                let rdn = format!("ou=New {next_id}");
                // Coordinator::promote, then Coordinator::publish.
                let next = coordinator.with_container(id, parent, &rdn, &rdn.to_lowercase());
                coordinator = next.clone();
                cell.publish(next);
                // Every worker notices the version moved and takes its own handle.
                for worker in &mut workers {
                    *worker = Arc::new((*cell.load()).clone());
                }
                // Demote it again, so the skeleton's size stays put.
                let next = coordinator.without_container(id);
                coordinator = next.clone();
                cell.publish(next);
                for worker in &mut workers {
                    *worker = Arc::new((*cell.load()).clone());
                }
                black_box(workers.len())
            });
        });
    }
    group.finish();
}

criterion_group!(benches, structural_change);
criterion_main!(benches);
