# A consumer of a DynamoDB table the team has already: the orders function reads the table's
# stream (modules/stream-consumer in its DynamoDB mode) in order per shard; a change it refuses
# for good is dead-lettered as the stream record, with its failure context, and the shard goes on.

module "orders_changes" {
  source = "../../modules/stream-consumer"

  name                = "warehouse-orders-changes"
  function_zip        = startswith(var.function_zip, "/") ? var.function_zip : "${path.root}/${var.function_zip}"
  dynamodb_stream_arn = var.table_stream_arn
  batch_size          = 100
  # Retried until a record is 23 hours old (DynamoDB Streams keep a record 24 hours): an outage of
  # the downstream shorter than that loses nothing (modules/stream-consumer, maximum_retry_attempts).
  maximum_retry_attempts     = -1
  maximum_record_age_seconds = 82800
  parallelization_factor     = 2
  alarm_topic_arn            = var.alarm_topic_arn
}
