variable "name" {
  description = "Name prefix of the controller's function, queue, schedule group and roles."
  type        = string

  validation {
    condition     = can(regex("^[a-zA-Z0-9-]{1,40}$", var.name))
    error_message = "name must be 1 to 40 letters, digits or hyphens: it prefixes the function and its roles (IAM allows 64)."
  }
}

variable "zip" {
  description = "Path of the intake-controller function's bootstrap.zip."
  type        = string
}

variable "mappings" {
  description = "The event source mappings the controller may pause, by key: each one's UUID and ARN, its queue, its consumer function and its maximum concurrency at full (null: none set)."
  type = map(object({
    uuid            = string
    arn             = string
    queue_url       = string
    queue_arn       = string
    function_name   = string
    function_arn    = string
    max_concurrency = optional(number)
  }))
  nullable = false

  validation {
    condition     = alltrue([for mapping in values(var.mappings) : mapping.max_concurrency == null ? true : mapping.max_concurrency >= 2 && mapping.max_concurrency <= 1000])
    error_message = "Each mapping's max_concurrency must be 2 to 1000 (Lambda's ScalingConfig), or null."
  }
}

variable "ramp" {
  description = "The maximum concurrencies a resumed mapping runs at, a minute each, before its full one."
  type        = list(number)
  default     = [2, 10, 50]
  nullable    = false

  validation {
    condition     = alltrue([for step in var.ramp : step >= 2 && step <= 1000 && floor(step) == step])
    error_message = "Each ramp step must be a whole number from 2 to 1000 (Lambda's ScalingConfig)."
  }
}

variable "switch_after_seconds" {
  description = "How long after the controller's last tick a paused or ramping mapping is enabled at full again by its switch (a one-time EventBridge Scheduler schedule): the fail-open bound."
  type        = number
  default     = 900
  nullable    = false

  validation {
    condition     = var.switch_after_seconds >= 180 && var.switch_after_seconds <= 3600
    error_message = "switch_after_seconds must be 180 to 3600: a few of the controller's minutes, at most an hour."
  }
}

variable "log_retention_days" {
  description = "Retention of the controller's log group (validated by the function module)."
  type        = number
  default     = 14
}

variable "alarm_topic_arn" {
  description = "SNS topic for alarm and OK notifications."
  type        = string
}

variable "metrics_namespace" {
  description = "Namespace of the controller's EMF metrics; its PausedMappings figure is alarmed on."
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
