//! The real bootstrap through a local runtime API, as Lambda Managed Instances drive it: several
//! invocations in flight in one process (`AWS_LAMBDA_MAX_CONCURRENCY`), or one at a time without
//! it. Every answer, every EMF line and every log line must belong to its own invocation.
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};

use redrive_runtime_api::{Invocation, RuntimeApi};

/// Each payment call takes this long, so that invocations handed out together overlap.
const LATENCY: &str = "1s";

struct Expected {
    trace_id: String,
    message_ids: Vec<String>,
    failures: Vec<String>,
}

/// Invocation `k`: `k % 3 + 1` orders; on odd `k` the first one's payment times out every time.
fn invocations(count: usize) -> (Vec<Invocation>, BTreeMap<String, Expected>, String) {
    let (mut invocations, mut expected, mut flaky) = (Vec::new(), BTreeMap::new(), Vec::new());
    for k in 0..count {
        let message_ids: Vec<String> = (0..k % 3 + 1).map(|j| format!("k{k}-m{j}")).collect();
        let records: Vec<serde_json::Value> = message_ids
            .iter()
            .map(|id| {
                let order = serde_json::json!({
                    "orderId": format!("o-{id}"), "customerId": "c-1", "amount": 12.5, "currency": "EUR"
                });
                serde_json::json!({
                    "messageId": id, "receiptHandle": format!("rh-{id}"), "body": order.to_string(),
                    "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1763789990000"},
                    "messageAttributes": {}, "eventSource": "aws:sqs",
                    "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders", "awsRegion": "us-east-1"
                })
            })
            .collect();
        let failures = if k % 2 == 1 {
            flaky.push(format!("o-{}:99", message_ids[0]));
            vec![message_ids[0].clone()]
        } else {
            Vec::new()
        };
        let request_id = format!("req-{k}");
        let trace_id = format!("Root=1-6921a3c0-{k:024x};Parent=53995c3f42cd8ad8;Sampled=1");
        invocations.push(Invocation {
            request_id: request_id.clone(),
            trace_id: trace_id.clone(),
            event: serde_json::json!({ "Records": records })
                .to_string()
                .into_bytes(),
        });
        expected.insert(
            request_id,
            Expected {
                trace_id,
                message_ids,
                failures,
            },
        );
    }
    (invocations, expected, flaky.join(","))
}

/// Runs `count` invocations through the bootstrap: the most in flight at once, and what it wrote.
fn drive(count: usize, max_concurrency: Option<&str>) -> (usize, Vec<serde_json::Value>) {
    let (invocations, expected, flaky) = invocations(count);
    let api = RuntimeApi::bind().unwrap();
    let mut env = vec![
        ("PAYMENTS_LATENCY", LATENCY),
        ("PAYMENTS_FLAKY_ORDERS", flaky.as_str()),
    ];
    if let Some(concurrency) = max_concurrency {
        env.push(("AWS_LAMBDA_MAX_CONCURRENCY", concurrency));
    }
    let mut child = api
        .spawn(env!("CARGO_BIN_EXE_sqs-consumer"), &env, true)
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let lines = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<String>>()
    });
    let served = api.serve(invocations, |_| Ok(())).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let lines: Vec<serde_json::Value> = lines
        .join()
        .unwrap()
        .iter()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("not JSON: {line}")))
        .collect();

    // Each answer is its own invocation's partial batch response.
    assert_eq!(served.answers.len(), count);
    for answer in &served.answers {
        assert!(!answer.error, "{} failed", answer.request_id);
        let response: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
        let failures: Vec<&str> = response["batchItemFailures"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["itemIdentifier"].as_str().unwrap())
            .collect();
        assert_eq!(
            failures, expected[&answer.request_id].failures,
            "the answer to {}",
            answer.request_id
        );
    }

    // One EMF line per invocation, with its request id, its trace id and its own figures.
    let emf: Vec<&serde_json::Value> = lines.iter().filter(|l| l.get("_aws").is_some()).collect();
    assert_eq!(emf.len(), count, "one fate line per invocation");
    for line in &emf {
        let request_id = line["requestId"].as_str().unwrap();
        let mine = &expected[request_id];
        assert_eq!(line["traceId"], mine.trace_id.as_str(), "{request_id}");
        assert_eq!(line["Records"], mine.message_ids.len(), "{request_id}");
        assert_eq!(line["GivenBack"], mine.failures.len(), "{request_id}");
    }
    let mut seen: Vec<&str> = emf
        .iter()
        .map(|l| l["requestId"].as_str().unwrap())
        .collect();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), count, "every invocation has its own line");

    // Every log line about a record names the invocation the record arrived in.
    let record_lines: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| l["fields"].get("message_id").is_some())
        .collect();
    let failed: usize = expected.values().map(|e| e.failures.len()).sum();
    assert_eq!(record_lines.len(), failed, "a line per record given back");
    for line in record_lines {
        let message_id = line["fields"]["message_id"].as_str().unwrap();
        let request_id = line["span"]["requestId"].as_str().unwrap();
        let mine = &expected[request_id];
        assert!(
            mine.message_ids.iter().any(|id| id == message_id),
            "{message_id} logged under {request_id}: {line}"
        );
        assert_eq!(line["span"]["xrayTraceId"], mine.trace_id.as_str());
    }
    (served.max_in_flight, lines)
}

#[test]
fn on_managed_instances_invocations_run_side_by_side_each_with_its_own_answer_logs_and_trace() {
    let (in_flight, _) = drive(8, Some("4"));
    assert_eq!(
        in_flight, 4,
        "AWS_LAMBDA_MAX_CONCURRENCY invocations at once"
    );
}

#[test]
fn without_managed_concurrency_invocations_run_one_at_a_time() {
    let (in_flight, _) = drive(3, None);
    assert_eq!(in_flight, 1);
}
