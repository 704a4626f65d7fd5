//! The EventBridge and scheduler rules fail on broken copies of `infra/`.

use redrive_infra::broken;
use redrive_infra::rules::eventbridge::{
    async_alarms, async_failures, bus_logging, event_targets, first_apply_order, schedules,
};

#[test]
fn an_event_target_without_retry_dlq_or_queue_policy_is_caught() {
    let route = "modules/eventbridge-route/main.tf";
    let no_retry = broken(route, "  retry_policy {\n    maximum_retry_attempts       = var.target_retry_attempts\n    maximum_event_age_in_seconds = var.target_max_event_age_seconds\n  }\n", "");
    assert_eq!(
        event_targets(&no_retry),
        ["modules/eventbridge-route: consumer: no retry policy with attempts and event age"]
    );
    let no_dlq = broken(
        route,
        "  dead_letter_config {\n    arn = aws_sqs_queue.target_dlq.arn\n  }\n",
        "",
    );
    assert_eq!(
        event_targets(&no_dlq),
        ["modules/eventbridge-route: consumer: no dead-letter queue of this module"]
    );
    let open = broken(
        route,
        "      test     = \"ArnEquals\"\n      variable = \"aws:SourceArn\"",
        "      test     = \"ArnEquals\"\n      variable = \"aws:SourceAccount\"",
    );
    assert_eq!(event_targets(&open).len(), 2, "{:?}", event_targets(&open));
    let no_policy = broken(route, "resource \"aws_sqs_queue_policy\" \"target_dlq\" {\n  queue_url = aws_sqs_queue.target_dlq.id", "resource \"aws_sqs_queue_policy\" \"target_dlq\" {\n  queue_url = aws_sqs_queue.target.id");
    assert_eq!(
        event_targets(&no_policy).len(),
        2,
        "{:?}",
        event_targets(&no_policy)
    );
}

#[test]
fn an_async_function_or_schedule_without_a_failure_destination_is_caught() {
    let route = "modules/eventbridge-route/main.tf";
    let lost = broken(
        route,
        "destination = aws_sqs_queue.consumer_failures_dlq.arn",
        "",
    );
    assert_eq!(
        async_failures(&lost),
        ["modules/eventbridge-route: consumer: no on-failure destination"]
    );
    let schedule = broken(
        "modules/recovery/main.tf",
        "    dead_letter_config {\n      arn = aws_sqs_queue.reprocessor_failures_dlq.arn\n    }\n",
        "",
    );
    assert_eq!(
        async_failures(&schedule),
        ["modules/recovery: reprocess: no dead-letter queue"]
    );
}

#[test]
fn a_schedule_that_sends_a_whole_dlq_to_one_queue_is_caught() {
    let one_queue = broken(
        "modules/recovery/main.tf",
        "fallbackDestination = each.value.origin_arn",
        "destination = each.value.origin_arn",
    );
    assert_eq!(
        schedules(&one_queue),
        ["modules/recovery: reprocess: the schedule's command names a destination: every message of the DLQ would go to that one queue; name it fallbackDestination"]
    );
}

#[test]
fn a_target_or_schedule_that_may_start_before_its_permissions_is_caught() {
    let route = broken(
        "modules/eventbridge-route/main.tf",
        "depends_on = [aws_lambda_permission.events, aws_sqs_queue_policy.target_dlq]",
        "depends_on = [aws_sqs_queue_policy.target_dlq]",
    );
    assert_eq!(
        first_apply_order(&route),
        ["modules/eventbridge-route: aws_cloudwatch_event_target.consumer does not depend on aws_lambda_permission.events"]
    );
    let queue_target = broken(
        "modules/eventbridge-route/main.tf",
        "depends_on = [aws_sqs_queue_policy.target, aws_sqs_queue_policy.target_dlq]",
        "depends_on = [aws_sqs_queue_policy.target_dlq]",
    );
    assert_eq!(
        first_apply_order(&queue_target),
        ["modules/eventbridge-route: aws_cloudwatch_event_target.queue does not depend on aws_sqs_queue_policy.target"]
    );
    let schedule = broken(
        "modules/recovery/main.tf",
        "depends_on = [aws_iam_role_policy.scheduler]",
        "",
    );
    assert_eq!(
        first_apply_order(&schedule),
        ["modules/recovery: aws_scheduler_schedule.reprocess does not depend on aws_iam_role_policy.scheduler"]
    );
}

#[test]
fn a_bus_whose_logs_go_nowhere_is_caught() {
    let route = broken(
        "modules/eventbridge-route/main.tf",
        "resource_arn = aws_cloudwatch_event_bus.bus.arn",
        "resource_arn = aws_cloudwatch_event_rule.route.arn",
    );
    assert_eq!(
        bus_logging(&route),
        ["modules/eventbridge-route: bus: its logs go nowhere"]
    );
}

/// Issue 43, item 4: with an on-failure destination, AsyncEventsDropped counts the events kept
/// there, and the alarm said they were lost; what loses an event is DestinationDeliveryFailures.
#[test]
fn an_async_alarm_that_calls_kept_events_lost_or_misses_lost_ones_is_caught() {
    let dropped = broken(
        "modules/eventbridge-route/main.tf",
        "destination-delivery-failures = \"DestinationDeliveryFailures\"\n",
        "destination-delivery-failures = \"DestinationDeliveryFailures\"\n      async-events-dropped          = \"AsyncEventsDropped\"\n",
    );
    assert_eq!(
        async_alarms(&dropped),
        ["modules/eventbridge-route: alarms on AsyncEventsDropped, which counts the events its on-failure destination keeps"]
    );
    let unwatched = broken(
        "modules/recovery/main.tf",
        "metric_name         = \"DestinationDeliveryFailures\"",
        "metric_name         = \"Invocations\"",
    );
    assert_eq!(
        async_alarms(&unwatched),
        ["modules/recovery: invokes asynchronously but no alarm watches DestinationDeliveryFailures"]
    );
}

/// Issue 43, item 7: without the log group's resource policy the bus's logs may never arrive, and
/// deliveries made at once to one destination conflict.
#[test]
fn bus_logs_without_a_resource_policy_or_with_parallel_deliveries_are_caught() {
    let unordered = broken(
        "modules/eventbridge-route/main.tf",
        "  depends_on               = [aws_cloudwatch_log_delivery.bus_error]\n",
        "",
    );
    assert_eq!(
        bus_logging(&unordered),
        ["modules/eventbridge-route: log deliveries made at once (bus_error, bus_info): each after the one before"]
    );
    let unpolicied = broken(
        "modules/eventbridge-route/main.tf",
        "resource \"aws_cloudwatch_log_resource_policy\" \"bus\"",
        "resource \"aws_cloudwatch_log_stream\" \"bus\"",
    );
    assert_eq!(
        bus_logging(&unpolicied),
        ["modules/eventbridge-route: delivers logs to a log group with no resource policy for delivery.logs.amazonaws.com"]
    );
}
