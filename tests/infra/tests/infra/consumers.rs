//! The consumer rules fail on broken copies of `infra/`.

use redrive_infra::rules::consumers::{
    high_throughput_fifo, idempotency_window, mappings, recursion, redrive_sources_have_a_way_out,
    reservations,
};
use redrive_infra::{broken, CONSUMER};

#[test]
fn a_mapping_without_item_failures_or_with_the_wrong_arguments_is_caught() {
    let plain = broken(
        CONSUMER,
        "function_response_types            = [\"ReportBatchItemFailures\"]",
        "function_response_types            = []",
    );
    assert_eq!(
        mappings(&plain),
        ["modules/sqs-consumer: consumer: no ReportBatchItemFailures"]
    );
    let bisect = broken(
        CONSUMER,
        "  function_response_types ",
        "  bisect_batch_on_function_error     = true\n  function_response_types ",
    );
    assert_eq!(mappings(&bisect), ["modules/sqs-consumer: consumer: bisect_batch_on_function_error is for stream sources only"]);
    let stream = "modules/stream-consumer/main.tf";
    let no_bisect = broken(
        stream,
        "bisect_batch_on_function_error     = true",
        "bisect_batch_on_function_error     = false",
    );
    assert_eq!(
        mappings(&no_bisect),
        ["modules/stream-consumer: stream: a stream mapping must bisect failing batches"]
    );
    let forever = broken(
        stream,
        "maximum_record_age_in_seconds      = var.maximum_record_age_seconds",
        "maximum_record_age_in_seconds      = -1",
    );
    assert_eq!(
        mappings(&forever),
        ["modules/stream-consumer: stream: maximum_record_age_in_seconds must be set and bounded"]
    );
    let no_retries = broken(
        stream,
        "maximum_retry_attempts             = var.maximum_retry_attempts",
        "",
    );
    assert_eq!(
        mappings(&no_retries),
        ["modules/stream-consumer: stream: maximum_retry_attempts must be set and bounded"]
    );
    let no_destination = broken(stream, "destination_arn = aws_sqs_queue.dlq.arn", "");
    assert_eq!(
        mappings(&no_destination),
        ["modules/stream-consumer: stream: no on-failure destination"]
    );
    let kafka = "modules/kafka-consumer/main.tf";
    let on_demand = broken(
        kafka,
        "  provisioned_poller_config {\n    minimum_pollers = var.pollers.minimum\n    maximum_pollers = var.pollers.maximum\n  }\n",
        "",
    );
    assert_eq!(
        mappings(&on_demand),
        ["modules/kafka-consumer: kafka: a Kafka mapping needs provisioned mode (provisioned_poller_config) for its error controls"]
    );
    let unrecorded = broken(kafka, "destination_arn = destination_config.value", "");
    assert_eq!(
        mappings(&unrecorded),
        ["modules/kafka-consumer: kafka: no on-failure destination"]
    );
}

#[test]
fn a_consumer_left_to_lambdas_loop_detection_is_caught() {
    let consumer = broken(CONSUMER, "recursive_loop = \"Allow\"", "");
    // Once per mapping: the source's and the retry lane's.
    assert_eq!(
        recursion(&consumer),
        ["modules/sqs-consumer: function: re-sends to the queue that triggers it without recursive_loop = \"Allow\""; 2]
    );
    let redrive = broken(
        "modules/recovery/main.tf",
        "recursive_loop = \"Allow\"",
        "recursive_loop = \"Terminate\"",
    );
    assert_eq!(
        recursion(&redrive),
        ["modules/recovery: event_redrive: re-sends to the queue that triggers it without recursive_loop = \"Allow\""]
    );
}

#[test]
fn an_idempotency_window_shorter_than_a_duplicates_path_is_caught() {
    let short = broken(
        "main.tf",
        "+ each.value.dlq_message_retention_seconds + 86400}s",
        "}s",
    );
    assert_eq!(
        idempotency_window(&short),
        ["infra: module consumer: REDRIVE_IDEMPOTENCY_TTL does not cover the source's and the DLQ's retention, so a redriven duplicate can outlive its key"]
    );
}

#[test]
fn a_default_concurrency_reservation_is_caught() {
    let route = broken(
        "modules/eventbridge-route/variables.tf",
        "default     = null\n\n  validation {\n    condition     = var.reserved_concurrency",
        "default     = 10\n\n  validation {\n    condition     = var.reserved_concurrency",
    );
    assert_eq!(
        reservations(&route),
        ["modules/eventbridge-route: reserved_concurrency has a default reservation"]
    );
}

#[test]
fn a_queue_the_event_redrive_reads_without_a_redrive_policy_is_caught() {
    let route = broken(
        "modules/eventbridge-route/main.tf",
        "  redrive_policy             = local.to_redrive_poison\n  tags                       = var.tags\n}\n\n# Where Lambda puts",
        "  tags                       = var.tags\n}\n\n# Where Lambda puts",
    );
    assert_eq!(
        redrive_sources_have_a_way_out(&route),
        ["modules/eventbridge-route: aws_sqs_queue.target_dlq is read by the EventBridge redrive without a redrive policy"]
    );
}

#[test]
fn a_fifo_queue_capped_per_queue_is_caught() {
    let consumer = broken(
        CONSUMER,
        "fifo_throughput_limit = \"perMessageGroupId\"",
        "fifo_throughput_limit = \"perQueue\"",
    );
    assert_eq!(
        high_throughput_fifo(&consumer),
        [
            "modules/sqs-consumer: dlq: a FIFO queue without high throughput",
            "modules/sqs-consumer: source: a FIFO queue without high throughput",
            "modules/sqs-consumer: lane: a FIFO queue without high throughput"
        ]
    );
}
