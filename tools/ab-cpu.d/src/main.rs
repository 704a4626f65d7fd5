//! `make bench`'s CPU-bound row on redrive-core's public API, for two trees in one process: 10,000
//! SQS records (every 100th fails), each body parsed as JSON and a field checked, report-only;
//! event bytes in, response bytes out. Alternated pairs, each side the median of `RUNS` batches;
//! prints every pair's candidate/base ratio, their median and how many pairs the candidate lost.
//! Usage: ab-cpu-harness [PAIRS [RUNS]] (15 and 21 by default).
use std::time::{Duration, Instant};

// `make bench`'s own event (tools/ab-cpu writes the repository's path here).
#[path = "@ROOT@/tools/bench/src/event.rs"]
mod event;

use event::{generate_event, Order, FAIL_EVERY};

const RECORDS: usize = 10_000;


/// The row's work against one tree's redrive-core: a function that runs `runs` batches of `event`
/// and returns their median.
macro_rules! row {
    ($name:ident, $core:ident) => {
        fn $name(runtime: &tokio::runtime::Runtime, event: &[u8], runs: usize) -> Duration {
            use $core::port::RecordingQueue;
            use $core::{Message, Processor, ProcessorConfig, RecordError, RecordHandler, SqsEvent};

            struct CheckStatus;
            impl RecordHandler for CheckStatus {
                async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
                    let order: Order<'_> = message.json()?;
                    match order.status {
                        "fail" => Err(RecordError::transient("order_failed", "status is fail")),
                        _ => Ok(()),
                    }
                }
            }

            let processor = Processor::new(
                RecordingQueue::default(),
                {
                    let mut processor_config = ProcessorConfig::default();
                    processor_config.source_queue_url = Some(
                        "https://sqs.us-east-1.amazonaws.com/123456789012/orders".into(),
                    );
                    processor_config
                },
            );
            let mut times: Vec<Duration> = (0..runs)
                .map(|_| {
                    let started = Instant::now();
                    let mut decoded = String::new();
                    let parsed = SqsEvent::from_slice_in(event, &mut decoded).expect("valid event");
                    let processed = runtime
                        .block_on(processor.process(&CheckStatus, &parsed.records, u64::MAX / 2))
                        .expect("batch");
                    let response = serde_json::to_vec(&processed.response).expect("response");
                    assert_eq!(
                        processed.response.batch_item_failures.len(),
                        RECORDS / FAIL_EVERY
                    );
                    std::hint::black_box(response);
                    started.elapsed()
                })
                .collect();
            times.sort();
            times[runs / 2]
        }
    };
}

row!(base_row, base);
row!(candidate_row, candidate);

fn main() {
    let mut args = std::env::args().skip(1).map(|n| n.parse::<usize>().expect("a number"));
    let pairs = args.next().unwrap_or(15);
    let runs = args.next().unwrap_or(21);
    let event = generate_event(RECORDS, None);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    // Warm-up: both trees' code and the allocator.
    base_row(&runtime, event.as_bytes(), 3);
    candidate_row(&runtime, event.as_bytes(), 3);
    let mut ratios = Vec::with_capacity(pairs);
    let mut lost = 0;
    for pair in 1..=pairs {
        let (base, candidate) = if pair % 2 == 1 {
            let base = base_row(&runtime, event.as_bytes(), runs);
            (base, candidate_row(&runtime, event.as_bytes(), runs))
        } else {
            let candidate = candidate_row(&runtime, event.as_bytes(), runs);
            (base_row(&runtime, event.as_bytes(), runs), candidate)
        };
        let ratio = candidate.as_secs_f64() / base.as_secs_f64();
        lost += usize::from(candidate > base);
        ratios.push(ratio);
        println!(
            "pair {pair}: base {} us, candidate {} us, candidate/base {ratio:.4}",
            base.as_micros(),
            candidate.as_micros()
        );
    }
    ratios.sort_by(f64::total_cmp);
    let median = if pairs % 2 == 1 {
        ratios[pairs / 2]
    } else {
        (ratios[pairs / 2 - 1] + ratios[pairs / 2]) / 2.0
    };
    println!("median candidate/base {median:.4} over {pairs} pairs; candidate slower in {lost} of {pairs}");
}
