# The complete redrive stack: every consumer of the tfvars topology, alarms and a dashboard.

locals {
  # The environment the consumers read (redrive::Settings); the same values the local stack uses.
  function_environment = merge(
    {
      REDRIVE_BACKOFF_BASE      = "${var.retry.backoff_base_seconds}s"
      REDRIVE_BACKOFF_FACTOR    = tostring(var.retry.backoff_factor)
      REDRIVE_BACKOFF_CAP       = "${var.retry.backoff_cap_seconds}s"
      REDRIVE_DEADLINE_MARGIN   = "${var.deadline_margin_seconds}s"
      REDRIVE_BREAKER_THRESHOLD = tostring(var.breaker.threshold)
      REDRIVE_BREAKER_OPEN_FOR  = "${var.breaker.open_for_seconds}s"
    },
    length(var.retry.sequence_seconds) == 0 ? {} : {
      REDRIVE_RETRY_SEQUENCE = join(",", [for s in var.retry.sequence_seconds : "${s}s"])
    },
  )
}

module "alerts" {
  source      = "./modules/alerts"
  name        = var.name_prefix
  alarm_email = var.alarm_email
  consumers = [for key, consumer in module.consumer : {
    queue_name    = consumer.queue_name
    dlq_name      = consumer.dlq_name
    function_name = consumer.function_name
  }]
}

module "consumer" {
  source   = "./modules/sqs-consumer"
  for_each = var.consumers

  name                          = "${var.name_prefix}-${each.key}"
  fifo                          = each.value.fifo
  function_zip                  = "${var.lambda_dir}/sqs-consumer/bootstrap.zip"
  function_timeout_seconds      = each.value.function_timeout_seconds
  function_memory_mb            = each.value.function_memory_mb
  environment                   = local.function_environment
  max_attempts                  = var.retry.max_attempts
  visibility_timeout_seconds    = each.value.visibility_timeout_seconds
  message_retention_seconds     = each.value.message_retention_seconds
  dlq_message_retention_seconds = each.value.dlq_message_retention_seconds
  max_receive_count             = each.value.max_receive_count
  batch_size                    = each.value.batch_size
  batching_window_seconds       = each.value.batching_window_seconds
  maximum_concurrency           = each.value.maximum_concurrency
  log_retention_days            = var.log_retention_days
  alarm_topic_arn               = module.alerts.topic_arn
  alarm_period_seconds          = var.alarms.period_seconds
  oldest_message_age_seconds    = var.alarms.oldest_message_age_seconds
  lambda_errors_threshold       = var.alarms.lambda_errors_threshold
  lambda_throttles_threshold    = var.alarms.lambda_throttles_threshold
}
