//! The naming rules hold for the names the modules build, and fail on broken copies of `infra/`.

use redrive_infra::rules::names::{global_names, reserved_names, stack_and_consumer_names};
use redrive_infra::{broken, parse, sources};

#[test]
fn the_derived_names_are_the_ones_the_modules_build() {
    let (stack, consumer) = stack_and_consumer_names(&parse(&sources()));
    for name in [
        "orders-events-consumer",
        "orders-events-queue",
        "parked-dlq",
        "archive",
        "scheduler",
        "alarms",
        "orders-stream-dlq",
    ] {
        assert!(stack.contains(name), "{name}: {stack:#?}");
    }
    // The reprocessor made for each consumer's DLQ: <name_prefix>-<key>-dlq-redrive.
    for suffix in ["", "-dlq", "-dlq-not-empty", "-idempotency", "-dlq-redrive"] {
        assert!(consumer.contains(suffix), "{suffix}: {consumer:#?}");
    }
    // A name added to a module and not to the lists is caught.
    let added = broken(
        "modules/eventbridge-route/main.tf",
        "name                      = \"${var.name}-queue\"",
        "name                      = \"${var.name}-audit-queue\"",
    );
    assert_eq!(
        reserved_names(&added),
        ["local.stack_names lacks \"orders-events-audit-queue\""]
    );
}

#[test]
fn a_global_name_without_the_region_is_caught() {
    let role = broken(
        "modules/function/main.tf",
        "name               = \"${var.name}-${local.region_code}\"",
        "name               = \"${var.name}-function\"",
    );
    assert_eq!(
        global_names(&role),
        ["modules/function: aws_iam_role.function: \"${var.name}-function\" is the same in every region"]
    );
    let dashboard = broken(
        "modules/alerts/main.tf",
        "dashboard_name = \"${var.name}-redrive-${data.aws_region.current.region}\"",
        "dashboard_name = \"${var.name}-redrive\"",
    );
    assert_eq!(
        global_names(&dashboard),
        ["modules/alerts: aws_cloudwatch_dashboard.redrive: \"${var.name}-redrive\" is the same in every region"]
    );
}
