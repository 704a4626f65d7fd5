//! The IAM rules fail on broken copies of `infra/`.

use redrive_infra::rules::iam::{
    growing_policies, iam, iam_names, qualified_invokes, replaceable_roles, sdk_actions,
    service_policies,
};
use redrive_infra::{broken, parse, sources, CONSUMER};

#[test]
fn wildcard_iam_is_caught() {
    let actions = broken(
        CONSUMER,
        "actions   = [\"sqs:SendMessage\"]",
        "actions   = [\"sqs:*\"]",
    );
    assert_eq!(iam(&actions).len(), 1, "{:?}", iam(&actions));
    let resources = broken(
        CONSUMER,
        "resources = concat([local.queue.arn, local.dlq.arn], aws_sqs_queue.lane[*].arn)",
        "resources = [\"*\"]",
    );
    assert_eq!(iam(&resources).len(), 1, "{:?}", iam(&resources));
    let conditional = broken(
        "modules/recovery/main.tf",
        "actions = [\"lambda:InvokeFunction\"]",
        "actions = [\"lambda:*\"]",
    );
    assert_eq!(iam(&conditional).len(), 1, "{:?}", iam(&conditional));
    let scheduler = broken(
        "modules/recovery/main.tf",
        "resources = [local.reprocessor_arn_pattern]",
        "resources = [\"*\"]",
    );
    assert_eq!(iam(&scheduler).len(), 1, "{:?}", iam(&scheduler));
}

#[test]
fn a_redrive_that_may_invoke_only_unqualified_arns_is_caught() {
    let redrive = broken(
        "modules/recovery/main.tf",
        "flatten([for arn in var.function_target_arns : [arn, \"${arn}:*\"]])",
        "var.function_target_arns",
    );
    assert_eq!(
        qualified_invokes(&redrive),
        ["modules/recovery module event_redrive statement \"DeliverToFunctionTargets\": invokes var.function_target_arns unqualified only"]
    );
}

#[test]
fn a_misspelt_iam_action_or_a_sid_iam_refuses_is_caught() {
    let actions = sdk_actions();
    for service in ["sqs", "dynamodb", "lambda"] {
        assert!(
            actions.contains_key(service),
            "the {service} SDK is in the lock file"
        );
    }
    let mut copy = sources();
    let (_, text) = copy
        .iter_mut()
        .find(|(p, _)| p.ends_with(CONSUMER))
        .unwrap();
    *text = text
        .replacen(
            "\"sqs:ChangeMessageVisibility\"",
            "\"sqs:ChangeMessageVisibilty\"",
            1,
        )
        .replacen(
            "sid       = \"RetryAndDeadLetter\"",
            "sid       = \"Retry-And-DeadLetter\"",
            1,
        );
    assert_eq!(
        iam_names(&copy, &parse(&copy), &actions),
        [
            "modules/sqs-consumer module function statement \"Retry-And-DeadLetter\": a Sid must be letters and digits",
            "modules/sqs-consumer/main.tf: sqs:ChangeMessageVisibilty is not an action of sqs",
        ]
    );
}

#[test]
fn a_service_policy_scoped_only_to_the_account_or_open_to_plain_http_is_caught() {
    let topic = broken(
        "modules/alerts/main.tf",
        "sid       = \"DenyWithoutTls\"\n    effect    = \"Deny\"",
        "sid       = \"DenyWithoutTls\"\n    effect    = \"Allow\"",
    );
    assert_eq!(
        service_policies(&topic),
        ["modules/alerts: aws_sns_topic_policy.alarms does not deny requests without TLS"]
    );
    let queues = broken(
        "modules/eventbridge-route/main.tf",
        "variable = \"aws:SecureTransport\"",
        "variable = \"aws:PrincipalIsAWSService\"",
    );
    assert_eq!(
        service_policies(&queues),
        [
            "modules/eventbridge-route: aws_sqs_queue_policy.target_dlq does not deny requests without TLS",
            "modules/eventbridge-route: aws_sqs_queue_policy.target does not deny requests without TLS"
        ]
    );
    let trust = broken(
        "modules/recovery/main.tf",
        "variable = \"aws:SourceArn\"",
        "variable = \"aws:SourceOrgID\"",
    );
    assert_eq!(
        service_policies(&trust),
        ["modules/recovery: scheduler_assume: [ \"scheduler.amazonaws.com\" ] is scoped to the account, not to the stack's sources"]
    );
}

/// Issue 43, item 5: a role renamed by an upgrade (the region code) was destroyed before its
/// replacement was made, leaving every function without permissions mid-apply.
#[test]
fn a_role_replaced_destroy_first_is_caught() {
    let function = broken(
        "modules/function/main.tf",
        "  # A renamed role (the region code, a new name_prefix) is made before the old one goes, so the\n  # function is never left without one mid-apply (docs/deployment.md, \"Upgrading\").\n  lifecycle {\n    create_before_destroy = true\n  }\n",
        "",
    );
    assert_eq!(
        replaceable_roles(&function),
        ["modules/function: aws_iam_role.function: replaced destroy-first (no create_before_destroy)"]
    );
}

/// Issue 43, item 8: the scheduler's policy listed one function ARN per DLQ and passed IAM's
/// 10,240 characters near 90 DLQs.
#[test]
fn a_policy_that_grows_with_every_dlq_is_caught() {
    let listed = broken(
        "modules/recovery/main.tf",
        "resources = [local.reprocessor_arn_pattern]",
        "resources = [for reprocessor in module.reprocessor : reprocessor.function_arn]",
    );
    let found = growing_policies(&listed);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("modules/recovery scheduler "),
        "{found:?}"
    );
}
