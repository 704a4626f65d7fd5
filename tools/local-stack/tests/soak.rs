//! The short soak of `make test` (the full one is `make soak`): the invariant holds on every seed,
//! and the faults really happened.
use redrive_local::soak::{run_in_memory, run_on_moto, SoakConfig, SoakReport};

fn check(report: &SoakReport) {
    println!("{report}");
    assert!(report.holds(), "{report}");
    assert!(
        report.injected_send_failures > 0 && report.lost_deletes > 0,
        "faults were injected: {report}"
    );
    assert!(
        report.duplicates_absorbed > 0,
        "duplicates reached the guard: {report}"
    );
    assert!(
        report.in_dlq > 0 && report.redriven > 0,
        "the DLQ was used and redriven: {report}"
    );
    assert_eq!(
        report.processed + report.in_dlq + report.still_queued,
        report.messages,
        "every message is processed or in the DLQ, once: {report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_messages_in_memory_on_two_seeds() {
    for seed in [1, 2] {
        check(
            &run_in_memory(&SoakConfig::memory(10_000, seed))
                .await
                .unwrap(),
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_messages_on_moto() {
    assert!(
        std::env::var("AWS_ENDPOINT_URL").is_ok(),
        "run with `make test` (moto server and AWS_ENDPOINT_URL)"
    );
    let prefix = format!("t{}-soak", std::process::id());
    check(
        &run_on_moto(&prefix, &SoakConfig::moto(300, 7))
            .await
            .unwrap(),
    );
}
