# A consumer of an orders topic on an MSK cluster the team has already: the orders function reads
# it in provisioned mode, and an order that fails transiently waits in the retry lane (an SQS FIFO
# queue, in its customer's message group) instead of holding its partition.

module "orders_kafka" {
  source = "../../modules/kafka-consumer"

  name              = "warehouse-orders-kafka"
  function_zip      = startswith(var.function_zip, "/") ? var.function_zip : "${path.root}/${var.function_zip}"
  source_cluster    = { msk_cluster_arn = var.msk_cluster_arn }
  topics            = ["orders"]
  consumer_group_id = "warehouse-orders"
  batch_size        = 100
  pollers           = { minimum = 1, maximum = 4 }
  alarm_topic_arn   = var.alarm_topic_arn
}
