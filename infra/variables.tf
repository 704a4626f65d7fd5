# The topology lives in redrive.auto.tfvars.json, which the local stack reads too.

variable "name_prefix" {
  description = "Prefix of every resource name."
  type        = string

  validation {
    condition     = can(regex("^[a-zA-Z0-9-]{1,26}$", var.name_prefix))
    error_message = "name_prefix must be 1 to 26 letters, digits or hyphens: <name_prefix>-orders-events names the EventBridge route, which allows 40."
  }
}

variable "consumers" {
  description = "SQS consumers: one source queue, DLQ, function and event source mapping each."
  type = map(object({
    fifo                          = bool
    function_timeout_seconds      = number
    function_memory_mb            = number
    visibility_timeout_seconds    = number
    message_retention_seconds     = number
    dlq_message_retention_seconds = number
    max_receive_count             = number
    batch_size                    = number
    batching_window_seconds       = number
    maximum_concurrency           = number
    record_concurrency            = number
    # A shared idempotency store (a DynamoDB table) keyed by messageId or a JSON pointer.
    idempotency_key = optional(string)
    # FIFO: continue or hold (modules/sqs-consumer's fifo_on_dead_letter).
    fifo_on_dead_letter = optional(string, "continue")
  }))
  nullable = false

  validation {
    condition     = alltrue([for k, c in var.consumers : can(regex("^[a-z0-9-]{1,24}$", k))])
    error_message = "Consumer keys must be 1 to 24 lowercase letters, digits or hyphens."
  }
  validation {
    condition     = alltrue([for k, c in var.consumers : c.idempotency_key == null || c.idempotency_key == "messageId" || startswith(coalesce(c.idempotency_key, "-"), "/")])
    error_message = "A consumer's idempotency_key is messageId or a JSON pointer into the body (/orderId); its function must be built with redrive's dynamodb feature."
  }
  # A FIFO consumer in batches counts attempts with the ledger in its idempotency table, and its
  # receive count has room for the receives held back: see modules/sqs-consumer.
  validation {
    condition     = alltrue([for k, c in var.consumers : !c.fifo || c.batch_size == 1 || (c.idempotency_key != null && c.max_receive_count >= c.batch_size * (var.retry.max_attempts + 1) + 21)])
    error_message = "A FIFO consumer with batch_size above 1 needs an idempotency_key (its table holds the attempt ledger) and a max_receive_count of at least batch_size x (retry.max_attempts + 1) + 21."
  }
  validation {
    condition     = alltrue([for k, c in var.consumers : contains(["continue", "hold"], c.fifo_on_dead_letter)])
    error_message = "A consumer's fifo_on_dead_letter is continue or hold."
  }
  # A hold keeps its head in the queue: the ledger says it is held, the retention must outlast it,
  # and the head comes back every 11 h 40 min (modules/sqs-consumer has the same rules).
  validation {
    condition     = alltrue([for k, c in var.consumers : c.fifo_on_dead_letter == "continue" || (c.fifo && c.idempotency_key != null && c.message_retention_seconds >= 2 * 86400 && c.max_receive_count >= c.batch_size * (var.retry.max_attempts + 1) + 51)])
    error_message = "fifo_on_dead_letter = \"hold\" is for FIFO queues with the attempt ledger (an idempotency_key) and a message_retention_seconds of at least two days, whose max_receive_count must be at least batch_size x (max_attempts + 1) + 51."
  }
  # With name_prefix at most 26, <name_prefix>-<key> (the consumer's function) stays within the
  # function module's 55, and <name_prefix>-<key>-dlq.fifo within SQS's 80.
  # Each consumer's DLQ gets a reprocessor, <name_prefix>-<key>-dlq-redrive (modules/recovery).
  validation {
    condition     = alltrue([for k, c in var.consumers : length("${var.name_prefix}-${k}-dlq-redrive") <= 55])
    error_message = "name_prefix and a consumer key together may take 42 characters: the key's DLQ reprocessor is <name_prefix>-<key>-dlq-redrive, and a function name 55 here."
  }
  # A key whose names would be the stack's own: CreateQueue hands back an existing queue whose
  # attributes match, so two resources would own one queue; a function or role would fail at apply.
  validation {
    condition = alltrue([for k, c in var.consumers : alltrue([
      for suffix in local.consumer_name_suffixes : !contains(local.stack_names, "${k}${suffix}")
    ])])
    error_message = "A consumer key may not build a name the stack's own parts use (<name_prefix>-<key>, -dlq, -function, -idempotency and its alarms against local.stack_names: orders-events-consumer, orders-events-queue, parked, archive, dlq-redrive, scheduler, alarms, ...)."
  }
  # Nor one another's: the consumer "x-dlq" would take the DLQ of the consumer "x".
  validation {
    condition = alltrue([for k, c in var.consumers : !anytrue([
      for suffix in local.consumer_name_suffixes : suffix != "" && endswith(k, suffix) && contains(keys(var.consumers), trimsuffix(k, suffix))
    ])])
    error_message = "A consumer key may not be another key followed by -dlq, -function or -idempotency: its names would be the other consumer's."
  }
  # Every other rule on a consumer is a validation of the sqs-consumer module's inputs.
}

# What follows "<name_prefix>-" in every name the stack's own parts build, and what follows
# "<name_prefix>-<key>" in the names of a consumer: the consumer keys are checked against them.
# tests/infra/tests/infra/contract.rs derives both lists from the modules and fails when a name is missing.
locals {
  stack_names = [
    "alarms",
    "archive",
    "console-audit",
    "eventbridge-redrive",
    "eventbridge-redrive-function",
    "intake",
    "intake-destination-delivery-failures",
    "intake-failures",
    "intake-failures-arrivals",
    "intake-failures-not-empty",
    "intake-failures-oldest-message-age",
    "intake-function",
    "intake-paused",
    "intake-requests",
    "intake-switch",
    "intake-tick",
    "orders-events",
    "orders-events-bus-log-delivery",
    "orders-events-bus-logs",
    "orders-events-consumer",
    "orders-events-consumer-failures-dlq",
    "orders-events-consumer-failures-dlq-arrivals",
    "orders-events-consumer-failures-dlq-not-empty",
    "orders-events-consumer-failures-dlq-oldest-message-age",
    "orders-events-consumer-function",
    "orders-events-queue",
    "orders-events-queue-oldest-message-age",
    "orders-events-redrive-poison-dlq",
    "orders-events-redrive-poison-dlq-arrivals",
    "orders-events-redrive-poison-dlq-not-empty",
    "orders-events-redrive-poison-dlq-oldest-message-age",
    "orders-events-route",
    "orders-events-target-dlq",
    "orders-events-target-dlq-arrivals",
    "orders-events-target-dlq-not-empty",
    "orders-events-target-dlq-oldest-message-age",
    "orders-stream",
    "orders-stream-dlq",
    "orders-stream-dlq-arrivals",
    "orders-stream-dlq-not-empty",
    "orders-stream-dlq-oldest-message-age",
    "orders-stream-function",
    "orders-stream-iterator-age",
    "orders-stream-stream-iterator-age",
    "parked-dlq",
    "parked-dlq-arrivals",
    "parked-dlq-not-empty",
    "parked-dlq-oldest-message-age",
    "redrive",
    "reprocessor-failures-dlq",
    "reprocessor-failures-dlq-arrivals",
    "reprocessor-failures-dlq-not-empty",
    "reprocessor-failures-dlq-oldest-message-age",
    "scheduler",
  ]
  consumer_name_suffixes = ["", "-alerted", "-dlq", "-dlq-arrivals", "-dlq-not-empty", "-dlq-oldest-message-age", "-dlq-redrive", "-dlq-redrive-destination-delivery-failures", "-dlq-redrive-function", "-function", "-held", "-idempotency", "-left-expiring", "-mapping-failed-invokes"]
}

variable "retry" {
  description = "Retry policy of the consumers (REDRIVE_* environment)."
  type = object({
    max_attempts         = number
    backoff_base_seconds = number
    backoff_factor       = number
    backoff_cap_seconds  = number
    sequence_seconds     = list(number)
    # How long after its first failure a record may still be deferred (REDRIVE_DEFER_MAX_AGE).
    defer_max_age_seconds = number
  })
  nullable = false

  validation {
    condition     = var.retry.max_attempts >= 1 && var.retry.max_attempts <= 100
    error_message = "retry.max_attempts must be between 1 and 100."
  }
  validation {
    condition     = var.retry.backoff_base_seconds > 0 && var.retry.backoff_cap_seconds >= var.retry.backoff_base_seconds && var.retry.backoff_cap_seconds <= 43200
    error_message = "retry.backoff_base_seconds must be above 0, and backoff_cap_seconds between the base and 43200 (12 h)."
  }
  validation {
    condition     = var.retry.backoff_factor >= 1 && var.retry.backoff_factor <= 10
    error_message = "retry.backoff_factor must be between 1 and 10."
  }
  validation {
    condition     = alltrue([for s in var.retry.sequence_seconds : s >= 0 && s <= 43200])
    error_message = "Every retry.sequence_seconds entry must be between 0 and 43200 (12 h)."
  }
  validation {
    condition     = var.retry.defer_max_age_seconds >= 60 && var.retry.defer_max_age_seconds <= 1209600
    error_message = "retry.defer_max_age_seconds must be between 60 (1 min) and 1209600 (14 d, SQS's longest retention)."
  }
}

variable "deadline_margin_seconds" {
  description = "No record is started later than this before the Lambda deadline."
  type        = number

  validation {
    condition     = var.deadline_margin_seconds >= 1 && var.deadline_margin_seconds <= 60
    error_message = "deadline_margin_seconds must be 1 to 60: the time left after the last record to send re-sends and dead letters before the function times out."
  }
}

variable "breaker" {
  description = "Circuit breaker of the consumers' downstream calls."
  type = object({
    threshold        = number
    open_for_seconds = number
  })
  nullable = false

  validation {
    condition     = var.breaker.threshold >= 0 && var.breaker.threshold <= 1000 && var.breaker.open_for_seconds >= 1 && var.breaker.open_for_seconds <= 900
    error_message = "breaker.threshold must be 0 (off) to 1000 and breaker.open_for_seconds 1 to 900."
  }
}

variable "tenant_breaker" {
  description = "Breakers per tenant (a fair or FIFO queue's message group, a Kafka record's key) in front of the shared breaker, for a handler that calls through redrive::TenantBreakers: one tenant whose own dependency fails defers only its own records, and the shared breaker counts its failures once. capacity: failing tenants remembered at once."
  type = object({
    threshold        = optional(number, 5)
    open_for_seconds = optional(number, 30)
    capacity         = optional(number, 10000)
  })
  default  = {}
  nullable = false

  validation {
    condition     = var.tenant_breaker.threshold >= 0 && var.tenant_breaker.threshold <= 1000 && var.tenant_breaker.open_for_seconds >= 1 && var.tenant_breaker.open_for_seconds <= 900 && var.tenant_breaker.capacity >= 1 && var.tenant_breaker.capacity <= 1000000
    error_message = "tenant_breaker.threshold must be 0 (off) to 1000, tenant_breaker.open_for_seconds 1 to 900 and tenant_breaker.capacity 1 to 1000000."
  }
}

variable "intake_pause" {
  description = "Pause a consumer's intake through its downstream's outage: once its breaker has stayed open after_seconds, the consumer asks, and the intake controller disables its event source mappings, probes with one message a minute, and enables them again through the ramp's maximum concurrencies. A switch enables a mapping at full switch_after_seconds after the controller's last tick, whatever becomes of the controller. Off by default."
  type = object({
    enabled              = optional(bool, false)
    after_seconds        = optional(number, 300)
    ramp                 = optional(list(number), [2, 10, 50])
    switch_after_seconds = optional(number, 900)
  })
  default  = {}
  nullable = false

  validation {
    condition     = var.intake_pause.after_seconds >= 60 && var.intake_pause.after_seconds <= 3600
    error_message = "intake_pause.after_seconds must be 60 to 3600 (REDRIVE_PAUSE_AFTER: 1m to 1h)."
  }
}

variable "alarms" {
  description = "CloudWatch alarm rules (evaluated locally by the demo too)."
  type = object({
    period_seconds             = number
    oldest_message_age_seconds = number
    lambda_errors_threshold    = number
    lambda_throttles_threshold = number
    # An outage: a DLQ message about to expire, records deferred or failing transiently.
    dlq_oldest_message_age_seconds = number
    deferred_threshold             = number
    transient_errors_threshold     = number
  })
  nullable = false

  # SQS and Lambda publish one-minute metrics: a shorter period sees gaps, which notBreaching reads
  # as OK. (A DLQ's depth alarm has no threshold to set: any message is an incident.)
  validation {
    condition     = var.alarms.period_seconds >= 60 && var.alarms.period_seconds % 60 == 0
    error_message = "alarms.period_seconds must be a multiple of 60: SQS and Lambda metrics come once a minute."
  }
  validation {
    condition     = var.alarms.oldest_message_age_seconds >= 60 && var.alarms.lambda_errors_threshold >= 0 && var.alarms.lambda_throttles_threshold >= 0
    error_message = "alarms.oldest_message_age_seconds must be at least 60 and the Lambda thresholds at least 0."
  }
  validation {
    condition     = var.alarms.dlq_oldest_message_age_seconds >= 60 && var.alarms.deferred_threshold >= 0 && var.alarms.transient_errors_threshold >= 0
    error_message = "alarms.dlq_oldest_message_age_seconds must be at least 60 (and below each DLQ's retention), the deferred and transient error thresholds at least 0."
  }
}

variable "log_retention_days" {
  description = "Retention of the functions' log groups."
  type        = number

  validation {
    condition     = contains([1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653], var.log_retention_days)
    error_message = "log_retention_days must be one of CloudWatch Logs' retention values (1, 3, 5, 7, 14, 30, 60, 90, ...)."
  }
}

variable "lambda_dir" {
  description = "Where `make build` (cargo lambda build --release --arm64 --output-format zip) puts <function>/bootstrap.zip."
  type        = string
  default     = "../target/lambda"
}

variable "alarm_email" {
  description = "Optional e-mail address subscribed to the alarm topic (confirm the subscription)."
  type        = string
  default     = null

  validation {
    condition     = var.alarm_email == null || can(regex("^[^@\\s]+@[^@\\s]+$", var.alarm_email))
    error_message = "alarm_email must be an e-mail address or null."
  }
}

variable "tags" {
  description = "Tags on every resource."
  type        = map(string)
  nullable    = false
  default     = { Project = "redrive" }
}

variable "events" {
  description = "The EventBridge route (modules/eventbridge-route): which events reach the event consumer and the SQS target, and how hard delivery is retried."
  type = object({
    sources                      = list(string)
    detail_types                 = list(string)
    target_retry_attempts        = number
    target_max_event_age_seconds = number
    async_retry_attempts         = number
  })
  nullable = false
  default = {
    sources                      = ["shop.orders"]
    detail_types                 = ["OrderPlaced"]
    target_retry_attempts        = 185
    target_max_event_age_seconds = 86400
    async_retry_attempts         = 2
  }

  validation {
    condition     = length(var.events.sources) > 0
    error_message = "events.sources must name at least one event source."
  }
  # The bounds of the retry settings are validated by the eventbridge-route module.
}

variable "stream" {
  description = "The Kinesis consumer (modules/stream-consumer)."
  type = object({
    retention_hours            = number
    batch_size                 = number
    maximum_retry_attempts     = number
    maximum_record_age_seconds = number
    parallelization_factor     = number
  })
  nullable = false
  default = {
    retention_hours            = 24
    batch_size                 = 100
    maximum_retry_attempts     = -1
    maximum_record_age_seconds = 82800
    parallelization_factor     = 1
  }
  # Bounds, and maximum_record_age_seconds below the retention, are validated by the module.
}

variable "large_messages" {
  description = "Large messages through S3 (the sqs-consumer function's s3 feature): a payload bucket for the stack, or a bucket of your own by name. The consumers read Extended Client pointers and offload copies too large for their failure context (docs/large-messages.md)."
  type = object({
    enabled              = bool
    existing_bucket_name = optional(string)
  })
  nullable = false
  default  = { enabled = false }
  # The bucket name is validated by modules/payload-bucket.
}

variable "redrive" {
  description = "The recovery side (modules/recovery): how often the DLQ reprocessor runs and its policy."
  type = object({
    schedule_expression    = string
    max_reprocess          = number
    eligible_after_seconds = number
    discard_kinds          = list(string)
    max_messages           = number
    rate_per_second        = number
  })
  nullable = false
  default = {
    schedule_expression    = "rate(15 minutes)"
    max_reprocess          = 3
    eligible_after_seconds = 300
    discard_kinds          = []
    max_messages           = 1000
    rate_per_second        = 50
  }
  # Bounds are validated by the redrive module.
}

variable "console_audit" {
  description = "The DLQ console's audit trail (`dlq console --audit-bus <bus_name>`, an event per change, source redrive.console): with archive = true an EventBridge archive keeps the events retention_days (0: forever)."
  type = object({
    archive        = bool
    bus_name       = optional(string, "default")
    retention_days = optional(number, 365)
  })
  nullable = false
  default  = { archive = false }
  # Validated by the recovery module.
}
