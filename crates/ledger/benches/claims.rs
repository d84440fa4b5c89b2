//! In-process ledger throughput: durable claims per second with group commit (many claims per
//! fsync'd transaction), under keys in order and under random UUIDs, against one transaction per
//! claim; durable first calls per second (a claim, then its completion: what the ledger does for
//! every first call through the proxy, without HTTP); and request fingerprinting of 1 KiB and
//! 64 KiB JSON bodies. `cargo bench -p idemgate-ledger --bench claims` (BENCHMARKS.md); under
//! `cargo test --benches` each runs once, as a smoke test.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

// The allocator of the shipped binaries (see crates/cli/src/main.rs).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use idemgate_ledger::*;

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

fn claim(body: &[u8], random: bool) -> ClaimRequest {
    ClaimRequest {
        route: "charges".into(),
        scope: "agent".into(),
        key: next_key(random),
        fingerprint: canon::fingerprint("POST", "charges", &[], body),
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
        at: now_millis(),
    }
}

/// `n` claims in flight at once (as from `n` concurrent requests), all awaited.
fn claims_in_flight(l: &Ledger, n: usize, body: &[u8]) {
    claims_with_keys(l, n, body, false)
}

/// As [`claims_in_flight`], each under a random UUID.
fn random_key_claims_in_flight(l: &Ledger, n: usize, body: &[u8]) {
    claims_with_keys(l, n, body, true)
}

fn claims_with_keys(l: &Ledger, n: usize, body: &[u8], random: bool) {
    let tickets: Vec<_> = (0..n).map(|_| l.claim(claim(body, random))).collect();
    for t in tickets {
        match t.wait() {
            Ok(ClaimOutcome::Claimed { .. }) => {}
            other => panic!("claim: {other:?}"),
        }
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

/// One round: `in_flight` operations put through the ledger at once, all awaited.
type Round = fn(&Ledger, usize, &[u8]);

/// Times `round` (which puts `in_flight` operations through `l` at once and waits for all) as the
/// benchmark `group/name/in_flight`, then prints how many writes each fsync'd commit carried.
fn bench_rounds(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    group: &str,
    name: &str,
    l: &Ledger,
    in_flight: usize,
    round: Round,
) {
    let body = br#"{"amount":4999,"currency":"usd","customer":"cus_123","description":"order 42"}"#;
    g.throughput(Throughput::Elements(in_flight as u64));
    g.bench_function(BenchmarkId::new(name, in_flight), |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                round(l, in_flight, body);
            }
            start.elapsed()
        })
    });
    let (commits, jobs) = l.writer_counters();
    eprintln!(
        "{group}/{name}: {jobs} writes in {commits} commits ({:.1} per fsync)",
        jobs as f64 / commits.max(1) as f64
    );
}

fn claims(c: &mut Criterion) {
    let mut g = c.benchmark_group("durable_claims");
    g.sample_size(10).measurement_time(Duration::from_secs(5));
    let rounds: [(&str, usize, Round); 3] = [
        ("group_commit", MAX_BATCH, claims_in_flight),
        (
            "group_commit_random_keys",
            MAX_BATCH,
            random_key_claims_in_flight,
        ),
        ("one_transaction_per_claim", 1, claims_in_flight),
    ];
    for (name, batch, round) in rounds {
        let (_dir, l) = ledger(batch);
        bench_rounds(&mut g, "durable_claims", name, &l, 256, round);
    }
    g.finish();
}

/// `n` first calls in flight at once: each claimed, then completed, both durable — the ledger's part
/// of a first call through the proxy, with the upstream answering instantly.
fn first_calls_in_flight(l: &Ledger, n: usize, body: &[u8]) {
    first_calls_with_keys(l, n, body, false)
}

/// As [`first_calls_in_flight`], each under a random UUID.
fn random_key_first_calls_in_flight(l: &Ledger, n: usize, body: &[u8]) {
    first_calls_with_keys(l, n, body, true)
}

fn first_calls_with_keys(l: &Ledger, n: usize, body: &[u8], random: bool) {
    let claims: Vec<_> = (0..n).map(|_| l.claim(claim(body, random))).collect();
    let completions: Vec<_> = claims
        .into_iter()
        .map(|t| match t.wait() {
            Ok(ClaimOutcome::Claimed { entry_id, .. }) => l.complete(CompleteRequest {
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
            }),
            other => panic!("claim: {other:?}"),
        })
        .collect();
    for t in completions {
        if let Err(e) = t.wait() {
            panic!("complete: {e}");
        }
    }
}

fn first_calls(c: &mut Criterion) {
    let mut g = c.benchmark_group("durable_first_calls");
    g.sample_size(10).measurement_time(Duration::from_secs(5));
    let rounds: [(&str, Round); 2] = [
        ("group_commit", first_calls_in_flight),
        ("group_commit_random_keys", random_key_first_calls_in_flight),
    ];
    for (name, round) in rounds {
        let (_dir, l) = ledger(MAX_BATCH);
        bench_rounds(&mut g, "durable_first_calls", name, &l, 256, round);
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

criterion_group!(benches, claims, first_calls, fingerprints);
criterion_main!(benches);
