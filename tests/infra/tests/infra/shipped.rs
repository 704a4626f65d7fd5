//! The engine against what Terraform ships: `infra/rendered/`, each configuration's plan as
//! `tools/plan-infra` renders it (`make infra-check` fails while a file differs from the plan).
//! Every queue takes the largest copy the engine may send to it, and every function's environment
//! is one its settings accept as they would at a cold start.
use std::path::PathBuf;

use redrive::config::{EventRedriveSettings, ReprocessSettings, Settings};
use redrive::envelope::MAX_MESSAGE_BYTES;
use serde_json::Value;

/// What the renderings show for a value Terraform knows only after apply.
const AFTER_APPLY: &str = "(known after apply)";

fn renderings() -> Vec<(String, Value)> {
    let dir: PathBuf = redrive_infra::infra().join("rendered");
    let mut found: Vec<(String, Value)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}; run tools/plan-infra", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            (
                path.display().to_string(),
                serde_json::from_str(&text).unwrap(),
            )
        })
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

/// The queues of one rendering whose `max_message_size` is under what the engine may send.
fn queues_too_small(rendering: &Value) -> Vec<String> {
    rendering["queues"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, queue)| queue["max_message_size"].as_u64().unwrap() < MAX_MESSAGE_BYTES as u64)
        .map(|(name, queue)| format!("{name}: {}", queue["max_message_size"]))
        .collect()
}

#[test]
fn every_configuration_is_rendered_and_every_queue_takes_the_largest_copy_the_engine_sends() {
    let renderings = renderings();
    let names: Vec<&str> = renderings
        .iter()
        .map(|(_, r)| r["configuration"].as_str().unwrap())
        .collect();
    let examples = std::fs::read_dir(redrive_infra::infra().join("examples"))
        .unwrap()
        .count();
    assert_eq!(
        names.len(),
        2 + examples,
        "one rendering per configuration (the root, the root holding its FIFO groups, each \
         example): {names:?}"
    );
    let mut queues = 0;
    for (path, rendering) in &renderings {
        queues += rendering["queues"].as_object().unwrap().len();
        let small = queues_too_small(rendering);
        assert!(
            small.is_empty(),
            "{path}: queues that refuse a copy the engine may send ({MAX_MESSAGE_BYTES} bytes): {small:?}"
        );
    }
    assert!(queues >= 20, "the renderings hold every queue: {queues}");
}

#[test]
fn a_queue_left_at_the_providers_default_size_is_caught() {
    let (_, mut rendering) = renderings().into_iter().next().unwrap();
    let queue = rendering["queues"]
        .as_object_mut()
        .unwrap()
        .values_mut()
        .next()
        .unwrap();
    // The AWS provider's default when max_message_size is unset.
    queue["max_message_size"] = 262_144.into();
    assert_eq!(queues_too_small(&rendering).len(), 1);
}

/// The Kafka mappings of one rendering that discard records without a record of them, or whose
/// unbounded retries Lambda would cap at 10 beside an on-failure destination (Lambda developer
/// guide, "Using a Kafka topic as an on-failure destination").
fn kafka_discards_unrecorded(rendering: &Value) -> Vec<String> {
    let mut found = Vec::new();
    for (address, mapping) in rendering["mappings"].as_object().unwrap() {
        if mapping["topics"].is_null() {
            continue;
        }
        let bounded = |name: &str| mapping[name].as_i64().is_some_and(|n| n >= 0);
        let discards =
            bounded("maximum_retry_attempts") || bounded("maximum_record_age_in_seconds");
        let recorded = mapping["on_failure_destination"].as_bool().unwrap();
        if discards && !recorded {
            found.push(format!(
                "{address}: discards without an on-failure destination"
            ));
        }
        if !bounded("maximum_retry_attempts") && recorded {
            found.push(format!(
                "{address}: unbounded retries beside an on-failure destination (Lambda caps them at 10)"
            ));
        }
    }
    found
}

#[test]
fn every_kafka_mapping_keeps_a_failing_batch_until_it_succeeds_or_records_what_it_discards() {
    let mut kafka = 0;
    for (path, rendering) in renderings() {
        kafka += rendering["mappings"]
            .as_object()
            .unwrap()
            .values()
            .filter(|m| !m["topics"].is_null())
            .count();
        assert_eq!(
            kafka_discards_unrecorded(&rendering),
            Vec::<String>::new(),
            "{path}"
        );
    }
    assert!(kafka >= 1, "the renderings hold a Kafka mapping");
    let (_, mut rendering) = renderings()
        .into_iter()
        .find(|(_, r)| r["configuration"] == "examples/kafka-orders")
        .unwrap();
    let mut shipped = |retries: i64, destination: bool| {
        let mapping = rendering["mappings"]
            .as_object_mut()
            .unwrap()
            .values_mut()
            .find(|m| !m["topics"].is_null())
            .unwrap();
        mapping["maximum_retry_attempts"] = retries.into();
        mapping["on_failure_destination"] = destination.into();
        kafka_discards_unrecorded(&rendering).len()
    };
    // What the module shipped before: 5 retries with a destination.
    assert_eq!(shipped(5, true), 0);
    assert_eq!(shipped(5, false), 1);
    assert_eq!(shipped(-1, true), 1);
}

/// `Ok` when one of the functions' settings types takes `environment` (unknowns stood in for).
fn accepted(environment: &serde_json::Map<String, Value>) -> Result<(), String> {
    let values: Vec<(String, String)> = environment
        .iter()
        .map(|(name, value)| {
            let value = value.as_str().unwrap();
            let value = match value {
                AFTER_APPLY if name.ends_with("_ARN") => {
                    "arn:aws:sqs:us-east-1:123456789012:known-after-apply".to_owned()
                }
                AFTER_APPLY if name.ends_with("_URL") => {
                    "https://sqs.us-east-1.amazonaws.com/123456789012/known-after-apply".to_owned()
                }
                AFTER_APPLY => "known-after-apply".to_owned(),
                value => value.to_owned(),
            };
            (name.clone(), value)
        })
        .collect();
    let names = || values.iter().map(|(name, _)| name.as_str());
    let lookup = |name: &str| {
        values
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let consumer = Settings::from_lookup(names(), lookup).map(|_| ());
    let reprocessor = ReprocessSettings::from_lookup(names(), lookup).map(|_| ());
    let event_redrive = EventRedriveSettings::from_lookup(names(), lookup).map(|_| ());
    match (consumer, reprocessor, event_redrive) {
        (Ok(()), _, _) | (_, Ok(()), _) | (_, _, Ok(())) => Ok(()),
        (Err(a), Err(b), Err(c)) => Err(format!(
            "consumer: {a}; reprocessor: {b}; event redrive: {c}"
        )),
    }
}

#[test]
fn every_function_starts_with_the_environment_terraform_gives_it() {
    let mut functions = 0;
    for (path, rendering) in renderings() {
        for (name, function) in rendering["functions"].as_object().unwrap() {
            functions += 1;
            let environment = function["environment"].as_object().unwrap();
            if let Err(error) = accepted(environment) {
                panic!("{path}: {name} would refuse to start: {error}");
            }
        }
    }
    assert!(
        functions >= 10,
        "the renderings hold every function: {functions}"
    );
}

#[test]
fn an_environment_the_engine_refuses_is_caught() {
    let (_, rendering) = renderings().into_iter().next().unwrap();
    let (_, function) = rendering["functions"]
        .as_object()
        .unwrap()
        .iter()
        .find(|(_, f)| f["environment"].get("REDRIVE_MAX_ATTEMPTS").is_some())
        .expect("a consumer");
    let mut environment = function["environment"].as_object().unwrap().clone();
    assert_eq!(accepted(&environment), Ok(()));
    environment.insert("REDRIVE_MAX_ATTEMPS".into(), "5".into());
    assert!(accepted(&environment)
        .unwrap_err()
        .contains("REDRIVE_MAX_ATTEMPS"));
}
