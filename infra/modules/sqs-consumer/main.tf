# One SQS consumer: source queue, DLQ, the function, its event source mapping and its alarms.

locals {
  suffix     = var.fifo ? ".fifo" : ""
  queue_name = "${var.name}${local.suffix}"
  dlq_name   = "${var.name}-dlq${local.suffix}"
  # The queues: made here, or a team's own (existing_queue), whose redrive policy names its DLQ.
  create = var.existing_queue == null
  queue = local.create ? {
    arn  = aws_sqs_queue.source[0].arn
    url  = aws_sqs_queue.source[0].url
    name = aws_sqs_queue.source[0].name
    } : {
    arn  = var.existing_queue.arn
    url  = var.existing_queue.url
    name = var.existing_queue.name
  }
  dlq = local.create ? {
    arn  = aws_sqs_queue.dlq[0].arn
    url  = aws_sqs_queue.dlq[0].url
    name = aws_sqs_queue.dlq[0].name
    } : {
    arn  = var.existing_queue.dlq_arn
    url  = var.existing_queue.dlq_url
    name = var.existing_queue.dlq_name
  }
}

resource "aws_sqs_queue" "dlq" {
  count = local.create ? 1 : 0

  name = local.dlq_name
  # What redrive may send (SQS takes up to 1 MiB); the provider creates 256 KiB queues unless told
  # (AWS provider, aws_sqs_queue: max_message_size defaults to 262144).
  max_message_size            = 1048576
  fifo_queue                  = var.fifo
  message_retention_seconds   = var.dlq_message_retention_seconds
  sqs_managed_sse_enabled     = true
  content_based_deduplication = false
  deduplication_scope         = local.high_throughput.deduplication_scope
  fifo_throughput_limit       = local.high_throughput.fifo_throughput_limit
  tags                        = var.tags
}

locals {
  # High-throughput FIFO: throughput and deduplication per message group, not per queue. Every
  # copy redrive sends to a FIFO queue names its group, and its deduplication id is unique within it.
  high_throughput = var.fifo ? {
    deduplication_scope   = "messageGroup"
    fifo_throughput_limit = "perMessageGroupId"
    } : {
    deduplication_scope   = null
    fifo_throughput_limit = null
  }
}

resource "aws_sqs_queue" "source" {
  count = local.create ? 1 : 0

  name                       = local.queue_name
  max_message_size           = 1048576
  fifo_queue                 = var.fifo
  visibility_timeout_seconds = var.visibility_timeout_seconds
  message_retention_seconds  = var.message_retention_seconds
  sqs_managed_sse_enabled    = true
  deduplication_scope        = local.high_throughput.deduplication_scope
  fifo_throughput_limit      = local.high_throughput.fifo_throughput_limit
  tags                       = var.tags
  redrive_policy = jsonencode({
    deadLetterTargetArn = aws_sqs_queue.dlq[0].arn
    maxReceiveCount     = var.max_receive_count
  })
}

# FIFO with hold: a held group waits in a retry lane of its own, a FIFO queue the same function
# reads, so that its backlog never fills the first 120,000 messages a FIFO receive looks at and
# stalls every other group (SQS developer guide, "Avoid large message backlogs with the same
# message group ID"; docs/design.md, "Held groups wait in the retry lane").
locals {
  lane = var.fifo && var.fifo_on_dead_letter == "hold" && !var.kafka_lane
}

resource "aws_sqs_queue" "lane" {
  count = local.lane ? 1 : 0

  name                       = "${var.name}-held${local.suffix}"
  max_message_size           = 1048576
  fifo_queue                 = true
  visibility_timeout_seconds = var.visibility_timeout_seconds
  message_retention_seconds  = var.message_retention_seconds
  sqs_managed_sse_enabled    = true
  deduplication_scope        = local.high_throughput.deduplication_scope
  fifo_throughput_limit      = local.high_throughput.fifo_throughput_limit
  tags                       = var.tags
  redrive_policy = jsonencode({
    deadLetterTargetArn = local.dlq.arn
    maxReceiveCount     = var.max_receive_count
  })
}

# Only the source queue (and its retry lane) may dead-letter into this DLQ (and native redrive
# goes back to them).
resource "aws_sqs_queue_redrive_allow_policy" "dlq" {
  count = local.create ? 1 : 0

  queue_url = aws_sqs_queue.dlq[0].id
  redrive_allow_policy = jsonencode({
    redrivePermission = "byQueue"
    sourceQueueArns   = concat([aws_sqs_queue.source[0].arn], aws_sqs_queue.lane[*].arn)
  })
}

module "function" {
  source = "../function"

  name               = var.name
  description        = "SQS consumer of ${local.queue_name} (redrive)"
  zip                = var.function_zip
  timeout_seconds    = var.function_timeout_seconds
  memory_mb          = var.function_memory_mb
  managed_instances  = var.managed_instances
  log_retention_days = var.log_retention_days
  tags               = var.tags
  # Retries, hops and deferrals are re-sent to the source queue: a chain Lambda would stop after 16
  # invocations. The code bounds each chain (REDRIVE_MAX_ATTEMPTS, the retry sequence's hops).
  recursive_loop = "Allow"
  environment = merge(var.environment, {
    REDRIVE_DLQ_URL      = local.dlq.url
    REDRIVE_MAX_ATTEMPTS = tostring(var.max_attempts)
    REDRIVE_CONCURRENCY  = tostring(var.record_concurrency)
    # Where the Deferred and TransientErrors alarms look.
    REDRIVE_METRICS_NAMESPACE = var.metrics_namespace
    # A FIFO record's wait in place ends within 12 h of its receive and before the retention.
    REDRIVE_SOURCE_RETENTION          = "${var.message_retention_seconds}s"
    REDRIVE_SOURCE_VISIBILITY_TIMEOUT = "${var.visibility_timeout_seconds}s"
    }, {
    REDRIVE_FIFO_ON_DEAD_LETTER            = var.fifo_on_dead_letter
    }, var.kafka_lane ? { REDRIVE_LANE_URL = local.queue.url } : {}, local.lane ? {
    REDRIVE_LANE_URL                       = aws_sqs_queue.lane[0].url
    } : {}, var.fifo_on_dead_letter != "hold" ? {} : {
    # A hold ends (the head is dead-lettered) a day before the queue's retention would drop it.
    REDRIVE_FIFO_HOLD_MAX_AGE = "${var.message_retention_seconds - 86400}s"
  })
  statements = concat([
    {
      sid       = "Consume"
      actions   = ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:ChangeMessageVisibility", "sqs:GetQueueUrl"]
      resources = concat([local.queue.arn], aws_sqs_queue.lane[*].arn)
    },
    {
      sid       = "RetryAndDeadLetter"
      actions   = ["sqs:SendMessage"]
      resources = concat([local.queue.arn, local.dlq.arn], aws_sqs_queue.lane[*].arn)
    },
  ], var.extra_statements)
}

resource "aws_lambda_event_source_mapping" "consumer" {
  event_source_arn                   = local.queue.arn
  function_name                      = module.function.function_arn
  batch_size                         = var.batch_size
  maximum_batching_window_in_seconds = var.fifo ? null : var.batching_window_seconds # FIFO mappings take no window
  function_response_types            = ["ReportBatchItemFailures"]
  tags                               = var.tags

  dynamic "scaling_config" {
    for_each = var.maximum_concurrency == null ? [] : [var.maximum_concurrency]
    content {
      maximum_concurrency = scaling_config.value
    }
  }

  dynamic "provisioned_poller_config" {
    for_each = var.provisioned_pollers == null ? [] : [var.provisioned_pollers]
    content {
      minimum_pollers = provisioned_poller_config.value.minimum
      maximum_pollers = provisioned_poller_config.value.maximum
    }
  }

  dynamic "metrics_config" {
    for_each = var.mapping_metrics ? [1] : []
    content {
      metrics = ["EventCount"]
    }
  }
}

# The retry lane's records: held heads and the records that follow them, in order, to the same
# function, which holds a head there until `dlq release` and runs the rest once it is released.
resource "aws_lambda_event_source_mapping" "lane" {
  count = local.lane ? 1 : 0

  event_source_arn        = aws_sqs_queue.lane[0].arn
  function_name           = module.function.function_arn
  batch_size              = var.batch_size
  function_response_types = ["ReportBatchItemFailures"]
  tags                    = var.tags

  dynamic "scaling_config" {
    for_each = var.maximum_concurrency == null ? [] : [var.maximum_concurrency]
    content {
      maximum_concurrency = scaling_config.value
    }
  }
}

# Events the mapping could not hand to the function at all: the invoke itself failed (the role, a
# deleted function or alias, the network, every invoke throttled). FailedInvokeEventCount also
# counts every event of a partial batch response (Lambda developer guide, "Event source mapping
# metrics"), and redrive answers with one whenever a record is given back, which a FIFO consumer
# does on every in-place retry: alone, it would page on work going as designed. So it counts only in
# a period in which the function ran no invocation (metric math IF and FILL; CloudWatch user guide,
# "Using math expressions with CloudWatch metrics"). A function that runs and fails is Errors.
resource "aws_cloudwatch_metric_alarm" "mapping_failed_invokes" {
  count = var.mapping_metrics && var.health_alarms ? 1 : 0

  alarm_name          = "${var.name}-mapping-failed-invokes"
  alarm_description   = "The event source mapping of ${local.queue.name} failed to invoke ${var.name} while the function ran no invocation (its role, a deleted function or alias, the network, every invoke throttled). Runbook: docs/runbook.md, 'Mapping failed invokes'."
  evaluation_periods  = 1
  threshold           = 0
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = [var.alarm_topic_arn]
  ok_actions          = [var.alarm_topic_arn]
  tags                = var.tags

  metric_query {
    id          = "unhanded"
    expression  = "IF(FILL(invocations, 0) == 0, FILL(failed, 0), 0)"
    label       = "Events the mapping failed to invoke the function with, while it ran none"
    return_data = true
  }
  metric_query {
    id = "failed"
    metric {
      namespace   = "AWS/Lambda"
      metric_name = "FailedInvokeEventCount"
      dimensions  = { EventSourceMappingUUID = aws_lambda_event_source_mapping.consumer.uuid }
      stat        = "Sum"
      period      = var.alarm_period_seconds
    }
  }
  metric_query {
    id = "invocations"
    metric {
      namespace   = "AWS/Lambda"
      metric_name = "Invocations"
      dimensions  = { FunctionName = module.function.function_name }
      stat        = "Sum"
      period      = var.alarm_period_seconds
    }
  }
}

module "dlq_alarm" {
  source                     = "../dlq-alarm"
  name                       = "${var.name}-dlq"
  queue_name                 = local.dlq.name
  oldest_message_age_seconds = var.dlq_oldest_message_age_seconds
  alarm_topic_arn            = var.alarm_topic_arn
  tags                       = var.tags
}

locals {
  # The consumer's health, beside the DLQ alarm: is it keeping up, failing whole batches, throttled?
  health_alarms = {
    oldest-message-age = {
      description = "The oldest message in ${local.queue.name} is older than ${var.oldest_message_age_seconds} s: the consumer is behind or stuck."
      namespace   = "AWS/SQS"
      metric      = "ApproximateAgeOfOldestMessage"
      dimensions  = { QueueName = local.queue.name }
      statistic   = "Maximum"
      threshold   = var.oldest_message_age_seconds
      missing     = "notBreaching"
    }
    function-errors = {
      description = "${var.name} failed whole batches (a record-level failure is not an error)."
      namespace   = "AWS/Lambda"
      metric      = "Errors"
      dimensions  = { FunctionName = module.function.function_name }
      statistic   = "Sum"
      threshold   = var.lambda_errors_threshold
      missing     = "notBreaching"
    }
    function-throttles = {
      description = "${var.name} was throttled."
      namespace   = "AWS/Lambda"
      metric      = "Throttles"
      dimensions  = { FunctionName = module.function.function_name }
      statistic   = "Sum"
      threshold   = var.lambda_throttles_threshold
      missing     = "notBreaching"
    }
    # An outage shows here first: re-sent copies are new messages, so the source queue's age stays low.
    # These EMF figures come only with invocations: a period without one keeps the alarm where it
    # was ("ignore"), so an outage whose deferred copies come back every few minutes is one alarm,
    # not an ALARM and a false OK each time; the next batch without deferrals ends it.
    deferred = {
      description = "${var.name} deferred records: a circuit breaker is open, a downstream is down. Runbook: docs/runbook.md, 'Records deferred or failing transiently'."
      namespace   = var.metrics_namespace
      metric      = "Deferred"
      dimensions  = { Function = module.function.function_name }
      statistic   = "Sum"
      threshold   = var.deferred_threshold
      missing     = "ignore"
    }
    transient-errors = {
      description = "${var.name} met transient errors: a downstream is failing and retries are under way. Runbook: docs/runbook.md, 'Records deferred or failing transiently'."
      namespace   = var.metrics_namespace
      metric      = "TransientErrors"
      dimensions  = { Function = module.function.function_name }
      statistic   = "Sum"
      threshold   = var.transient_errors_threshold
      missing     = "ignore"
    }
    # Only with fifo_on_dead_letter = "hold" (the for_each leaves it out otherwise). A held head
    # comes back only every 11 h 40 min, so the gauge is the ledger's count of held heads, which
    # every container reports at least once a minute while it has batches; "ignore" keeps the
    # state through minutes without them. The first count after `dlq release` ends it.
    held = {
      description = "${var.name} holds a FIFO group on a record it could not handle: the group waits, in order, for an operator. Runbook: docs/runbook.md, 'A FIFO group is held'."
      namespace   = var.metrics_namespace
      metric      = "HeldHeads"
      dimensions  = { Function = module.function.function_name }
      statistic   = "Maximum"
      threshold   = 0
      missing     = "ignore"
    }
  }
}

locals {
  # Only with a retry lane. A FIFO receive looks at the first 120,000 messages of a queue; past
  # them, heads sent to the lane behind a held group's backlog are not received, so no hold is written for
  # them (SQS developer guide, "Avoid large message backlogs with the same message group ID").
  # Its depth is alarmed below that bound, and its oldest message: a held group waiting long for
  # an operator (AWS/SQS metrics: SQS developer guide, "Available CloudWatch metrics for Amazon
  # SQS"). Runbook: docs/runbook.md, 'The retry lane fills or ages'.
  lane_alarms = local.lane ? {
    lane-depth = {
      description = "The retry lane ${one(aws_sqs_queue.lane[*].name)} holds more than ${var.lane_depth_threshold} visible messages: near the 120,000 a FIFO receive looks at, heads parked after a held group's backlog are not seen. Runbook: docs/runbook.md, 'The retry lane fills or ages'."
      namespace   = "AWS/SQS"
      metric      = "ApproximateNumberOfMessagesVisible"
      dimensions  = { QueueName = one(aws_sqs_queue.lane[*].name) }
      statistic   = "Maximum"
      threshold   = var.lane_depth_threshold
      missing     = "notBreaching"
    }
    lane-oldest-message-age = {
      description = "The oldest message in the retry lane ${one(aws_sqs_queue.lane[*].name)} is older than ${var.lane_oldest_message_age_seconds} s: a held group has waited that long for an operator. Runbook: docs/runbook.md, 'The retry lane fills or ages'."
      namespace   = "AWS/SQS"
      metric      = "ApproximateAgeOfOldestMessage"
      dimensions  = { QueueName = one(aws_sqs_queue.lane[*].name) }
      statistic   = "Maximum"
      threshold   = var.lane_oldest_message_age_seconds
      missing     = "notBreaching"
    }
  } : {}
}

resource "aws_cloudwatch_metric_alarm" "health" {
  for_each = var.health_alarms ? merge({ for key, alarm in local.health_alarms : key => alarm if key != "held" || var.fifo_on_dead_letter == "hold" }, local.lane_alarms) : {}

  alarm_name          = "${var.name}-${each.key}"
  alarm_description   = each.value.description
  namespace           = each.value.namespace
  metric_name         = each.value.metric
  dimensions          = each.value.dimensions
  statistic           = each.value.statistic
  period              = var.alarm_period_seconds
  evaluation_periods  = 1
  threshold           = each.value.threshold
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = each.value.missing
  alarm_actions       = [var.alarm_topic_arn]
  ok_actions          = [var.alarm_topic_arn]
  tags                = var.tags
}
