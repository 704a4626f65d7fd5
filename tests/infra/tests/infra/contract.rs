//! Contract tests on `infra/`: every rule holds on the configuration, every module has its standard files, and the rules on variables, module calls and the deploy fail on broken copies.
use std::path::Path;

use hcl::Body;

use redrive_infra::rules::alarms::{
    dlq_alarms, drained_dlqs, emf_alarm_states, gauge_alarms, left_message_alarms, mapping_metrics,
    metrics_namespaces, stream_alarms,
};
use redrive_infra::rules::consumers::{
    high_throughput_fifo, idempotency_window, mappings, recursion, redrive_sources_have_a_way_out,
    reservations,
};
use redrive_infra::rules::eventbridge::{
    async_alarms, async_failures, bus_logging, event_targets, first_apply_order, schedules,
};
use redrive_infra::rules::iam::{
    growing_policies, iam, iam_names, qualified_invokes, replaceable_roles, sdk_actions,
    service_policies, statements,
};
use redrive_infra::rules::modules::{
    alarm_target_check, module_calls, provider_versions, variable_rules,
};
use redrive_infra::rules::names::{global_names, reserved_names};
use redrive_infra::rules::payloads::payload_buckets;
use redrive_infra::{broken, infra, label, parse, sources, CONSUMER_VARIABLES};

#[test]
fn the_configuration_keeps_every_rule() {
    let modules = parse(&sources());
    for (rule, violations) in [
        ("dlq alarms", dlq_alarms(&modules)),
        ("qualified invokes", qualified_invokes(&modules)),
        ("replaceable roles", replaceable_roles(&modules)),
        ("growing policies", growing_policies(&modules)),
        ("mappings", mappings(&modules)),
        ("variable rules", variable_rules(&modules)),
        ("iam", iam(&modules)),
        ("event targets", event_targets(&modules)),
        ("async failures", async_failures(&modules)),
        ("async alarms", async_alarms(&modules)),
        ("recursion", recursion(&modules)),
        ("schedules", schedules(&modules)),
        ("idempotency window", idempotency_window(&modules)),
        ("module calls", module_calls(&modules)),
        ("provider versions", provider_versions(&modules)),
        ("alarm target check", alarm_target_check(&modules)),
        ("metrics namespaces", metrics_namespaces(&modules)),
        ("reservations", reservations(&modules)),
        ("first apply order", first_apply_order(&modules)),
        ("stream alarms", stream_alarms(&modules)),
        ("emf alarm states", emf_alarm_states(&modules)),
        ("gauge alarms", gauge_alarms(&modules)),
        ("left message alarms", left_message_alarms(&modules)),
        ("drained dlqs", drained_dlqs(&modules)),
        ("redrive sources", redrive_sources_have_a_way_out(&modules)),
        ("reserved names", reserved_names(&modules)),
        ("service policies", service_policies(&modules)),
        ("mapping metrics", mapping_metrics(&modules)),
        ("global names", global_names(&modules)),
        ("bus logging", bus_logging(&modules)),
        ("high-throughput FIFO", high_throughput_fifo(&modules)),
        ("payload buckets", payload_buckets(&modules)),
        ("iam names", iam_names(&sources(), &modules, &sdk_actions())),
    ] {
        assert!(violations.is_empty(), "{rule}: {violations:#?}");
    }
    let count = |kind: &str| -> usize {
        modules
            .iter()
            .map(|m| m.blocks("resource", kind).count())
            .sum()
    };
    assert_eq!(
        count("aws_lambda_event_source_mapping"),
        5,
        "SQS consumer and its retry lane, stream consumer, Kafka consumer, EventBridge redrive"
    );
    assert_eq!(count("aws_cloudwatch_event_target"), 2);
    assert!(statements(&modules)
        .iter()
        .any(|(w, ..)| w.contains("module function statement \"RetryAndDeadLetter\"")));
}

#[test]
fn every_module_has_the_standard_files_and_its_readme_lists_every_input_and_output() {
    let modules = std::fs::read_dir(infra().join("modules")).unwrap();
    let examples = std::fs::read_dir(infra().join("examples")).unwrap();
    for module in modules.chain(examples) {
        let module = module.unwrap().path();
        for file in [
            "main.tf",
            "variables.tf",
            "outputs.tf",
            "versions.tf",
            "README.md",
        ] {
            assert!(
                module.join(file).exists(),
                "{} has no {file}",
                module.display()
            );
        }
        let readme = std::fs::read_to_string(module.join("README.md")).unwrap();
        for (file, kind) in [("variables.tf", "variable"), ("outputs.tf", "output")] {
            let body: Body =
                hcl::from_str(&std::fs::read_to_string(module.join(file)).unwrap()).unwrap();
            for block in body.blocks().filter(|b| b.identifier() == kind) {
                let row = format!("| {} |", label(block, 0));
                assert!(
                    readme.contains(&row),
                    "{}/README.md lists no {kind} {row}",
                    module.display()
                );
            }
        }
    }
}

#[test]
fn weakened_variable_rules_are_caught() {
    let visibility = broken(
        CONSUMER_VARIABLES,
        ">= 6 * var.function_timeout_seconds",
        ">= 2 * var.function_timeout_seconds",
    );
    assert_eq!(variable_rules(&visibility).len(), 1);
    let retention = broken(
        CONSUMER_VARIABLES,
        "var.fifo || var.dlq_message_retention_seconds > var.message_retention_seconds",
        "var.dlq_message_retention_seconds >= 60",
    );
    assert_eq!(
        variable_rules(&retention).len(),
        1,
        "the other modules' rule does not cover this one"
    );
    let receives = broken(
        CONSUMER_VARIABLES,
        " && var.max_receive_count > var.max_attempts",
        "",
    );
    assert_eq!(variable_rules(&receives), ["modules/sqs-consumer: variable max_receive_count: no validation `var.max_receive_count > var.max_attempts`"]);
    let fifo = broken(
        CONSUMER_VARIABLES,
        "var.max_receive_count >= var.batch_size * (var.max_attempts + 1) + 21",
        "var.max_receive_count >= var.max_attempts * var.batch_size",
    );
    assert_eq!(variable_rules(&fifo), ["modules/sqs-consumer: variable max_receive_count: no validation `!var.fifo || var.batch_size == 1 || var.max_receive_count >= var.batch_size * (var.max_attempts + 1) + 21`"]);
    let no_ledger = broken(
        CONSUMER_VARIABLES,
        "var.batch_size == 1 || length(setintersection(keys(var.environment), [\"REDRIVE_IDEMPOTENCY_TABLE\", \"REDRIVE_LEDGER_TABLE\"])) > 0",
        "true",
    );
    assert_eq!(
        variable_rules(&no_ledger).len(),
        1,
        "a FIFO batch without the attempt ledger"
    );
    let age = broken(
        "modules/stream-consumer/variables.tf",
        " && var.maximum_record_age_seconds < var.retention_hours * 3600",
        "",
    );
    assert_eq!(variable_rules(&age).len(), 1);
}

#[test]
fn a_module_call_with_an_unknown_or_a_missing_argument_is_caught() {
    let unknown = broken(
        "examples/own-consumer/main.tf",
        "record_concurrency ",
        "records_concurrency ",
    );
    assert_eq!(
        module_calls(&unknown),
        ["examples/own-consumer: module reserve: modules/sqs-consumer declares no variable records_concurrency"]
    );
    let missing = broken(
        "examples/redrive-only/main.tf",
        "  alarm_topic_arn = var.alarm_topic_arn\n}\n\nmodule",
        "}\n\nmodule",
    );
    assert_eq!(
        module_calls(&missing),
        ["examples/redrive-only: module recovery: the required variable alarm_topic_arn of modules/recovery is not passed"]
    );
}

/// `make deploy` checks for an alarm subscription before it applies anything, and the check
/// refuses a stack whose alarms nobody receives.
#[test]
fn a_deploy_whose_alarms_nobody_receives_is_refused() {
    let root = redrive_infra::repo_root();
    let makefile = std::fs::read_to_string(root.join("Makefile")).unwrap();
    let deploy = makefile.split("\ndeploy:").nth(1).unwrap();
    let (check, apply) = (
        deploy
            .find("tools/alarm-target")
            .expect("deploy runs tools/alarm-target"),
        deploy.find("terraform -chdir=infra apply").unwrap(),
    );
    assert!(check < apply, "the check comes before the apply");

    let dir = std::env::temp_dir().join(format!("redrive-alarm-target-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tfvars = |email: Option<&str>| {
        let mut values: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(infra().join("redrive.auto.tfvars.json")).unwrap(),
        )
        .unwrap();
        values["alarm_email"] = email.into();
        let path = dir.join(format!("{}.json", email.unwrap_or("none")));
        std::fs::write(&path, values.to_string()).unwrap();
        path
    };
    let run = |path: &Path, env: &[(&str, &str)]| {
        std::process::Command::new(root.join("tools/alarm-target"))
            .arg(path)
            .env_remove("ALARM_EMAIL")
            .env_remove("TF_VAR_alarm_email")
            .env_remove("NO_ALARM_EMAIL")
            .envs(env.iter().copied())
            .output()
            .unwrap()
    };
    let refused = run(&tfvars(None), &[]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("an SNS topic that nobody reads"));
    assert!(run(&tfvars(Some("ops@example.com")), &[]).status.success());
    assert!(run(&tfvars(None), &[("ALARM_EMAIL", "ops@example.com")])
        .status
        .success());
    assert!(run(&tfvars(None), &[("NO_ALARM_EMAIL", "1")])
        .status
        .success());
    std::fs::remove_dir_all(&dir).ok();
}

/// Issue 43, item 9: modules that pin the provider tightly hold a stack back; a root that does not
/// pin one gets whatever is newest; a plain apply without alarm_email said nothing.
#[test]
fn loose_or_tight_provider_versions_and_a_silent_apply_without_alarm_email_are_caught() {
    let tight = broken(
        "modules/function/versions.tf",
        "version = \">= 6.25\"",
        "version = \"~> 6.25\"",
    );
    assert_eq!(
        provider_versions(&tight),
        ["modules/function: the AWS provider at \"~> 6.25\": a module takes a lower bound (>= x.y)"]
    );
    let loose = broken(
        "versions.tf",
        "version = \"6.25.0\"",
        "version = \">= 6.25\"",
    );
    assert_eq!(
        provider_versions(&loose),
        ["infra: the AWS provider at \">= 6.25\": a root module pins one version (x.y.z)"]
    );
    let silent = broken(
        "main.tf",
        "condition     = var.alarm_email != null",
        "condition     = true",
    );
    assert_eq!(
        alarm_target_check(&silent),
        ["infra: no check block warns when alarm_email is unset"]
    );
}
