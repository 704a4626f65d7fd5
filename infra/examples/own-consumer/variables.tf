variable "function_zip" {
  description = "The consumer's bootstrap.zip: `cargo lambda build --release --arm64 --output-format zip -p own-consumer`."
  type        = string
  default     = "../../../target/lambda/own-consumer/bootstrap.zip"
  nullable    = false
}

variable "alarm_topic_arn" {
  description = "An SNS topic the team already has for alarm and OK notifications."
  type        = string

  validation {
    condition     = can(regex("^arn:aws[a-z-]*:sns:[a-z0-9-]+:[0-9]{12}:[a-zA-Z0-9_-]{1,256}$", var.alarm_topic_arn))
    error_message = "alarm_topic_arn must be the ARN of an SNS topic."
  }
}

variable "reservations_table_arn" {
  description = "The DynamoDB table the handler writes reservations to (its downstream)."
  type        = string

  validation {
    condition     = can(regex("^arn:aws[a-z-]*:dynamodb:[a-z0-9-]+:[0-9]{12}:table/[a-zA-Z0-9_.-]{3,255}$", var.reservations_table_arn))
    error_message = "reservations_table_arn must be the ARN of a DynamoDB table."
  }
}
