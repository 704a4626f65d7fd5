# An EventBridge route: a bus, a rule, and two targets that each have a retry policy and a
# dead-letter queue: the event consumer function (invoked asynchronously, with its own on-failure
# destination for function errors) and an SQS queue. Both DLQs are read by the EventBridge redrive.

locals {
  # The rule: FailedInvocations, a target could not be reached (then the DLQ has the event);
  # InvocationsFailedToBeSentToDlq, not even the DLQ could be reached - events are being lost.
  # The asynchronously invoked consumer: its on-failure destination could not be written to, and
  # the event is lost (Lambda developer guide, "Capturing records of Lambda asynchronous
  # invocations": DestinationDeliveryFailures). Not AsyncEventsDropped: Lambda sends a dropped
  # event to the on-failure destination before it counts it ("Asynchronous invocation metrics"),
  # so with one it counts events kept in the failures queue, whose arrivals are alarmed already.
  alarms = merge(
    { for key, metric in {
      failed-invocations        = "FailedInvocations"
      invocations-failed-to-dlq = "InvocationsFailedToBeSentToDlq"
      invocations-sent-to-dlq   = "InvocationsSentToDlq"
      } : key => {
      namespace   = "AWS/Events"
      metric      = metric
      dimensions  = { EventBusName = aws_cloudwatch_event_bus.bus.name, RuleName = aws_cloudwatch_event_rule.route.name }
      description = "${metric} of rule ${aws_cloudwatch_event_rule.route.name}. Runbook: docs/runbook.md, 'EventBridge rule alarms'."
    } },
    { for key, metric in {
      destination-delivery-failures = "DestinationDeliveryFailures"
      } : "consumer-${key}" => {
      namespace   = "AWS/Lambda"
      metric      = metric
      dimensions  = { FunctionName = module.consumer.function_name }
      description = "${metric} of ${module.consumer.function_name}: events invoked asynchronously are being lost. Runbook: docs/runbook.md, 'Asynchronous invocations lost'."
    } },
  )
}

resource "aws_cloudwatch_event_bus" "bus" {
  name = var.name

  # What the bus did with each event (matched, delivered, retried, sent to the DLQ) in its own log
  # group; the event itself only with include_detail FULL.
  log_config {
    level          = var.bus_log_level
    include_detail = var.bus_log_include_detail
  }
  tags = var.tags
}

locals {
  # The bus writes one log type per level; a level takes the types below it too.
  bus_log_types = slice(["ERROR_LOGS", "INFO_LOGS", "TRACE_LOGS"], 0, index(["OFF", "ERROR", "INFO", "TRACE"], var.bus_log_level))
}

resource "aws_cloudwatch_log_group" "bus" {
  #checkov:skip=CKV_AWS_158:The bus logs record event processing steps (the event itself only with include_detail FULL); a customer KMS key would add cost and a key policy.
  #checkov:skip=CKV_AWS_338:Retention is a validated input (log_retention_days), as for the functions' log groups.
  count = length(local.bus_log_types) > 0 ? 1 : 0

  name              = "/aws/vendedlogs/events/event-bus/${var.name}"
  retention_in_days = var.log_retention_days
  tags              = var.tags
}

resource "aws_cloudwatch_log_delivery_source" "bus" {
  for_each = toset(local.bus_log_types)

  name         = "${var.name}-${lower(replace(each.key, "_LOGS", ""))}-logs"
  log_type     = each.key
  resource_arn = aws_cloudwatch_event_bus.bus.arn
  tags         = var.tags
}

resource "aws_cloudwatch_log_delivery_destination" "bus" {
  count = length(local.bus_log_types) > 0 ? 1 : 0

  name = "${var.name}-bus-logs"
  delivery_destination_configuration {
    destination_resource_arn = aws_cloudwatch_log_group.bus[0].arn
  }
  tags = var.tags
}

data "aws_caller_identity" "current" {}

data "aws_partition" "current" {}

data "aws_region" "current" {}

# The log group lets the log delivery service write (CloudWatch Logs user guide, "Logs sent to
# CloudWatch Logs": the log group's resource policy). Left to AWS, the policy is written at the
# first delivery only if the account's 10 resource policies per region and their size leave room;
# else the logs never arrive and nothing says so.
data "aws_iam_policy_document" "bus_log_delivery" {
  count = length(local.bus_log_types) > 0 ? 1 : 0

  statement {
    sid       = "AWSLogDeliveryWrite"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${aws_cloudwatch_log_group.bus[0].arn}:log-stream:*"]
    principals {
      type        = "Service"
      identifiers = ["delivery.logs.amazonaws.com"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [data.aws_caller_identity.current.account_id]
    }
    condition {
      test     = "ArnLike"
      variable = "aws:SourceArn"
      values   = ["arn:${data.aws_partition.current.partition}:logs:${data.aws_region.current.region}:${data.aws_caller_identity.current.account_id}:*"]
    }
  }
}

resource "aws_cloudwatch_log_resource_policy" "bus" {
  count = length(local.bus_log_types) > 0 ? 1 : 0

  policy_name     = "${var.name}-bus-log-delivery"
  policy_document = data.aws_iam_policy_document.bus_log_delivery[0].json
}

# One delivery per log type, made one after the other: deliveries to one destination made at once
# fail with a ConflictException (the provider applies them in parallel).
resource "aws_cloudwatch_log_delivery" "bus_error" {
  count = contains(local.bus_log_types, "ERROR_LOGS") ? 1 : 0

  delivery_source_name     = aws_cloudwatch_log_delivery_source.bus["ERROR_LOGS"].name
  delivery_destination_arn = aws_cloudwatch_log_delivery_destination.bus[0].arn
  depends_on               = [aws_cloudwatch_log_resource_policy.bus]
  tags                     = var.tags
}

resource "aws_cloudwatch_log_delivery" "bus_info" {
  count = contains(local.bus_log_types, "INFO_LOGS") ? 1 : 0

  delivery_source_name     = aws_cloudwatch_log_delivery_source.bus["INFO_LOGS"].name
  delivery_destination_arn = aws_cloudwatch_log_delivery_destination.bus[0].arn
  depends_on               = [aws_cloudwatch_log_delivery.bus_error]
  tags                     = var.tags
}

resource "aws_cloudwatch_log_delivery" "bus_trace" {
  count = contains(local.bus_log_types, "TRACE_LOGS") ? 1 : 0

  delivery_source_name     = aws_cloudwatch_log_delivery_source.bus["TRACE_LOGS"].name
  delivery_destination_arn = aws_cloudwatch_log_delivery_destination.bus[0].arn
  depends_on               = [aws_cloudwatch_log_delivery.bus_info]
  tags                     = var.tags
}

moved {
  from = aws_cloudwatch_log_delivery.bus["ERROR_LOGS"]
  to   = aws_cloudwatch_log_delivery.bus_error[0]
}

moved {
  from = aws_cloudwatch_log_delivery.bus["INFO_LOGS"]
  to   = aws_cloudwatch_log_delivery.bus_info[0]
}

moved {
  from = aws_cloudwatch_log_delivery.bus["TRACE_LOGS"]
  to   = aws_cloudwatch_log_delivery.bus_trace[0]
}

resource "aws_cloudwatch_event_rule" "route" {
  name           = "${var.name}-route"
  description    = "Routes ${var.name} events to the event consumer and the ${var.name}-queue target."
  event_bus_name = aws_cloudwatch_event_bus.bus.name
  event_pattern  = var.event_pattern
  tags           = var.tags
}

# Where EventBridge puts an event it could not deliver to a target (a standard queue, as EventBridge
# requires). Read by the EventBridge redrive: the visibility timeout fits its function.
resource "aws_sqs_queue" "target_dlq" {
  name = "${var.name}-target-dlq"
  # What redrive may send (SQS takes up to 1 MiB); the provider creates 256 KiB queues unless told
  # (AWS provider, aws_sqs_queue: max_message_size defaults to 262144).
  max_message_size           = 1048576
  message_retention_seconds  = var.dlq_message_retention_seconds
  visibility_timeout_seconds = 6 * var.redrive_function_timeout_seconds
  sqs_managed_sse_enabled    = true
  redrive_policy             = local.to_redrive_poison
  tags                       = var.tags
}

# Where Lambda puts an invocation record when the consumer failed after its asynchronous retries.
resource "aws_sqs_queue" "consumer_failures_dlq" {
  name                       = "${var.name}-consumer-failures-dlq"
  max_message_size           = 1048576
  message_retention_seconds  = var.dlq_message_retention_seconds
  visibility_timeout_seconds = 6 * var.redrive_function_timeout_seconds
  sqs_managed_sse_enabled    = true
  redrive_policy             = local.to_redrive_poison
  tags                       = var.tags
}

# Messages the EventBridge redrive itself could not get through (it crashed or timed out on them
# redrive_max_receive_count times): without it they came back every visibility timeout until the
# queue's retention dropped them. Retention at SQS's longest, since a message's age counts from
# its first enqueue.
resource "aws_sqs_queue" "redrive_poison_dlq" {
  name                      = "${var.name}-redrive-poison-dlq"
  max_message_size          = 1048576
  message_retention_seconds = 1209600
  sqs_managed_sse_enabled   = true
  tags                      = var.tags
}

locals {
  to_redrive_poison = jsonencode({
    deadLetterTargetArn = aws_sqs_queue.redrive_poison_dlq.arn
    maxReceiveCount     = var.redrive_max_receive_count
  })
}

# The SQS target of the rule (for example an audit trail or a second consumer).
resource "aws_sqs_queue" "target" {
  name                      = "${var.name}-queue"
  max_message_size          = 1048576
  message_retention_seconds = var.message_retention_seconds
  sqs_managed_sse_enabled   = true
  tags                      = var.tags
}

data "aws_iam_policy_document" "events_send" {
  for_each = {
    target_dlq = aws_sqs_queue.target_dlq.arn
    target     = aws_sqs_queue.target.arn
  }

  statement {
    sid       = "EventBridgeRuleSends"
    actions   = ["sqs:SendMessage"]
    resources = [each.value]
    principals {
      type        = "Service"
      identifiers = ["events.amazonaws.com"]
    }
    condition {
      test     = "ArnEquals"
      variable = "aws:SourceArn"
      values   = [aws_cloudwatch_event_rule.route.arn]
    }
  }
  statement {
    sid       = "DenyWithoutTls"
    effect    = "Deny"
    actions   = ["sqs:*"]
    resources = [each.value]
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }
}

resource "aws_sqs_queue_policy" "target_dlq" {
  queue_url = aws_sqs_queue.target_dlq.id
  policy    = data.aws_iam_policy_document.events_send["target_dlq"].json
}

resource "aws_sqs_queue_policy" "target" {
  queue_url = aws_sqs_queue.target.id
  policy    = data.aws_iam_policy_document.events_send["target"].json
}

module "consumer" {
  source = "../function"

  name               = "${var.name}-consumer"
  description        = "EventBridge consumer of ${var.name} events (redrive)"
  zip                = var.consumer_zip
  timeout_seconds    = var.function_timeout_seconds
  memory_mb          = var.function_memory_mb
  log_retention_days = var.log_retention_days
  # Invoked asynchronously: no mapping caps it. Throttled events wait in Lambda's queue and are
  # retried up to the maximum event age.
  reserved_concurrency = var.reserved_concurrency
  environment          = var.environment
  statements = [
    {
      # Lambda writes the on-failure record with the function's role.
      sid       = "OnFailureDestination"
      actions   = ["sqs:SendMessage"]
      resources = [aws_sqs_queue.consumer_failures_dlq.arn]
    },
  ]
  tags = var.tags
}

resource "aws_lambda_permission" "events" {
  statement_id  = "EventBridgeInvokes"
  action        = "lambda:InvokeFunction"
  function_name = module.consumer.function_name
  principal     = "events.amazonaws.com"
  source_arn    = aws_cloudwatch_event_rule.route.arn
}

resource "aws_lambda_function_event_invoke_config" "consumer" {
  function_name                = module.consumer.function_name
  maximum_retry_attempts       = var.async_retry_attempts
  maximum_event_age_in_seconds = var.async_max_event_age_seconds

  destination_config {
    on_failure {
      destination = aws_sqs_queue.consumer_failures_dlq.arn
    }
  }
}

resource "aws_cloudwatch_event_target" "consumer" {
  rule           = aws_cloudwatch_event_rule.route.name
  event_bus_name = aws_cloudwatch_event_bus.bus.name
  target_id      = "consumer"
  arn            = module.consumer.function_arn

  retry_policy {
    maximum_retry_attempts       = var.target_retry_attempts
    maximum_event_age_in_seconds = var.target_max_event_age_seconds
  }

  dead_letter_config {
    arn = aws_sqs_queue.target_dlq.arn
  }

  # The first events must find the permission to invoke and the DLQ's policy in place, or they
  # fail into the DLQ, or are dropped.
  depends_on = [aws_lambda_permission.events, aws_sqs_queue_policy.target_dlq]
}

resource "aws_cloudwatch_event_target" "queue" {
  rule           = aws_cloudwatch_event_rule.route.name
  event_bus_name = aws_cloudwatch_event_bus.bus.name
  target_id      = "queue"
  arn            = aws_sqs_queue.target.arn

  retry_policy {
    maximum_retry_attempts       = var.target_retry_attempts
    maximum_event_age_in_seconds = var.target_max_event_age_seconds
  }

  dead_letter_config {
    arn = aws_sqs_queue.target_dlq.arn
  }

  depends_on = [aws_sqs_queue_policy.target, aws_sqs_queue_policy.target_dlq]
}

module "target_dlq_alarm" {
  source          = "../dlq-alarm"
  name            = "${var.name}-target-dlq"
  queue_name      = aws_sqs_queue.target_dlq.name
  runbook         = "Runbook: docs/runbook.md, 'EventBridge target DLQ not empty'."
  alarm_topic_arn = var.alarm_topic_arn
  # The EventBridge redrive (modules/recovery) empties it within seconds.
  drained = true
  tags    = var.tags
}

module "redrive_poison_dlq_alarm" {
  source          = "../dlq-alarm"
  name            = "${var.name}-redrive-poison-dlq"
  queue_name      = aws_sqs_queue.redrive_poison_dlq.name
  runbook         = "Runbook: docs/runbook.md, 'EventBridge redrive poison queue not empty'."
  alarm_topic_arn = var.alarm_topic_arn
  tags            = var.tags
}

module "consumer_failures_dlq_alarm" {
  source          = "../dlq-alarm"
  name            = "${var.name}-consumer-failures-dlq"
  queue_name      = aws_sqs_queue.consumer_failures_dlq.name
  runbook         = "Runbook: docs/runbook.md, 'EventBridge target DLQ not empty'."
  alarm_topic_arn = var.alarm_topic_arn
  # The EventBridge redrive (modules/recovery) empties it within seconds.
  drained = true
  tags    = var.tags
}

# The SQS target has its consumer elsewhere (or none yet): if nobody reads it, its events expire
# unseen when the retention runs out. This alarm fires well before.
resource "aws_cloudwatch_metric_alarm" "target_queue_age" {
  alarm_name          = "${var.name}-queue-oldest-message-age"
  alarm_description   = "An event has waited in ${aws_sqs_queue.target.name} for over ${var.target_queue_oldest_message_age_seconds} s: its consumer is behind or missing, and retention (${var.message_retention_seconds} s) will drop it. Runbook: docs/runbook.md, 'EventBridge rule alarms'."
  namespace           = "AWS/SQS"
  metric_name         = "ApproximateAgeOfOldestMessage"
  dimensions          = { QueueName = aws_sqs_queue.target.name }
  statistic           = "Maximum"
  period              = 60
  evaluation_periods  = 1
  threshold           = var.target_queue_oldest_message_age_seconds
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = [var.alarm_topic_arn]
  ok_actions          = [var.alarm_topic_arn]
  tags                = var.tags
}

resource "aws_cloudwatch_metric_alarm" "route" {
  for_each = local.alarms

  alarm_name          = "${var.name}-${each.key}"
  alarm_description   = each.value.description
  namespace           = each.value.namespace
  metric_name         = each.value.metric
  dimensions          = each.value.dimensions
  statistic           = "Sum"
  period              = 60
  evaluation_periods  = 1
  threshold           = 0
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = [var.alarm_topic_arn]
  ok_actions          = [var.alarm_topic_arn]
  tags                = var.tags
}
