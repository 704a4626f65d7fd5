variable "name" {
  description = "Prefix of the topic, key and dashboard names."
  type        = string

  validation {
    condition     = can(regex("^[a-zA-Z0-9-]{1,32}$", var.name))
    error_message = "name must be 1 to 32 letters, digits or hyphens."
  }
}

variable "alarm_email" {
  description = "Optional e-mail address subscribed to the topic."
  type        = string
  default     = null

  validation {
    condition     = var.alarm_email == null || can(regex("^[^@\\s]+@[^@\\s]+$", var.alarm_email))
    error_message = "alarm_email must be an e-mail address or null."
  }
}

variable "consumers" {
  description = "Consumers on the dashboard: their queue, DLQ and function names."
  type = list(object({
    queue_name    = string
    dlq_name      = string
    function_name = string
  }))
  nullable = false
  default  = []
}

variable "metrics_namespace" {
  description = "Namespace of the consumers' EMF metrics (REDRIVE_METRICS_NAMESPACE)."
  type        = string
  default     = "redrive"

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
