//! `make bench`'s CPU-bound row on redrive-core's public API, against the one tree this build of
//! the harness links: 10,000 SQS records (every 100th fails), each body parsed as JSON and a field
//! checked, report-only; event bytes in, response bytes out. Prints the median of `RUNS` batches,
//! in nanoseconds, after three to warm up. Usage: ab-cpu-harness [RUNS] (21 by default).
use std::time::{Duration, Instant};

// The bench's file names the engine as the bench does.
extern crate redrive_core as redrive;

use redrive::port::RecordingQueue;
use redrive::{Processor, ProcessorConfig, SqsEvent};

// `make bench`'s own event and handler (tools/ab-cpu writes the repository's path here).
#[path = "@ROOT@/tools/bench/src/event.rs"]
mod event;

use event::{generate_event, CheckStatus, FAIL_EVERY};

const RECORDS: usize = 10_000;

/// The median of `runs` batches of `event`.
fn row(runtime: &tokio::runtime::Runtime, event: &[u8], runs: usize) -> Duration {
    let mut config = ProcessorConfig::default();
    config.source_queue_url = Some("https://sqs.us-east-1.amazonaws.com/123456789012/orders".into());
    let processor = Processor::new(RecordingQueue::default(), config);
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let started = Instant::now();
            let mut decoded = String::new();
            let parsed = SqsEvent::from_slice_in(event, &mut decoded).expect("valid event");
            let processed = runtime
                .block_on(processor.process(&CheckStatus, &parsed.records, u64::MAX / 2))
                .expect("batch");
            let response = serde_json::to_vec(&processed.response).expect("response");
            assert_eq!(processed.response.batch_item_failures.len(), RECORDS / FAIL_EVERY);
            std::hint::black_box(response);
            started.elapsed()
        })
        .collect();
    times.sort();
    times[runs / 2]
}

fn main() {
    let runs = std::env::args()
        .nth(1)
        .map_or(21, |n| n.parse::<usize>().expect("a number of runs"));
    let event = generate_event(RECORDS, None);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    // Warm-up: the code and the allocator.
    row(&runtime, event.as_bytes(), 3);
    println!("{}", row(&runtime, event.as_bytes(), runs).as_nanos());
}
