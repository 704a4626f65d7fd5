# A team's own consumer (examples/own-consumer) on modules/sqs-consumer: its zip, its environment,
# the IAM its downstream needs, its tags; redrive brings the queues, retries, DLQ and alarms.

module "reserve" {
  source = "../../modules/sqs-consumer"

  name = "warehouse-reserve"
  # A relative path is read from this directory, wherever terraform runs from.
  function_zip               = startswith(var.function_zip, "/") ? var.function_zip : "${path.root}/${var.function_zip}"
  function_timeout_seconds   = 30
  function_memory_mb         = 256
  visibility_timeout_seconds = 180
  max_attempts               = 5
  max_receive_count          = 10
  batch_size                 = 10
  record_concurrency         = 10
  environment = {
    REDRIVE_BACKOFF_BASE  = "5s"
    REDRIVE_BACKOFF_CAP   = "15m"
    REDRIVE_DEFER_MAX_AGE = "1h"
    RESERVATIONS_TABLE    = element(split("/", var.reservations_table_arn), 1)
  }
  extra_statements = [
    {
      sid       = "Reservations"
      actions   = ["dynamodb:PutItem", "dynamodb:GetItem"]
      resources = [var.reservations_table_arn]
    },
  ]
  alarm_topic_arn = var.alarm_topic_arn
  tags            = { team = "warehouse", service = "reserve" }
}
