variable "reprocessor_zip" {
  description = "bootstrap.zip of functions/dlq-redrive (`make build`)."
  type        = string
  default     = "../../../target/lambda/dlq-redrive/bootstrap.zip"
  nullable    = false
}

variable "queues" {
  description = "Queues that already exist, by a short key: each source queue's ARN and its DLQ's name, URL and ARN."
  type = map(object({
    source_arn = string
    dlq_name   = string
    dlq_url    = string
    dlq_arn    = string
  }))
  nullable = false

  validation {
    condition     = length(var.queues) > 0 && alltrue([for q in values(var.queues) : can(regex("^arn:aws[a-z-]*:sqs:", q.source_arn)) && can(regex("^arn:aws[a-z-]*:sqs:", q.dlq_arn)) && startswith(q.dlq_url, "https://")])
    error_message = "Name at least one queue: SQS ARNs for source_arn and dlq_arn, an https:// URL for dlq_url."
  }
}

variable "alarm_topic_arn" {
  description = "An SNS topic that already exists for alarm and OK notifications."
  type        = string

  validation {
    condition     = can(regex("^arn:aws[a-z-]*:sns:[a-z0-9-]+:[0-9]{12}:[a-zA-Z0-9_-]{1,256}$", var.alarm_topic_arn))
    error_message = "alarm_topic_arn must be the ARN of an SNS topic."
  }
}

variable "dlq_tag" {
  description = "A tag the team puts on its DLQs: one Metrics Insights alarm watches every queue that carries it, the ones added after this apply too. null for none."
  type = object({
    key   = string
    value = string
  })
  default = null

  validation {
    condition     = var.dlq_tag == null ? true : can(regex("^[A-Za-z0-9_]{1,128}$", var.dlq_tag.key)) && can(regex("^[A-Za-z0-9_.:/=+@ -]{1,256}$", var.dlq_tag.value)) && !strcontains(var.dlq_tag.value, "'")
    error_message = "dlq_tag.key must be 1 to 128 letters, digits or underscores (the query names it unquoted), and its value 1 to 256 characters without a quote."
  }
}
