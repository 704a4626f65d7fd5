//! Names: what the modules build from the name prefix and consumer keys, reserved names, names global per account.
use std::collections::BTreeSet;
use std::path::Path;

use hcl::{Block, Body};

use crate::{attr, label, normalize, text, Module};

/// What follows `${<variable>}` in a name written as `"${<variable>}..."` (or `""` for the
/// variable itself); `None` for any other expression or for a name with another interpolation
/// left (a key of a `for_each`). `${local.suffix}` (`.fifo`) and the region a global name carries
/// are dropped: they are the same for every name of one stack.
pub fn name_after(value: &str, variable: &str) -> Option<String> {
    if value == variable {
        return Some(String::new());
    }
    let rest = value
        .strip_prefix(&format!("\"${{{variable}}}"))?
        .strip_suffix('"')?
        .replace("${local.suffix}", "")
        .replace("-${local.region_code}", "")
        .replace("-${data.aws_region.current.region}", "");
    (!rest.contains("${")).then_some(rest)
}

/// Stands for a consumer's key in the names built once per DLQ (`for_each = var.dlqs`, whose keys
/// the root stack takes from its consumers).
pub const KEY: &str = "<key>";

/// Whether `block` is made once per DLQ (`for_each = var.dlqs`): its `${each.key}` is a consumer's
/// key.
pub fn per_dlq(block: &Block) -> bool {
    attr(block, "for_each").as_deref() == Some("var.dlqs")
}

/// [`name_after`] for a name written in a block made per DLQ or not.
pub fn name_after_in(per_dlq: bool, value: &str, variable: &str) -> Option<String> {
    if per_dlq {
        name_after(&value.replace("${each.key}", KEY), variable)
    } else {
        name_after(value, variable)
    }
}

/// Every name module `dir` builds from its `var.name`, as what follows it, with those of the
/// modules it calls: `""` (the function, its role, its log group), `-dlq`, `-dlq-not-empty`, ...
pub fn built_names(modules: &[Module], dir: &str) -> BTreeSet<String> {
    fn names_in(body: &Body, per_dlq: bool, out: &mut BTreeSet<String>) {
        for attribute in body.attributes() {
            if attribute.key().ends_with("name") {
                if let Some(name) = name_after_in(per_dlq, &text(attribute.expr()), "var.name") {
                    out.insert(name);
                }
            }
        }
        for block in body.blocks().filter(|b| b.identifier() != "module") {
            names_in(block.body(), per_dlq || self::per_dlq(block), out);
        }
    }
    let Some(module) = modules.iter().find(|m| m.dir == dir) else {
        return BTreeSet::new();
    };
    let mut names = BTreeSet::new();
    for body in &module.bodies {
        names_in(body, false, &mut names);
    }
    for call in module
        .bodies
        .iter()
        .flat_map(|b| b.blocks())
        .filter(|b| b.identifier() == "module")
    {
        let (Some(source), Some(name)) = (attr(call, "source"), attr(call, "name")) else {
            continue;
        };
        let Some(prefix) = name_after_in(per_dlq(call), &name, "var.name") else {
            continue;
        };
        let child = normalize(&Path::new(dir).join(source.trim_matches('"')));
        for name in built_names(modules, &child.display().to_string()) {
            names.insert(format!("{prefix}{name}"));
        }
    }
    names
}

/// The root's names after `<name_prefix>-`: those of the stack's own parts, and what a consumer's
/// key K is followed by in the names its consumer (and its idempotency table) build.
pub fn stack_and_consumer_names(modules: &[Module]) -> (BTreeSet<String>, BTreeSet<String>) {
    let root = modules
        .iter()
        .find(|m| m.dir.is_empty())
        .expect("root module");
    let (mut stack, mut consumer) = (BTreeSet::new(), BTreeSet::new());
    for call in root
        .bodies
        .iter()
        .flat_map(|b| b.blocks())
        .filter(|b| b.identifier() == "module")
    {
        let (Some(source), Some(name)) = (attr(call, "source"), attr(call, "name")) else {
            continue;
        };
        let child = source.trim_matches('"').trim_start_matches("./").to_owned();
        let built = built_names(modules, &child);
        let per_key = name
            .strip_prefix("\"${var.name_prefix}-${each.key}")
            .and_then(|r| r.strip_suffix('"'));
        match (per_key, name_after(&name, "var.name_prefix")) {
            (Some(after_key), _) => {
                consumer.extend(built.iter().map(|n| format!("{after_key}{n}")))
            }
            (None, Some(prefix)) => {
                // Names made per DLQ follow a consumer's key: <name_prefix>-<key>-dlq-redrive.
                let dlqs_are_consumers =
                    attr(call, "dlqs").is_some_and(|d| d.contains("module.consumer"));
                for name in built.iter().map(|n| format!("{prefix}{n}")) {
                    match name.strip_prefix(&format!("-{KEY}")) {
                        Some(after_key) if dlqs_are_consumers => {
                            consumer.insert(after_key.to_owned());
                        }
                        Some(_) => {}
                        None if name.contains(KEY) => {}
                        None => {
                            let name = name.trim_start_matches('-');
                            if !name.is_empty() {
                                stack.insert(name.to_owned());
                            }
                        }
                    }
                }
            }
            (None, None) => {}
        }
    }
    (stack, consumer)
}

/// The reserved names `infra/variables.tf` checks consumer keys against (`local.stack_names`,
/// `local.consumer_name_suffixes`) hold every name the modules build: a name added to a module
/// and not to the lists would let a key take it.
pub fn reserved_names(modules: &[Module]) -> Vec<String> {
    let root = modules
        .iter()
        .find(|m| m.dir.is_empty())
        .expect("root module");
    let listed = |local: &str| -> BTreeSet<String> {
        root.local_of(&format!("local.{local}"))
            .trim_matches(|c| c == '[' || c == ']')
            .split(',')
            .map(|n| n.trim().trim_matches('"').to_owned())
            .filter(|n| !n.is_empty() || local == "consumer_name_suffixes")
            .collect()
    };
    let (stack, consumer) = stack_and_consumer_names(modules);
    let mut violations: Vec<String> = stack
        .difference(&listed("stack_names"))
        .map(|name| format!("local.stack_names lacks {name:?}"))
        .collect();
    violations.extend(
        consumer
            .difference(&listed("consumer_name_suffixes"))
            .map(|name| format!("local.consumer_name_suffixes lacks {name:?}")),
    );
    violations
}

/// Names IAM and CloudWatch dashboards keep account-wide carry the region, so that the same
/// `name_prefix` in two regions makes two roles and two dashboards (the second region's apply
/// failed on its roles and overwrote the first region's dashboard).
pub fn global_names(modules: &[Module]) -> Vec<String> {
    let mut violations = Vec::new();
    for module in modules {
        for (kind, attribute) in [
            ("aws_iam_role", "name"),
            ("aws_cloudwatch_dashboard", "dashboard_name"),
        ] {
            for resource in module.blocks("resource", kind) {
                let name = attr(resource, attribute).unwrap_or_default();
                if !name.contains("${local.region_code}")
                    && !name.contains("${data.aws_region.current.region}")
                {
                    violations.push(format!(
                        "{}: {kind}.{}: {name} is the same in every region",
                        module.dir,
                        label(resource, 1)
                    ));
                }
            }
        }
    }
    violations
}
