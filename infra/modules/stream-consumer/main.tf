# A stream consumer: of a Kinesis stream it creates, or of a DynamoDB table's stream
# (dynamodb_stream_arn); the function, and an event source mapping that bisects a failing batch,
# retries a bounded number of times, drops records past a bounded age, and sends what it gives up on
# to an SQS DLQ. Bisection is a stream feature: SQS mappings have none.

locals {
  dynamodb = var.dynamodb_stream_arn != null
  # The read actions Lambda's mapping needs on the stream, and nothing else: for DynamoDB the
  # DynamoDB developer guide's "IAM policy to allow an AWS Lambda function to access DynamoDB
  # stream records", on the stream's ARN.
  read_actions = local.dynamodb ? [
    "dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator", "dynamodb:ListStreams",
    ] : [
    "kinesis:DescribeStream", "kinesis:DescribeStreamSummary", "kinesis:GetRecords", "kinesis:GetShardIterator", "kinesis:ListShards",
  ]
}

moved {
  from = aws_kinesis_stream.stream
  to   = aws_kinesis_stream.stream[0]
}

resource "aws_kinesis_stream" "stream" {
  count            = local.dynamodb ? 0 : 1
  name             = var.name
  retention_period = var.retention_hours
  encryption_type  = "KMS"
  kms_key_id       = "alias/aws/kinesis"

  stream_mode_details {
    stream_mode = "ON_DEMAND"
  }
  tags = var.tags
}

# Two kinds of message land here: the records the function itself dead-letters (permanent errors,
# with the body and the redrive metadata), and Lambda's on-failure records for batches it gave up on
# (shard, sequence-number range and the reason; the data stays in the stream for its retention).
resource "aws_sqs_queue" "dlq" {
  name = "${var.name}-dlq"
  # What redrive may send (SQS takes up to 1 MiB); the provider creates 256 KiB queues unless told
  # (AWS provider, aws_sqs_queue: max_message_size defaults to 262144).
  max_message_size          = 1048576
  message_retention_seconds = var.dlq_message_retention_seconds
  sqs_managed_sse_enabled   = true
  tags                      = var.tags
}

module "function" {
  source = "../function"

  name               = var.name
  description        = "${local.dynamodb ? "DynamoDB Streams" : "Kinesis"} consumer of ${var.name} (redrive)"
  zip                = var.function_zip
  timeout_seconds    = var.function_timeout_seconds
  memory_mb          = var.function_memory_mb
  log_retention_days = var.log_retention_days
  environment = merge(var.environment, {
    REDRIVE_DLQ_URL = aws_sqs_queue.dlq.url
  })
  statements = [
    {
      sid       = "ReadStream"
      actions   = local.read_actions
      resources = [local.dynamodb ? var.dynamodb_stream_arn : aws_kinesis_stream.stream[0].arn]
    },
    {
      # The function's dead letters, and Lambda's on-failure records (sent with this role).
      sid       = "DeadLetter"
      actions   = ["sqs:SendMessage"]
      resources = [aws_sqs_queue.dlq.arn]
    },
  ]
  tags = var.tags
}

resource "aws_lambda_event_source_mapping" "stream" {
  event_source_arn                   = local.dynamodb ? var.dynamodb_stream_arn : aws_kinesis_stream.stream[0].arn
  function_name                      = module.function.function_arn
  starting_position                  = var.starting_position
  batch_size                         = var.batch_size
  maximum_batching_window_in_seconds = var.batching_window_seconds
  parallelization_factor             = var.parallelization_factor
  bisect_batch_on_function_error     = true
  maximum_retry_attempts             = var.maximum_retry_attempts
  maximum_record_age_in_seconds      = var.maximum_record_age_seconds
  function_response_types            = ["ReportBatchItemFailures"]

  destination_config {
    on_failure {
      destination_arn = aws_sqs_queue.dlq.arn
    }
  }
  tags = var.tags
}

module "dlq_alarm" {
  source          = "../dlq-alarm"
  name            = "${var.name}-dlq"
  queue_name      = aws_sqs_queue.dlq.name
  alarm_topic_arn = var.alarm_topic_arn
  tags            = var.tags
}

# The consumer falls behind the stream: records get older than they should before they are read.
resource "aws_cloudwatch_metric_alarm" "iterator_age" {
  alarm_name          = "${var.name}-iterator-age"
  alarm_description   = "${var.name} reads records older than ${var.iterator_age_threshold_ms} ms: it is behind or stuck on a failing batch. Runbook: docs/runbook.md, 'Stream consumer behind'."
  namespace           = "AWS/Lambda"
  metric_name         = "IteratorAge"
  dimensions          = { FunctionName = module.function.function_name }
  statistic           = "Maximum"
  period              = 60
  evaluation_periods  = 1
  threshold           = var.iterator_age_threshold_ms
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = [var.alarm_topic_arn]
  ok_actions          = [var.alarm_topic_arn]
  tags                = var.tags
}

# The stream's own view: Lambda's IteratorAge goes silent when the mapping stops (disabled, its
# role broken, the function deleted), and so does this metric, which only GetRecords calls write.
# A running mapping polls an idle stream too, so no data for five minutes means nobody reads it.
# Kinesis only: DynamoDB Streams publish no iterator age of their own (README, "Alarms").
moved {
  from = aws_cloudwatch_metric_alarm.stream_iterator_age
  to   = aws_cloudwatch_metric_alarm.stream_iterator_age[0]
}

resource "aws_cloudwatch_metric_alarm" "stream_iterator_age" {
  count               = local.dynamodb ? 0 : 1
  alarm_name          = "${var.name}-stream-iterator-age"
  alarm_description   = "Records in ${aws_kinesis_stream.stream[0].name} wait longer than ${var.iterator_age_threshold_ms} ms to be read, or nobody has read the stream for 5 minutes (the mapping stopped). Runbook: docs/runbook.md, 'Stream consumer behind'."
  namespace           = "AWS/Kinesis"
  metric_name         = "GetRecords.IteratorAgeMilliseconds"
  dimensions          = { StreamName = aws_kinesis_stream.stream[0].name }
  statistic           = "Maximum"
  period              = 60
  evaluation_periods  = 5
  threshold           = var.iterator_age_threshold_ms
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "breaching"
  alarm_actions       = [var.alarm_topic_arn]
  ok_actions          = [var.alarm_topic_arn]
  tags                = var.tags
}
