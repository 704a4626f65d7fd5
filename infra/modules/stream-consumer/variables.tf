variable "name" {
  description = "Name of the Kinesis stream and the function; prefix of the DLQ and alarms."
  type        = string

  validation {
    condition     = can(regex("^[a-zA-Z0-9-]{1,50}$", var.name))
    error_message = "name must be 1 to 50 letters, digits or hyphens."
  }
}

variable "function_zip" {
  description = "bootstrap.zip of the consumer (functions/sqs-consumer reads Kinesis and DynamoDB Streams events too)."
  type        = string
}

variable "dynamodb_stream_arn" {
  description = "Consume this DynamoDB table's stream (the table's stream_arn; a view with the images your handler reads) instead of creating a Kinesis stream. DynamoDB keeps stream records for 24 hours."
  type        = string
  default     = null

  validation {
    condition     = var.dynamodb_stream_arn == null || can(regex("^arn:aws[a-z-]*:dynamodb:[a-z0-9-]+:[0-9]{12}:table/[a-zA-Z0-9_.-]{3,255}/stream/[^/]+$", var.dynamodb_stream_arn))
    error_message = "dynamodb_stream_arn must be a DynamoDB table's stream ARN (arn:aws:dynamodb:<region>:<account>:table/<table>/stream/<label>), as aws_dynamodb_table's stream_arn gives it."
  }
  # DynamoDB Streams keep records 24 hours (DynamoDB developer guide, "Change data capture for
  # DynamoDB Streams"): retention_hours is the Kinesis stream's.
  validation {
    condition     = var.dynamodb_stream_arn == null || var.retention_hours == 24
    error_message = "retention_hours is the Kinesis stream's: with dynamodb_stream_arn it must stay 24, the retention DynamoDB Streams have."
  }
}

variable "function_timeout_seconds" {
  description = "Function timeout."
  type        = number
  default     = 60

  validation {
    condition     = var.function_timeout_seconds >= 1 && var.function_timeout_seconds <= 900
    error_message = "function_timeout_seconds must be between 1 and 900 (Lambda's limit)."
  }
}

variable "function_memory_mb" {
  description = "Function memory."
  type        = number
  default     = 256

  validation {
    condition     = var.function_memory_mb >= 128 && var.function_memory_mb <= 10240
    error_message = "function_memory_mb must be between 128 and 10240 (Lambda's limits)."
  }
}

variable "environment" {
  description = "Environment of the function; REDRIVE_DLQ_URL is added."
  type        = map(string)
  nullable    = false
  default     = {}
}

variable "log_retention_days" {
  description = "Retention of the function's log group (validated by the function module)."
  type        = number
  default     = 14
}

variable "retention_hours" {
  description = "Kinesis stream retention: how long a record can still be replayed (24 for a DynamoDB stream, fixed)."
  type        = number
  default     = 24

  validation {
    condition     = var.retention_hours >= 24 && var.retention_hours <= 8760
    error_message = "retention_hours must be 24 to 8760."
  }
}

variable "starting_position" {
  description = "Where a new mapping starts reading: LATEST or TRIM_HORIZON."
  type        = string
  default     = "TRIM_HORIZON"

  validation {
    condition     = contains(["LATEST", "TRIM_HORIZON"], var.starting_position)
    error_message = "starting_position must be LATEST or TRIM_HORIZON."
  }
}

variable "batch_size" {
  description = "Records per batch."
  type        = number
  default     = 100

  validation {
    condition     = var.batch_size >= 1 && var.batch_size <= 10000
    error_message = "batch_size must be 1 to 10000."
  }
}

variable "batching_window_seconds" {
  description = "How long the mapping gathers records before it invokes."
  type        = number
  default     = 1

  validation {
    condition     = var.batching_window_seconds >= 0 && var.batching_window_seconds <= 300
    error_message = "batching_window_seconds must be 0 to 300."
  }
}

variable "parallelization_factor" {
  description = "Concurrent batches per shard (order is kept per partition key)."
  type        = number
  default     = 1

  validation {
    condition     = var.parallelization_factor >= 1 && var.parallelization_factor <= 10
    error_message = "parallelization_factor must be 1 to 10."
  }
}

variable "maximum_retry_attempts" {
  description = "Retries of a batch the function gives back (bisected on a function error) before Lambda discards it to the DLQ as an on-failure record (metadata only). -1: no count, until maximum_record_age_seconds, so that an outage is bounded by time, not by how fast the retries come. redrive dead-letters a poison record itself; only a crash loop (out of memory, a timeout) retries a record until its age runs out."
  type        = number
  default     = -1

  validation {
    condition     = var.maximum_retry_attempts == -1 ? true : var.maximum_retry_attempts >= 0 && var.maximum_retry_attempts <= 10000
    error_message = "maximum_retry_attempts must be -1 (until the record age runs out) or 0 to 10000."
  }
}

variable "maximum_record_age_seconds" {
  description = "The longest a batch is retried: older records are discarded to the DLQ as on-failure records (metadata only; the data stays in the stream for its retention). The longest downstream outage the consumer waits out without losing a record. Bounded: must be below the stream retention."
  type        = number
  default     = 82800

  validation {
    condition     = var.maximum_record_age_seconds >= 60 && var.maximum_record_age_seconds <= 604800 && var.maximum_record_age_seconds < var.retention_hours * 3600
    error_message = "maximum_record_age_seconds must be 60 to 604800 and below the stream retention (retention_hours x 3600)."
  }
}

variable "dlq_message_retention_seconds" {
  description = "Retention of the DLQ."
  type        = number
  default     = 1209600

  validation {
    condition     = var.dlq_message_retention_seconds >= 60 && var.dlq_message_retention_seconds <= 1209600 && var.dlq_message_retention_seconds > var.retention_hours * 3600
    error_message = "dlq_message_retention_seconds must be 60 to 1209600 and longer than the stream retention."
  }
}

variable "iterator_age_threshold_ms" {
  description = "IteratorAge above which the consumer counts as behind."
  type        = number
  default     = 60000

  validation {
    condition     = var.iterator_age_threshold_ms >= 1000
    error_message = "iterator_age_threshold_ms must be at least 1000."
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
