# A Kafka consumer (Amazon MSK, or self-managed Kafka): the function reads its topics through an
# event source mapping in provisioned mode (the mode Lambda's error controls and partial batch
# responses for Kafka need: Lambda developer guide, "Configuring error handling controls for
# Kafka event sources"), and a record that fails transiently goes to the retry lane, an SQS FIFO
# queue the same function reads (modules/sqs-consumer with kafka_lane), instead of holding its
# partition. A record the lane gives up on, or a permanent failure, is in the lane's DLQ.

locals {
  msk = var.source_cluster.msk_cluster_arn != null
  # arn:aws:kafka:<region>:<account>:cluster/<name>/<uuid>: its topics and groups are named under
  # topic/<name>/<uuid>/ and group/<name>/<uuid>/ (MSK developer guide, IAM access control).
  cluster_path       = local.msk ? join("/", slice(split("/", var.source_cluster.msk_cluster_arn), 1, 3)) : ""
  cluster_arn_prefix = local.msk ? split(":cluster/", var.source_cluster.msk_cluster_arn)[0] : ""
  msk_statements = local.msk ? [
    {
      # The mapping finds the brokers (Lambda developer guide, MSK event source permissions).
      sid       = "DescribeCluster"
      actions   = ["kafka:DescribeClusterV2", "kafka:GetBootstrapBrokers"]
      resources = [var.source_cluster.msk_cluster_arn]
    },
    {
      # IAM access control: connect, read the topics, and commit the consumer group's offsets.
      sid     = "ReadTopics"
      actions = ["kafka-cluster:Connect", "kafka-cluster:DescribeClusterDynamicConfiguration", "kafka-cluster:DescribeTopic", "kafka-cluster:ReadData", "kafka-cluster:DescribeGroup", "kafka-cluster:AlterGroup"]
      resources = concat(
        [var.source_cluster.msk_cluster_arn],
        [for topic in var.topics : "${local.cluster_arn_prefix}:topic/${local.cluster_path}/${topic}"],
        ["${local.cluster_arn_prefix}:group/${local.cluster_path}/${var.consumer_group_id}"],
      )
    },
  ] : []
  # Lambda polls a cluster in a VPC through network interfaces it makes in the cluster's subnets,
  # with the function's role (the AWSLambdaMSKExecutionRole managed policy's EC2 actions; Lambda
  # developer guide, "Configuring Lambda permissions for Amazon MSK event source mappings"). Its
  # on-failure SQS destination is then reached from that VPC: through a NAT gateway or an SQS VPC
  # endpoint, which is the network's to provide (README).
  # Lambda records a discarded batch only where its retries are bounded: with -1 it retries
  # until the batch succeeds or leaves the topic, and a destination would cap that at 10
  # (Lambda developer guide, "Using a Kafka topic as an on-failure destination").
  discards = var.maximum_retry_attempts >= 0
  in_vpc   = local.msk || var.source_cluster.subnet_ids != null
  network_statements = local.in_vpc ? [
    {
      sid       = "ManageNetworkInterfaces"
      actions   = ["ec2:CreateNetworkInterface", "ec2:DescribeNetworkInterfaces", "ec2:DescribeVpcs", "ec2:DeleteNetworkInterface", "ec2:DescribeSubnets", "ec2:DescribeSecurityGroups"]
      resources = ["*"]
    },
  ] : []
  access_configurations = concat(
    [for arn in compact([var.source_cluster.sasl_scram_secret_arn]) : { type = "SASL_SCRAM_512_AUTH", uri = arn }],
    [for id in coalesce(var.source_cluster.subnet_ids, []) : { type = "VPC_SUBNET", uri = "subnet:${id}" }],
    [for id in coalesce(var.source_cluster.security_group_ids, []) : { type = "VPC_SECURITY_GROUP", uri = "security_group:${id}" }],
  )
  secret_statements = var.source_cluster.sasl_scram_secret_arn == null ? [] : [
    {
      # SASL/SCRAM credentials of a self-managed cluster.
      sid       = "ReadCredentials"
      actions   = ["secretsmanager:GetSecretValue"]
      resources = [var.source_cluster.sasl_scram_secret_arn]
    },
  ]
}

# The attempt ledger: each key with records out of its partition (in the lane or the DLQ), so
# that a later batch's records of that key follow them there (REDRIVE_LEDGER_TABLE).
module "ledger" {
  source = "../idempotency-table"

  name = "${var.name}-ledger"
  tags = var.tags
}

# The lane, its DLQ, the function and the lane's own mapping, with their alarms.
module "consumer" {
  source = "../sqs-consumer"

  name                     = var.name
  fifo                     = true
  kafka_lane               = true
  function_zip             = var.function_zip
  function_timeout_seconds = var.function_timeout_seconds
  function_memory_mb       = var.function_memory_mb
  environment              = merge(var.environment, { REDRIVE_LEDGER_TABLE = module.ledger.table_name })
  extra_statements = concat(local.msk_statements, local.network_statements, local.secret_statements, [module.ledger.access_statement], [
    for arn in aws_sqs_queue.discarded[*].arn : {
      # Lambda sends a discarded batch's record with the function's role.
      sid       = "RecordDiscarded"
      actions   = ["sqs:SendMessage"]
      resources = [arn]
    }
  ], var.extra_statements)
  max_attempts        = var.max_attempts
  fifo_on_dead_letter = var.lane_on_dead_letter
  # The least sqs-consumer's rules take for a FIFO queue read one record at a time: its tries, an
  # outage's deferrals in place (21 receives), and with hold a held head's returns (30 more).
  max_receive_count          = var.max_attempts + 1 + 21 + (var.lane_on_dead_letter == "hold" ? 30 : 0)
  visibility_timeout_seconds = var.lane_visibility_timeout_seconds
  message_retention_seconds  = var.lane_message_retention_seconds
  batch_size                 = 1
  batching_window_seconds    = 0
  log_retention_days         = var.log_retention_days
  alarm_topic_arn            = var.alarm_topic_arn
  tags                       = var.tags
}

# With bounded retries, what Lambda itself gives up on (a batch whose retries ran out: the
# function failed as a whole, or could not send a record to the lane) is recorded here, metadata
# only (Lambda developer guide, "Capturing discarded batches for Amazon MSK and self-managed Apache
# Kafka event sources"); Kafka keeps the records until its retention.
resource "aws_sqs_queue" "discarded" {
  count = local.discards ? 1 : 0
  name  = "${var.name}-discarded"
  # What redrive may send (SQS takes up to 1 MiB); the provider creates 256 KiB queues unless told
  # (AWS provider, aws_sqs_queue: max_message_size defaults to 262144).
  max_message_size          = 1048576
  message_retention_seconds = 1209600
  sqs_managed_sse_enabled   = true
  tags                      = var.tags
}

resource "aws_lambda_event_source_mapping" "kafka" {
  function_name                      = module.consumer.function_arn
  event_source_arn                   = var.source_cluster.msk_cluster_arn
  topics                             = var.topics
  starting_position                  = var.starting_position
  batch_size                         = var.batch_size
  maximum_batching_window_in_seconds = var.batching_window_seconds
  function_response_types            = ["ReportBatchItemFailures"]
  bisect_batch_on_function_error     = true
  maximum_retry_attempts             = var.maximum_retry_attempts
  maximum_record_age_in_seconds      = var.maximum_record_age_seconds

  provisioned_poller_config {
    minimum_pollers = var.pollers.minimum
    maximum_pollers = var.pollers.maximum
  }

  dynamic "amazon_managed_kafka_event_source_config" {
    for_each = local.msk ? [var.consumer_group_id] : []
    content {
      consumer_group_id = amazon_managed_kafka_event_source_config.value
    }
  }

  dynamic "self_managed_event_source" {
    for_each = local.msk ? [] : [join(",", var.source_cluster.bootstrap_servers)]
    content {
      endpoints = { KAFKA_BOOTSTRAP_SERVERS = self_managed_event_source.value }
    }
  }

  dynamic "self_managed_kafka_event_source_config" {
    for_each = local.msk ? [] : [var.consumer_group_id]
    content {
      consumer_group_id = self_managed_kafka_event_source_config.value
    }
  }

  dynamic "source_access_configuration" {
    for_each = local.access_configurations
    content {
      type = source_access_configuration.value.type
      uri  = source_access_configuration.value.uri
    }
  }

  dynamic "destination_config" {
    for_each = aws_sqs_queue.discarded[*].arn
    content {
      on_failure {
        destination_arn = destination_config.value
      }
    }
  }
  tags = var.tags
}

module "discarded_alarm" {
  source          = "../dlq-alarm"
  count           = local.discards ? 1 : 0
  name            = "${var.name}-discarded"
  queue_name      = aws_sqs_queue.discarded[0].name
  alarm_topic_arn = var.alarm_topic_arn
  tags            = var.tags
}

# Lambda publishes OffsetLag for a function a Kafka mapping invokes: the records written to the
# topic that the consumer group has not processed (AWS Compute Blog, "Offset lag metric for Amazon
# MSK as an event source for Lambda"). Missing data breaches: a mapping that stops polling
# (disabled, its role, its network, a deleted secret) publishes none.
resource "aws_cloudwatch_metric_alarm" "offset_lag" {
  alarm_name          = "${var.name}-offset-lag"
  alarm_description   = "The Kafka mapping of ${var.name} is ${var.offset_lag_threshold} records or more behind its topic, or has published no OffsetLag for ${var.offset_lag_minutes} minutes (it stopped polling). Runbook: docs/runbook.md, 'Kafka consumer behind or stopped'."
  namespace           = "AWS/Lambda"
  metric_name         = "OffsetLag"
  dimensions          = { FunctionName = module.consumer.function_name }
  statistic           = "Maximum"
  period              = 60
  evaluation_periods  = var.offset_lag_minutes
  threshold           = var.offset_lag_threshold
  comparison_operator = "GreaterThanOrEqualToThreshold"
  treat_missing_data  = "breaching"
  alarm_actions       = [var.alarm_topic_arn]
  ok_actions          = [var.alarm_topic_arn]
  tags                = var.tags
}
