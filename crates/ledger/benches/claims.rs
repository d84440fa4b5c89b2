//! In-process ledger throughput: durable claims per second with group commit (many claims per
//! fsync'd transaction), under keys in order and under random UUIDs, against one transaction per
//! claim; durable first calls per second (a claim, then its completion: what the ledger does for
//! every first call through the proxy, without HTTP); request fingerprinting of 1 KiB and 64 KiB
//! JSON bodies; and the strict JSON parse every write's body goes through, beside serde_json's. The ledger benches keep 256 operations in flight, starting the next as each
//! one is answered, as 256 busy connections would. `cargo bench -p idemgate-ledger --bench claims`
//! (BENCHMARKS.md); under `cargo test --benches` each runs once, as a smoke test.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

// The allocator of the shipped binaries (see crates/cli/src/main.rs).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use idemgate_ledger::{
    canon, now_millis, testing, ChainHasher, ClaimOutcome, ClaimRequest, CompleteOutcome,
    CompleteRequest, Effect, Ledger, OpenOptions, RequestRecord, ResponseRecord, Storage, Ticket,
    MAX_BATCH,
};

static NEXT: AtomicU64 = AtomicU64::new(0);

/// The next key: `bench-<n>`, in order, or (`random`) a random UUID v4, as agents send them. A
/// new key's index rows land on the page of the one before when keys come in order, and on a
/// page of their own when they are random, which every commit then writes whole.
fn next_key(random: bool) -> String {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    if !random {
        return format!("bench-{n}");
    }
    // splitmix64: a bijection, so the keys are distinct, and as good as random for a b-tree.
    let mix = |mut z: u64| {
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let (a, b) = (mix(2 * n + 1), mix(2 * n + 2));
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        0x8000 | (b >> 48) & 0x3fff,
        b & 0xffff_ffff_ffff
    )
}

/// How the benchmark's keys are ordered.
#[derive(Clone, Copy)]
enum Keys {
    InOrder,
    Random,
}

fn claim(body: &[u8], keys: Keys) -> ClaimRequest {
    ClaimRequest {
        route: "charges".into(),
        scope: "agent".into(),
        key: next_key(matches!(keys, Keys::Random)),
        fingerprint: canon::fingerprint("POST", "charges", &[], body),
        legacy_fingerprint: None,
        effect: Effect::Write,
        request: RequestRecord {
            method: "POST".into(),
            path: "/v1/charges".into(),
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.to_vec(),
        },
        owner: "bench".into(),
        lease_ms: 30_000,
        ttl_ms: 3_600_000,
        reject_duplicates_within_ms: None,
        tool: None,
        subjects: Vec::new(),
        dup_fp: None,
        approval: None,
        at: now_millis(),
    }
}

/// `total` claims, `in_flight` at a time: when the oldest is answered, the next one starts, as
/// each of `in_flight` connections sends its next request once its last is answered. (Rounds of
/// `in_flight` claims, all awaited before the next round, left the writer idle at every round's
/// end and sent it small batches at every round's start: fewer claims/s under either key order.)
fn claims(l: &Ledger, keys: Keys, in_flight: usize, total: usize, body: &[u8]) {
    let mut window = VecDeque::with_capacity(in_flight);
    for _ in 0..total {
        if window.len() == in_flight {
            claimed(window.pop_front().expect("a full window"));
        }
        window.push_back(l.claim(claim(body, keys)));
    }
    for t in window {
        claimed(t);
    }
}

/// The entry a claim's ticket answers with; panics on anything but a new claim.
fn claimed(ticket: Ticket<ClaimOutcome>) -> i64 {
    match ticket.wait() {
        Ok(ClaimOutcome::Claimed { entry_id, .. }) => entry_id,
        other => panic!("claim: {other:?}"),
    }
}

/// A new SQLite ledger with at most `max_batch` jobs per transaction, and its directory.
fn ledger(max_batch: usize) -> (tempfile::TempDir, std::sync::Arc<Ledger>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let l = Ledger::sqlite_with_batch(
        dir.path().join("bench.db"),
        OpenOptions {
            create: true,
            hasher: ChainHasher::unkeyed(),
        },
        max_batch,
    )
    .expect("open");
    (dir, l)
}

/// Puts `total` operations through the ledger, `in_flight` at a time, and waits for all.
type Load = fn(&Ledger, Keys, usize, usize, &[u8]);

/// Times `load` (`in_flight` operations at a time, without a pause between them) as the benchmark
/// `group/name/in_flight`, one element per operation, then prints how many writes each fsync'd
/// commit carried.
fn bench_load(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    group: &str,
    name: &str,
    l: &Ledger,
    keys: Keys,
    in_flight: usize,
    load: Load,
) {
    let body = br#"{"amount":4999,"currency":"usd","customer":"cus_123","description":"order 42"}"#;
    g.throughput(Throughput::Elements(in_flight as u64));
    // The writer thread's CPU time and the wall time inside the timed loads, and the writes made.
    let (mut cpu, mut wall, mut writes) = (Duration::ZERO, Duration::ZERO, 0);
    g.bench_function(BenchmarkId::new(name, in_flight), |b| {
        b.iter_custom(|iters| {
            let (cpu_before, (_, jobs_before)) = (writer_cpu(), l.writer_counters());
            let start = Instant::now();
            load(l, keys, in_flight, iters as usize * in_flight, body);
            let elapsed = start.elapsed();
            wall += elapsed;
            cpu += writer_cpu().saturating_sub(cpu_before);
            writes += l.writer_counters().1 - jobs_before;
            elapsed
        })
    });
    let (commits, jobs) = l.writer_counters();
    eprintln!(
        "{group}/{name}: {jobs} writes in {commits} commits ({:.1} per fsync)",
        jobs as f64 / commits.max(1) as f64
    );
    // What bounds the writer: its CPU per write, and the share of the time it was on a core. The
    // rest it waits, mostly on its commit's fsync; a writer that never waited would make at most
    // one write per CPU time per write.
    if writes > 0 && !cpu.is_zero() {
        let per_write = cpu.as_secs_f64() / writes as f64;
        eprintln!(
            "{group}/{name}: the writer thread: {:.1} µs of CPU per write, on a core {:.0}% of \
             the time; {:.0} writes/s at 100%",
            per_write * 1e6,
            100.0 * cpu.as_secs_f64() / wall.as_secs_f64(),
            1.0 / per_write
        );
    }
}

/// The CPU time the ledger's writer threads have used so far, from their `schedstat`
/// (nanoseconds on a core); zero where there is no `/proc`.
fn writer_cpu() -> Duration {
    let ns: u64 = testing::writer_threads()
        .iter()
        .filter_map(|t| std::fs::read_to_string(t.join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(ns)
}

fn durable_claims(c: &mut Criterion) {
    let mut g = c.benchmark_group("durable_claims");
    g.sample_size(10).measurement_time(Duration::from_secs(5));
    let runs = [
        ("group_commit", MAX_BATCH, Keys::InOrder),
        ("group_commit_random_keys", MAX_BATCH, Keys::Random),
        ("one_transaction_per_claim", 1, Keys::InOrder),
    ];
    for (name, batch, keys) in runs {
        let (_dir, l) = ledger(batch);
        bench_load(&mut g, "durable_claims", name, &l, keys, 256, claims);
    }
    g.finish();
}

/// A first call's two writes, in flight.
enum Step {
    Claim(Ticket<ClaimOutcome>),
    Complete(Ticket<CompleteOutcome>),
}

/// `total` first calls, `in_flight` at a time: each claimed, then completed, both durable — the
/// ledger's part of a first call through the proxy, with the upstream answering instantly. When
/// one ends, the next starts (as in [`claims`]).
fn first_calls(l: &Ledger, keys: Keys, in_flight: usize, total: usize, body: &[u8]) {
    let mut window = VecDeque::with_capacity(in_flight);
    let mut started = 0;
    while started < total.min(in_flight) {
        window.push_back(Step::Claim(l.claim(claim(body, keys))));
        started += 1;
    }
    while let Some(step) = window.pop_front() {
        match step {
            Step::Claim(t) => {
                let entry_id = claimed(t);
                window.push_back(Step::Complete(l.complete(CompleteRequest {
                    entry_id,
                    owner: "bench".into(),
                    response: ResponseRecord {
                        status: 201,
                        headers: vec![("content-type".into(), "application/json".into())],
                        body: br#"{"id":"ch_1","status":"succeeded"}"#.to_vec(),
                    },
                    ttl_ms: 3_600_000,
                    duplicate_window_ms: Some(600_000),
                    at: now_millis(),
                })));
            }
            Step::Complete(t) => {
                if let Err(e) = t.wait() {
                    panic!("complete: {e}");
                }
                if started < total {
                    window.push_back(Step::Claim(l.claim(claim(body, keys))));
                    started += 1;
                }
            }
        }
    }
}

fn durable_first_calls(c: &mut Criterion) {
    let mut g = c.benchmark_group("durable_first_calls");
    g.sample_size(10).measurement_time(Duration::from_secs(5));
    for (name, keys) in [
        ("group_commit", Keys::InOrder),
        ("group_commit_random_keys", Keys::Random),
    ] {
        let (_dir, l) = ledger(MAX_BATCH);
        bench_load(
            &mut g,
            "durable_first_calls",
            name,
            &l,
            keys,
            256,
            first_calls,
        );
    }
    g.finish();
}

/// A JSON body of about `size` bytes: an object of short records, like a batch tool call.
fn body_of(size: usize) -> Vec<u8> {
    let mut items = Vec::new();
    let mut len = 0;
    let mut i = 0;
    while len < size {
        let item = serde_json::json!({"sku": format!("sku-{i}"), "qty": i % 7, "price": 1.25 * i as f64, "note": "x"});
        len += item.to_string().len() + 1;
        items.push(item);
        i += 1;
    }
    serde_json::to_vec(&serde_json::json!({"customer": "cus_1", "items": items})).expect("json")
}

fn fingerprints(c: &mut Criterion) {
    let mut g = c.benchmark_group("fingerprint");
    for size in [1024usize, 64 * 1024] {
        let body = body_of(size);
        g.throughput(Throughput::Bytes(body.len() as u64));
        g.bench_function(
            BenchmarkId::from_parameter(format!("{}KiB", size / 1024)),
            |b| b.iter(|| canon::fingerprint("POST", "charges", &[], std::hint::black_box(&body))),
        );
    }
    g.finish();
}

/// What reading a body strictly costs ([`canon::parse_json`], which refuses an object naming a
/// member twice and which every JSON body of a write goes through) beside serde_json's own parse
/// into a `Value`, the lenient parse it stands in for: the same bodies, in one process, in turns.
fn json_parse(c: &mut Criterion) {
    let mut g = c.benchmark_group("json_parse");
    for size in [1024usize, 64 * 1024] {
        let body = body_of(size);
        let kib = format!("{}KiB", size / 1024);
        g.throughput(Throughput::Bytes(body.len() as u64));
        g.bench_function(BenchmarkId::new("strict", &kib), |b| {
            b.iter(|| canon::parse_json(std::hint::black_box(&body)).expect("json"))
        });
        g.bench_function(BenchmarkId::new("serde_json", &kib), |b| {
            b.iter(|| {
                serde_json::from_slice::<serde_json::Value>(std::hint::black_box(&body))
                    .expect("json")
            })
        });
    }
    g.finish();
}

criterion_group!(
    benches,
    durable_claims,
    durable_first_calls,
    fingerprints,
    json_parse
);
criterion_main!(benches);
