//! Modules: variable validations and module calls against the modules' inputs.
use std::collections::BTreeMap;
use std::path::Path;

use crate::{attr, label, normalize, Module};

/// The validation conditions of variable `name` in `module`.
pub fn validations(module: &Module, name: &str) -> Vec<String> {
    module
        .blocks("variable", name)
        .flat_map(|variable| {
            variable
                .body()
                .blocks()
                .filter(|b| b.identifier() == "validation")
        })
        .filter_map(|validation| attr(validation, "condition"))
        .collect()
}

/// Visibility timeout >= 6 x function timeout + window; DLQ retention > source retention (standard);
/// maxReceiveCount >= 5 and above the code's attempt limit; stream records age out before the
/// stream forgets them and retries are bounded.
pub fn variable_rules(modules: &[Module]) -> Vec<String> {
    let required = [
        ("modules/sqs-consumer", "visibility_timeout_seconds", "var.visibility_timeout_seconds >= 6 * var.function_timeout_seconds + var.batching_window_seconds"),
        ("modules/sqs-consumer", "dlq_message_retention_seconds", "var.fifo || var.dlq_message_retention_seconds > var.message_retention_seconds"),
        ("modules/sqs-consumer", "max_receive_count", "var.max_receive_count >= 5"),
        ("modules/sqs-consumer", "max_receive_count", "var.max_receive_count > var.max_attempts"),
        ("modules/sqs-consumer", "max_receive_count", "!var.fifo || var.batch_size == 1 || var.max_receive_count >= var.batch_size * (var.max_attempts + 1) + 21"),
        ("modules/sqs-consumer", "max_receive_count", "var.fifo_on_dead_letter != \"hold\" || var.max_receive_count >= var.batch_size * (var.max_attempts + 1) + 21 + 30"),
        ("modules/sqs-consumer", "batch_size", "!var.fifo || var.batch_size == 1 || length(setintersection(keys(var.environment), [\"REDRIVE_IDEMPOTENCY_TABLE\", \"REDRIVE_LEDGER_TABLE\"])) > 0"),
        ("modules/eventbridge-route", "dlq_message_retention_seconds", "var.dlq_message_retention_seconds > var.message_retention_seconds"),
        ("modules/stream-consumer", "maximum_record_age_seconds", "var.maximum_record_age_seconds < var.retention_hours * 3600"),
        ("modules/stream-consumer", "maximum_retry_attempts", "var.maximum_retry_attempts >= 0"),
        ("modules/stream-consumer", "dlq_message_retention_seconds", "var.dlq_message_retention_seconds > var.retention_hours * 3600"),
    ];
    required
        .iter()
        .filter(|(dir, variable, rule)| {
            !modules
                .iter()
                .filter(|m| m.dir == *dir)
                .any(|m| validations(m, variable).iter().any(|c| c.contains(rule)))
        })
        .map(|(dir, variable, rule)| format!("{dir}: variable {variable}: no validation `{rule}`"))
        .collect()
}

/// Every call of a local module passes only variables the module declares, and every variable the
/// module declares without a default: what `terraform plan` reports as an unsupported or a missing
/// argument.
pub fn module_calls(modules: &[Module]) -> Vec<String> {
    const META: [&str; 6] = [
        "source",
        "for_each",
        "count",
        "depends_on",
        "providers",
        "version",
    ];
    let mut violations = Vec::new();
    for module in modules {
        for call in module.bodies.iter().flat_map(|body| body.blocks()) {
            if call.identifier() != "module" {
                continue;
            }
            let source = attr(call, "source").unwrap_or_default();
            let source = source.trim_matches('"');
            let target = Path::new(&module.dir).join(source);
            let target = normalize(&target);
            let Some(callee) = modules.iter().find(|m| Path::new(&m.dir) == target) else {
                violations.push(format!(
                    "{}: module {}: no module at {source}",
                    module.dir,
                    label(call, 0)
                ));
                continue;
            };
            let variables: BTreeMap<&str, bool> = callee
                .bodies
                .iter()
                .flat_map(|body| body.blocks())
                .filter(|b| b.identifier() == "variable")
                .map(|b| {
                    (
                        label(b, 0),
                        b.body().attributes().any(|a| a.key() == "default"),
                    )
                })
                .collect();
            let passed: Vec<&str> = call.body().attributes().map(|a| a.key()).collect();
            for name in passed.iter().filter(|name| !META.contains(name)) {
                if !variables.contains_key(name) {
                    violations.push(format!(
                        "{}: module {}: {} declares no variable {name}",
                        module.dir,
                        label(call, 0),
                        callee.dir
                    ));
                }
            }
            for (name, _) in variables.iter().filter(|(_, has_default)| !**has_default) {
                if !passed.contains(name) {
                    violations.push(format!(
                        "{}: module {}: the required variable {name} of {} is not passed",
                        module.dir,
                        label(call, 0),
                        callee.dir
                    ));
                }
            }
        }
    }
    violations
}
