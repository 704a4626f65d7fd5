variable "function_zip" {
  description = "bootstrap.zip of functions/sqs-consumer (`make build`), which reads DynamoDB Streams events too."
  type        = string
  default     = "../../../target/lambda/sqs-consumer/bootstrap.zip"
  nullable    = false
}

variable "table_stream_arn" {
  description = "The stream of the table to consume: aws_dynamodb_table's stream_arn, with a view that carries the new image (NEW_IMAGE or NEW_AND_OLD_IMAGES)."
  type        = string
  nullable    = false
  # Validated by modules/stream-consumer (dynamodb_stream_arn).
}

variable "alarm_topic_arn" {
  description = "An SNS topic that already exists for alarm and OK notifications."
  type        = string

  validation {
    condition     = can(regex("^arn:aws[a-z-]*:sns:[a-z0-9-]+:[0-9]{12}:[a-zA-Z0-9_-]{1,256}$", var.alarm_topic_arn))
    error_message = "alarm_topic_arn must be the ARN of an SNS topic."
  }
}
