//! Consumers: event source mappings, their queues and redrive policies, reservations, recursion, FIFO throughput, the idempotency window.

use hcl::Block;

use crate::rules::iam::statements;
use crate::{attr, child, label, Module};

/// Arguments that only stream sources (Kinesis, DynamoDB, Kafka) take.
pub const STREAM_ONLY: [&str; 8] = [
    "bisect_batch_on_function_error",
    "starting_position",
    "starting_position_timestamp",
    "parallelization_factor",
    "maximum_retry_attempts",
    "maximum_record_age_in_seconds",
    "tumbling_window_in_seconds",
    "destination_config",
];

pub fn present(block: &Block, name: &str) -> bool {
    block.body().attributes().any(|a| a.key() == name) || child(block, name).is_some()
}

/// Every mapping reports item failures. A mapping on a stream (Kinesis, DynamoDB Streams, or
/// Kafka: one that reads `topics`) bisects and sets its retries and record age. Kinesis and DynamoDB
/// retries may be -1, bounded by the record age (an outage is then bounded by time, not by how fast
/// Lambda retries), with an on-failure destination. A Kafka mapping's retries and record age may
/// both be -1 (kept until the batch succeeds or leaves the topic); its destination is then a
/// `dynamic` block, present only where the retries are bounded, since Lambda caps infinite retries
/// at 10 beside one (Lambda developer guide, "Using a Kafka topic as an on-failure destination";
/// the renderings check each configuration's outcome). A Kafka mapping runs in provisioned mode,
/// which those error controls need (Lambda developer guide, "Configuring error handling controls
/// for Kafka event sources"); any other mapping is an SQS mapping and carries no stream-only
/// argument.
pub fn mappings(modules: &[Module]) -> Vec<String> {
    let mut violations = Vec::new();
    for module in modules {
        for mapping in module.blocks("resource", "aws_lambda_event_source_mapping") {
            let name = format!("{}: {}", module.dir, label(mapping, 1));
            if !attr(mapping, "function_response_types")
                .is_some_and(|t| t.contains("\"ReportBatchItemFailures\""))
            {
                violations.push(format!("{name}: no ReportBatchItemFailures"));
            }
            let kafka = present(mapping, "topics");
            let stream = kafka
                || attr(mapping, "event_source_arn")
                    .is_some_and(|arn| arn.contains("aws_kinesis_stream."));
            if !stream {
                for arg in STREAM_ONLY.iter().filter(|arg| present(mapping, arg)) {
                    violations.push(format!("{name}: {arg} is for stream sources only"));
                }
                continue;
            }
            if kafka && child(mapping, "provisioned_poller_config").is_none() {
                violations.push(format!(
                    "{name}: a Kafka mapping needs provisioned mode (provisioned_poller_config) for its error controls"
                ));
            }
            if attr(mapping, "bisect_batch_on_function_error").as_deref() != Some("true") {
                violations.push(format!(
                    "{name}: a stream mapping must bisect failing batches"
                ));
            }
            for (limit, unbounded_allowed) in [
                ("maximum_retry_attempts", true),
                ("maximum_record_age_in_seconds", kafka),
            ] {
                match attr(mapping, limit) {
                    Some(value) if value != "-1" || unbounded_allowed => {}
                    _ => violations.push(format!("{name}: {limit} must be set and bounded")),
                }
            }
            let destination = |config: &Block| {
                child(config, "on_failure").is_some_and(|f| present(f, "destination_arn"))
                    || child(config, "content")
                        .and_then(|c| child(c, "on_failure"))
                        .is_some_and(|f| present(f, "destination_arn"))
            };
            let fixed = child(mapping, "destination_config").is_some_and(destination);
            let dynamic = mapping.body().blocks().any(|b| {
                b.identifier() == "dynamic" && label(b, 0) == "destination_config" && destination(b)
            });
            if !(fixed || (kafka && dynamic)) {
                violations.push(format!("{name}: no on-failure destination"));
            }
        }
    }
    violations
}

/// The queues the root's EventBridge redrive reads (`module.recovery`'s `event_sources`): each as
/// the module that creates it and its `aws_sqs_queue` label.
pub fn event_source_queues(modules: &[Module]) -> Vec<(&Module, String)> {
    let Some(root) = modules.iter().find(|m| m.dir.is_empty()) else {
        return Vec::new();
    };
    let sources = root
        .calls("recovery")
        .find_map(|call| attr(call, "event_sources"))
        .unwrap_or_default();
    // `module.events.target_dlq_arn` -> the called module and the queue its output names.
    sources
        .split_whitespace()
        .filter(|w| w.starts_with("module."))
        .filter_map(|reference| {
            let mut parts = reference.trim_end_matches(',').split('.');
            let (_, call, output) = (parts.next()?, parts.next()?, parts.next()?);
            let dir = root
                .bodies
                .iter()
                .flat_map(|body| body.blocks())
                .find(|b| b.identifier() == "module" && label(b, 0) == call)
                .and_then(|b| attr(b, "source"))?
                .trim_matches('"')
                .trim_start_matches("./")
                .to_owned();
            let module = modules.iter().find(|m| m.dir == dir)?;
            let value = module
                .bodies
                .iter()
                .flat_map(|body| body.blocks())
                .find(|b| b.identifier() == "output" && label(b, 0) == output)
                .and_then(|b| attr(b, "value"))?;
            let queue = value.strip_prefix("aws_sqs_queue.")?.strip_suffix(".arn")?;
            Some((module, queue.to_owned()))
        })
        .collect()
}

/// The queues the EventBridge redrive reads have a redrive policy: a message that crashes or
/// times out the redrive itself came back every visibility timeout for the queue's retention.
pub fn redrive_sources_have_a_way_out(modules: &[Module]) -> Vec<String> {
    event_source_queues(modules)
        .into_iter()
        .filter(|(module, queue)| {
            !module
                .blocks("resource", "aws_sqs_queue")
                .any(|q| label(q, 1) == queue && present(q, "redrive_policy"))
        })
        .map(|(module, queue)| {
            format!("{}: aws_sqs_queue.{queue} is read by the EventBridge redrive without a redrive policy", module.dir)
        })
        .collect()
}

/// A FIFO queue the modules make is a high-throughput one (deduplication and throughput per
/// message group): otherwise a queue's deletes cap it near 300 messages a second whatever the
/// number of groups.
pub fn high_throughput_fifo(modules: &[Module]) -> Vec<String> {
    let mut violations = Vec::new();
    for module in modules {
        for queue in module.blocks("resource", "aws_sqs_queue") {
            if attr(queue, "fifo_queue").is_none_or(|f| f == "false") {
                continue;
            }
            let setting = |name: &str| {
                let value = attr(queue, name).unwrap_or_default();
                match value.strip_prefix("local.") {
                    Some(_) => module.local_of(&value),
                    None => value,
                }
            };
            if !setting("deduplication_scope").contains("\"messageGroup\"")
                || !setting("fifo_throughput_limit").contains("\"perMessageGroupId\"")
            {
                violations.push(format!(
                    "{}: {}: a FIFO queue without high throughput",
                    module.dir,
                    label(queue, 1)
                ));
            }
        }
    }
    violations
}

/// A consumer behind the shared idempotency store remembers a done key at least as long as a
/// duplicate can come back: the source's retention plus the DLQ's (a copy dead-lettered, then
/// redriven). The code's default (14 d) is shorter than that path with the tfvars' queues.
pub fn idempotency_window(modules: &[Module]) -> Vec<String> {
    let mut violations = Vec::new();
    for module in modules {
        for call in module.calls("sqs-consumer") {
            let environment = attr(call, "environment").unwrap_or_default();
            if !environment.contains("REDRIVE_IDEMPOTENCY_TABLE") {
                continue;
            }
            let ttl = environment
                .split("REDRIVE_IDEMPOTENCY_TTL")
                .nth(1)
                .and_then(|rest| rest.split('\n').next())
                .unwrap_or_default();
            let covers = ["message_retention_seconds", "dlq_message_retention_seconds"]
                .iter()
                .all(|retention| ttl.contains(retention));
            if !covers {
                let dir = if module.dir.is_empty() {
                    "infra"
                } else {
                    &module.dir
                };
                violations.push(format!(
                    "{dir}: module {}: REDRIVE_IDEMPOTENCY_TTL does not cover the source's and the DLQ's retention, so a redriven duplicate can outlive its key",
                    label(call, 0)
                ));
            }
        }
    }
    violations
}

/// No module reserves concurrency unless asked: Lambda refuses a reservation that leaves the
/// account's unreserved concurrency under 100, so any default reservation fails on a new account.
pub fn reservations(modules: &[Module]) -> Vec<String> {
    modules
        .iter()
        .flat_map(|module| {
            module
                .blocks("variable", "reserved_concurrency")
                .filter(|variable| attr(variable, "default").is_some_and(|d| d != "null"))
                .map(|_| {
                    format!(
                        "{}: reserved_concurrency has a default reservation",
                        module.dir
                    )
                })
        })
        .collect()
}

/// A function that an SQS event source mapping invokes (a mapping without the stream-only
/// `starting_position`) and that may send to SQS re-sends to its own trigger: Lambda's recursive
/// loop detection would stop that chain after 16 invocations, so its module call sets
/// `recursive_loop = "Allow"` (the code bounds the chain).
pub fn recursion(modules: &[Module]) -> Vec<String> {
    let mut violations = Vec::new();
    for module in modules {
        for mapping in module.blocks("resource", "aws_lambda_event_source_mapping") {
            if present(mapping, "starting_position") {
                continue;
            }
            let target = attr(mapping, "function_name").unwrap_or_default();
            for call in module.calls("function") {
                let sends =
                    statements(std::slice::from_ref(module))
                        .iter()
                        .any(|(w, actions, ..)| {
                            w.contains(&format!(" module {} statement", label(call, 0)))
                                && actions.contains("\"sqs:SendMessage\"")
                        });
                let invoked = [".", "[0]."]
                    .iter()
                    .any(|then| target.starts_with(&format!("module.{}{then}", label(call, 0))));
                if invoked && sends && attr(call, "recursive_loop").as_deref() != Some("\"Allow\"")
                {
                    violations.push(format!(
                        "{}: {}: re-sends to the queue that triggers it without recursive_loop = \"Allow\"",
                        module.dir,
                        label(call, 0)
                    ));
                }
            }
        }
    }
    violations
}
