variable "name" {
  description = "Name of the bus; prefix of the rule, queues, function and alarms."
  type        = string

  validation {
    condition     = can(regex("^[a-zA-Z0-9-]{1,40}$", var.name))
    error_message = "name must be 1 to 40 letters, digits or hyphens."
  }
}

variable "event_pattern" {
  description = "The rule's event pattern (JSON)."
  type        = string

  validation {
    condition     = can(jsondecode(var.event_pattern))
    error_message = "event_pattern must be JSON, e.g. jsonencode({ source = [\"shop.orders\"] })."
  }
}

variable "consumer_zip" {
  description = "bootstrap.zip of functions/event-consumer."
  type        = string
}

variable "function_timeout_seconds" {
  description = "Timeout of the event consumer."
  type        = number
  default     = 30

  validation {
    condition     = var.function_timeout_seconds >= 1 && var.function_timeout_seconds <= 900
    error_message = "function_timeout_seconds must be between 1 and 900 (Lambda's limit)."
  }
}

variable "function_memory_mb" {
  description = "Memory of the event consumer."
  type        = number
  default     = 256

  validation {
    condition     = var.function_memory_mb >= 128 && var.function_memory_mb <= 10240
    error_message = "function_memory_mb must be between 128 and 10240 (Lambda's limits)."
  }
}

variable "target_queue_oldest_message_age_seconds" {
  description = "Alarm when the SQS target's oldest event is older than this: well under its retention, so nothing expires unseen."
  type        = number
  default     = 86400
  nullable    = false

  validation {
    condition     = var.target_queue_oldest_message_age_seconds >= 60 && var.target_queue_oldest_message_age_seconds < var.message_retention_seconds
    error_message = "target_queue_oldest_message_age_seconds must be at least 60 and below message_retention_seconds."
  }
}

variable "reserved_concurrency" {
  description = "Cap of the asynchronously invoked event consumer (its reserved concurrency); null for none. Lambda refuses a reservation that leaves the account's unreserved concurrency under 100, so a new account (a quota of 10) cannot reserve any: raise the quota first."
  type        = number
  default     = null

  validation {
    condition     = var.reserved_concurrency == null ? true : var.reserved_concurrency >= 1 && var.reserved_concurrency <= 1000
    error_message = "reserved_concurrency must be null or 1 to 1000."
  }
}

variable "bus_log_level" {
  description = "What the event bus logs to its log group (/aws/vendedlogs/events/event-bus/<name>): OFF, ERROR (failed deliveries and the DLQ), INFO (the main steps too) or TRACE (every step)."
  type        = string
  default     = "ERROR"
  nullable    = false

  validation {
    condition     = contains(["OFF", "ERROR", "INFO", "TRACE"], var.bus_log_level)
    error_message = "bus_log_level must be OFF, ERROR, INFO or TRACE."
  }
}

variable "bus_log_include_detail" {
  description = "FULL puts the event, the target input and request into the bus logs; NONE (the default) keeps payloads, which may hold personal data, out of them."
  type        = string
  default     = "NONE"
  nullable    = false

  validation {
    condition     = contains(["FULL", "NONE"], var.bus_log_include_detail)
    error_message = "bus_log_include_detail must be FULL or NONE."
  }
}

variable "redrive_max_receive_count" {
  description = "Receives after which SQS moves a message of the target DLQ or the on-failure queue to the redrive's poison queue: the EventBridge redrive crashed or timed out on it that often (its own failures are retried by re-sending, which resets the count)."
  type        = number
  default     = 10
  nullable    = false

  validation {
    condition     = var.redrive_max_receive_count >= 5 && var.redrive_max_receive_count <= 1000
    error_message = "redrive_max_receive_count must be 5 to 1000: throttled invocations raise it too."
  }
}

variable "environment" {
  description = "Environment of the event consumer (REDRIVE_BREAKER_*, PAYMENTS_*)."
  type        = map(string)
  nullable    = false
  default     = {}
}

variable "log_retention_days" {
  description = "Retention of the consumer's log group (validated by the function module)."
  type        = number
  default     = 14
}

variable "target_retry_attempts" {
  description = "EventBridge retry policy: attempts per target before the event goes to the target DLQ."
  type        = number
  default     = 185

  validation {
    condition     = var.target_retry_attempts >= 0 && var.target_retry_attempts <= 185
    error_message = "target_retry_attempts must be 0 to 185."
  }
}

variable "target_max_event_age_seconds" {
  description = "EventBridge retry policy: age after which an undelivered event goes to the target DLQ."
  type        = number
  default     = 86400

  validation {
    condition     = var.target_max_event_age_seconds >= 60 && var.target_max_event_age_seconds <= 86400
    error_message = "target_max_event_age_seconds must be 60 to 86400."
  }
}

variable "async_retry_attempts" {
  description = "Lambda's retries of a failed asynchronous invocation of the consumer before the on-failure destination."
  type        = number
  default     = 2

  validation {
    condition     = var.async_retry_attempts >= 0 && var.async_retry_attempts <= 2
    error_message = "async_retry_attempts must be 0 to 2."
  }
}

variable "async_max_event_age_seconds" {
  description = "Age after which Lambda stops retrying an asynchronous invocation and records the failure."
  type        = number
  default     = 21600

  validation {
    condition     = var.async_max_event_age_seconds >= 60 && var.async_max_event_age_seconds <= 21600
    error_message = "async_max_event_age_seconds must be 60 to 21600."
  }
}

variable "message_retention_seconds" {
  description = "Retention of the SQS target queue."
  type        = number
  default     = 345600

  validation {
    condition     = var.message_retention_seconds >= 60 && var.message_retention_seconds <= 1209600
    error_message = "message_retention_seconds must be 60 to 1209600 (14 days)."
  }
}

variable "dlq_message_retention_seconds" {
  description = "Retention of the target DLQ and the consumer's failure queue."
  type        = number
  default     = 1209600

  validation {
    condition     = var.dlq_message_retention_seconds > var.message_retention_seconds && var.dlq_message_retention_seconds <= 1209600
    error_message = "dlq_message_retention_seconds must be longer than message_retention_seconds and at most 1209600."
  }
}

variable "redrive_function_timeout_seconds" {
  description = "Timeout of the EventBridge redrive that reads the DLQs: their visibility timeout is 6 x this."
  type        = number
  default     = 30

  validation {
    condition     = var.redrive_function_timeout_seconds >= 1 && var.redrive_function_timeout_seconds <= 900
    error_message = "redrive_function_timeout_seconds must be 1 to 900."
  }
}

variable "alarm_topic_arn" {
  description = "SNS topic for alarm and OK notifications."
  type        = string
}

variable "tags" {
  description = "Tags of every resource the module creates."
  type        = map(string)
  default     = {}
  nullable    = false
}
