# One SQS consumer: source queue, DLQ, the function, its event source mapping and its alarms.

locals {
  suffix     = var.fifo ? ".fifo" : ""
  queue_name = "${var.name}${local.suffix}"
  dlq_name   = "${var.name}-dlq${local.suffix}"
  log_group  = "/aws/lambda/${var.name}"
}

resource "aws_sqs_queue" "dlq" {
  name                        = local.dlq_name
  fifo_queue                  = var.fifo
  message_retention_seconds   = var.dlq_message_retention_seconds
  sqs_managed_sse_enabled     = true
  content_based_deduplication = false
}

resource "aws_sqs_queue" "source" {
  name                       = local.queue_name
  fifo_queue                 = var.fifo
  visibility_timeout_seconds = var.visibility_timeout_seconds
  message_retention_seconds  = var.message_retention_seconds
  sqs_managed_sse_enabled    = true
  redrive_policy = jsonencode({
    deadLetterTargetArn = aws_sqs_queue.dlq.arn
    maxReceiveCount     = var.max_receive_count
  })
}

# Only the source queue may dead-letter into this DLQ (and native redrive goes back to it).
resource "aws_sqs_queue_redrive_allow_policy" "dlq" {
  queue_url = aws_sqs_queue.dlq.id
  redrive_allow_policy = jsonencode({
    redrivePermission = "byQueue"
    sourceQueueArns   = [aws_sqs_queue.source.arn]
  })
}

resource "aws_cloudwatch_log_group" "function" {
  #checkov:skip=CKV_AWS_158:Lambda logs carry no secrets; a customer KMS key would add cost and a key policy to every log group.
  #checkov:skip=CKV_AWS_338:Retention is a validated input (log_retention_days); one year is not required for operational logs.
  name              = local.log_group
  retention_in_days = var.log_retention_days
}

data "aws_iam_policy_document" "assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["lambda.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "function" {
  name               = "${var.name}-function"
  assume_role_policy = data.aws_iam_policy_document.assume.json
}

# Least privilege: this function's queues and log group only (no AWSLambdaSQSQueueExecutionRole).
data "aws_iam_policy_document" "function" {
  statement {
    sid       = "Consume"
    actions   = ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:ChangeMessageVisibility", "sqs:GetQueueUrl"]
    resources = [aws_sqs_queue.source.arn]
  }
  statement {
    sid       = "RetryAndDeadLetter"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.source.arn, aws_sqs_queue.dlq.arn]
  }
  statement {
    sid       = "Logs"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${aws_cloudwatch_log_group.function.arn}:*"]
  }
  statement {
    # X-Ray's PutTraceSegments and PutTelemetryRecords support no resource-level permissions.
    sid       = "Tracing"
    actions   = ["xray:PutTraceSegments", "xray:PutTelemetryRecords"]
    resources = ["*"]
  }
}

resource "aws_iam_role_policy" "function" {
  name   = "${var.name}-function"
  role   = aws_iam_role.function.id
  policy = data.aws_iam_policy_document.function.json
}

resource "aws_lambda_function" "consumer" {
  #checkov:skip=CKV_AWS_116:An SQS-triggered function is invoked synchronously by its event source mapping; failed records go to the queue's DLQ, which is wired here.
  #checkov:skip=CKV_AWS_115:Concurrency is capped per source by the event source mapping's scaling_config.maximum_concurrency.
  #checkov:skip=CKV_AWS_117:The function only calls SQS, CloudWatch and X-Ray public endpoints; a VPC adds NAT cost and no protection here.
  #checkov:skip=CKV_AWS_272:Code signing needs a signing profile the deploying account may not have; zips come from the reviewed build.
  #checkov:skip=CKV_AWS_173:The environment holds queue URLs and retry settings, no secrets; AWS encrypts it at rest with its own key.
  function_name    = var.name
  role             = aws_iam_role.function.arn
  runtime          = "provided.al2023"
  architectures    = ["arm64"]
  handler          = "bootstrap"
  filename         = var.function_zip
  source_code_hash = filebase64sha256(var.function_zip)
  timeout          = var.function_timeout_seconds
  memory_size      = var.function_memory_mb

  environment {
    variables = merge(var.environment, {
      REDRIVE_DLQ_URL      = aws_sqs_queue.dlq.url
      REDRIVE_MAX_ATTEMPTS = tostring(var.max_attempts)
    })
  }

  logging_config {
    log_format = "JSON"
    log_group  = aws_cloudwatch_log_group.function.name
  }

  tracing_config {
    mode = "Active"
  }

  depends_on = [aws_iam_role_policy.function]
}

resource "aws_lambda_event_source_mapping" "consumer" {
  event_source_arn                   = aws_sqs_queue.source.arn
  function_name                      = aws_lambda_function.consumer.arn
  batch_size                         = var.batch_size
  maximum_batching_window_in_seconds = var.fifo ? null : var.batching_window_seconds # FIFO mappings take no window
  function_response_types            = ["ReportBatchItemFailures"]

  scaling_config {
    maximum_concurrency = var.maximum_concurrency
  }
}

# Any message in the DLQ is an incident: zero threshold, one minute, missing data is fine.
resource "aws_cloudwatch_metric_alarm" "dlq_depth" {
  alarm_name          = "${var.name}-dlq-not-empty"
  alarm_description   = "Messages in ${local.dlq_name}. Runbook: README, 'DLQ depth'."
  namespace           = "AWS/SQS"
  metric_name         = "ApproximateNumberOfMessagesVisible"
  dimensions          = { QueueName = aws_sqs_queue.dlq.name }
  statistic           = "Maximum"
  period              = 60
  evaluation_periods  = 1
  threshold           = 0
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = [var.alarm_topic_arn]
  ok_actions          = [var.alarm_topic_arn]
}

locals {
  # The consumer's health, beside the DLQ alarm: is it keeping up, failing whole batches, throttled?
  health_alarms = {
    oldest-message-age = {
      description = "The oldest message in ${local.queue_name} is older than ${var.oldest_message_age_seconds} s: the consumer is behind or stuck."
      namespace   = "AWS/SQS"
      metric      = "ApproximateAgeOfOldestMessage"
      dimensions  = { QueueName = aws_sqs_queue.source.name }
      statistic   = "Maximum"
      threshold   = var.oldest_message_age_seconds
    }
    function-errors = {
      description = "${var.name} failed whole batches (a record-level failure is not an error)."
      namespace   = "AWS/Lambda"
      metric      = "Errors"
      dimensions  = { FunctionName = aws_lambda_function.consumer.function_name }
      statistic   = "Sum"
      threshold   = var.lambda_errors_threshold
    }
    function-throttles = {
      description = "${var.name} was throttled."
      namespace   = "AWS/Lambda"
      metric      = "Throttles"
      dimensions  = { FunctionName = aws_lambda_function.consumer.function_name }
      statistic   = "Sum"
      threshold   = var.lambda_throttles_threshold
    }
  }
}

resource "aws_cloudwatch_metric_alarm" "health" {
  for_each = local.health_alarms

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
  treat_missing_data  = "notBreaching"
  alarm_actions       = [var.alarm_topic_arn]
  ok_actions          = [var.alarm_topic_arn]
}
