variable "function_zip" {
  description = "bootstrap.zip of functions/sqs-consumer (`make build`), which reads Kafka events and its retry lane."
  type        = string
  default     = "../../../target/lambda/sqs-consumer/bootstrap.zip"
  nullable    = false
}

variable "msk_cluster_arn" {
  description = "The MSK cluster (IAM access control) whose orders topic the function reads."
  type        = string
  nullable    = false
  # Validated by modules/kafka-consumer (source_cluster).
}

variable "alarm_topic_arn" {
  description = "An SNS topic that already exists for alarm and OK notifications."
  type        = string

  validation {
    condition     = can(regex("^arn:aws[a-z-]*:sns:[a-z0-9-]+:[0-9]{12}:[a-zA-Z0-9_-]{1,256}$", var.alarm_topic_arn))
    error_message = "alarm_topic_arn must be the ARN of an SNS topic."
  }
}
