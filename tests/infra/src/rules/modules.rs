//! Modules: variable validations and module calls against the modules' inputs.
use std::collections::BTreeMap;
use std::path::Path;

use crate::{attr, child, label, normalize, text, Module};

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
        ("modules/stream-consumer", "maximum_retry_attempts", "var.maximum_retry_attempts == -1 ? true : var.maximum_retry_attempts >= 0"),
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

/// The root module warns on a plain `terraform apply` without `alarm_email` (a `check` block on
/// it): `make deploy` refuses to go on without one, `terraform apply` alone would say nothing.
pub fn alarm_target_check(modules: &[Module]) -> Vec<String> {
    let root = modules.iter().find(|module| module.dir.is_empty());
    let warned = root.is_some_and(|root| {
        root.blocks("check", "alarm_target").any(|check| {
            child(check, "assert")
                .and_then(|assert| attr(assert, "condition"))
                .is_some_and(|condition| condition.contains("var.alarm_email"))
        })
    });
    if warned {
        Vec::new()
    } else {
        vec!["infra: no check block warns when alarm_email is unset".to_owned()]
    }
}

/// Modules take a lower bound on the AWS provider (`>= x.y`), so that a stack can move on without
/// their release; a root module (the stack, each example) pins one exact version.
pub fn provider_versions(modules: &[Module]) -> Vec<String> {
    let mut violations = Vec::new();
    for module in modules {
        for terraform in module
            .bodies
            .iter()
            .flat_map(|body| body.blocks())
            .filter(|block| block.identifier() == "terraform")
        {
            let Some(providers) = child(terraform, "required_providers") else {
                continue;
            };
            let Some(aws) = attr_object(providers, "aws") else {
                continue;
            };
            let version = aws.trim_matches('"');
            let reusable = module.dir.starts_with("modules/");
            let dir = if module.dir.is_empty() {
                "infra"
            } else {
                &module.dir
            };
            let exact = version.split('.').count() == 3
                && version
                    .split('.')
                    .all(|part| part.chars().all(|c| c.is_ascii_digit()));
            let lower_bound = version.starts_with(">= ") && !version.contains(',');
            if reusable && !lower_bound {
                violations.push(format!(
                    "{dir}: the AWS provider at {version:?}: a module takes a lower bound (>= x.y)"
                ));
            }
            if !reusable && !exact {
                violations.push(format!(
                    "{dir}: the AWS provider at {version:?}: a root module pins one version (x.y.z)"
                ));
            }
        }
    }
    violations
}

/// The `version` of a `required_providers` entry written as an object (`aws = { ... }`).
fn attr_object(block: &hcl::Block, name: &str) -> Option<String> {
    let attribute = block.body().attributes().find(|a| a.key() == name)?;
    let hcl::Expression::Object(fields) = attribute.expr() else {
        return None;
    };
    fields.iter().find_map(|(key, value)| {
        (key.to_string().trim_matches('"') == "version").then(|| text(value))
    })
}
