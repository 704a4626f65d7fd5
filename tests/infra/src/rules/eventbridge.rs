//! EventBridge and the scheduler: targets with retries and DLQs, asynchronous failures, schedules, bus logs, the order of the first apply.
use std::collections::BTreeSet;

use hcl::Block;

use crate::rules::consumers::present;
use crate::{attr, child, label, Module};

/// Every EventBridge target has a retry policy and a dead-letter queue, and that queue has a policy
/// that lets EventBridge send to it for this rule only (`aws:SourceArn`).
pub fn event_targets(modules: &[Module]) -> Vec<String> {
    let mut violations = Vec::new();
    for module in modules {
        for target in module.blocks("resource", "aws_cloudwatch_event_target") {
            let name = format!("{}: {}", module.dir, label(target, 1));
            let retry = child(target, "retry_policy");
            if !retry.is_some_and(|r| {
                present(r, "maximum_retry_attempts") && present(r, "maximum_event_age_in_seconds")
            }) {
                violations.push(format!(
                    "{name}: no retry policy with attempts and event age"
                ));
            }
            let Some(queue) = child(target, "dead_letter_config")
                .and_then(|d| attr(d, "arn"))
                .and_then(|arn| {
                    arn.strip_prefix("aws_sqs_queue.")
                        .map(|s| s.replace(".arn", ""))
                })
            else {
                violations.push(format!("{name}: no dead-letter queue of this module"));
                continue;
            };
            let queue_url = format!("aws_sqs_queue.{queue}.id");
            let allowed = module
                .blocks("resource", "aws_sqs_queue_policy")
                .filter(|p| attr(p, "queue_url").as_deref() == Some(&queue_url))
                .filter_map(|p| attr(p, "policy"))
                .any(|policy| {
                    module
                        .blocks("data", "aws_iam_policy_document")
                        .any(|document| {
                            policy.contains(&format!(
                                "data.aws_iam_policy_document.{}",
                                label(document, 1)
                            )) && document.body().blocks().any(|s| {
                                attr(s, "actions")
                                    .is_some_and(|a| a.contains("\"sqs:SendMessage\""))
                                    && child(s, "principals")
                                        .and_then(|p| attr(p, "identifiers"))
                                        .is_some_and(|i| i.contains("\"events.amazonaws.com\""))
                                    && child(s, "condition")
                                        .and_then(|c| attr(c, "variable"))
                                        .as_deref()
                                        == Some("\"aws:SourceArn\"")
                            })
                        })
                });
            if !allowed {
                violations.push(format!(
                    "{name}: {queue_url} has no policy letting events.amazonaws.com send for the rule (aws:SourceArn)"
                ));
            }
        }
    }
    violations
}

/// Every asynchronously invoked function has an on-failure destination; every schedule a DLQ.
pub fn async_failures(modules: &[Module]) -> Vec<String> {
    let mut violations = Vec::new();
    for module in modules {
        for config in module.blocks("resource", "aws_lambda_function_event_invoke_config") {
            if !child(config, "destination_config")
                .and_then(|d| child(d, "on_failure"))
                .is_some_and(|f| present(f, "destination"))
            {
                violations.push(format!(
                    "{}: {}: no on-failure destination",
                    module.dir,
                    label(config, 1)
                ));
            }
        }
        for schedule in module.blocks("resource", "aws_scheduler_schedule") {
            let target = child(schedule, "target");
            if !target
                .and_then(|t| child(t, "dead_letter_config"))
                .is_some_and(|d| present(d, "arn"))
            {
                violations.push(format!(
                    "{}: {}: no dead-letter queue",
                    module.dir,
                    label(schedule, 1)
                ));
            }
        }
    }
    violations
}

/// A module that invokes a function asynchronously with an on-failure destination alarms on
/// `DestinationDeliveryFailures` (the failure record lost) and not on `AsyncEventsDropped`, which
/// with a destination counts the events kept there (Lambda developer guide, "Asynchronous
/// invocation metrics") and called them lost.
pub fn async_alarms(modules: &[Module]) -> Vec<String> {
    let mut violations = Vec::new();
    for module in modules {
        let asynchronous = module
            .blocks("resource", "aws_lambda_function_event_invoke_config")
            .next()
            .is_some();
        if !asynchronous {
            continue;
        }
        let text: String = module
            .bodies
            .iter()
            .map(|body| hcl::format::to_string(body).unwrap_or_default())
            .collect();
        if !text.contains("\"DestinationDeliveryFailures\"") {
            violations.push(format!(
                "{}: invokes asynchronously but no alarm watches DestinationDeliveryFailures",
                module.dir
            ));
        }
        if text.contains("\"AsyncEventsDropped\"") {
            violations.push(format!(
                "{}: alarms on AsyncEventsDropped, which counts the events its on-failure destination keeps",
                module.dir
            ));
        }
    }
    violations
}

/// A scheduled reprocessor command names no `destination`: that would send every message of a DLQ
/// to one queue, and one DLQ may serve several sources. The queue the schedule was made for is
/// its `fallbackDestination`, for messages that name no origin.
pub fn schedules(modules: &[Module]) -> Vec<String> {
    let mut violations = Vec::new();
    for module in modules {
        for schedule in module.blocks("resource", "aws_scheduler_schedule") {
            let input = child(schedule, "target")
                .and_then(|target| attr(target, "input"))
                .unwrap_or_default();
            let names_destination = input
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .any(|word| word == "destination");
            if names_destination {
                violations.push(format!(
                    "{}: {}: the schedule's command names a destination: every message of the DLQ would go to that one queue; name it fallbackDestination",
                    module.dir,
                    label(schedule, 1)
                ));
            }
        }
    }
    violations
}

/// Every event bus says what it logs (`log_config`) and delivers those logs somewhere
/// (`aws_cloudwatch_log_delivery_source` on its ARN): a failed delivery is otherwise seen only as a
/// count.
pub fn bus_logging(modules: &[Module]) -> Vec<String> {
    let mut violations = Vec::new();
    for module in modules {
        for bus in module.blocks("resource", "aws_cloudwatch_event_bus") {
            let arn = format!("aws_cloudwatch_event_bus.{}.arn", label(bus, 1));
            let delivered = module
                .blocks("resource", "aws_cloudwatch_log_delivery_source")
                .any(|source| attr(source, "resource_arn").as_deref() == Some(arn.as_str()));
            if child(bus, "log_config").is_none() || !delivered {
                violations.push(format!(
                    "{}: {}: its logs go nowhere",
                    module.dir,
                    label(bus, 1)
                ));
            }
        }
        let deliveries: Vec<&Block> = module
            .blocks("resource", "aws_cloudwatch_log_delivery")
            .collect();
        if deliveries.is_empty() {
            continue;
        }
        if module
            .blocks("resource", "aws_cloudwatch_log_resource_policy")
            .next()
            .is_none()
        {
            violations.push(format!(
                "{}: delivers logs to a log group with no resource policy for delivery.logs.amazonaws.com",
                module.dir
            ));
        }
        let unordered: Vec<&str> = deliveries
            .iter()
            .filter(|delivery| {
                present(delivery, "for_each")
                    || !attr(delivery, "depends_on")
                        .is_some_and(|d| d.contains("aws_cloudwatch_log_delivery."))
            })
            .map(|delivery| label(delivery, 1))
            .collect();
        if unordered.len() > 1 || deliveries.iter().any(|d| present(d, "for_each")) {
            violations.push(format!(
                "{}: log deliveries made at once ({}): each after the one before",
                module.dir,
                unordered.join(", ")
            ));
        }
    }
    violations
}

/// What an event target or a schedule needs in place before its first delivery, and so must
/// depend on: the permission to invoke a function, the policy of each queue it sends to (its
/// DLQ's too), the policy of the role it assumes. Without it the first apply races: the first
/// events fail into the DLQs, or are dropped.
pub fn first_apply_order(modules: &[Module]) -> Vec<String> {
    let mut violations = Vec::new();
    for module in modules {
        let policy_of = |queue: &str| {
            module
                .blocks("resource", "aws_sqs_queue_policy")
                .find(|p| {
                    attr(p, "queue_url").is_some_and(|u| u == format!("aws_sqs_queue.{queue}.id"))
                })
                .map(|p| format!("aws_sqs_queue_policy.{}", label(p, 1)))
        };
        let mut check = |block: &Block, needed: Vec<String>| {
            let depends_on = attr(block, "depends_on").unwrap_or_default();
            let depends_on: BTreeSet<&str> = depends_on
                .trim_matches(|c| c == '[' || c == ']')
                .split(',')
                .map(str::trim)
                .collect();
            for need in needed {
                if !depends_on.contains(need.as_str()) {
                    violations.push(format!(
                        "{}: {}.{} does not depend on {need}",
                        module.dir,
                        label(block, 0),
                        label(block, 1)
                    ));
                }
            }
        };
        for target in module.blocks("resource", "aws_cloudwatch_event_target") {
            let arns = [
                attr(target, "arn").unwrap_or_default(),
                child(target, "dead_letter_config")
                    .and_then(|d| attr(d, "arn"))
                    .unwrap_or_default(),
            ];
            let mut needed = Vec::new();
            for arn in &arns {
                if arn.ends_with("function_arn") {
                    needed.extend(
                        module
                            .blocks("resource", "aws_lambda_permission")
                            .map(|p| format!("aws_lambda_permission.{}", label(p, 1))),
                    );
                }
                if let Some(queue) = arn
                    .strip_prefix("aws_sqs_queue.")
                    .and_then(|a| a.strip_suffix(".arn"))
                {
                    needed.push(
                        policy_of(queue)
                            .unwrap_or_else(|| format!("a policy of aws_sqs_queue.{queue}")),
                    );
                }
            }
            check(target, needed);
        }
        for schedule in module.blocks("resource", "aws_scheduler_schedule") {
            let role = child(schedule, "target")
                .and_then(|t| attr(t, "role_arn"))
                .unwrap_or_default();
            let role = role
                .strip_prefix("aws_iam_role.")
                .and_then(|r| r.strip_suffix(".arn"))
                .unwrap_or_default();
            let needed = module
                .blocks("resource", "aws_iam_role_policy")
                .filter(|p| attr(p, "role").is_some_and(|r| r == format!("aws_iam_role.{role}.id")))
                .map(|p| format!("aws_iam_role_policy.{}", label(p, 1)))
                .collect();
            check(schedule, needed);
        }
    }
    violations
}
