variable "name" {
  description = "Prefix of the functions, queues, schedules and alarms."
  type        = string

  validation {
    condition     = can(regex("^[a-zA-Z0-9-]{1,32}$", var.name))
    error_message = "name must be 1 to 32 letters, digits or hyphens."
  }
}

variable "reprocessor_zip" {
  description = "bootstrap.zip of functions/dlq-redrive."
  type        = string
}

variable "event_redrive_zip" {
  description = "bootstrap.zip of functions/eventbridge-redrive; needed only with event_sources."
  type        = string
  default     = null

  validation {
    condition     = var.event_redrive_zip != null || length(var.event_sources) == 0
    error_message = "event_redrive_zip is needed when event_sources names queues for the EventBridge redrive."
  }
}

variable "reprocessor_timeout_seconds" {
  description = "Timeout of the DLQ reprocessor; a run stops 10 s before it."
  type        = number
  default     = 300

  validation {
    condition     = var.reprocessor_timeout_seconds >= 30 && var.reprocessor_timeout_seconds <= 900
    error_message = "reprocessor_timeout_seconds must be 30 to 900."
  }
}

variable "event_redrive_timeout_seconds" {
  description = "Timeout of the EventBridge redrive (its source queues' visibility timeout must be 6 x this). It waits for each function it invokes, so it must exceed function_target_timeout_seconds by 20 s at least: the target's Init (up to 10 s), then the redrive's deadline margin and carry-out."
  type        = number
  default     = 60

  validation {
    condition     = var.event_redrive_timeout_seconds >= 1 && var.event_redrive_timeout_seconds <= 900
    error_message = "event_redrive_timeout_seconds must be 1 to 900."
  }

  validation {
    condition     = length(var.function_target_arns) == 0 || var.event_redrive_timeout_seconds >= var.function_target_timeout_seconds + 20
    error_message = "event_redrive_timeout_seconds must be at least function_target_timeout_seconds + 20: the redrive invokes a function target synchronously and waits for its answer (its Init takes up to 10 s), then carries the batch out before its own deadline; shorter, it gives up on a target that is still running and invokes it again."
  }
}

variable "function_target_timeout_seconds" {
  description = "The longest timeout of the functions in function_target_arns (the redrive waits for each invoke)."
  type        = number
  default     = 30
  nullable    = false

  validation {
    condition     = var.function_target_timeout_seconds >= 1 && var.function_target_timeout_seconds <= 880
    error_message = "function_target_timeout_seconds must be 1 to 880 (Lambda's 900 s limit, less the redrive's 20 s)."
  }
}

variable "dlqs" {
  description = "DLQs to drain on the schedule, by a short key: URL, ARN, the origin queue ARN their messages go back to, for a DLQ several queues share the other origins, and its retention (default 14 days). Each gets a reprocessor of its own (<name>-<key>-dlq-redrive) that may send to those origins only."
  type = map(object({
    url        = string
    arn        = string
    origin_arn = string
    # A DLQ several queues share: the other queues its messages may go home to.
    other_origin_arns = optional(list(string), [])
    # Its MessageRetentionPeriod: the alarm on what the runs leave fires a day before it ends.
    retention_seconds = optional(number, 1209600)
  }))
  nullable = false

  validation {
    condition     = alltrue([for dlq in values(var.dlqs) : startswith(dlq.arn, "arn:") && startswith(dlq.origin_arn, "arn:")])
    error_message = "Every DLQ needs its queue ARN and its origin queue ARN."
  }
  validation {
    condition     = alltrue([for dlq in values(var.dlqs) : dlq.retention_seconds >= 60 && dlq.retention_seconds <= 1209600])
    error_message = "Every DLQ's retention_seconds is its MessageRetentionPeriod: 60 to 1209600 (14 days)."
  }
  # Each DLQ's reprocessor is the function <name>-<key>-dlq-redrive, within modules/function's 55.
  validation {
    condition     = alltrue([for key in keys(var.dlqs) : can(regex("^[a-zA-Z0-9-_]{1,55}$", "${var.name}-${key}-dlq-redrive"))])
    error_message = "Each DLQ's reprocessor is named <name>-<key>-dlq-redrive, which must be 1 to 55 letters, digits, hyphens or underscores: shorten the name or the DLQ's key."
  }
}

variable "schedule_expression" {
  description = "When the reprocessor runs, as EventBridge Scheduler writes it: rate(15 minutes), cron(0 * * * ? *)."
  type        = string
  default     = "rate(15 minutes)"

  validation {
    condition     = can(regex("^(rate|cron|at)\\(.+\\)$", var.schedule_expression))
    error_message = "schedule_expression must be rate(...), cron(...) or at(...)."
  }
}

variable "policy" {
  description = "The redrive policy (docs/redrive.md): reprocess cap, eligibility backoff, discarded kinds, run limits."
  type = object({
    max_reprocess          = number
    eligible_after_seconds = number
    discard_kinds          = list(string)
    max_messages           = number
    rate_per_second        = number
  })
  nullable = false
  default = {
    max_reprocess          = 3
    eligible_after_seconds = 300
    discard_kinds          = []
    max_messages           = 1000
    rate_per_second        = 50
  }

  validation {
    condition     = var.policy.max_reprocess >= 0 && var.policy.max_reprocess <= 100 && var.policy.eligible_after_seconds >= 0
    error_message = "policy.max_reprocess must be 0 to 100 and policy.eligible_after_seconds at least 0."
  }
  validation {
    condition     = var.policy.max_messages >= 1 && var.policy.rate_per_second >= 0.1 && var.policy.rate_per_second <= 3000
    error_message = "policy.max_messages must be at least 1 and policy.rate_per_second 0.1 to 3000."
  }
}

variable "event_sources" {
  description = "Queues the EventBridge redrive reads, by a static key: EventBridge target DLQs and on-failure destination queues."
  type        = map(string)
  nullable    = false
  default     = {}
}

variable "sqs_target_arns" {
  description = "SQS queues the EventBridge redrive may deliver to (the rules' SQS targets)."
  type        = list(string)
  nullable    = false
  default     = []
}

variable "fifo_target_groups" {
  description = "The message group each FIFO queue among sqs_target_arns gets from its rule target (sqs_target.message_group_id), by queue ARN (REDRIVE_FIFO_TARGET_GROUPS). An event for a FIFO target not named here is parked."
  type        = map(string)
  nullable    = false
  default     = {}

  validation {
    condition     = alltrue([for arn, group in var.fifo_target_groups : endswith(arn, ".fifo") && contains(var.sqs_target_arns, arn) && length(group) >= 1 && length(group) <= 128])
    error_message = "fifo_target_groups maps FIFO queue ARNs from sqs_target_arns (ending in .fifo) to message groups of 1 to 128 characters."
  }
}

variable "function_target_arns" {
  description = "Functions the EventBridge redrive may invoke (the rules' Lambda targets), as unqualified ARNs; every version and alias of each is granted."
  type        = list(string)
  default     = []
  nullable    = false

  validation {
    condition     = alltrue([for arn in var.function_target_arns : can(regex("^arn:[a-z-]+:lambda:[a-z0-9-]+:[0-9]{12}:function:[A-Za-z0-9_-]{1,64}$", arn))])
    error_message = "function_target_arns must be unqualified Lambda function ARNs (arn:<partition>:lambda:<region>:<account>:function:<name>); versions and aliases are granted with them."
  }
}

variable "environment" {
  description = "Retry settings of the EventBridge redrive (REDRIVE_BACKOFF_* and friends)."
  type        = map(string)
  nullable    = false
  default     = {}
}

variable "log_retention_days" {
  description = "Retention of the functions' log groups (validated by the function module)."
  type        = number
  default     = 14
}

variable "alarm_topic_arn" {
  description = "SNS topic for alarm and OK notifications."
  type        = string
}

variable "metrics_namespace" {
  description = "Namespace of the reprocessor's EMF metrics (REDRIVE_METRICS_NAMESPACE); its `Alerted` figure per DLQ is alarmed on."
  type        = string
  default     = "redrive"
  nullable    = false

  validation {
    condition     = length(var.metrics_namespace) >= 1 && length(var.metrics_namespace) <= 255
    error_message = "metrics_namespace must be 1 to 255 characters."
  }
}

variable "tags" {
  description = "Tags of every resource the module creates."
  type        = map(string)
  default     = {}
  nullable    = false
}

variable "console_audit" {
  description = "The DLQ console's audit trail: `dlq console --audit-bus <bus_name>` puts an event per change (source redrive.console); with archive, an EventBridge archive keeps them retention_days (0: forever)."
  type = object({
    archive        = bool
    bus_name       = optional(string, "default")
    retention_days = optional(number, 365)
  })
  default  = { archive = false }
  nullable = false

  validation {
    condition     = can(regex("^[A-Za-z0-9._/-]{1,256}$", var.console_audit.bus_name))
    error_message = "console_audit.bus_name must be an event bus name: 1 to 256 letters, digits, or . _ / -."
  }

  validation {
    condition     = var.console_audit.retention_days >= 0 && floor(var.console_audit.retention_days) == var.console_audit.retention_days
    error_message = "console_audit.retention_days must be a whole number of days, 0 (forever) or more."
  }
}
