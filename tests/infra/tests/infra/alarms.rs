//! The alarm rules fail on broken copies of `infra/`.

use redrive_infra::rules::alarms::{
    dlq_alarms, drained_dlqs, emf_alarm_states, gauge_alarms, left_message_alarms, mapping_metrics,
    metrics_namespaces, stream_alarms,
};
use redrive_infra::{broken, CONSUMER};

#[test]
fn a_dlq_without_its_alarm_or_a_weakened_alarm_is_caught() {
    let raised = broken(
        "modules/dlq-alarm/main.tf",
        "  threshold           = 0\n",
        "  threshold           = 5\n",
    );
    assert_eq!(
        dlq_alarms(&raised),
        ["dlq-alarm dlq_depth: threshold is Some(\"5\"), expected 0"]
    );
    let ageless = broken(
        "modules/dlq-alarm/main.tf",
        "  threshold           = var.oldest_message_age_seconds\n",
        "  threshold           = 1209600\n",
    );
    assert_eq!(
        dlq_alarms(&ageless),
        ["dlq-alarm oldest_message_age: threshold is Some(\"1209600\"), expected var.oldest_message_age_seconds"]
    );
    let missing = broken(
        "modules/dlq-alarm/main.tf",
        "  treat_missing_data  = \"notBreaching\"\n",
        "  treat_missing_data  = \"missing\"\n",
    );
    assert_eq!(dlq_alarms(&missing).len(), 1, "{:?}", dlq_alarms(&missing));
    let silent = broken(
        "modules/dlq-alarm/main.tf",
        "  ok_actions          = [var.alarm_topic_arn]\n",
        "",
    );
    assert_eq!(dlq_alarms(&silent), ["dlq-alarm dlq_depth: no ok_actions"]);
    let none = broken(
        CONSUMER,
        "queue_name                 = local.dlq.name",
        "queue_name                 = \"other\"",
    );
    assert_eq!(
        dlq_alarms(&none),
        ["modules/sqs-consumer: aws_sqs_queue.dlq[0].name has 0 dlq-alarm modules, expected 1"]
    );
    let parked = broken(
        "modules/recovery/main.tf",
        "queue_name      = aws_sqs_queue.parked_dlq[0].name",
        "queue_name      = aws_sqs_queue.archive.name",
    );
    assert_eq!(dlq_alarms(&parked).len(), 1, "{:?}", dlq_alarms(&parked));
}

#[test]
fn a_function_writing_its_metrics_where_its_alarms_do_not_look_is_caught() {
    let consumer = broken(
        CONSUMER,
        "REDRIVE_METRICS_NAMESPACE = var.metrics_namespace",
        "",
    );
    assert_eq!(
        metrics_namespaces(&consumer),
        ["modules/sqs-consumer: function: its EMF metrics do not go to var.metrics_namespace"]
    );
    let reprocessor = broken(
        "modules/recovery/main.tf",
        "REDRIVE_METRICS_NAMESPACE = var.metrics_namespace",
        "",
    );
    assert_eq!(
        metrics_namespaces(&reprocessor),
        ["modules/recovery: reprocessor: its EMF metrics do not go to var.metrics_namespace"]
    );
}

#[test]
fn a_stream_whose_stopped_mapping_goes_unnoticed_is_caught() {
    let silent = broken(
        "modules/stream-consumer/main.tf",
        "treat_missing_data  = \"breaching\"",
        "treat_missing_data  = \"notBreaching\"",
    );
    assert_eq!(
        stream_alarms(&silent),
        ["modules/stream-consumer: stream: no alarm on the stream's iterator age that breaches on missing data"]
    );
}

/// Issue 53 item 6: nothing alarmed when a Kafka mapping stopped or fell behind.
#[test]
fn a_kafka_mapping_that_stops_or_falls_behind_unnoticed_is_caught() {
    let silent = broken(
        "modules/kafka-consumer/main.tf",
        "metric_name         = \"OffsetLag\"",
        "metric_name         = \"Invocations\"",
    );
    assert_eq!(
        stream_alarms(&silent),
        ["modules/kafka-consumer: kafka: no alarm on the Kafka mapping's offset lag that breaches on missing data"]
    );
}

#[test]
fn an_emf_alarm_that_flaps_between_invocations_is_caught() {
    let consumer = broken(
        CONSUMER,
        "threshold   = var.deferred_threshold\n      missing     = \"ignore\"",
        "threshold   = var.deferred_threshold\n      missing     = \"notBreaching\"",
    );
    assert_eq!(
        emf_alarm_states(&consumer),
        ["modules/sqs-consumer: health[deferred]: treat_missing_data \"notBreaching\""]
    );
    let reprocessor = broken(
        "modules/recovery/main.tf",
        "treat_missing_data = \"ignore\"",
        "treat_missing_data = \"notBreaching\"",
    );
    assert_eq!(
        emf_alarm_states(&reprocessor),
        ["modules/recovery: alerted: treat_missing_data \"notBreaching\""]
    );
}

#[test]
fn a_drained_dlq_watched_only_by_its_depth_is_caught() {
    let route = broken(
        "modules/eventbridge-route/main.tf",
        "queue_name      = aws_sqs_queue.target_dlq.name\n  runbook         = \"Runbook: docs/runbook.md, 'EventBridge target DLQ not empty'.\"\n  alarm_topic_arn = var.alarm_topic_arn\n  # The EventBridge redrive (modules/recovery) empties it within seconds.\n  drained = true",
        "queue_name      = aws_sqs_queue.target_dlq.name\n  runbook         = \"Runbook: docs/runbook.md, 'EventBridge target DLQ not empty'.\"\n  alarm_topic_arn = var.alarm_topic_arn",
    );
    assert_eq!(
        drained_dlqs(&route),
        ["modules/eventbridge-route: aws_sqs_queue.target_dlq.name is drained by the EventBridge redrive but its dlq-alarm does not count arrivals"]
    );
}

#[test]
fn a_mapping_whose_failed_invokes_nobody_watches_is_caught() {
    let consumer = broken(
        CONSUMER,
        "metric_name = \"FailedInvokeEventCount\"",
        "metric_name = \"PolledEventCount\"",
    );
    assert_eq!(
        mapping_metrics(&consumer),
        ["modules/sqs-consumer: consumer: counts its events but no alarm watches its failed invokes"]
    );
}

/// Issue 43, item 1: the Held alarm on the per-batch count went OK at the next batch of another
/// group while the group stayed held.
#[test]
fn a_held_alarm_on_the_per_batch_count_is_caught() {
    let consumer = broken(
        CONSUMER,
        "metric      = \"HeldHeads\"\n      dimensions  = { Function = module.function.function_name }\n      statistic   = \"Maximum\"",
        "metric      = \"Held\"\n      dimensions  = { Function = module.function.function_name }\n      statistic   = \"Sum\"",
    );
    assert_eq!(
        gauge_alarms(&consumer),
        ["modules/sqs-consumer: health[held]: watches Held, a per-batch count that falls to 0 while the state lasts: watch HeldHeads"]
    );
    let summed = broken(
        CONSUMER,
        "metric      = \"HeldHeads\"\n      dimensions  = { Function = module.function.function_name }\n      statistic   = \"Maximum\"",
        "metric      = \"HeldHeads\"\n      dimensions  = { Function = module.function.function_name }\n      statistic   = \"Average\"",
    );
    assert_eq!(
        gauge_alarms(&summed),
        ["modules/sqs-consumer: health[held]: HeldHeads read with \"Average\", not Maximum"]
    );
}

/// Issue 43, item 2: the DLQ's own age alarm cannot see what every reprocessor run receives again.
#[test]
fn a_reprocessed_dlq_whose_left_messages_age_unwatched_is_caught() {
    let recovery = broken(
        "modules/recovery/main.tf",
        "metric_name         = \"OldestLeftSeconds\"",
        "metric_name         = \"NotYet\"",
    );
    assert_eq!(
        left_message_alarms(&recovery),
        ["modules/recovery: no alarm on each DLQ's OldestLeftSeconds (Maximum): what the reprocessor leaves expires unseen"]
    );
}

/// Issue 43, item 3: FailedInvokeEventCount counts every event of a partial batch response, so the
/// old alarm on it alone paged on every retry in place of a FIFO consumer.
#[test]
fn a_failed_invokes_alarm_that_counts_partial_batch_responses_is_caught() {
    let ungated = broken(
        CONSUMER,
        "expression  = \"IF(FILL(invocations, 0) == 0, FILL(failed, 0), 0)\"",
        "expression  = \"FILL(failed, 0)\"",
    );
    assert_eq!(
        mapping_metrics(&ungated),
        ["modules/sqs-consumer: mapping_failed_invokes: alarms on FailedInvokeEventCount alone, which counts every event of a partial batch response"]
    );
}
