//! The real event-consumer bootstrap through a local runtime API: with
//! `AWS_LAMBDA_MAX_CONCURRENCY` it takes that many events at once, each answered as its own.
use redrive_runtime_api::{Invocation, RuntimeApi};

#[test]
fn on_managed_instances_events_are_handled_side_by_side() {
    let sample = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../events/eventbridge-order-event.json"
    ))
    .unwrap();
    let invocations: Vec<Invocation> = (0..6)
        .map(|k| {
            let mut event: serde_json::Value = serde_json::from_str(&sample).unwrap();
            event["detail"]["orderId"] = format!("o-{k}").into();
            Invocation {
                request_id: format!("req-{k}"),
                trace_id: format!("Root=1-6921a3c0-{k:024x};Sampled=1"),
                event: event.to_string().into_bytes(),
            }
        })
        .collect();
    let api = RuntimeApi::bind().unwrap();
    let mut child = api
        .spawn(
            env!("CARGO_BIN_EXE_event-consumer"),
            &[
                ("AWS_LAMBDA_MAX_CONCURRENCY", "3"),
                ("PAYMENTS_LATENCY", "1s"),
            ],
            false,
        )
        .unwrap();
    let served = api.serve(invocations, |_| Ok(()));
    child.kill().unwrap();
    child.wait().unwrap();
    let served = served.unwrap();
    assert_eq!(
        served.max_in_flight, 3,
        "AWS_LAMBDA_MAX_CONCURRENCY events at once"
    );
    let mut answered: Vec<&str> = served
        .answers
        .iter()
        .map(|a| a.request_id.as_str())
        .collect();
    answered.sort_unstable();
    assert_eq!(
        answered,
        ["req-0", "req-1", "req-2", "req-3", "req-4", "req-5"]
    );
    assert!(
        served.answers.iter().all(|a| !a.error),
        "every order was paid"
    );
}
