variable "name" {
  description = "Alarm name prefix: the alarm is `<name>-not-empty`."
  type        = string

  validation {
    condition     = can(regex("^[a-zA-Z0-9-_.]{1,200}$", var.name))
    error_message = "name must be 1 to 200 letters, digits, hyphens, underscores or dots."
  }
}

variable "queue_name" {
  description = "Name of the dead-letter queue."
  type        = string
}

variable "oldest_message_age_seconds" {
  description = "Age of the oldest message above which the DLQ's second alarm fires; keep it well under the DLQ's retention."
  type        = number
  default     = 3600
  nullable    = false

  validation {
    condition     = var.oldest_message_age_seconds >= 60 && var.oldest_message_age_seconds <= 1209600
    error_message = "oldest_message_age_seconds must be 60 to 1209600 (14 days, SQS's longest retention)."
  }
}

variable "drained" {
  description = "A function drains this queue within seconds (the EventBridge redrive reads the target DLQ and the on-failure queue): its visible depth rarely shows a message, so a third alarm counts arrivals (NumberOfMessagesSent > 0). Not for a queue SQS moves messages into by a redrive policy: SQS does not count those moves as sent."
  type        = bool
  default     = false
  nullable    = false
}

variable "runbook" {
  description = "Where the runbook entry for this alarm is, for the alarm description."
  type        = string
  default     = "Runbook: docs/runbook.md, 'DLQ not empty'."
}

variable "alarm_topic_arn" {
  description = "SNS topic for alarm and OK notifications."
  type        = string

  validation {
    condition     = startswith(var.alarm_topic_arn, "arn:")
    error_message = "alarm_topic_arn must be an SNS topic ARN."
  }
}

variable "tags" {
  description = "Tags of the alarms."
  type        = map(string)
  nullable    = false
  default     = {}
}
