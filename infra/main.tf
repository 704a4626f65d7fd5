# The complete redrive stack: every SQS consumer of the tfvars topology, an EventBridge route with
# its event consumer, a Kinesis consumer, the recovery functions, alarms and a dashboard.

locals {
  # A relative lambda_dir is read from this directory, wherever terraform runs from (-chdir).
  lambda_dir = startswith(var.lambda_dir, "/") ? var.lambda_dir : "${path.root}/${var.lambda_dir}"
  zips = {
    sqs_consumer        = "${local.lambda_dir}/sqs-consumer/bootstrap.zip"
    event_consumer      = "${local.lambda_dir}/event-consumer/bootstrap.zip"
    dlq_redrive         = "${local.lambda_dir}/dlq-redrive/bootstrap.zip"
    eventbridge_redrive = "${local.lambda_dir}/eventbridge-redrive/bootstrap.zip"
    intake_controller   = "${local.lambda_dir}/intake-controller/bootstrap.zip"
  }
  event_consumer_timeout_seconds = 30
  # The redrive waits for the consumer it invokes, then carries its batch out.
  event_redrive_timeout_seconds = local.event_consumer_timeout_seconds + 30

  # The environment the consumers read (redrive::Settings); the same values the local stack uses.
  function_environment = merge(
    {
      REDRIVE_BACKOFF_BASE      = "${var.retry.backoff_base_seconds}s"
      REDRIVE_BACKOFF_FACTOR    = tostring(var.retry.backoff_factor)
      REDRIVE_BACKOFF_CAP       = "${var.retry.backoff_cap_seconds}s"
      REDRIVE_DEFER_MAX_AGE     = "${var.retry.defer_max_age_seconds}s"
      REDRIVE_DEADLINE_MARGIN   = "${var.deadline_margin_seconds}s"
      REDRIVE_BREAKER_THRESHOLD = tostring(var.breaker.threshold)
      REDRIVE_BREAKER_OPEN_FOR  = "${var.breaker.open_for_seconds}s"
      # Read by a handler that calls through redrive::TenantBreakers (the orders consumer does).
      REDRIVE_TENANT_BREAKER_THRESHOLD = tostring(var.tenant_breaker.threshold)
      REDRIVE_TENANT_BREAKER_OPEN_FOR  = "${var.tenant_breaker.open_for_seconds}s"
      REDRIVE_TENANT_BREAKER_CAPACITY  = tostring(var.tenant_breaker.capacity)
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

# Large messages: one bucket for the stack, each consumer writing under a prefix of its own. The
# lifecycle rule outlasts every copy that may point at an object: the longest source retention
# (twice with hold: a parked copy keeps its pointer in the retry lane, whose retention is the
# source's) plus DLQ retention, once more for each redrive the reprocessor may make, and a day.
locals {
  payload_expiry_days = 1 + ceil(
    max(0, [for consumer in var.consumers : consumer.message_retention_seconds * (consumer.fifo_on_dead_letter == "hold" ? 2 : 1) + consumer.dlq_message_retention_seconds]...)
    * (var.redrive.max_reprocess + 1) / 86400
  )
}

module "payloads" {
  source = "./modules/payload-bucket"
  count  = var.large_messages.enabled ? 1 : 0

  name_prefix          = "${lower(var.name_prefix)}-payloads-"
  existing_bucket_name = var.large_messages.existing_bucket_name
  expire_after_days    = local.payload_expiry_days
  writer_prefixes      = { for key, consumer in var.consumers : key => "redrive/${key}/" }
  tags                 = var.tags
}

module "idempotency" {
  source   = "./modules/idempotency-table"
  for_each = { for key, consumer in var.consumers : key => consumer if consumer.idempotency_key != null }

  name = "${var.name_prefix}-${each.key}-idempotency"
}

module "consumer" {
  source   = "./modules/sqs-consumer"
  for_each = var.consumers

  name                     = "${var.name_prefix}-${each.key}"
  fifo                     = each.value.fifo
  function_zip             = local.zips.sqs_consumer
  function_timeout_seconds = each.value.function_timeout_seconds
  function_memory_mb       = each.value.function_memory_mb
  environment = merge(local.function_environment, !var.intake_pause.enabled ? {} : {
    REDRIVE_PAUSE_AFTER     = "${var.intake_pause.after_seconds}s"
    REDRIVE_PAUSE_QUEUE_URL = module.intake[0].requests_queue_url
    }, each.value.idempotency_key == null ? {} : {
    REDRIVE_IDEMPOTENCY_TABLE = module.idempotency[each.key].table_name
    REDRIVE_IDEMPOTENCY_KEY   = each.value.idempotency_key
    REDRIVE_IDEMPOTENCY_LEASE = "${each.value.function_timeout_seconds + 60}s"
    # A duplicate can come back as late as the source's retention plus the DLQ's (a copy
    # dead-lettered, then redriven), and a day for the redrive's backoff: the key outlives both.
    REDRIVE_IDEMPOTENCY_TTL = "${each.value.message_retention_seconds + each.value.dlq_message_retention_seconds + 86400}s"
    }, !var.large_messages.enabled ? {} : {
    REDRIVE_PAYLOAD_BUCKET = module.payloads[0].bucket_name
    REDRIVE_PAYLOAD_PREFIX = "redrive/${each.key}/"
  })
  extra_statements = concat(
    each.value.idempotency_key == null ? [] : [module.idempotency[each.key].access_statement],
    !var.intake_pause.enabled ? [] : [{
      sid       = "AskForAPause"
      actions   = ["sqs:SendMessage"]
      resources = [module.intake[0].requests_queue_arn]
    }],
    var.large_messages.enabled ? module.payloads[0].access_statements[each.key] : [],
  )
  max_attempts                   = var.retry.max_attempts
  visibility_timeout_seconds     = each.value.visibility_timeout_seconds
  message_retention_seconds      = each.value.message_retention_seconds
  dlq_message_retention_seconds  = each.value.dlq_message_retention_seconds
  max_receive_count              = each.value.max_receive_count
  batch_size                     = each.value.batch_size
  fifo_on_dead_letter            = each.value.fifo_on_dead_letter
  batching_window_seconds        = each.value.batching_window_seconds
  maximum_concurrency            = each.value.maximum_concurrency
  record_concurrency             = each.value.record_concurrency
  log_retention_days             = var.log_retention_days
  alarm_topic_arn                = module.alerts.topic_arn
  alarm_period_seconds           = var.alarms.period_seconds
  oldest_message_age_seconds     = var.alarms.oldest_message_age_seconds
  lambda_errors_threshold        = var.alarms.lambda_errors_threshold
  lambda_throttles_threshold     = var.alarms.lambda_throttles_threshold
  dlq_oldest_message_age_seconds = var.alarms.dlq_oldest_message_age_seconds
  deferred_threshold             = var.alarms.deferred_threshold
  transient_errors_threshold     = var.alarms.transient_errors_threshold
}

# Consumers whose downstream stays down pause their intake (REDRIVE_PAUSE_AFTER); the controller
# probes once a minute and enables each mapping again step by step (modules/intake-controller).
module "intake" {
  source = "./modules/intake-controller"
  count  = var.intake_pause.enabled ? 1 : 0

  name                 = var.name_prefix
  zip                  = local.zips.intake_controller
  ramp                 = var.intake_pause.ramp
  switch_after_seconds = var.intake_pause.switch_after_seconds
  mappings = merge([for key, consumer in module.consumer : {
    for index, mapping in consumer.mappings : "${key}-${index}" => merge(mapping, {
      function_name = consumer.function_name
      function_arn  = consumer.function_arn
    })
  }]...)
  log_retention_days = var.log_retention_days
  alarm_topic_arn    = module.alerts.topic_arn
}

module "events" {
  source = "./modules/eventbridge-route"

  name                             = "${var.name_prefix}-orders-events"
  event_pattern                    = jsonencode({ source = var.events.sources, "detail-type" = var.events.detail_types })
  consumer_zip                     = local.zips.event_consumer
  function_timeout_seconds         = local.event_consumer_timeout_seconds
  environment                      = local.function_environment
  log_retention_days               = var.log_retention_days
  target_retry_attempts            = var.events.target_retry_attempts
  target_max_event_age_seconds     = var.events.target_max_event_age_seconds
  async_retry_attempts             = var.events.async_retry_attempts
  redrive_function_timeout_seconds = local.event_redrive_timeout_seconds
  alarm_topic_arn                  = module.alerts.topic_arn
}

module "stream" {
  source = "./modules/stream-consumer"

  name                       = "${var.name_prefix}-orders-stream"
  function_zip               = local.zips.sqs_consumer
  environment                = local.function_environment
  log_retention_days         = var.log_retention_days
  retention_hours            = var.stream.retention_hours
  batch_size                 = var.stream.batch_size
  maximum_retry_attempts     = var.stream.maximum_retry_attempts
  maximum_record_age_seconds = var.stream.maximum_record_age_seconds
  parallelization_factor     = var.stream.parallelization_factor
  alarm_topic_arn            = module.alerts.topic_arn
}

module "recovery" {
  source = "./modules/recovery"

  name                          = var.name_prefix
  reprocessor_zip               = local.zips.dlq_redrive
  event_redrive_zip             = local.zips.eventbridge_redrive
  event_redrive_timeout_seconds = local.event_redrive_timeout_seconds
  environment                   = local.function_environment
  log_retention_days            = var.log_retention_days
  schedule_expression           = var.redrive.schedule_expression
  policy = {
    max_reprocess          = var.redrive.max_reprocess
    eligible_after_seconds = var.redrive.eligible_after_seconds
    discard_kinds          = var.redrive.discard_kinds
    max_messages           = var.redrive.max_messages
    rate_per_second        = var.redrive.rate_per_second
  }
  # The stream's DLQ is not drained here: its on-failure records point into the stream, and its
  # dead letters name the stream as origin (README, "Kinesis").
  dlqs = { for key, consumer in module.consumer : key => {
    url               = consumer.dlq_url
    arn               = consumer.dlq_arn
    origin_arn        = consumer.queue_arn
    retention_seconds = consumer.dlq_message_retention_seconds
  } }
  event_sources = {
    target-dlq        = module.events.target_dlq_arn
    consumer-failures = module.events.consumer_failures_dlq_arn
  }
  sqs_target_arns                 = [module.events.target_queue_arn]
  function_target_arns            = [module.events.consumer_function_arn]
  function_target_timeout_seconds = local.event_consumer_timeout_seconds
  alarm_topic_arn                 = module.alerts.topic_arn
  console_audit                   = var.console_audit
}

# Called "redrive" before 0.2: its resources keep their state under the new name.
moved {
  from = module.redrive
  to   = module.recovery
}

# A plain `terraform apply` without alarm_email (make deploy refuses one, tools/alarm-target) warns:
# every alarm of the stack goes to an SNS topic nobody reads unless it is subscribed another way.
# A check warns and does not stop the apply (Terraform language, "Checks"); its message names the
# topic, not its ARN, which is unknown until apply (a message with an unknown value is not shown).
check "alarm_target" {
  assert {
    condition     = var.alarm_email != null
    error_message = "alarm_email is not set: every alarm of this stack (a DLQ not empty, messages about to expire, a held FIFO group) goes to the SNS topic ${var.name_prefix}-alarms with no subscriber. Set alarm_email, or subscribe the topic another way (a chat integration, an on-call tool)."
  }
}

