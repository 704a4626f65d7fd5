# Recovery: the DLQ reprocessor on an EventBridge Scheduler schedule per DLQ (with its own
# on-failure destination), and the EventBridge redrive reading the EventBridge target DLQs and the
# event consumers' on-failure queues through SQS event source mappings.

locals {
  queue_access = ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"]
  event_arns   = values(var.event_sources)
  # The EventBridge redrive exists only when it has queues to read.
  event_redrive = length(var.event_sources) > 0 ? 1 : 0
}

# Copies of discarded messages (REDRIVE_DISCARD_KINDS), kept as long as SQS allows.
resource "aws_sqs_queue" "archive" {
  name = "${var.name}-archive"
  # What redrive may send (SQS takes up to 1 MiB); the provider creates 256 KiB queues unless told
  # (AWS provider, aws_sqs_queue: max_message_size defaults to 262144).
  max_message_size          = 1048576
  message_retention_seconds = 1209600
  sqs_managed_sse_enabled   = true
  tags                      = var.tags
}

# Failed reprocessor runs: the scheduler's DLQ and the function's on-failure destination.
resource "aws_sqs_queue" "reprocessor_failures_dlq" {
  name                      = "${var.name}-reprocessor-failures-dlq"
  max_message_size          = 1048576
  message_retention_seconds = 1209600
  sqs_managed_sse_enabled   = true
  tags                      = var.tags
}

# One reprocessor per DLQ, each with a role that may read that DLQ and send to its origin only: a
# command written by hand cannot move one consumer's DLQ into another consumer's queue, because
# IAM refuses the send (IAM cannot tie a send to the queue a message was read from, so the scope
# is the role's).
module "reprocessor" {
  source   = "../function"
  for_each = var.dlqs

  name               = "${var.name}-${each.key}-dlq-redrive"
  description        = "DLQ reprocessor of ${each.value.url} (redrive)"
  zip                = var.reprocessor_zip
  timeout_seconds    = var.reprocessor_timeout_seconds
  log_retention_days = var.log_retention_days
  environment = {
    REDRIVE_ARCHIVE_QUEUE_URL      = aws_sqs_queue.archive.url
    REDRIVE_REPROCESS_MAX          = tostring(var.policy.max_reprocess)
    REDRIVE_REPROCESS_AFTER        = "${var.policy.eligible_after_seconds}s"
    REDRIVE_DISCARD_KINDS          = join(",", var.policy.discard_kinds)
    REDRIVE_REPROCESS_MAX_MESSAGES = tostring(var.policy.max_messages)
    REDRIVE_REPROCESS_RATE         = tostring(var.policy.rate_per_second)
    # Where the Alerted alarm looks.
    REDRIVE_METRICS_NAMESPACE = var.metrics_namespace
  }
  statements = [
    {
      sid       = "DrainItsDeadLetterQueue"
      actions   = local.queue_access
      resources = [each.value.arn]
    },
    {
      sid       = "SendHome"
      actions   = ["sqs:SendMessage", "sqs:GetQueueUrl"]
      resources = concat([each.value.origin_arn], each.value.other_origin_arns)
    },
    {
      sid       = "ArchiveAndRecordFailures"
      actions   = ["sqs:SendMessage"]
      resources = [aws_sqs_queue.archive.arn, aws_sqs_queue.reprocessor_failures_dlq.arn]
    },
  ]
  tags = var.tags
}

# A failed run's record could not be written to its on-failure destination: the failure is lost.
resource "aws_cloudwatch_metric_alarm" "reprocessor_destination_delivery_failures" {
  for_each = var.dlqs

  alarm_name          = "${var.name}-${each.key}-dlq-redrive-destination-delivery-failures"
  alarm_description   = "A failed run of ${module.reprocessor[each.key].function_name} could not be recorded in ${aws_sqs_queue.reprocessor_failures_dlq.name}. Runbook: docs/runbook.md, 'Asynchronous invocations lost'."
  namespace           = "AWS/Lambda"
  metric_name         = "DestinationDeliveryFailures"
  dimensions          = { FunctionName = module.reprocessor[each.key].function_name }
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

resource "aws_lambda_function_event_invoke_config" "reprocessor" {
  for_each = var.dlqs

  function_name          = module.reprocessor[each.key].function_name
  maximum_retry_attempts = 0 # the next scheduled run is the retry

  destination_config {
    on_failure {
      destination = aws_sqs_queue.reprocessor_failures_dlq.arn
    }
  }
}

data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}
data "aws_region" "current" {}

data "aws_iam_policy_document" "scheduler_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["scheduler.amazonaws.com"]
    }
    # Confused deputy: only this stack's schedules may take the role. Scheduler names the
    # schedule group as the source; the schedules are listed too.
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [data.aws_caller_identity.current.account_id]
    }
    condition {
      test     = "ArnLike"
      variable = "aws:SourceArn"
      values   = [aws_scheduler_schedule_group.reprocess.arn, "${local.schedule_arn_prefix}/${aws_scheduler_schedule_group.reprocess.name}/*"]
    }
  }
}

# The stack's schedules in a group of their own, which the scheduler role's trust names.
resource "aws_scheduler_schedule_group" "reprocess" {
  name = var.name
  tags = var.tags
}

locals {
  schedule_arn_prefix = "arn:${data.aws_partition.current.partition}:scheduler:${data.aws_region.current.region}:${data.aws_caller_identity.current.account_id}:schedule"
  # Every reprocessor of this stack (module.reprocessor's names); the schedules invoke them unqualified.
  reprocessor_arn_pattern = "arn:${data.aws_partition.current.partition}:lambda:${data.aws_region.current.region}:${data.aws_caller_identity.current.account_id}:function:${var.name}-*-dlq-redrive"
}

locals {
  # IAM names are global: the same stack in two regions needs two roles (modules/function).
  region_code = replace(replace(replace(replace(replace(replace(replace(data.aws_region.current.region, "-", ""), "north", "n"), "south", "s"), "east", "e"), "west", "w"), "central", "c"), "gov", "g")
}

resource "aws_iam_role" "scheduler" {
  name               = "${var.name}-scheduler-${local.region_code}"
  assume_role_policy = data.aws_iam_policy_document.scheduler_assume.json

  # A renamed role (the region code, a new name_prefix) is made before the old one goes, so the
  # schedules are never left without one mid-apply (docs/deployment.md, "Upgrading").
  lifecycle {
    create_before_destroy = true
  }
  tags = var.tags
}

# The reprocessors by their name pattern (<name>-<key>-dlq-redrive), not one ARN each: listed, the
# policy grows with every DLQ past IAM's 10,240 characters for a role's inline policies near 90.
data "aws_iam_policy_document" "scheduler" {
  dynamic "statement" {
    for_each = length(var.dlqs) == 0 ? [] : [1]
    content {
      sid       = "InvokeReprocessors"
      actions   = ["lambda:InvokeFunction"]
      resources = [local.reprocessor_arn_pattern]
    }
  }
  statement {
    sid       = "SchedulerDeadLetter"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.reprocessor_failures_dlq.arn]
  }
}

resource "aws_iam_role_policy" "scheduler" {
  name   = "${var.name}-scheduler"
  role   = aws_iam_role.scheduler.id
  policy = data.aws_iam_policy_document.scheduler.json

  # Made on the new role before the old role goes (see the role).
  lifecycle {
    create_before_destroy = true
  }
}

# One schedule per DLQ; its input is the reprocessor's command (README, "Redrive").
resource "aws_scheduler_schedule" "reprocess" {
  #checkov:skip=CKV_AWS_297:The schedule's input is a queue URL and ARN, no secrets; Scheduler encrypts it with an AWS owned key.
  for_each = var.dlqs

  name                = "${var.name}-${each.key}"
  group_name          = aws_scheduler_schedule_group.reprocess.name
  description         = "Redrives ${each.value.url} under the redrive policy."
  schedule_expression = var.schedule_expression

  flexible_time_window {
    mode = "OFF"
  }

  target {
    arn      = module.reprocessor[each.key].function_arn
    role_arn = aws_iam_role.scheduler.arn
    # The queue the schedule is for is a fallback only: one DLQ may serve several sources, and each
    # message goes home to the origin its metadata or DeadLetterQueueSourceArn names.
    input = jsonencode({ source = each.value.url, fallbackDestination = each.value.origin_arn })

    retry_policy {
      maximum_retry_attempts       = 0
      maximum_event_age_in_seconds = 3600
    }

    dead_letter_config {
      arn = aws_sqs_queue.reprocessor_failures_dlq.arn
    }
  }

  # The first run must find the role allowed to invoke; the role alone is not enough.
  depends_on = [aws_iam_role_policy.scheduler]
}

# Events the EventBridge redrive gives up on (parked), with the redrive metadata.
resource "aws_sqs_queue" "parked_dlq" {
  count = local.event_redrive

  name                      = "${var.name}-parked-dlq"
  max_message_size          = 1048576
  message_retention_seconds = 1209600
  sqs_managed_sse_enabled   = true
  tags                      = var.tags
}

module "event_redrive" {
  source = "../function"
  count  = local.event_redrive

  name               = "${var.name}-eventbridge-redrive"
  description        = "Redrives EventBridge target DLQs and on-failure records to the failed target (redrive)"
  zip                = var.event_redrive_zip
  timeout_seconds    = var.event_redrive_timeout_seconds
  log_retention_days = var.log_retention_days
  # A failed redelivery is retried by re-sending to the event DLQ that triggers it, within its
  # attempts (REDRIVE_MAX_ATTEMPTS); then it is parked.
  recursive_loop = "Allow"
  environment = merge(var.environment, {
    REDRIVE_DLQ_URL           = aws_sqs_queue.parked_dlq[0].url
    REDRIVE_REPROCESS_AFTER   = "${var.policy.eligible_after_seconds}s"
    REDRIVE_METRICS_NAMESPACE = var.metrics_namespace
    }, length(var.fifo_target_groups) == 0 ? {} : {
    REDRIVE_FIFO_TARGET_GROUPS = join(",", [for arn, group in var.fifo_target_groups : "${arn}=${group}"])
  })
  statements = concat(
    [
      {
        sid       = "ConsumeEventDeadLetters"
        actions   = local.queue_access
        resources = local.event_arns
      },
      {
        sid       = "RetryAndPark"
        actions   = ["sqs:SendMessage"]
        resources = concat(local.event_arns, [aws_sqs_queue.parked_dlq[0].arn])
      },
    ],
    length(var.sqs_target_arns) == 0 ? [] : [{
      sid       = "DeliverToQueueTargets"
      actions   = ["sqs:SendMessage", "sqs:GetQueueUrl"]
      resources = var.sqs_target_arns
    }],
    length(var.function_target_arns) == 0 ? [] : [{
      sid     = "DeliverToFunctionTargets"
      actions = ["lambda:InvokeFunction"]
      # A failure record names the function by its qualified ARN (`:$LATEST`, a version or an
      # alias), and IAM matches a qualified invoke only against a qualified resource.
      resources = flatten([for arn in var.function_target_arns : [arn, "${arn}:*"]])
    }],
  )
  tags = var.tags
}

resource "aws_lambda_event_source_mapping" "event_redrive" {
  for_each = var.event_sources

  event_source_arn                   = each.value
  function_name                      = module.event_redrive[0].function_arn
  batch_size                         = 10
  maximum_batching_window_in_seconds = 0
  function_response_types            = ["ReportBatchItemFailures"]

  scaling_config {
    maximum_concurrency = 2
  }
  tags = var.tags
}

module "parked_dlq_alarm" {
  source          = "../dlq-alarm"
  count           = local.event_redrive
  name            = "${var.name}-parked-dlq"
  queue_name      = aws_sqs_queue.parked_dlq[0].name
  runbook         = "Runbook: docs/runbook.md, 'EventBridge: parking queue not empty'."
  alarm_topic_arn = var.alarm_topic_arn
  tags            = var.tags
}

# The reprocessor gave up on a message (redriven REDRIVE_REPROCESS_MAX times, failed again): it stays
# in the DLQ for a person. One alarm per drained DLQ, on the EMF figure the reprocessor writes for it.
resource "aws_cloudwatch_metric_alarm" "alerted" {
  for_each = var.dlqs

  alarm_name          = "${var.name}-${each.key}-alerted"
  alarm_description   = "The DLQ reprocessor gave up on a message of ${each.value.url}: redriven the allowed number of times, it failed again. Runbook: docs/runbook.md, 'Redrive metrics'."
  namespace           = var.metrics_namespace
  metric_name         = "Alerted"
  dimensions          = { Source = element(split(":", each.value.arn), 5) }
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  threshold           = 0
  comparison_operator = "GreaterThanThreshold"
  # Written once a run: between runs the alarm stays where the last run left it, so a message
  # counted again on every run is one alarm, not an ALARM and a false OK four times an hour.
  treat_missing_data = "ignore"
  alarm_actions      = [var.alarm_topic_arn]
  ok_actions         = [var.alarm_topic_arn]
  tags               = var.tags
}

# What a run leaves in its DLQ (manual review, not yet due, the cap reached) is received by every
# run, and SQS leaves a message received three times or more out of ApproximateAgeOfOldestMessage
# (SQS developer guide, "Available CloudWatch metrics for Amazon SQS"): the DLQ's own age alarm
# goes quiet. The reprocessor writes the age of the oldest message it left; a day before the DLQ's
# retention deletes it (half the retention, for one of two days or less), a person is told.
resource "aws_cloudwatch_metric_alarm" "left_expiring" {
  for_each = var.dlqs

  alarm_name          = "${var.name}-${each.key}-left-expiring"
  alarm_description   = "A message the DLQ reprocessor leaves in ${each.value.url} is near the DLQ's retention (${each.value.retention_seconds} s), after which SQS deletes it unseen. Runbook: docs/runbook.md, 'DLQ message ageing'."
  namespace           = var.metrics_namespace
  metric_name         = "OldestLeftSeconds"
  dimensions          = { Source = element(split(":", each.value.arn), 5) }
  statistic           = "Maximum"
  period              = 300
  evaluation_periods  = 1
  threshold           = max(each.value.retention_seconds - 86400, floor(each.value.retention_seconds / 2))
  comparison_operator = "GreaterThanThreshold"
  # Written once a run, as Alerted.
  treat_missing_data = "ignore"
  alarm_actions      = [var.alarm_topic_arn]
  ok_actions         = [var.alarm_topic_arn]
  tags               = var.tags
}

module "reprocessor_failures_dlq_alarm" {
  source          = "../dlq-alarm"
  name            = "${var.name}-reprocessor-failures-dlq"
  queue_name      = aws_sqs_queue.reprocessor_failures_dlq.name
  runbook         = "Runbook: docs/runbook.md, 'Redrive metrics'."
  alarm_topic_arn = var.alarm_topic_arn
  tags            = var.tags
}

# The DLQ console's audit trail (`dlq console` puts one event per change, source redrive.console)
# kept in an EventBridge archive: an archive with an event pattern keeps only the events that
# match it, and retention 0 keeps them forever (CloudFormation, AWS::Events::Archive).
resource "aws_cloudwatch_event_archive" "console_audit" {
  count = var.console_audit.archive ? 1 : 0

  name             = "${var.name}-console-audit"
  description      = "Every change made from the DLQ console (dlq console): jobs, releases, bodies revealed."
  event_source_arn = "arn:${data.aws_partition.current.partition}:events:${data.aws_region.current.region}:${data.aws_caller_identity.current.account_id}:event-bus/${var.console_audit.bus_name}"
  event_pattern    = jsonencode({ source = ["redrive.console"] })
  retention_days   = var.console_audit.retention_days
}
