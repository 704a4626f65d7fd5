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

variable "runbook" {
  description = "Where the runbook entry for this alarm is, for the alarm description."
  type        = string
  default     = "Runbook: README, 'DLQ not empty'."
}

variable "alarm_topic_arn" {
  description = "SNS topic for alarm and OK notifications."
  type        = string

  validation {
    condition     = startswith(var.alarm_topic_arn, "arn:")
    error_message = "alarm_topic_arn must be an SNS topic ARN."
  }
}
